#pragma once
// POST /bind: carries out the bind plan (core/bind_plan) for a pod our filter decided: takes the node locks
// in vendor order through their queues (LockQueue), posts the Binding that carries the decision, and leaves
// the locks for the device plugin to release (PluginLocks). The pod's progress (binding, bound) is kept in
// the pod ledger, which the filter and the reservation sweep read. In all-fitting filter mode the decision
// is made here first (ScoreService::PlaceAtBind): the pod fitted on the node kube-scheduler chose.
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/bind_plan.h"
#include "core/cluster_state.h"
#include "core/fit.h"
#include "extender/cluster_writer.h"
#include "extender/lock_queue.h"
#include "extender/node_locker.h"
#include "extender/options.h"
#include "extender/plugin_locks.h"
#include "extender/pod_ledger.h"
#include "extender/requeue.h"
#include "extender/score_service.h"
#include "k8s/metrics.h"
#include "k8s/waits.h"

namespace hami::extender {

// Which pod goes where: kube-scheduler's ExtenderBindingArgs as the service sees it.
struct BindRequest {
  std::string ns, name;
  std::string uid;  // "" when the request names none
  std::string node;
  std::string Key() const { return ns + "/" + name; }
};

class BindService {
 public:
  // `pods`: the pod cache ("ns/name" -> pod), alive as long as the service. `scores`: decides at bind when
  // it is in all-fitting mode (null: the filter always decides).
  BindService(const ClusterState& state, PodLedger& ledger, const std::map<std::string, PodView>& pods,
              LockQueue& queue, PluginLocks& plugin_locks, NodeLocker& locker, ClusterWriter& writer,
              const Clock& clock, BindOptions options, Requeue& requeue, ScoreService* scores = nullptr);

  // The bind of one pod: "" on success, else the error kube-scheduler is told (an event says it too).
  boost::asio::awaitable<std::string> Bind(const BindRequest& request);
  // A request that could not be read: counted as a failed bind.
  void Refuse() {
    ++stats_.binds;
    Count("failure", 0);
  }

  // Binds in flight that spend the API budget now (not parked behind a lock's queue head).
  std::size_t BindsUsingBudget() const;
  // Notified whenever a bind ends or a lock queue moves (the filter's backpressure waits on it).
  k8s::Signal& progress() const { return queue_->progress(); }

  struct Stats {
    std::size_t binds = 0;
    std::size_t rebinds = 0;  // binds of pods already bound to the node asked for
  };
  const Stats& stats() const { return stats_; }
  void WriteMetrics(k8s::prom::TextWriter& w) const;

 private:
  // The locks taken, in the order taken.
  using HeldLocks = std::vector<std::pair<LockTarget, LockOutcome>>;

  boost::asio::awaitable<std::string> BindPod(const BindRequest& request);
  // Takes the plan's locks for `pod` on `node` once the pod is found to hold a reservation there; an error
  // (the locks taken released) when it does not, or a lock could not be had.
  boost::asio::awaitable<std::string> TakeLocks(const PodView& pod, const PodRequests& requests,
                                                const std::string& node, HeldLocks& held);
  // Posts the Binding with the decision (after clearing an earlier decision's keys), reads back an unclear
  // outcome, and leaves the locks for the device plugin on success.
  boost::asio::awaitable<std::string> PostBinding(const PodView& pod, const PodRequests& requests,
                                                  const std::string& node, HeldLocks& held);
  // Removes the keys of an earlier decision the Binding does not overwrite (BindingWrites::NeedsClearing).
  boost::asio::awaitable<ApiResult<void>> ClearEarlier(const PodView& pod, const BindingWrites& writes);
  boost::asio::awaitable<void> ReleaseAll(const HeldLocks& held);
  void Count(const char* result, double seconds);
  std::string Failed(const PodView& pod, std::string message);
  // The answer to a bind of a pod that already has spec.nodeName: success on that node, an error elsewhere.
  std::string AlreadyBound(const PodView& pod, const std::string& node);
  // The pod from the cache, or from the API server when the cache has none or one with another uid.
  boost::asio::awaitable<ApiResult<PodView>> LookupPod(const BindRequest& request);
  // Frees the hold of `uid` if the ledger keeps it for pod `key` ("ns/name"); logs a uid of another pod.
  void ReleaseIfHeldBy(const std::string& uid, const std::string& key);

  const ClusterState* state_;
  PodLedger* ledger_;
  const std::map<std::string, PodView>* pods_;
  LockQueue* queue_;
  PluginLocks* plugin_locks_;
  NodeLocker* locker_;
  ClusterWriter* writer_;
  const Clock* clock_;
  BindOptions options_;
  Requeue* requeue_;  // told of binds that timed out on a node lock
  ScoreService* scores_;
  Stats stats_;
  k8s::prom::Histogram latency_;
  std::map<std::string, std::uint64_t> results_;  // success, failure
};

}  // namespace hami::extender
