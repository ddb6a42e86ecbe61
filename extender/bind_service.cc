#include "extender/bind_service.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/bind_plan.h"
#include "core/keys.h"

namespace hami::extender {
namespace asio = boost::asio;
namespace json = boost::json;
using std::chrono::steady_clock;

BindService::BindService(const ClusterState& state, PodLedger& ledger,
                         const std::map<std::string, PodView>& pods, LockQueue& queue,
                         PluginLocks& plugin_locks, NodeLocker& locker, ClusterWriter& writer,
                         const Clock& clock, BindOptions options, Requeue& requeue, ScoreService* scores)
    : state_(&state),
      ledger_(&ledger),
      pods_(&pods),
      queue_(&queue),
      plugin_locks_(&plugin_locks),
      locker_(&locker),
      writer_(&writer),
      clock_(&clock),
      options_(options),
      requeue_(&requeue),
      scores_(scores),
      latency_(k8s::prom::Histogram::LatencyBuckets()) {}

std::size_t BindService::BindsUsingBudget() const {
  // Binds parked in a lock queue behind its head wait for a device plugin, not for the budget.
  const std::size_t running = ledger_->binds_running();
  return running - std::min(queue_->parked(), running);
}

void BindService::Count(const char* result, double seconds) {
  ++results_[result];
  latency_.Observe(seconds);
}

asio::awaitable<std::string> BindService::Bind(const BindRequest& request) {
  const auto start = steady_clock::now();
  ++stats_.binds;
  // However the bind ends (an exception too), a filter held for the backlog looks again.
  struct Progress {
    k8s::Signal& signal;
    ~Progress() { signal.Notify(); }
  } ended{queue_->progress()};
  std::string error = co_await BindPod(request);
  Count(error.empty() ? "success" : "failure",
        std::chrono::duration<double>(steady_clock::now() - start).count());
  co_return error;
}

asio::awaitable<ApiResult<PodView>> BindService::LookupPod(const BindRequest& request) {
  if (auto it = pods_->find(request.Key()); it != pods_->end()) {
    if (request.uid.empty() || it->second.uid == request.uid) co_return it->second;
  }
  // Not watched yet (just created), or the cache still has an earlier pod of that name: ask the API server.
  co_return co_await writer_->ReadPod(request.ns, request.name);
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

std::string BindService::Failed(const PodView& pod, std::string message) {
  writer_->Event(k8s::InvolvedObject::Of(pod), "Warning", "BindingFailed", message);
  return message;
}

void BindService::ReleaseIfHeldBy(const std::string& uid, const std::string& key) {
  // The caller names a pod and a uid; only a hold the ledger keeps for exactly that pair is freed. The uid
  // of a running pod sent with another pod's name frees nothing.
  if (auto other = ledger_->OtherHolder(uid, key)) {
    spdlog::warn("bind of pod {} names uid {}, which is pod {}'s: nothing released", key, uid, *other);
    return;
  }
  if (ledger_->Holds(uid)) ledger_->Release(uid);
}

asio::awaitable<void> BindService::ReleaseAll(const HeldLocks& held) {
  for (auto h = held.rbegin(); h != held.rend(); ++h) co_await locker_->Release(h->first, h->second.value);
}

asio::awaitable<std::string> BindService::BindPod(const BindRequest& request) {
  const std::string key = request.Key();
  auto pod = co_await LookupPod(request);
  if (!pod) {
    // Only a pod known to be gone loses its reservation; a failed read changes nothing.
    if (pod.error().kind != ApiErrorKind::kNotFound)
      co_return fmt::format("cannot read pod {}: {}", key, pod.error().message);
    ReleaseIfHeldBy(request.uid.empty() ? key : request.uid, key);
    co_return fmt::format("pod \"{}\" not found", key);
  }
  const std::string uid = pod->UidOrKey();
  if (!request.uid.empty() && request.uid != pod->uid) {
    // The pod of that name now is another one: the hold of the uid asked for, if it was made for this name,
    // belongs to a pod that is gone.
    ReleaseIfHeldBy(request.uid, key);
    co_return fmt::format("pod {} was re-created (uid {}, bind asked for {})", key, pod->uid, request.uid);
  }
  if (!pod->node_name.empty()) co_return AlreadyBound(*pod, request.node);
  // kube-scheduler retries a bind it gave up waiting for while the first still runs: two binds of one pod
  // would share (and one could release) the other's lock. While this bind runs, the expiry sweep leaves the
  // pod's reservation and its node locks alone.
  if (!ledger_->BeginBind(key, uid))
    co_return fmt::format("pod {} is being bound already (an earlier bind of it is still running)", key);
  struct Binding {
    PodLedger& ledger;
    std::string uid;
    ~Binding() { ledger.EndBind(uid); }
  } binding{*ledger_, uid};
  // Like every other failed bind, this keeps the pod's reservation: its re-filter or the timeout frees it.
  if (state_->FindNode(request.node) == nullptr)
    co_return Failed(*pod, fmt::format("failed to get node {}: not found", request.node));
  auto requests = CollectRequests(*pod, state_->backends());
  if (!requests) co_return Failed(*pod, fmt::format("pod {}: {}", key, requests.error().message));
  HeldLocks held;
  if (requests->Any() && scores_ != nullptr && scores_->all_fitting()) {
    // The event loop runs nothing else until the devices are reserved: no decision sees them free meanwhile.
    if (std::string refused = scores_->PlaceAtBind(*pod, requests, request.node); !refused.empty())
      co_return Failed(*pod, std::move(refused));
  }
  if (requests->Any()) {
    std::string error = co_await TakeLocks(*pod, *requests, request.node, held);
    if (!error.empty()) co_return Failed(*pod, std::move(error));
  }
  co_return co_await PostBinding(*pod, *requests, request.node, held);
}

asio::awaitable<std::string> BindService::TakeLocks(const PodView& pod, const PodRequests& requests,
                                                    const std::string& node, HeldLocks& held) {
  const std::string key = pod.Key();
  const std::string uid = pod.UidOrKey();
  // Only a decision our filter made for this pod is bound: devices a pod's own annotations name (written
  // by anyone who may edit the pod) would skip the fit and could be another pod's.
  const Reservation* ours = ledger_->HeldFor(uid, key);
  if (ours == nullptr)
    co_return fmt::format(
        "pod {} holds no device reservation (it was not filtered by this scheduler, or the reservation was "
        "released); it must be filtered again",
        key);
  if (ours->node != node)
    co_return fmt::format("pod {} has devices reserved on node {}, not on {}", key, ours->node, node);
  const auto deadline = steady_clock::now() + options_.node_lock_retry_timeout;
  for (const BindLock& lock_spec : LocksToTake(state_->backends(), requests)) {
    LockTarget target{node, lock_spec.key, lock_spec.rule, pod.ns, pod.name};
    LockOutcome lock = co_await queue_->Acquire(target, deadline);
    if (!lock.acquired) {
      // kube-scheduler backs the pod off as unschedulable: once the node shows the lock released, it is
      // asked to try again at once.
      if (lock.contention) requeue_->WaitsForLock(pod, node);
      co_await ReleaseAll(held);
      co_return std::move(lock.message);
    }
    held.emplace_back(std::move(target), std::move(lock));
  }
  // Waiting for the lock took time: the devices must still be reserved for this pod on this node.
  const Reservation* still_ours = ledger_->HeldFor(uid, key);
  if (still_ours == nullptr || still_ours->node != node) {
    co_await ReleaseAll(held);
    co_return fmt::format(
        "pod {} lost its device reservation on node {} while binding; it must be filtered again", key, node);
  }
  co_return std::string();
}

asio::awaitable<ApiResult<void>> BindService::ClearEarlier(const PodView& pod, const BindingWrites& writes) {
  json::object stale;
  for (const auto& k : writes.clear_annotations) stale[k] = nullptr;
  json::object metadata{{"annotations", std::move(stale)}};
  if (writes.clear_label) metadata["labels"] = json::object{{keys::kAssignedNode, nullptr}};
  const json::value patch = {{"metadata", std::move(metadata)}};
  co_return co_await writer_->PatchPod(pod.ns, pod.name, patch, Budget::kDecision);
}

asio::awaitable<std::string> BindService::PostBinding(const PodView& pod, const PodRequests& requests,
                                                      const std::string& node, HeldLocks& held) {
  const std::string key = pod.Key();
  const std::string uid = pod.UidOrKey();
  // The decision (our filter's, held since) and bind-phase `allocating` travel in the Binding: the API
  // server writes them in the same update as spec.nodeName. HAMi patches the pod at filter and again before
  // binding: two requests more, and a failed binding leaves the pod `allocating`. A pod bound already is
  // refused, so a stale cache cannot turn a finished pod back to `allocating`.
  const Reservation* decision = ledger_->HeldFor(uid, key);
  const BindingWrites writes =
      PlanBinding(state_->backends(), pod, requests, decision == nullptr ? nullptr : &decision->annotations,
                  node, clock_->Now());
  if (writes.NeedsClearing()) {
    if (auto cleared = co_await ClearEarlier(pod, writes); !cleared) {
      co_await ReleaseAll(held);
      co_return Failed(pod, fmt::format("could not clear pod {}'s earlier allocation: {}", key,
                                        cleared.error().message));
    }
  }
  BindingWrite binding{pod.ns, pod.name, pod.uid, node, writes.annotations, writes.labels};
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
    auto view = co_await writer_->ReadPod(pod.ns, pod.name);
    if (view) {
      if (view->uid == pod.uid && !view->node_name.empty()) {
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
    for (const auto& [target, lock] : held) plugin_locks_->Keep(target, lock, uid);
    co_return Failed(pod, fmt::format("could not tell whether pod {} was bound to node {}: {}", key, node,
                                      bound.error().message));
  }
  if (!bound) {
    co_await ReleaseAll(held);
    co_return Failed(pod,
                     fmt::format("could not bind pod {} to node {}: {}", key, node, bound.error().message));
  }
  // The locks stay held: the device plugin releases them once it has set the devices up. They are remembered
  // until the node shows them gone, so that a pod deleted before its allocation does not leave one behind.
  const bool pod_still_there = [&] {
    auto it = pods_->find(key);
    return it == pods_->end() || it->second.uid == pod.uid;  // not yet watched counts as there
  }();
  for (const auto& [target, lock] : held) plugin_locks_->Keep(target, lock, uid);
  if (pod_still_there) {
    ledger_->MarkBound(uid, node);
  } else {
    plugin_locks_->ReleaseLeftover(uid);  // deleted while we were binding it
  }
  writer_->Event(k8s::InvolvedObject::Of(pod), "Normal", "BindingSucceed",
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
            static_cast<double>(plugin_locks_->abandoned()));
  w.Counter("hami_scheduler_node_lock_waits_total", "Binds that waited for a node lock held by another pod.",
            static_cast<double>(queue_->waits()));
}

}  // namespace hami::extender
