#include "extender/bind_service.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "core/bind_plan.h"
#include "core/codec/stamps.h"
#include "core/fit.h"
#include "core/keys.h"
#include "extender/ledger_feed.h"
#include "k8s/reflector.h"

namespace hami::extender {
namespace asio = boost::asio;
namespace json = boost::json;
using std::chrono::steady_clock;

BindService::BindService(asio::any_io_executor executor, const ClusterState& state,
                         const Reservations& reservations, const std::map<std::string, PodView>& pods,
                         NodeLocker& locker, ClusterWriter& writer, const Clock& clock, BindOptions options,
                         Release release)
    : executor_(std::move(executor)),
      state_(&state),
      reservations_(&reservations),
      pods_(&pods),
      locker_(&locker),
      writer_(&writer),
      clock_(&clock),
      options_(options),
      release_(std::move(release)),
      latency_(k8s::prom::Histogram::LatencyBuckets()) {}

bool BindService::InFlight(const std::string& key, const std::string& uid) const {
  auto [b, e] = in_flight_.equal_range(key);
  return std::any_of(b, e, [&](const auto& kv) { return kv.second == uid; });
}

const std::string* BindService::BoundTo(const std::string& uid) const {
  auto it = bound_.find(uid);
  return it == bound_.end() ? nullptr : &it->second;
}

std::size_t BindService::BindsUsingBudget() const {
  // Binds parked in a lock queue behind its head wait for a device plugin, not for the budget.
  std::size_t parked = 0;
  for (const auto& [node, waiters] : lock_waiters_) {
    std::vector<std::string_view> keys;
    for (const auto& w : waiters) {
      if (std::find(keys.begin(), keys.end(), w.key) != keys.end()) {
        ++parked;
      } else {
        keys.push_back(w.key);
      }
    }
  }
  return in_flight_.size() - std::min(parked, in_flight_.size());
}

void BindService::Count(const char* result, double seconds) {
  ++results_[result];
  latency_.Observe(seconds);
}

asio::awaitable<std::string> BindService::Bind(const k8s::ExtenderBindingArgs& args) {
  const auto start = steady_clock::now();
  ++stats_.binds;
  // However the bind ends (an exception too), a filter held for the backlog looks again.
  struct Progress {
    k8s::Signal& signal;
    ~Progress() { signal.Notify(); }
  } progress{progress_};
  std::string error = co_await BindPod(args);
  Count(error.empty() ? "success" : "failure",
        std::chrono::duration<double>(steady_clock::now() - start).count());
  co_return error;
}

// ---------------------------------------------------------------------------------------------------------
// Watch events

void BindService::OnNodeSeen(const NodeView& node) {
  ForgetReleasedLocks(node);
  WakeLockWaiters(node.name);
}

void BindService::OnNodeDeleted(const std::string& node) {
  held_locks_.erase(node);
  WakeLockWaiters(node);
}

void BindService::OnPodGone(const std::string& uid) {
  bound_.erase(uid);
  ReleaseLeftoverLocks(uid);
  if (!lock_waiters_.empty()) WakeAllLockWaiters();  // it may own a lock someone waits for
}

void BindService::ForgetReleasedLocks(const NodeView& node) {
  auto it = held_locks_.find(node.name);
  if (it == held_locks_.end()) return;
  std::erase_if(it->second, [&](const HeldLock& h) {
    // Only a node state from after our lock patch tells: an older event still lacks our value.
    if (!k8s::LaterOrSame(node.resource_version, h.resource_version)) return false;
    auto a = node.annotations.find(h.target.key);
    return a == node.annotations.end() || a->second != h.value;
  });
  if (it->second.empty()) held_locks_.erase(it);
}

void BindService::ReleaseLeftoverLocks(const std::string& uid) {
  for (auto& [node, locks] : held_locks_) {
    for (auto it = locks.begin(); it != locks.end();) {
      if (it->uid != uid) {
        ++it;
        continue;
      }
      // Owners are named by namespace/name: a new pod of the same name may have re-entered this lock.
      if (auto now = (*pods_).find(it->target.pod_ns + "/" + it->target.pod_name);
          now != (*pods_).end() && now->second.uid != uid) {
        it = locks.erase(it);
        continue;
      }
      // The pod went away before its device plugin finished: nobody else would release this lock (a bare
      // timestamp, as Cambricon's, names no owner that could be found gone).
      spdlog::info("pod {}/{} is gone: releasing {} on node {}", it->target.pod_ns, it->target.pod_name,
                   it->target.key, node);
      ++background_;
      // The coroutine owns its copy: the entry is erased before the coroutine first runs.
      const auto release = [](NodeLocker& locker, HeldLock lock) -> asio::awaitable<void> {
        co_await locker.Release(lock.target, lock.value);
      };
      asio::co_spawn(executor_, release(*locker_, *it), [this](std::exception_ptr) { --background_; });
      it = locks.erase(it);
    }
  }
  std::erase_if(held_locks_, [](const auto& kv) { return kv.second.empty(); });
}

asio::awaitable<void> BindService::ReleaseAbandonedLocks(const std::map<std::string, NodeView>& nodes) {
  const TimePoint now = clock_->Now();
  // Node locks left by a bind that never completed (the process was killed between lock and binding, or
  // the pod was bound elsewhere afterwards): nobody would release them before the lock timeout, and every
  // bind to the node waits meanwhile.
  std::vector<std::pair<LockTarget, std::string>> abandoned;
  for (const auto& [name, node] : nodes) {
    for (std::size_t b = 0; b < state_->backends().size(); ++b) {
      const BackendSpec& spec = state_->backends().at(b).Spec();
      if (spec.keys.node_lock.empty() || !spec.lock.owner_aware) continue;
      auto value = node.annotations.find(spec.keys.node_lock);
      if (value == node.annotations.end()) continue;
      if (std::any_of(abandoned.begin(), abandoned.end(), [&](const auto& a) {
            return a.first.node == node.name && a.first.key == spec.keys.node_lock;
          }))
        continue;
      auto lock = codec::ParseNodeLock(value->second);
      if (!lock || lock->legacy) continue;
      const std::string owner_key = lock->ns + "/" + lock->pod;
      if (in_flight_.contains(owner_key)) continue;  // a bind of ours is using it right now
      auto it = (*pods_).find(owner_key);
      const PodView* owner = it == (*pods_).end() ? nullptr : &it->second;
      // Held by us for another pod of that name than the cache shows (re-created, the cache behind).
      if (auto held = held_locks_.find(node.name);
          held != held_locks_.end() && owner != nullptr &&
          std::any_of(held->second.begin(), held->second.end(),
                      [&](const HeldLock& h) { return h.value == value->second && h.uid != UidOf(*owner); }))
        continue;
      const bool elsewhere = owner != nullptr && !owner->node_name.empty() && owner->node_name != node.name;
      // Unbound, gone, or allocated already (the device plugin's release was lost): nobody needs it now.
      bool idle = owner == nullptr || owner->node_name.empty();
      if (owner != nullptr) {
        auto phase = owner->annotations.find(std::string(keys::kBindPhase));
        idle |= phase != owner->annotations.end() &&
                (phase->second == keys::kBindPhaseSuccess || phase->second == keys::kBindPhaseFailed);
      }
      if (elsewhere || (idle && now - lock->taken_at >= options_.reservation_timeout))
        abandoned.push_back(
            {LockTarget{node.name, spec.keys.node_lock, spec.lock, lock->ns, lock->pod}, value->second});
    }
  }
  for (const auto& [target, value] : abandoned) {
    spdlog::warn(
        "node {}: lock {} of pod {}/{} is needed no more (its bind did not complete, or the device "
        "plugin's release was lost): releasing it",
        target.node, target.key, target.pod_ns, target.pod_name);
    ++stats_.abandoned_locks;
    co_await locker_->Release(target, value);  // only if it still holds that value
  }
}

void BindService::Stop() {
  stopping_ = true;
  for (auto& [node, waiters] : lock_waiters_) {
    for (auto& w : waiters) w.timer->cancel();
  }
}

asio::awaitable<ApiResult<PodView>> BindService::LookupPod(const std::string& ns, const std::string& name,
                                                           const std::string& uid) {
  if (auto it = (*pods_).find(ns + "/" + name); it != (*pods_).end()) {
    if (uid.empty() || it->second.uid == uid) co_return it->second;
  }
  // Not watched yet (just created), or the cache still has an earlier pod of that name: ask the API server.
  co_return co_await writer_->ReadPod(ns, name);
}

std::string BindService::AlreadyBound(const PodView& pod, const std::string& node) {
  // A retried /bind (its first answer lost): the binding is done, and the node lock and bind-phase belong to
  // that first bind and the device plugin; neither is touched.
  if (pod.node_name == node) {
    ++stats_.rebinds;
    spdlog::info("bind: pod {} is already bound to node {}; nothing to do", pod.Key(), node);
    return std::string();
  }
  std::string message =
      fmt::format("pod {} is already bound to node {}, cannot bind it to {}", pod.Key(), pod.node_name, node);
  writer_->Event(k8s::InvolvedObject::Of(pod), "Warning", "BindingFailed", message);
  return message;
}

LockView BindService::CachedLock(const LockTarget& target) {
  const NodeEntry* entry = state_->FindNode(target.node);
  if (entry == nullptr) return locker_->Current(target, "", std::nullopt);
  auto a = entry->node.annotations.find(target.key);
  return locker_->Current(target, entry->node.resource_version,
                          a == entry->node.annotations.end() ? std::nullopt : std::optional(a->second));
}

void BindService::WakeLockWaiters(const std::string& node) {
  ++lock_wakeups_[node];
  auto it = lock_waiters_.find(node);
  if (it == lock_waiters_.end()) return;
  // Only the longest-waiting bind per lock looks (at the caches); the others keep their turn.
  std::vector<std::string> keys;
  for (auto& w : it->second) {
    if (std::find(keys.begin(), keys.end(), w.key) != keys.end()) continue;
    keys.push_back(w.key);
    w.timer->cancel();
  }
}

void BindService::WakeAllLockWaiters() {
  std::vector<std::string> nodes;
  for (const auto& [node, waiters] : lock_waiters_) nodes.push_back(node);
  for (const auto& node : nodes) WakeLockWaiters(node);
}

asio::awaitable<LockOutcome> BindService::AcquireWaiting(const LockTarget& target,
                                                         steady_clock::time_point deadline) {
  // First come, first served, driven by the watches: only the bind at the head of a lock's queue may ask the
  // API server, and only once the caches show the lock free (or stale, or its owner gone); the others wait
  // without a request. (Every waiting bind re-reading the node and the owner pod each second spent the whole
  // client budget on polls: at --kube-qps 50 with 40 binds queued on one node, each lock hand-over waited
  // about a second for a token.) The node watch wakes the head; its timer re-checks the caches for expiry.
  const PodCached cached = [this](const std::string& ns, const std::string& name) {
    return pods_->contains(ns + "/" + name);
  };
  asio::steady_timer timer(executor_);
  const LockWaiter me{&timer, target.key};
  // Queued from the start: a bind taking the lock right now is the head, so one arriving meanwhile waits
  // for its outcome instead of racing it (a compare-and-swap bound to conflict, then a read).
  lock_waiters_[target.node].push_back(me);
  progress_.Notify();  // one more bind parked behind a queue head
  struct Leave {       // however the wait ends, the queue forgets us and the next bind gets its turn
    BindService* c;
    const LockTarget* target;
    const asio::steady_timer* timer;
    ~Leave() {
      auto it = c->lock_waiters_.find(target->node);
      if (it == c->lock_waiters_.end()) return;
      std::erase_if(it->second, [&](const LockWaiter& w) { return w.timer == timer; });
      if (it->second.empty()) {
        c->lock_waiters_.erase(it);
      } else {
        c->WakeLockWaiters(target->node);
      }
      c->progress_.Notify();
    }
  } leave{this, &target, &timer};
  const auto my_turn = [&] {
    for (const auto& w : lock_waiters_[target.node]) {
      if (w.key == target.key) return w.timer == &timer;  // the first waiter for this lock
    }
    return false;
  };
  bool waited = false;
  std::string busy;
  for (;;) {
    bool missed_wakeup = false;
    if (my_turn() && !stopping_) {
      const LockView seen = CachedLock(target);
      std::optional<std::string> reason = locker_->BusyReason(target, seen, cached);
      if (!reason) {
        const std::uint64_t wakeups = lock_wakeups_[target.node];
        LockOutcome out = co_await locker_->Acquire(target, &seen, cached);
        if (out.acquired || !out.contention) co_return out;
        reason = out.message;
        // A wake-up while we asked (the release we lost to?) found no timer waiting: look again now.
        missed_wakeup = lock_wakeups_[target.node] != wakeups;
      }
      busy = std::move(*reason);
    }
    const auto now = steady_clock::now();
    if (options_.node_lock_retry_timeout.count() == 0 || now >= deadline || stopping_) {
      LockOutcome out;
      out.contention = true;
      if (stopping_) {
        out.message =
            fmt::format("scheduler shutting down while waiting for node {} to be unlocked", target.node);
      } else if (!waited && !busy.empty()) {
        out.message = busy;
      } else {
        out.message = fmt::format("timed out after {}ms waiting for node {} to be unlocked{}{}",
                                  options_.node_lock_retry_timeout.count(), target.node,
                                  busy.empty() ? "" : ": ", busy);
      }
      co_return out;
    }
    if (!waited) ++stats_.lock_waits;
    waited = true;
    if (missed_wakeup) continue;
    timer.expires_after(std::min<steady_clock::duration>(deadline - now, std::chrono::seconds(1)));
    co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
  }
}

void BindService::ReleaseIfHeldBy(const std::string& uid, const std::string& key) {
  // The caller names a pod and a uid; only a hold the ledger keeps for exactly that pair is freed. The uid
  // of a running pod sent with another pod's name frees nothing.
  const PodAllocation* held = state_->FindPod(uid);
  const Reservation* reserved = reservations_->Find(uid);
  if ((held != nullptr && held->ns + "/" + held->name != key) ||
      (reserved != nullptr && reserved->key != key)) {
    spdlog::warn("bind of pod {} names uid {}, which is pod {}'s: nothing released", key, uid,
                 held != nullptr ? held->ns + "/" + held->name : reserved->key);
    return;
  }
  if (held != nullptr || reserved != nullptr) release_(uid);
}

asio::awaitable<std::string> BindService::BindPod(const k8s::ExtenderBindingArgs& args) {
  const std::string key = args.pod_namespace + "/" + args.pod_name;
  auto pod = co_await LookupPod(args.pod_namespace, args.pod_name, args.pod_uid);
  if (!pod) {
    // Only a pod known to be gone loses its reservation; a failed read changes nothing.
    if (pod.error().kind != ApiErrorKind::kNotFound)
      co_return fmt::format("cannot read pod {}: {}", key, pod.error().message);
    ReleaseIfHeldBy(args.pod_uid.empty() ? key : args.pod_uid, key);
    co_return fmt::format("pod \"{}\" not found", key);
  }
  const std::string uid = UidOf(*pod);
  if (!args.pod_uid.empty() && args.pod_uid != pod->uid) {
    // The pod of that name now is another one: the hold of the uid asked for, if it was made for this name,
    // belongs to a pod that is gone.
    ReleaseIfHeldBy(args.pod_uid, key);
    co_return fmt::format("pod {} was re-created (uid {}, bind asked for {})", key, pod->uid, args.pod_uid);
  }
  const auto failed = [&](std::string message) {
    writer_->Event(k8s::InvolvedObject::Of(*pod), "Warning", "BindingFailed", message);
    return message;
  };
  if (!pod->node_name.empty()) co_return AlreadyBound(*pod, args.node);
  // kube-scheduler retries a bind it gave up waiting for while the first still runs: two binds of one pod
  // would share (and one could release) the other's lock.
  if (InFlight(key, uid))
    co_return fmt::format("pod {} is being bound already (an earlier bind of it is still running)", key);
  // While this bind runs, the expiry sweep leaves the pod's reservation and its node locks alone.
  in_flight_.emplace(key, uid);
  struct InFlightEntry {
    std::unordered_multimap<std::string, std::string>& binds;
    std::string key, uid;
    ~InFlightEntry() {
      auto [b, e] = binds.equal_range(key);
      for (auto it = b; it != e; ++it) {
        if (it->second == uid) {
          binds.erase(it);
          break;
        }
      }
    }
  } in_flight{in_flight_, key, uid};
  // Like every other failed bind, this keeps the pod's reservation: its re-filter or the timeout frees it.
  if (state_->FindNode(args.node) == nullptr)
    co_return failed(fmt::format("failed to get node {}: not found", args.node));
  const Backends& backends = state_->backends();
  auto requests = CollectRequests(*pod, backends);
  if (!requests) co_return failed(fmt::format("pod {}: {}", key, requests.error().message));

  std::vector<std::pair<LockTarget, LockOutcome>> held;  // in the order taken
  const auto release_all = [&]() -> asio::awaitable<void> {
    for (auto h = held.rbegin(); h != held.rend(); ++h) co_await locker_->Release(h->first, h->second.value);
  };
  if (requests->Any()) {
    // Only a decision our filter made for this pod is bound: devices a pod's own annotations name (written
    // by anyone who may edit the pod) would skip the fit and could be another pod's.
    const PodAllocation* reservation = state_->FindPod(uid);
    const Reservation* ours = reservations_->Find(uid);
    if (reservation == nullptr || ours == nullptr || ours->key != key)
      co_return failed(
          fmt::format("pod {} holds no device reservation (it was not filtered by this scheduler, "
                      "or the reservation was released); it must be filtered again",
                      key));
    if (reservation->node != args.node)
      co_return failed(fmt::format("pod {} has devices reserved on node {}, not on {}", key,
                                   reservation->node, args.node));
    const auto deadline = steady_clock::now() + options_.node_lock_retry_timeout;
    for (const BindLock& lock_spec : LocksToTake(backends, *requests)) {
      LockTarget target{args.node, lock_spec.key, lock_spec.rule, pod->ns, pod->name};
      LockOutcome lock = co_await AcquireWaiting(target, deadline);
      if (!lock.acquired) {
        co_await release_all();
        co_return failed(lock.message);
      }
      held.emplace_back(std::move(target), std::move(lock));
    }
    // Waiting for the lock took time: the devices must still be reserved for this pod on this node.
    const PodAllocation* still = state_->FindPod(uid);
    const Reservation* still_ours = reservations_->Find(uid);
    if (still == nullptr || still->node != args.node || still_ours == nullptr ||
        still_ours->node != args.node) {
      co_await release_all();
      co_return failed(fmt::format(
          "pod {} lost its device reservation on node {} while binding; it must be filtered again", key,
          args.node));
    }
  }
  // The decision (our filter's, held since) and bind-phase `allocating` travel in the Binding: the API
  // server writes them in the same update as spec.nodeName. HAMi patches the pod at filter and again before
  // binding: two requests more, and a failed binding leaves the pod `allocating`. A pod bound already is
  // refused, so a stale cache cannot turn a finished pod back to `allocating`.
  const Reservation* decision = reservations_->Find(uid);
  const BindingWrites writes =
      PlanBinding(backends, *pod, *requests, decision == nullptr ? nullptr : &decision->annotations,
                  args.node, clock_->Now());
  if (writes.NeedsClearing()) {
    json::object stale;
    for (const auto& k : writes.clear_annotations) stale[k] = nullptr;
    json::object metadata{{"annotations", std::move(stale)}};
    if (writes.clear_label) metadata["labels"] = json::object{{keys::kAssignedNode, nullptr}};
    const json::value patch = {{"metadata", std::move(metadata)}};
    if (auto cleared = co_await writer_->PatchPod(pod->ns, pod->name, patch, Budget::kDecision); !cleared) {
      co_await release_all();
      co_return failed(
          fmt::format("could not clear pod {}'s earlier allocation: {}", key, cleared.error().message));
    }
  }
  const std::string node = args.node;
  BindingWrite binding{pod->ns, pod->name, pod->uid, node, writes.annotations, writes.labels};
  if (writes.NeedsClearing()) {  // the stamp says when the Binding went out
    if (auto t = binding.annotations.find(std::string(keys::kBindTime)); t != binding.annotations.end())
      t->second = std::to_string(
          std::chrono::duration_cast<std::chrono::seconds>(clock_->Now().time_since_epoch()).count());
  }
  auto bound = co_await writer_->Bind(binding);
  bool outcome_unknown = false;
  // A conflict, a lost answer or a 5xx: the Binding may have been applied (nodeName, devices and
  // `allocating` in one update), or the pod was bound before (an earlier bind whose answer was lost); the pod
  // is read back before any lock is released.
  if (!bound &&
      (bound.error().kind == ApiErrorKind::kConflict || bound.error().kind == ApiErrorKind::kTransport ||
       bound.error().kind == ApiErrorKind::kServer)) {
    auto view = co_await writer_->ReadPod(pod->ns, pod->name);
    if (view) {
      if (view->uid == pod->uid && !view->node_name.empty()) {
        auto phase = view->annotations.find(std::string(keys::kBindPhase));
        const bool settled = phase != view->annotations.end() && phase->second != keys::kBindPhaseAllocating;
        if (view->node_name != node || settled) {
          // Bound elsewhere, or its device plugin is done already: the locks taken just now are not needed
          // (one re-entered belongs to that earlier bind).
          for (auto h = held.rbegin(); h != held.rend(); ++h) {
            if (!h->second.reentered) co_await locker_->Release(h->first, h->second.value);
          }
          co_return AlreadyBound(*view, node);
        }
        bound = ApiResult<void>{};  // bound here and allocating: the device plugin releases the locks
      }
    } else if (view.error().status != kUnreadableObject) {  // read back, but unreadable: not bound by us
      outcome_unknown = bound.error().kind != ApiErrorKind::kConflict;
    }
  }
  if (!bound && outcome_unknown) {
    // Perhaps bound and allocating: releasing the lock could put two pods in allocating on one node. The
    // locks stay held as after a success; the device plugin, the retried bind or the sweep clears them.
    for (auto& [target, lock] : held)
      held_locks_[target.node].push_back(HeldLock{target, lock.value, lock.resource_version, uid});
    co_return failed(fmt::format("could not tell whether pod {} was bound to node {}: {}", key, node,
                                 bound.error().message));
  }
  if (!bound) {
    co_await release_all();
    co_return failed(fmt::format("could not bind pod {} to node {}: {}", key, node, bound.error().message));
  }
  // The locks stay held: the device plugin releases them once it has set the devices up. They are remembered
  // until the node shows them gone, so that a pod deleted before its allocation does not leave one behind.
  const bool pod_still_there = [&] {
    auto it = (*pods_).find(key);
    return it == (*pods_).end() || it->second.uid == pod->uid;  // not yet watched counts as there
  }();
  for (auto& [target, lock] : held)
    held_locks_[target.node].push_back(HeldLock{target, lock.value, lock.resource_version, uid});
  if (!pod_still_there) ReleaseLeftoverLocks(uid);  // deleted while we were binding it
  if (pod_still_there) bound_[uid] = node;
  writer_->Event(k8s::InvolvedObject::Of(*pod), "Normal", "BindingSucceed",
                 fmt::format("Successfully binding node [{}] to {}", node, key));
  co_return std::string();
}

void BindService::WriteMetrics(k8s::prom::TextWriter& w) const {
  w.Family("hami_scheduler_bind_duration_seconds",
           "Time to answer /bind, including node locks and the binding.", "histogram");
  latency_.Write(w, "hami_scheduler_bind_duration_seconds", {});
  w.Family("hami_scheduler_bind_results_total", "/bind answers by result.", "counter");
  for (const char* result : {"success", "failure"}) {
    auto it = results_.find(result);
    w.Sample("hami_scheduler_bind_results_total", {{"result", result}},
             static_cast<double>(it == results_.end() ? 0 : it->second));
  }
  w.Counter("hami_scheduler_abandoned_locks_released_total",
            "Node locks of binds that never completed (owner unbound past --reservation-timeout, or bound "
            "elsewhere), released.",
            static_cast<double>(stats_.abandoned_locks));
  w.Counter("hami_scheduler_node_lock_waits_total", "Binds that waited for a node lock held by another pod.",
            static_cast<double>(stats_.lock_waits));
}

}  // namespace hami::extender
