#pragma once
// The watched caches and the routing table from their events to the services: every watch event the
// extender acts on is routed here and nowhere else (kube-scheduler keeps its event handlers in one file the
// same way). WatchRoutes::Attach sets each cache's handlers to the member functions below; each one is the
// whole list of services that event reaches:
//
//   node added or updated    -> LedgerFeed::UpsertNode, HealthService::ApplyMask, PluginLocks::OnNodeSeen,
//                               LockQueue::Wake, Requeue::NodeSeen
//   node deleted             -> LedgerFeed::RemoveNode, HealthService::Forget, PluginLocks::OnNodeDeleted,
//                               LockQueue::Wake
//   pod added or updated     -> LedgerFeed (waiting, allocation), PodLedger (shown bound, reservation
//                               written, reservation abandoned by kube-scheduler), PreemptService::OnPod
//                               (its nomination), Requeue::Forget once bound, and as a pod deleted once
//                               finished
//   pod deleted              -> LedgerFeed::StopWaiting, PodLedger::Gone, PluginLocks::ReleaseLeftover,
//                               LockQueue::WakeAll, Requeue::Forget, PreemptService::Forget
//   quota added, updated, deleted -> the ledger's quotas, Requeue::QuotaChanged
//   (after each of the above: Requeue::Poke, which passes over what the ledger gained)
//   Lease (follow mode)      -> Leadership::Observe
//   a cache synced           -> Readiness (wakes the filters waiting to be ready)
//
// An update whose uid differs (an object re-created under its name while we were not watching; a relist
// shows it as an update) is the old object's delete, then the new one's add.
#include <boost/asio/awaitable.hpp>
#include <map>
#include <memory>
#include <string>

#include "extender/health_service.h"
#include "extender/leadership.h"
#include "extender/ledger_feed.h"
#include "extender/lock_queue.h"
#include "extender/plugin_locks.h"
#include "extender/pod_ledger.h"
#include "extender/preempt_service.h"
#include "extender/readiness.h"
#include "extender/requeue.h"
#include "extender/score_service.h"
#include "k8s/api_client.h"
#include "k8s/reflector.h"

namespace hami::extender {

struct CacheOptions {
  k8s::Reflector::Options reflector;  // page size and backoffs (the path is set per resource)
  std::map<std::string, std::string> node_label_selector;  // empty: every node
  // Follow mode: the co-located kube-scheduler's Lease (namespace, name) is watched; otherwise it is not.
  bool watch_lease = false;
  std::string lease_namespace, lease_name;
};

struct Caches {
  Caches(k8s::ApiClient& client, const CacheOptions& options);
  Caches(const Caches&) = delete;
  Caches& operator=(const Caches&) = delete;

  // Every watch, until cancelled.
  boost::asio::awaitable<void> Run();

  k8s::Informer<NodeView> nodes;
  k8s::Informer<PodView> pods;
  k8s::Informer<ResourceQuotaView> quotas;
  // Read by /preempt alone (it counts the evictions a budget forbids); no event of theirs is routed.
  k8s::Informer<DisruptionBudgetView> budgets;
  std::unique_ptr<k8s::Informer<LeaseView>> lease;  // follow mode only
};

class WatchRoutes {
 public:
  struct Targets {
    LedgerFeed& feed;
    HealthService& health;
    PodLedger& ledger;
    LockQueue& lock_queue;
    PluginLocks& plugin_locks;
    Leadership& leadership;
    Readiness& readiness;
    Requeue& requeue;
    PreemptService& preempt;
    ScoreService& scores;
    std::string scheduler_name;  // pods naming it are ours (they wait for our decision)
  };
  explicit WatchRoutes(Targets targets) : t_(std::move(targets)) {}

  // Routes every cache's events (and their syncs) to the functions below; before the caches run.
  void Attach(Caches& caches);

  void OnNode(const NodeView& node);
  void OnNodeDeleted(const NodeView& node);
  void OnPod(const PodView& pod);
  void OnPodDeleted(const PodView& pod);

 private:
  // A pod deleted or finished: its hold released, locks it left for its device plugin released, and the
  // lock queues woken (it may have held a lock someone waits for).
  void PodGone(const std::string& uid);

  Targets t_;
};

}  // namespace hami::extender
