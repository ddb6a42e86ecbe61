#include "extender/lease_elector.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/json.hpp>
#include <limits>

#include "core/codec/stamps.h"
#include "k8s/objects.h"
#include "k8s/waits.h"

namespace hami::extender {
namespace asio = boost::asio;
namespace json = boost::json;
using std::chrono::steady_clock;

ApiLeaseClient::ApiLeaseClient(k8s::ApiClient& client, const std::string& ns, const std::string& name)
    : client_(&client),
      collection_(fmt::format("/apis/coordination.k8s.io/v1/namespaces/{}/leases", ns)),
      object_(collection_ + "/" + name) {}

asio::awaitable<ApiResult<json::value>> ApiLeaseClient::Get() { co_return co_await client_->Get(object_); }
asio::awaitable<ApiResult<json::value>> ApiLeaseClient::Create(const json::value& lease) {
  co_return co_await client_->Create(collection_, lease);
}
asio::awaitable<ApiResult<json::value>> ApiLeaseClient::Update(const json::value& lease) {
  co_return co_await client_->Update(object_, lease);
}

LeaseElector::LeaseElector(LeaseClient& client, Leadership& leadership, const Clock& wall)
    : client_(&client), leadership_(&leadership), wall_(&wall) {}

json::value LeaseElector::Spec(const json::value* old_spec, bool ours) const {
  const std::string now = codec::FormatRfc3339Micro(wall_->Now());
  const auto duration =
      std::chrono::duration_cast<std::chrono::seconds>(leadership_->options().lease_duration);
  json::object spec{{"holderIdentity", leadership_->holder_identity()},
                    {"leaseDurationSeconds", std::max<std::int64_t>(1, duration.count())},
                    {"renewTime", now},
                    {"acquireTime", now}};
  std::int64_t transitions = 0;
  const json::object* old = old_spec != nullptr ? old_spec->if_object() : nullptr;
  if (old != nullptr) {
    if (const json::value* t = old->if_contains("leaseTransitions"); t != nullptr && t->is_int64())
      transitions = std::clamp<std::int64_t>(t->get_int64(), 0, std::numeric_limits<std::int32_t>::max());
    const json::value* acquired = old->if_contains("acquireTime");
    if (ours && acquired != nullptr && acquired->is_string()) spec["acquireTime"] = *acquired;
    // A new holder is a transition (client-go counts a take-over of a released Lease too).
    if (!ours && transitions < std::numeric_limits<std::int32_t>::max()) ++transitions;
  }
  spec["leaseTransitions"] = transitions;
  return spec;
}

void LeaseElector::Observed(const LeaseView& view) {
  // client-go's rule: the record (holder, times, duration, transitions) changing is a renewal; a write that
  // moved only the resourceVersion (a label, an annotation) is not.
  if (observed_record_ && observed_record_->SameRecord(view)) return;
  observed_record_ = view;
  observed_at_ = leadership_->now();
}

asio::awaitable<bool> LeaseElector::TryAcquireOrRenew() {
  in_round_ = true;
  bool held = false;
  try {
    held = co_await Round();
  } catch (...) {
    in_round_ = false;
    round_done_.Notify();
    throw;
  }
  in_round_ = false;
  round_done_.Notify();
  co_return held;
}

bool LeaseElector::Won(const json::value& lease, steady_clock::time_point sent_at) {
  auto view = k8s::LeaseFromJson(lease);
  if (!view) {
    leadership_->NotAcquired(nullptr, "the API server returned a Lease we cannot read: " + view.error().message);
    return false;
  }
  last_written_ = lease;
  Observed(*view);
  if (releasing_) return false;  // a round in flight when Release() began does not start a new term
  leadership_->Acquired(*view, sent_at);
  return true;
}

asio::awaitable<bool> LeaseElector::Round() {
  // The term is counted from before the write is sent: whoever reads the record we write waits the lease
  // duration from a later moment, and our term (the renew deadline) is shorter.
  const steady_clock::time_point sent_at = leadership_->now();
  const std::string& me = leadership_->holder_identity();
  // Checked before every write: Release() may have begun while we waited for an answer.
  if (releasing_) co_return false;
  // Leading: renew the Lease as our last write left it (one request); any failure falls back to a read.
  if (leadership_->leader() && last_written_.is_object()) {
    json::value lease = last_written_;
    lease.as_object()["spec"] = Spec(last_written_.as_object().if_contains("spec"), true);
    auto renewed = co_await client_->Update(lease);
    if (renewed) co_return Won(*renewed, sent_at);
  }

  auto got = co_await client_->Get();
  if (releasing_) co_return false;
  if (!got && got.error().kind == ApiErrorKind::kNotFound) co_return co_await Recreate(sent_at);
  if (!got) {
    leadership_->NotAcquired(nullptr, "cannot read it: " + got.error().message);
    co_return false;
  }
  auto view = k8s::LeaseFromJson(*got);
  if (!view) {
    leadership_->NotAcquired(nullptr, "cannot read it: " + view.error().message);
    co_return false;
  }
  const json::value* spec = got->as_object().if_contains("spec");
  Observed(*view);
  const std::string holder = view->holder_identity.value_or("");
  const bool ours = holder == me;
  if (!holder.empty() && !ours &&
      observed_at_ + std::chrono::seconds(view->lease_duration_seconds) > leadership_->now()) {
    leadership_->NotAcquired(&*view, "");
    co_return false;
  }
  json::value lease = *got;
  lease.as_object()["spec"] = Spec(spec, ours);
  auto updated = co_await client_->Update(lease);
  if (!updated) {
    // Conflict: another replica wrote first (it won this race), or the holder renewed meanwhile.
    leadership_->NotAcquired(ours ? nullptr : &*view, "cannot write it: " + updated.error().message);
    co_return false;
  }
  co_return Won(*updated, sent_at);
}

asio::awaitable<bool> LeaseElector::Recreate(steady_clock::time_point sent_at) {
  // Deleted while another replica's term ran (kubectl delete, a pruning tool): that replica still leads
  // until its term ends, so the Lease is not created before then.
  const std::string holder = observed_record_ ? observed_record_->holder_identity.value_or("") : std::string();
  if (!holder.empty() && holder != leadership_->holder_identity() &&
      observed_at_ + std::chrono::seconds(observed_record_->lease_duration_seconds) > leadership_->now()) {
    leadership_->NotAcquired(nullptr, fmt::format("deleted while held by {}; waiting out its term", holder));
    co_return false;
  }
  const auto& o = leadership_->options();
  const json::value lease{{"apiVersion", "coordination.k8s.io/v1"},
                          {"kind", "Lease"},
                          {"metadata", {{"name", o.name}, {"namespace", o.ns}}},
                          {"spec", Spec(nullptr, false)}};
  auto created = co_await client_->Create(lease);
  if (!created) {
    leadership_->NotAcquired(nullptr, "cannot create it: " + created.error().message);
    co_return false;
  }
  co_return Won(*created, sent_at);
}

void LeaseElector::LogTurn() {
  const bool leading = leadership_->leader();
  const std::string reason = leading ? "" : leadership_->Describe();
  if (leading != logged_leader_) {
    if (leading) {
      spdlog::info("leader election: acquired Lease {}/{} as {}", leadership_->options().ns,
                   leadership_->options().name, leadership_->holder_identity());
    } else {
      spdlog::warn("leader election: stopped leading ({})", reason);
    }
  } else if (!leading && reason != logged_reason_) {
    spdlog::info("leader election: {}", reason);
  }
  logged_leader_ = leading;
  logged_reason_ = reason;
}

asio::awaitable<void> LeaseElector::Run() {
  const auto retry = leadership_->options().retry_period;
  std::uniform_real_distribution<double> jitter(1.0, 1.2);
  while (!releasing_) {
    const bool held = co_await TryAcquireOrRenew();
    LogTurn();
    if (releasing_) break;
    // Leading renews every retry period; the others spread their attempts (client-go's jitter factor).
    const auto wait = held ? retry
                           : std::chrono::milliseconds(static_cast<std::int64_t>(
                                 static_cast<double>(retry.count()) * jitter(rng_)));
    co_await wake_.WaitUntil(steady_clock::now() + wait);
    co_await k8s::ThrowIfCancelled();
  }
}

asio::awaitable<void> LeaseElector::Release() {
  releasing_ = true;
  wake_.Notify();
  leadership_->Released();
  // A round in flight writes nothing more (it checks releasing_ before each write), but a write already sent
  // must land before we read. Bounded, so that a hung request cannot hold up the shutdown.
  const auto deadline = steady_clock::now() + 3 * leadership_->options().retry_period;
  while (in_round_ && steady_clock::now() < deadline) co_await round_done_.WaitUntil(deadline);
  const std::string& me = leadership_->holder_identity();
  // Two tries: a write we stopped waiting for may still land between our read and our write.
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto got = co_await client_->Get();
    if (!got) {
      spdlog::warn("leader election: Lease not released (cannot read it: {})", got.error().message);
      co_return;
    }
    auto view = k8s::LeaseFromJson(*got);
    if (!view || view->holder_identity.value_or("") != me) co_return;  // not ours: nothing to give up
    json::value lease = *got;
    json::object& spec = lease.as_object()["spec"].emplace_object();
    const json::value* old_spec = got->as_object().if_contains("spec");
    const std::string now = codec::FormatRfc3339Micro(wall_->Now());
    // client-go's release: no holder, a one-second duration, the transition count kept.
    spec = {{"holderIdentity", ""}, {"leaseDurationSeconds", 1}, {"acquireTime", now}, {"renewTime", now}};
    if (old_spec != nullptr && old_spec->is_object()) {
      if (const json::value* t = old_spec->as_object().if_contains("leaseTransitions"))
        spec["leaseTransitions"] = *t;
    }
    auto put = co_await client_->Update(lease);
    if (put) {
      spdlog::info("leader election: released Lease {}/{}", leadership_->options().ns,
                   leadership_->options().name);
      co_return;
    }
    if (put.error().kind != ApiErrorKind::kConflict) {
      spdlog::warn("leader election: Lease not released ({})", put.error().message);
      co_return;
    }
  }
  spdlog::warn("leader election: Lease not released (it kept changing under us); it expires by itself");
}

}  // namespace hami::extender
