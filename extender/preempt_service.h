#pragma once
// POST /preempt and what follows it. kube-scheduler's preemption hands us the nodes where evicting pods of
// lower priority might make room for a pod, each with the victims its own dry run chose there (often none:
// it cannot see devices); we answer, per node, which pods must leave for the pod's devices to fit (core's
// VictimChooser over the ledger), and leave out the nodes where no eviction helps. kube-scheduler then picks
// one node, evicts, and nominates the pod there (status.nominatedNodeName). From then until the pod is
// bound, gone or nominated elsewhere, the devices it is to get hold on that node for every pod it outranks
// or equals, so what its victims free is not given away (docs/DECISIONS.md, "Preemption").
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>

#include "core/preemption.h"
#include "core/scheduler.h"
#include "extender/readiness.h"
#include "k8s/extender.h"
#include "k8s/metrics.h"

namespace hami::extender {

struct PreemptOptions {
  SchedulerOptions policies;   // the same device and node policies as /filter
  std::string scheduler_name;  // a preemptor naming another scheduler is left to kube-scheduler's choice
};

class PreemptService {
 public:
  // `pods` and `budgets`: the pod and PodDisruptionBudget caches, alive as long as the service;
  // `budgets_synced` says whether the latter has been listed.
  PreemptService(ClusterState& state, const std::map<std::string, PodView>& pods,
                 const std::map<std::string, DisruptionBudgetView>& budgets,
                 std::function<bool()> budgets_synced, const Readiness& readiness, PreemptOptions options);

  // The victims per node for kube-scheduler (ExtenderPreemptionResult). A node the request describes
  // otherwise than the caches show (not registered, a victim unknown, not bound there, not of lower
  // priority, listed twice) is left out, with the reason in the log. An error, with nothing changed, when we
  // cannot answer yet.
  Result<std::map<std::string, k8s::MetaVictims>> Preempt(const k8s::ExtenderPreemptionArgs& args);
  // Why no answer can be given now ("" when it can): not ready, the PodDisruptionBudget cache not listed.
  std::string NotReady() const;
  // A request that could not be read: counted, answered with `error`.
  Error Refuse(std::string error);

  // The pod as the watch shows it now: a nomination begins, moves or ends with it.
  void OnPod(const PodView& pod);
  // The pod is gone.
  void Forget(const std::string& uid);

  void WriteMetrics(k8s::prom::TextWriter& w) const;

 private:
  struct Preemptor {
    const PodView* pod;
    PodContext ctx;
    PodRequests requests;
  };
  // The victims of one node, or why none helps; an error for a node or a victim the caches contradict.
  Result<VictimChoice> ChooseOn(const Preemptor& p, const std::string& node,
                                const std::vector<std::string>& uids);
  // The pod `uid` names, for a victim on `node` of `preemptor`: bound there, of lower priority.
  Result<const PodView*> Victim(const std::string& uid, const std::string& node, const PodView& preemptor);
  // Keeps, for a pod the cache has, where the answer places it on the nodes kube-scheduler is likeliest to
  // pick (`helped` is consumed); a nomination on one of them holds that.
  void Remember(const PodView& pod, std::map<std::string, VictimChoice>& helped);
  Error Fail(std::string message);
  // The pod cache's pod of "ns/name", or null.
  std::function<const PodView*(const std::string&)> FindPod() const;

  ClusterState* state_;
  const std::map<std::string, PodView>* pods_;
  const std::map<std::string, DisruptionBudgetView>* budgets_;
  std::function<bool()> budgets_synced_;
  const Readiness* readiness_;
  PreemptOptions options_;
  VictimChooser chooser_;
  std::vector<DisruptionBudgetView> budget_list_;  // scratch: the budgets, per request
  std::unordered_map<std::string, const PodView*> by_uid_;  // scratch: built when a victim needs it
  // Per preemptor uid: per node answered, the hold it gets there (kept until it is bound or gone; bounded).
  std::unordered_map<std::string, std::map<std::string, PodAllocation>> answered_;
  std::deque<std::string> answer_order_;  // answered_'s uids, oldest first
  k8s::prom::Histogram latency_;
  std::map<std::string, std::uint64_t> results_;  // victims, none, passthrough, error
  std::uint64_t contradicted_ = 0;                // nodes left out for input the caches contradict
  std::uint64_t nominations_ = 0;                 // holds taken for nominated pods
};

}  // namespace hami::extender
