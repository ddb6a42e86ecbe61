#pragma once
// The extender's settings, grouped by the components that take them. config/ reads them into
// Config::extender (defaults <- YAML <- flags, each value checked and parsed once); cmd hands them to the
// Extender as they are, and the Extender hands each component its group. Plain data: config/ may include
// this header (and no other of extender/), so nothing here may include more than core/.
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/admission.h"
#include "core/free_capacity.h"
#include "core/scheduler.h"

namespace hami::extender {

enum class LeaderElectMode { kFollow, kAcquire };

// Leadership and, in acquire mode, LeaseElector.
struct LeadershipOptions {
  bool enabled = false;  // --leader-elect
  std::string ns;        // --leader-elect-resource-namespace
  std::string name;      // --leader-elect-resource-name
  // --leader-elect-identity ("" = the host name): the holder identity's prefix ("<identity>_..."); in
  // acquire mode the elector writes "<identity>_<random>", as kube-scheduler does.
  std::string identity;
  LeaderElectMode mode = LeaderElectMode::kFollow;  // --leader-elect-mode
  // Acquire mode (kube-scheduler's flags and defaults).
  std::chrono::milliseconds lease_duration{15000};  // --leader-elect-lease-duration
  std::chrono::milliseconds renew_deadline{10000};  // --leader-elect-renew-deadline
  std::chrono::milliseconds retry_period{2000};     // --leader-elect-retry-period
};

// FilterService.
struct FilterOptions {
  SchedulerOptions policies;  // --gpu-scheduler-policy, --node-scheduler-policy, --busy-node-threshold
  // How long a filter waits for the caches and the first health pass before answering an error.
  std::chrono::milliseconds ready_wait{25000};
  // A filter is held (at most 20 s) while the binds in flight need more than this of the decisions' budget
  // (--kube-qps, two requests each): binds queued longer would pass kube-scheduler's 30 s httpTimeout.
  // 0: never.
  std::chrono::milliseconds bind_backlog{10000};
  // --refusal-annotation: a refused pod carries the refusal's reason (keys::kFilterRefusal) after its events
  // have aged out, written only when the reason changes (docs/DECISIONS.md, "The refusal annotation").
  bool refusal_annotation = false;
};

// BindService (and LockQueue, PluginLocks, ReservationExpiry: the same two timeouts).
struct BindOptions {
  // --node-lock-retry-timeout: how long a bind waits for a node lock held by another pod (every pod, not only
  // PodGroup members as in HAMi: kube-scheduler binds asynchronously, so waiting costs nothing while failing
  // costs a requeue with backoff). 0: fail at once.
  std::chrono::milliseconds node_lock_retry_timeout{28000};
  // --reservation-timeout: a pod that carries our allocation but has no spec.nodeName this long after its
  // filter (hami.io/vgpu-time) or its bind (hami.io/bind-time) loses it, and a lock whose owner never bound
  // is released.
  std::chrono::seconds reservation_timeout{300};
};

// RefitService (POST /refit): whose calls it takes, and the time its caller gives it.
struct RefitOptions {
  // --device-plugin-namespace, --device-plugin-service-account: the NVIDIA device plugin's service account,
  // the one caller accepted (both empty: every refit is refused, saying so).
  std::string device_plugin_namespace;
  std::string device_plugin_service_account;
  std::chrono::milliseconds budget{2000};  // the device plugin's client timeout
  // The merge patch starts only with this much of the budget left, so a refit never lands after the
  // plugin gave up on it.
  std::chrono::milliseconds patch_reserve{500};
  std::chrono::seconds verdict_ttl{60};  // how long a token's positive TokenReview is kept
};

struct ExtenderOptions {
  // --scheduler-name (also the events' source, and the pods the watch routes take as ours) and
  // --force-overwrite-default-scheduler: AdmissionService.
  AdmissionOptions admission{.scheduler_name = "hami-scheduler"};
  FilterOptions filter;
  BindOptions bind;
  std::chrono::seconds node_lock_timeout{300};             // --node-lock-timeout: NodeLocker
  std::chrono::milliseconds health_interval{15000};        // --health-check-interval: Housekeeping's rounds
  std::chrono::seconds handshake_timeout{60};              // --handshake-timeout: HealthService
  std::map<std::string, std::string> node_label_selector;  // --node-label-selector: the node watch
  // --leader-elect...: only the leader runs the health pass and the sweep, answers /filter and /bind, exports
  // the device gauges and labels the scheduler pods hami.io/scheduler-role=leader|follower.
  LeadershipOptions leadership;
  bool legacy_metrics = false;  // --legacy-metrics: LedgerFeed's families under HAMi's old names too
  // --requeue-qps: Requeue's nudges a second (0: none); unset: half the background client's --kube-qps.
  std::optional<double> requeue_qps;
  // --capacity-shape: the pod shapes whose fits per node LedgerFeed exports with the largest free slices
  // (docs/DECISIONS.md, "Free capacity"); checked against the backends when they are built.
  std::vector<CapacityShape> capacity_shapes;
  RefitOptions refit;
};

}  // namespace hami::extender
