#pragma once
// The extender's controller: one object on the one event loop that owns the node registry and usage ledger
// (core::ClusterState), feeds them from node, pod and resource-quota watches, runs the health pass, and
// answers kube-scheduler's /filter and /bind (extender v1 JSON in, JSON out).
//
// Ledger rules (reference/hami-scheduler.md §5, with upstream quirks 9 and 10 fixed):
// - a pod counts once it carries hami.io/vgpu-node and its allocation annotations decode, or once our filter
//   reserved devices for it; Succeeded/Failed pods and deleted pods release; terminating pods keep holding;
// - a reservation made by our filter is authoritative while its annotation patch is in flight (older watch
//   events of the pod do not overwrite it); allocations read from annotations follow later annotation
//   changes;
// - after a restart the ledger is rebuilt from annotations alone.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/cluster_state.h"
#include "core/health.h"
#include "core/scheduler.h"
#include "k8s/api_client.h"
#include "k8s/events.h"
#include "k8s/extender.h"
#include "k8s/metrics.h"
#include "k8s/node_locker.h"
#include "k8s/reflector.h"

namespace hami::k8s {

struct ControllerOptions {
  std::string scheduler_name = "hami-scheduler";  // event source
  std::string hostname;                           // event source host
  SchedulerOptions policies;
  std::string node_label_selector;  // "k=v,k2=v2"; "" = every node
  std::chrono::milliseconds health_interval{15000};
  std::chrono::seconds handshake_timeout{60};
  std::chrono::seconds node_lock_timeout{300};
  // How long a bind waits for a node lock held by another pod (every pod, not only PodGroup members as in
  // HAMi: kube-scheduler binds asynchronously, so waiting costs nothing while failing costs a requeue with
  // backoff). 0: fail at once.
  std::chrono::milliseconds node_lock_retry_timeout{28000};
  // How long /filter waits for the caches and the first health pass before answering an error.
  std::chrono::milliseconds ready_wait{25000};
  // A pod that carries our allocation but has no spec.nodeName this long after its filter (hami.io/vgpu-time)
  // or its bind (hami.io/bind-time) loses it: a failed binding or a restart between filter and bind would
  // otherwise hold its devices until the pod is re-filtered or deleted (HAMi holds them that long).
  std::chrono::seconds reservation_timeout{300};
  // A filter is held (at most 20 s) while the binds in flight need more than this of the --kube-qps
  // budget (two requests each): binds queued longer would pass kube-scheduler's 30 s httpTimeout. 0: never.
  std::chrono::milliseconds bind_backlog{10000};
  bool legacy_metrics = false;
  Reflector::Options reflector_defaults;  // page size and backoffs for the watches (path is set per resource)
};

class Controller {
 public:
  // `client` makes the decisions' requests (and watches); `background` the health pass's handshakes and the
  // expiry sweep's patches (a background client sharing its rate limit: ClientOptions::background);
  // `events` posts the events (a rate limit of its own).
  struct Clients {
    ApiClient* decisions;
    ApiClient* background;
    ApiClient* events;
  };
  Controller(boost::asio::any_io_executor executor, Clients clients, const Backends& backends,
             ControllerOptions options, const Clock& clock);
  Controller(boost::asio::any_io_executor executor, ApiClient& client, const Backends& backends,
             ControllerOptions options, const Clock& clock)
      : Controller(std::move(executor), Clients{&client, &client, &client}, backends, std::move(options),
                   clock) {}
  ~Controller();

  // Watches nodes, pods and quotas and runs the health pass every interval, until cancelled.
  boost::asio::awaitable<void> Run();
  // One health pass over every node (PROTOCOL.md §3); Run() calls it on its timer.
  boost::asio::awaitable<void> HealthPass();
  // Frees the reservations of pods left unbound for longer than the reservation timeout (their annotations
  // are removed with a compare-and-swap patch), and ledger entries whose pod no longer carries an allocation.
  // Run() calls it after every health pass.
  boost::asio::awaitable<void> ExpireReservations();

  // Caches synced at least once.
  bool synced() const;
  // Synced and the first health pass done: /filter answers from here on.
  bool ready() const { return synced() && health_passes_ > 0; }
  std::string NotReadyReason() const;

  // POST /filter and POST /bind: request body in, ExtenderFilterResult / ExtenderBindingResult JSON out.
  // Failures are in the JSON's Error (kube-scheduler expects HTTP 200).
  boost::asio::awaitable<std::string> Filter(const std::string& body, bool body_too_large);
  boost::asio::awaitable<std::string> Bind(const std::string& body, bool body_too_large);

  // Ends waits (for readiness, for busy node locks) at once and refuses new ones: for shutdown. Requests in
  // flight finish; a bind that was waiting answers that the scheduler is shutting down.
  void Stop();
  void DropQueuedEvents() { events_.Stop(); }
  // Work of its own still running (events being posted, leftover locks being released): the controller must
  // outlive it.
  bool busy() const { return events_.busy() || background_ > 0; }

  // GET /metrics (Prometheus text 0.0.4).
  std::string Metrics() const;

  const ClusterState& state() const { return state_; }
  const EventRecorder& events() const { return events_; }
  const NodeLocker& locker() const { return locker_; }
  // Whether our filter holds a decision for pod `uid` that no Binding has written yet.
  bool Reserved(const std::string& uid) const { return reservations_.contains(uid); }
  // The pod as the watch last showed it ("ns/name"); null if not seen.
  const PodView* CachedPod(const std::string& key) const;
  struct Stats {
    std::size_t filters = 0, binds = 0, health_passes = 0;
    std::size_t annotation_errors = 0;    // pods whose allocation annotations could not be decoded
    std::size_t registration_errors = 0;  // unreadable device registrations (once per node, vendor, value)
    std::size_t lock_waits = 0;           // binds that waited for a node lock
    std::size_t rebinds = 0;              // binds of pods already bound to the node asked for
    std::size_t handshake_patches = 0, cleanups = 0;
    std::size_t expired = 0;          // reservations of pods never bound, freed after the reservation timeout
    std::size_t abandoned_locks = 0;  // node locks of binds that never completed, released
    std::size_t filters_held = 0;     // filters that waited for the binds in flight (AwaitBindBacklog)
  };
  const Stats& stats() const { return stats_; }
  // Node-vendor registrations that cannot be read now.
  std::size_t unreadable_registrations() const;

 private:
  // A decision of our filter, held in memory until the pod shows bound: the Binding writes it on the pod.
  struct Reservation {
    std::string key;  // "ns/name"
    std::string node;
    TimePoint decided;
    Annotations annotations;  // the allocation, as the Binding writes it
  };
  struct HeldLock {
    LockTarget target;
    std::string value;
    std::string resource_version;  // the node's, once our lock was written
    std::string uid;               // the pod it was taken for
  };
  struct LockWaiter {
    boost::asio::steady_timer* timer;
    std::string key;  // the lock annotation it waits for
  };

  // --- watches -> registry and ledger
  void OnNode(const NodeView& node);
  void OnNodeDeleted(const NodeView& node);
  void OnPod(const PodView& pod);
  void OnPodDeleted(const PodView& pod);
  void ReleasePod(const std::string& uid);
  void ApplyHealthMask(const std::string& node);
  // Logs, counts and records an event for each vendor registration of `node` that became unreadable.
  void ReportRegistrationErrors(const NodeView& node);
  void ReleaseLeftoverLocks(const std::string& uid);
  void ForgetReleasedLocks(const NodeView& node);

  // --- health
  boost::asio::awaitable<void> HealthLoop();
  boost::asio::awaitable<void> PatchNodeAnnotation(const std::string& node, const std::string& key,
                                                   const boost::json::value& value);

  // --- filter / bind
  boost::asio::awaitable<bool> WaitReady();
  // Holds a filter while the binds in flight need more than a few seconds of the --kube-qps budget.
  boost::asio::awaitable<void> AwaitBindBacklog();
  boost::asio::awaitable<std::string> FilterParsed(ExtenderArgs& args);
  boost::asio::awaitable<std::string> BindParsed(const ExtenderBindingArgs& args);
  // The answer to a bind of a pod that already has spec.nodeName: success on that node, an error elsewhere.
  std::string AlreadyBound(const PodView& pod, const std::string& node);
  // The pod from the cache, or from the API server when the cache has none or one with another uid.
  boost::asio::awaitable<ApiResult<PodView>> LookupPod(const std::string& ns, const std::string& name,
                                                       const std::string& uid);
  boost::asio::awaitable<LockOutcome> AcquireWaiting(const LockTarget& target,
                                                     std::chrono::steady_clock::time_point deadline);
  // Wakes the first waiting bind of each lock on `node` (all nodes: a lock owner may be gone).
  void WakeLockWaiters(const std::string& node);
  void WakeAllLockWaiters();
  // The lock as the node cache (or our own newer write) shows it.
  LockView CachedLock(const LockTarget& target);
  void RecordFilterEvent(const PodView& pod, const FilterOutcome& outcome);
  // The pod annotations a decision consists of (hami.io/vgpu-node, -time, the MIG list, every backend's
  // allocated and to-allocate keys).
  std::vector<std::string_view> AllocationKeys() const;

  boost::asio::any_io_executor executor_;
  ApiClient* client_;
  ApiClient* background_client_;
  ApiClient* event_client_;
  const Backends* backends_;
  ControllerOptions options_;
  const Clock* clock_;
  ClusterState state_;
  Scheduler scheduler_;
  EventRecorder events_;
  NodeLocker locker_;
  std::unique_ptr<Informer<NodeView>> nodes_;
  std::unique_ptr<Informer<PodView>> pods_;
  std::unique_ptr<Informer<ResourceQuotaView>> quotas_;
  std::unordered_map<std::string, NodeHealthRecord> health_;
  std::unordered_map<std::string, Reservation> reservations_;  // pod uid -> made by our filter, not yet bound
  std::unordered_map<std::string, std::vector<LockWaiter>>
      lock_waiters_;                                   // node -> binds waiting, oldest first
  std::unordered_set<std::string> annotation_warned_;  // pods whose unreadable annotations were logged
  // node -> the registration error last reported per backend ("" = readable), for nodes with one.
  std::unordered_map<std::string, std::vector<std::string>> registration_errors_;
  // "ns/name" -> uid of each /bind running now: the expiry sweep leaves their reservations and locks alone.
  std::unordered_multimap<std::string, std::string> binds_in_flight_;
  bool BindInFlight(const std::string& key, const std::string& uid) const;
  // Pods whose decision time is unreadable (or far in the future): when this process first saw them.
  std::unordered_map<std::string, TimePoint> undated_;
  // node -> locks our binds left for the device plugin to release, until the node shows them gone.
  std::unordered_map<std::string, std::vector<HeldLock>> held_locks_;
  std::size_t background_ = 0;  // leftover-lock releases running
  bool stopping_ = false;
  std::unordered_map<std::string, std::uint64_t> lock_wakeups_;  // node -> WakeLockWaiters() calls so far
  bool expiring_ = false;                                        // an ExpireReservations() sweep is running
  std::size_t health_passes_ = 0;
  Stats stats_;
  // Metrics.
  double filter_held_seconds_ = 0;
  prom::Histogram filter_latency_;
  prom::Histogram bind_latency_;
  std::map<std::string, std::uint64_t> filter_results_;  // scheduled, unschedulable, error, passthrough
  std::map<std::string, std::uint64_t> bind_results_;    // success, failure
};

}  // namespace hami::k8s
