#include "extender/node_locker.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "core/codec/stamps.h"
#include "core/node_lock.h"
#include "k8s/reflector.h"

namespace hami::extender {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// A conflict means the node changed since we read it: read again soon (10 ms doubling, jittered; upstream
// waits 100 ms doubling, which puts hundreds of milliseconds on binds whenever device plugins write the
// node).
constexpr int kAttempts = 6;

NodeLockRead ReadLock(const ObjectMeta& node, const std::string& key) {
  NodeLockRead r{node.resource_version, std::nullopt};
  if (auto it = node.annotations.find(key); it != node.annotations.end()) r.value = it->second;
  return r;
}

json::value LockPatch(const std::string& key, const json::value& value, const std::string& rv) {
  json::object meta{{"annotations", json::object{{key, value}}}};
  if (!rv.empty()) meta["resourceVersion"] = rv;
  return json::object{{"metadata", std::move(meta)}};
}

}  // namespace

NodeLocker::NodeLocker(ClusterWriter& writer, const Clock& clock, std::chrono::seconds timeout)
    : writer_(&writer), clock_(&clock), timeout_(timeout) {}

std::optional<TimePoint> NodeLocker::MalformedSince(const LockTarget& t,
                                                    const std::optional<std::string>& value) {
  const std::string slot = t.node + "/" + t.key;
  if (!value || ReadNodeLock(*value, clock_->Now())) {
    malformed_.erase(slot);
    return std::nullopt;
  }
  auto [it, fresh] = malformed_.try_emplace(slot, *value, clock_->Now());
  if (!fresh && it->second.first != *value) it->second = {*value, clock_->Now()};
  if (fresh)
    spdlog::warn("node {}: unreadable lock {}='{}'; treated as stale after {}s", t.node, t.key, *value,
                 t.rule.fixed_expiry.value_or(timeout_).count());
  return it->second.second;
}

asio::awaitable<void> NodeLocker::Backoff(int attempt) {
  const auto base = std::chrono::milliseconds(10 << attempt);
  std::uniform_int_distribution<long> jitter(0, base.count() / 2);
  asio::steady_timer timer(co_await asio::this_coro::executor,
                           base + std::chrono::milliseconds(jitter(rng_)));
  co_await timer.async_wait(asio::use_awaitable);
}

void NodeLocker::Wrote(const LockTarget& t, const std::string& resource_version,
                       std::optional<std::string> value) {
  written_[t.node + "/" + t.key] = LockView{resource_version, std::move(value)};
}

LockView NodeLocker::Current(const LockTarget& t, const std::string& cached_rv,
                             const std::optional<std::string>& cached_value) {
  if (auto it = written_.find(t.node + "/" + t.key); it != written_.end()) {
    // Ours only while it is later than the cache's; opaque (non-integer) versions cannot be ordered, and then
    // the cache is trusted (a stale view costs one conflict and a read).
    const std::string& w = it->second.resource_version;
    if (w != cached_rv && k8s::LaterOrSame(w, cached_rv)) return it->second;
    written_.erase(it);  // the cache has caught up
  }
  return LockView{cached_rv, cached_value};
}

namespace {

std::string ContentionMessage(const LockTarget& t, const codec::NodeLock& owner) {
  return fmt::format("node {} is locked by pod {}/{} since {}: node lock contention", t.node, owner.ns,
                     owner.pod, codec::FormatRfc3339(owner.taken_at));
}

}  // namespace

std::optional<std::string> NodeLocker::BusyReason(const LockTarget& t, const LockView& seen,
                                                  const PodCached& cached) {
  const LockDecision d = DecideLock(t.node, seen.value, t.pod_ns, t.pod_name, clock_->Now(), timeout_, t.rule,
                                    MalformedSince(t, seen.value));
  if (d.action == LockAction::kContended) return d.why;
  if (d.action == LockAction::kCheckOwner && cached) {
    const auto owner = codec::ParseNodeLock(*seen.value);
    if (owner && cached(owner->ns, owner->pod)) return ContentionMessage(t, *owner);
  }
  return std::nullopt;
}

asio::awaitable<LockOutcome> NodeLocker::Acquire(const LockTarget& t, const LockView* seen,
                                                 const PodCached& cached) {
  LockOutcome out;
  std::string last_error;
  int reads = 0;  // of the node from the API server
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    NodeLockRead read;
    if (attempt == 0 && seen != nullptr && !seen->resource_version.empty()) {
      read = NodeLockRead{seen->resource_version, seen->value};  // the cache's view: no request
    } else {
      // A conflict on a read of our own means another writer is busy on the node: back off. One on the
      // cache's view only means the cache was behind: read at once.
      if (reads > 0) co_await Backoff(reads - 1);
      ++reads;
      auto node = co_await writer_->ReadNode(t.node);
      if (!node) {
        out.message = fmt::format("failed to get node {}: {}", t.node, node.error().message);
        co_return out;
      }
      read = ReadLock(*node, t.key);
    }
    const TimePoint now = clock_->Now();
    LockDecision d = DecideLock(t.node, read.value, t.pod_ns, t.pod_name, now, timeout_, t.rule,
                                MalformedSince(t, read.value));
    // Holding a lock without writing it: only on what the API server says now (the device plugin may have
    // released it since the cache looked, and another bind taken it).
    if (d.action == LockAction::kReenter && reads == 0) continue;
    if (d.action == LockAction::kReenter) {
      ++stats_.reentered;
      out.acquired = true;
      out.reentered = true;
      out.value = *read.value;
      out.resource_version = read.resource_version;
      co_return out;
    }
    if (d.action == LockAction::kCheckOwner) {
      if (auto refused = co_await CheckOwner(t, *read.value, cached, d.why)) co_return std::move(*refused);
    } else if (d.action == LockAction::kContended) {
      ++stats_.contended;
      out.contention = true;
      out.message = d.why;
      co_return out;
    }
    if (d.action != LockAction::kTake) spdlog::info("{}; taking it for {}/{}", d.why, t.pod_ns, t.pod_name);

    WriteAttempt write = co_await Write(t, read, now, d.action == LockAction::kTake);
    if (write.done) co_return std::move(*write.done);
    last_error = std::move(write.error);
    if (write.retry) continue;
    break;
  }
  out.message = fmt::format("failed to set node lock {} on node {} after {} attempts: {}", t.key, t.node,
                            kAttempts, last_error);
  co_return out;
}

asio::awaitable<std::optional<LockOutcome>> NodeLocker::CheckOwner(const LockTarget& t,
                                                                    const std::string& value,
                                                                    const PodCached& cached, std::string& why) {
  const auto owner = codec::ParseNodeLock(value);
  const bool exists = cached && cached(owner->ns, owner->pod);
  // (No co_await inside a conditional expression: GCC 12 destroys its temporaries twice.)
  ApiResult<PodView> pod = PodView{};
  if (!exists) pod = co_await writer_->ReadPod(owner->ns, owner->pod);
  LockOutcome out;
  if (pod || pod.error().status == kUnreadableObject) {  // the owner exists
    ++stats_.contended;
    out.contention = true;
    out.message = ContentionMessage(t, *owner);
    co_return out;
  }
  if (pod.error().kind != ApiErrorKind::kNotFound) {
    out.message = fmt::format("node {}: cannot check the lock owner {}/{}: {}", t.node, owner->ns, owner->pod,
                              pod.error().message);
    co_return out;
  }
  why = fmt::format("node {}: lock owner {}/{} no longer exists", t.node, owner->ns, owner->pod);
  co_return std::nullopt;
}

asio::awaitable<NodeLocker::WriteAttempt> NodeLocker::Write(const LockTarget& t, const NodeLockRead& read,
                                                            TimePoint now, bool free) {
  const std::string value = LockValue(now, t.pod_ns, t.pod_name, t.rule);
  const json::value patch = LockPatch(t.key, json::value(value), read.resource_version);
  auto patched = co_await writer_->PatchNode(t.node, patch, Budget::kDecision);
  WriteAttempt attempt;
  const auto held = [&](const ObjectMeta& node, std::size_t& counter) {
    ++counter;
    LockOutcome out;
    out.acquired = true;
    out.value = value;
    out.resource_version = ReadLock(node, t.key).resource_version;
    Wrote(t, out.resource_version, value);
    attempt.done = std::move(out);
  };
  if (patched) {
    held(*patched, free ? stats_.taken : stats_.stolen);
    co_return attempt;
  }
  attempt.error = patched.error().message;
  if (patched.error().kind == ApiErrorKind::kConflict) {
    ++stats_.conflicts;  // someone wrote the node since we read it: read again
    attempt.retry = true;
  } else if (patched.error().kind == ApiErrorKind::kTransport ||
             patched.error().kind == ApiErrorKind::kServer) {
    // The patch may have been applied with its answer lost: our value in place means we hold the lock.
    auto again = co_await writer_->ReadNode(t.node);
    if (again && ReadLock(*again, t.key).value == value) {
      held(*again, stats_.taken);
    } else {
      attempt.retry = true;
    }
  }
  co_return attempt;
}

asio::awaitable<void> NodeLocker::Release(const LockTarget& t, const std::string& written) {
  const std::optional<std::string> first_read = written;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    if (attempt > 0) co_await Backoff(attempt - 1);
    auto node = co_await writer_->ReadNode(t.node);
    if (!node) {
      if (node.error().kind == ApiErrorKind::kNotFound) co_return;
      spdlog::warn("releasing lock {} on node {}: {}", t.key, t.node, node.error().message);
      continue;
    }
    const NodeLockRead read = ReadLock(*node, t.key);
    if (!MayRelease(read.value, first_read, t.pod_ns, t.pod_name, false)) co_return;
    const json::value patch = LockPatch(t.key, json::value(nullptr), read.resource_version);
    auto patched = co_await writer_->PatchNode(t.node, patch, Budget::kDecision);
    if (patched) {
      ++stats_.released;
      Wrote(t, ReadLock(*patched, t.key).resource_version, std::nullopt);
      co_return;
    }
    if (patched.error().kind == ApiErrorKind::kNotFound) co_return;
    spdlog::warn("releasing lock {} on node {}: {}", t.key, t.node, patched.error().message);
  }
  spdlog::error("could not release lock {} on node {} for {}/{}; it expires after {}s", t.key, t.node,
                t.pod_ns, t.pod_name, t.rule.fixed_expiry.value_or(timeout_).count());
}

}  // namespace hami::extender
