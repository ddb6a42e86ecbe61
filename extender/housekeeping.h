#pragma once
// The leader's rounds, every --health-check-interval once the caches have synced: the scheduler pods' role
// labels (with --leader-elect), the health pass over every node, then the sweep (reservations never bound,
// ledger entries no pod backs any more, node locks abandoned by binds that never completed). A follower runs
// none of it and writes nothing (its caches stay warm); becoming the leader starts a round at once.
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <string>

#include "extender/cluster_writer.h"
#include "extender/health_service.h"
#include "extender/leadership.h"
#include "extender/ledger_feed.h"
#include "extender/plugin_locks.h"
#include "extender/pod_ledger.h"
#include "extender/readiness.h"
#include "extender/requeue.h"
#include "extender/reservation_expiry.h"
#include "extender/watch_routes.h"
#include "k8s/waits.h"

namespace hami::extender {

struct HousekeepingOptions {
  std::chrono::milliseconds interval{15000};  // --health-check-interval
  // The scheduler pod we run in (POD_NAME, POD_NAMESPACE): with --leader-elect the leader labels it
  // hami.io/scheduler-role=leader and the other scheduler pods of its release follower (HAMi's labels, which
  // its chart's Service selects on). Empty: no labels.
  std::string pod_name, pod_namespace;
};

class Housekeeping {
 public:
  struct Parts {
    const Caches& caches;
    LedgerFeed& feed;
    HealthService& health;
    PodLedger& ledger;
    ReservationExpiry& expiry;
    PluginLocks& plugin_locks;
    Leadership& leadership;
    Readiness& readiness;
    ClusterWriter& writer;
    Requeue& requeue;  // told after each pass and sweep: devices restored, reservations expired
  };
  Housekeeping(Parts parts, HousekeepingOptions options)
      : p_(std::move(parts)), options_(std::move(options)) {}

  // The rounds, until cancelled.
  boost::asio::awaitable<void> Run();
  // One health pass over every node.
  boost::asio::awaitable<void> HealthPass();
  // One sweep (one at a time: a test's call may meet the loop's, and each decides from what the last left).
  boost::asio::awaitable<void> Sweep();

 private:
  boost::asio::awaitable<void> LabelSchedulerPods();

  Parts p_;
  HousekeepingOptions options_;
  bool sweeping_ = false;
  k8s::Signal sweep_done_;
};

}  // namespace hami::extender
