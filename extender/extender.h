#pragma once
// The extender composed, in one place: each component built once, in dependency order, and handed what it
// uses. The watches feed the services through one routing table (WatchRoutes); the leader's rounds (health
// pass, sweep, role labels) are Housekeeping's; /filter, /bind and /webhook are answered by FilterService,
// BindService and AdmissionService behind the HTTP adapter (extender/http_routes, which owns the wire);
// Readiness says when they may answer. This class owns them all, starts and stops them, and gathers their
// metrics; it decides nothing itself.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <memory>
#include <string>

#include "core/cluster_state.h"
#include "extender/admission_service.h"
#include "extender/bind_service.h"
#include "extender/cluster_view.h"
#include "extender/cluster_writer.h"
#include "extender/filter_service.h"
#include "extender/health_service.h"
#include "extender/housekeeping.h"
#include "extender/leadership.h"
#include "extender/lease_elector.h"
#include "extender/ledger_feed.h"
#include "extender/lock_queue.h"
#include "extender/node_locker.h"
#include "extender/options.h"
#include "extender/plugin_locks.h"
#include "extender/pod_ledger.h"
#include "extender/preempt_service.h"
#include "extender/readiness.h"
#include "extender/refit_service.h"
#include "extender/requeue.h"
#include "extender/reservation_expiry.h"
#include "extender/watch_routes.h"
#include "k8s/api_client.h"
#include "k8s/events.h"
#include "k8s/metrics.h"
#include "k8s/reflector.h"
#include "k8s/waits.h"

namespace hami::extender {

// Where this replica runs, and how fast its watches restart: facts of the process, not settings.
struct ExtenderSite {
  std::string hostname;  // the events' source host, and the leader identity's default
  // The scheduler pod we run in (POD_NAME, POD_NAMESPACE): with --leader-elect the leader labels it
  // hami.io/scheduler-role=leader and the other scheduler pods of its release follower. Empty: no labels.
  std::string pod_name, pod_namespace;
  k8s::Reflector::Options reflector;  // page size and backoffs for the watches (path set per resource)
};

class Extender : public k8s::prom::Source {
 public:
  // `decisions` makes the decisions' requests (and watches); `background` the health pass's handshakes and
  // the sweep's patches (a background client sharing its rate limit: ClientOptions::background); `events`
  // posts the events (a rate limit of its own).
  struct Clients {
    k8s::ApiClient* decisions;
    k8s::ApiClient* background;
    k8s::ApiClient* events;
    // --leader-elect-mode=acquire: the Lease's reads and writes (a rate limit of its own, so a renewal never
    // queues behind decisions).
    k8s::ApiClient* leases = nullptr;
    // /refit's TokenReviews (a rate limit of its own, one short attempt): unauthenticated callers never
    // spend the decisions' budget. Null: the background client.
    k8s::ApiClient* reviews = nullptr;
  };
  Extender(boost::asio::any_io_executor executor, Clients clients, const Backends& backends,
           ExtenderOptions options, const ExtenderSite& site, const Clock& clock);
  ~Extender() override;
  Extender(const Extender&) = delete;
  Extender& operator=(const Extender&) = delete;

  // Watches nodes, pods and quotas (and the Lease), and runs the leader's rounds, until cancelled.
  boost::asio::awaitable<void> Run();
  // One health pass over every node; Run() calls it every round.
  boost::asio::awaitable<void> HealthPass() { return housekeeping_.HealthPass(); }
  // The sweep Run() calls after every health pass: expired reservations, ledger entries no pod backs any
  // more, abandoned node locks.
  boost::asio::awaitable<void> ExpireReservations() { return housekeeping_.Sweep(); }

  const Readiness& readiness() const { return readiness_; }
  bool synced() const { return readiness_.synced(); }  // caches synced at least once
  bool ready() const { return readiness_.ready(); }    // /filter answers from here on
  const Leadership& leadership() const { return leadership_; }

  FilterService& filter() { return filter_; }
  BindService& binder() { return binder_; }
  ScoreService& scores() { return scores_; }
  PreemptService& preempt() { return preempt_; }
  AdmissionService& admission() { return admission_; }
  RefitService& refit() { return refit_; }
  Requeue& requeue() { return requeue_; }

  // What the metrics listener's /api/ shows.
  const ClusterView& view() const { return view_; }

  // Acquire mode: ends our term at once (no write leaves after it) and gives the Lease up, so another replica
  // takes over within its retry period. Otherwise nothing.
  boost::asio::awaitable<void> ReleaseLeadership();
  // Ends waits (for readiness, for busy node locks, for the bind backlog) at once and refuses new ones: for
  // shutdown. Requests in flight finish.
  void Stop();
  void DropQueuedEvents() { events_.Stop(); }
  // Work of its own still running (events being posted, leftover locks being released, refusal annotations
  // being written).
  bool busy() const { return events_.busy() || plugin_locks_.busy() || filter_.busy(); }

  // GET /metrics (Prometheus text 0.0.4): every service's families and the API budget's.
  std::string Metrics() const override;

  const ClusterState& state() const { return feed_.state(); }
  const k8s::EventRecorder& events() const { return events_; }
  const NodeLocker& locker() const { return locker_; }
  // Whether our filter holds a decision for pod `uid` that no Binding has written yet.
  bool Reserved(const std::string& uid) const { return ledger_.reserved(uid); }
  // The pod as the watch last showed it ("ns/name"); null if not seen.
  const PodView* CachedPod(const std::string& key) const;
  struct Stats {
    std::size_t filters = 0, binds = 0, health_passes = 0;
    std::size_t annotation_errors = 0, registration_errors = 0;
    std::size_t lock_waits = 0, rebinds = 0;
    std::size_t handshake_patches = 0, cleanups = 0;
    std::size_t expired = 0, abandoned_locks = 0, filters_held = 0;
  };
  // Every service's counters in one place (for tests and benchmarks).
  Stats stats() const;

 private:
  Clients clients_;
  ExtenderOptions options_;
  Leadership leadership_;
  Readiness readiness_;
  k8s::EventRecorder events_;
  ApiClusterWriter writer_;
  LeaderFencedWriter fenced_;  // what every service writes through
  LedgerFeed feed_;
  HealthService health_;
  PodLedger ledger_;
  ReservationExpiry expiry_;
  NodeLocker locker_;
  Caches caches_;
  Requeue requeue_;
  ClusterView view_;
  LockQueue lock_queue_;
  PluginLocks plugin_locks_;
  ScoreService scores_;  // all-fitting filter mode
  BindService binder_;
  FilterService filter_;
  PreemptService preempt_;
  AdmissionService admission_;
  RefitService refit_;
  WatchRoutes routes_;
  Housekeeping housekeeping_;
  std::unique_ptr<LeaseClient> lease_client_;  // acquire mode only
  std::unique_ptr<LeaseElector> elector_;      // acquire mode only
};

}  // namespace hami::extender
