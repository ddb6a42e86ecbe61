#pragma once
// POST /filter: decides where a pod's devices go (core's Scheduler over the registry and ledger), holds the
// decision in the pod ledger as a reservation until its Binding writes it, and answers which node fits. In
// all-fitting mode it answers every node that fits and reserves nothing (ScoreService takes over).
// Waits for the caches and the first health pass before its first answer, and holds a decision while the
// binds in flight need more of the API budget than kube-scheduler's timeout leaves them.
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <map>
#include <string>

#include "core/scheduler.h"
#include "extender/bind_service.h"
#include "extender/cluster_writer.h"
#include "extender/options.h"
#include "extender/pod_ledger.h"
#include "extender/readiness.h"
#include "extender/requeue.h"
#include "extender/score_service.h"
#include "k8s/metrics.h"
#include "k8s/waits.h"

namespace hami::extender {

class FilterService {
 public:
  // `pods`: the pod cache ("ns/name" -> pod), alive as long as the service. `decision_qps`: the decisions'
  // client's --kube-qps, the budget the binds in flight share (0: no limit, no backpressure).
  FilterService(ClusterState& state, PodLedger& ledger, const BindService& binds,
                const std::map<std::string, PodView>& pods, ClusterWriter& writer, const Clock& clock,
                FilterOptions options, double decision_qps, Readiness& readiness, Requeue& requeue,
                ScoreService& scores);

  // The decision for `pod` among `candidates` (node names), as kube-scheduler is to hear it: a failure is
  // an outcome of kind kError with its message.
  boost::asio::awaitable<FilterOutcome> Filter(const PodView& pod,
                                               const std::vector<std::string>& candidates);
  // A request that could not be read: counted, answered with `error`.
  FilterOutcome Refuse(std::string error);

  struct Stats {
    std::size_t filters = 0;
    std::size_t filters_held = 0;  // filters that waited for the binds in flight
  };
  const Stats& stats() const { return stats_; }
  void WriteMetrics(k8s::prom::TextWriter& w) const;

 private:
  boost::asio::awaitable<FilterOutcome> Decide(const PodView& pod,
                                               const std::vector<std::string>& candidates);
  // Who the request speaks for.
  struct Identity {
    std::string refusal;  // the pod's uid is another pod's (in the cache, a read, the ledger, a reservation)
    std::string bound;    // else: the node the pod is bound to already ("" when it is not)
  };
  boost::asio::awaitable<Identity> Identify(const PodView& pod);
  // The answer for a pod bound already: its node fits (if a candidate), nothing is decided or released.
  FilterOutcome AnswerBound(const std::string& node, const std::vector<std::string>& candidates);
  boost::asio::awaitable<bool> WaitReady();
  boost::asio::awaitable<void> AwaitBindBacklog();
  // A one-node decision: held in the pod ledger as a reservation (its annotations too) until the Binding.
  void HoldDecision(const PodView& pod, FilterOutcome& outcome, TimePoint now, std::size_t candidates);
  FilterOutcome Fail(std::string message);
  void RecordFilterEvent(const PodView& pod, const FilterOutcome& outcome);

  ClusterState* state_;
  PodLedger* ledger_;
  const BindService* binds_;
  const std::map<std::string, PodView>* pods_;
  ClusterWriter* writer_;
  const Clock* clock_;
  FilterOptions options_;
  double decision_qps_;
  Readiness* readiness_;
  Requeue* requeue_;
  ScoreService* scores_;
  Scheduler scheduler_;
  Stats stats_;
  double held_seconds_ = 0;
  k8s::prom::Histogram latency_;
  std::map<std::string, std::uint64_t> results_;  // scheduled, fitting, unschedulable, error, passthrough
};

}  // namespace hami::extender
