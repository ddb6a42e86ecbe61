#include "extender/lock_queue.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace hami::extender {
namespace asio = boost::asio;
using std::chrono::steady_clock;

LockQueue::LockQueue(asio::any_io_executor executor, const ClusterState& state,
                     const std::map<std::string, PodView>& pods, NodeLocker& locker,
                     std::chrono::milliseconds retry_timeout)
    : executor_(std::move(executor)),
      state_(&state),
      pods_(&pods),
      locker_(&locker),
      retry_timeout_(retry_timeout) {}

std::size_t LockQueue::parked() const {
  std::size_t parked = 0;
  for (const auto& [node, waiters] : waiters_) {
    std::vector<std::string_view> keys;
    for (const auto& w : waiters) {
      if (std::find(keys.begin(), keys.end(), w.key) != keys.end()) {
        ++parked;
      } else {
        keys.push_back(w.key);
      }
    }
  }
  return parked;
}

void LockQueue::Stop() {
  stopping_ = true;
  for (auto& [node, waiters] : waiters_) {
    for (auto& w : waiters) w.timer->cancel();
  }
}

LockView LockQueue::CachedLock(const LockTarget& target) {
  const NodeEntry* entry = state_->FindNode(target.node);
  if (entry == nullptr) return locker_->Current(target, "", std::nullopt);
  auto a = entry->node.annotations.find(target.key);
  return locker_->Current(target, entry->node.resource_version,
                          a == entry->node.annotations.end() ? std::nullopt : std::optional(a->second));
}

void LockQueue::Wake(const std::string& node) {
  auto it = waiters_.find(node);
  if (it == waiters_.end()) return;  // no bind waits there, nor asks (one asking is a waiter too)
  ++wakeups_[node];
  // Only the longest-waiting bind per lock looks (at the caches); the others keep their turn.
  std::vector<std::string> keys;
  for (auto& w : it->second) {
    if (std::find(keys.begin(), keys.end(), w.key) != keys.end()) continue;
    keys.push_back(w.key);
    w.timer->cancel();
  }
}

void LockQueue::WakeAll() {
  std::vector<std::string> nodes;
  for (const auto& [node, waiters] : waiters_) nodes.push_back(node);
  for (const auto& node : nodes) Wake(node);
}

bool LockQueue::FirstFor(const LockTarget& target, const asio::steady_timer& timer) {
  for (const auto& w : waiters_[target.node]) {
    if (w.key == target.key) return w.timer == &timer;  // the first waiter for this lock
  }
  return false;
}

void LockQueue::Leave(const LockTarget& target, const asio::steady_timer& timer) {
  auto it = waiters_.find(target.node);
  if (it == waiters_.end()) return;
  std::erase_if(it->second, [&](const Waiter& w) { return w.timer == &timer; });
  if (it->second.empty()) {
    waiters_.erase(it);
    wakeups_.erase(target.node);  // counted only while someone waits: node churn does not grow it
  } else {
    Wake(target.node);
  }
  progress_.Notify();
}

asio::awaitable<LockOutcome> LockQueue::Acquire(const LockTarget& target, steady_clock::time_point deadline) {
  // (Every waiting bind re-reading the node and the owner pod each second spent the whole client budget on
  // polls: at --kube-qps 50 with 40 binds queued on one node, each lock hand-over waited about a second for
  // a token.)
  const PodCached cached = [this](const std::string& ns, const std::string& name) {
    return pods_->contains(ns + "/" + name);
  };
  asio::steady_timer timer(executor_);
  // Queued from the start: a bind taking the lock right now is the head, so one arriving meanwhile waits
  // for its outcome instead of racing it (a compare-and-swap bound to conflict, then a read).
  waiters_[target.node].push_back(Waiter{&timer, target.key});
  progress_.Notify();  // one more bind parked behind a queue head
  struct Leaving {      // however the wait ends, the queue forgets us and the next bind gets its turn
    LockQueue* q;
    const LockTarget* target;
    const asio::steady_timer* timer;
    ~Leaving() { q->Leave(*target, *timer); }
  } leaving{this, &target, &timer};
  bool waited = false;
  std::string busy;
  for (;;) {
    bool missed_wakeup = false;
    if (FirstFor(target, timer) && !stopping_) {
      const LockView seen = CachedLock(target);
      std::optional<std::string> reason = locker_->BusyReason(target, seen, cached);
      if (!reason) {
        const std::uint64_t wakeups = wakeups_[target.node];
        LockOutcome out = co_await locker_->Acquire(target, &seen, cached);
        if (out.acquired || !out.contention) co_return out;
        reason = out.message;
        // A wake-up while we asked (the release we lost to?) found no timer waiting: look again now.
        missed_wakeup = wakeups_[target.node] != wakeups;
      }
      busy = std::move(*reason);
    }
    const auto now = steady_clock::now();
    if (retry_timeout_.count() == 0 || now >= deadline || stopping_) {
      LockOutcome out;
      out.contention = true;
      if (stopping_) {
        out.message =
            fmt::format("scheduler shutting down while waiting for node {} to be unlocked", target.node);
      } else if (!waited && !busy.empty()) {
        out.message = busy;
      } else {
        out.message = fmt::format("timed out after {}ms waiting for node {} to be unlocked{}{}",
                                  retry_timeout_.count(), target.node, busy.empty() ? "" : ": ", busy);
      }
      co_return out;
    }
    if (!waited) ++waits_;
    waited = true;
    if (missed_wakeup) continue;
    timer.expires_after(std::min<steady_clock::duration>(deadline - now, std::chrono::seconds(1)));
    co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
  }
}

}  // namespace hami::extender
