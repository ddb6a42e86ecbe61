#pragma once
// The watched caches and the routing table from their events to the services: every watch event the
// extender acts on is routed here and nowhere else (kube-scheduler keeps its event handlers in one file the
// same way). WatchRoutes::Attach sets each cache's handlers to the member functions below; each one is the
// whole list of services that event reaches:
//
//   node added or updated    -> LedgerFeed::UpsertNode, HealthService::ApplyMask, BindService::OnNodeSeen
//   node deleted             -> LedgerFeed::RemoveNode, HealthService::Forget, BindService::OnNodeDeleted
//   pod added or updated     -> LedgerFeed (waiting, allocation), Reservations, BindService (bound, gone)
//   pod deleted              -> LedgerFeed::StopWaiting, the hold released, BindService::OnPodGone
//   quota added, updated, deleted -> the ledger's quotas
//   Lease (follow mode)      -> Leadership::Observe
//   a cache synced           -> Readiness (wakes the filters waiting to be ready)
//
// An update whose uid differs (an object re-created under its name while we were not watching; a relist
// shows it as an update) is the old object's delete, then the new one's add.
#include <boost/asio/awaitable.hpp>
#include <memory>
#include <string>

#include "extender/bind_service.h"
#include "extender/health_service.h"
#include "extender/leadership.h"
#include "extender/ledger_feed.h"
#include "extender/readiness.h"
#include "extender/reservations.h"
#include "k8s/api_client.h"
#include "k8s/reflector.h"

namespace hami::extender {

struct CacheOptions {
  k8s::Reflector::Options reflector;  // page size and backoffs (the path is set per resource)
  std::string node_label_selector;    // "k=v,k2=v2"; "" = every node
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
  std::unique_ptr<k8s::Informer<LeaseView>> lease;  // follow mode only
};

class WatchRoutes {
 public:
  struct Targets {
    LedgerFeed& feed;
    HealthService& health;
    BindService& binder;
    Reservations& reservations;
    Leadership& leadership;
    Readiness& readiness;
    HoldRelease release;
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
  Targets t_;
};

}  // namespace hami::extender
