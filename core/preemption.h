#pragma once
// Device-aware preemption: which pods of lower priority must leave a node so that a pod's devices fit there.
// A what-if over the ledger through the fit engine (FitEngine::FitAgainst): it decides nothing and changes
// nothing; kube-scheduler picks the node among the answers and evicts (docs/DECISIONS.md, "Preemption").
//
// Per node: the victims kube-scheduler chose already always stay; the pods already terminating count as
// gone; the holds of pods nominated there that the pod does not outrank count as taken; if the pod fits
// then, no more are added. Otherwise every pod of lower priority that holds devices there is taken away,
// and if the pod fits then, pods are given back (kube-scheduler's reprieve): those off the cards that fit
// takes together, then each in turn when the pod still fits without its eviction: first the pods whose
// eviction would violate a PodDisruptionBudget, then the more important, the smaller.
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/cluster_state.h"
#include "core/fit.h"
#include "core/model.h"

namespace hami {

// kube-scheduler's order of importance: higher priority first; ties by namespace/name.
bool MoreImportant(const PodView& a, const PodView& b);

// Per pod of `pods` (taken most important first): whether its eviction violates a PodDisruptionBudget, as
// kube-scheduler counts it. Each budget of the pod's namespace whose selector matches the pod and that does
// not list it as disrupted already gives one of its allowed disruptions, in the budgets' order, until one
// has none left: the pod violates it.
std::vector<bool> PdbViolations(std::span<const PodView* const> pods,
                                std::span<const DisruptionBudgetView> budgets);

// A pod bound to a node, with what the ledger charges it there.
struct PodHolding {
  const PodView* pod;
  const PodAllocation* charge;
  const std::vector<DeviceCharge>* charges;  // as the ledger applies them (init containers collapsed)
};
// The pods the ledger charges to `node` that `find` ("ns/name" -> the pod, null when unknown) shows bound
// there with the same uid, by name: the only pods whose eviction frees devices there.
std::vector<PodHolding> PodsHoldingDevices(const ClusterState& state, const NodeEntry& node,
                                           const std::function<const PodView*(const std::string&)>& find);

struct PreemptionQuery {
  const PodView* preemptor = nullptr;
  const PodContext* ctx = nullptr;
  const PodRequests* requests = nullptr;
  const NodeEntry* node = nullptr;
  std::span<const PodView* const> required;  // kube-scheduler's victims on the node: they leave in any case
  std::span<const PodHolding> on_node;        // the pods bound to the node that hold devices there
  // The holds of pods nominated to the node that outrank or equal the preemptor: they stay.
  std::span<const PodAllocation* const> nominated;
  std::span<const DisruptionBudgetView> budgets;
};

struct VictimChoice {
  bool helps = false;  // false: no eviction of pods of lower priority makes room; `reason` says why
  std::vector<const PodView*> victims;  // the required ones included, most important first
  std::int64_t pdb_violations = 0;      // of the whole set
  PodDevices devices;                   // where the preemptor's devices go once the victims are gone
  std::string reason;
};

// kube-scheduler's choice among the nodes where preemption helps: the fewest PDB violations, then the lowest
// priority of the most important victim, the smallest sum of the victims' priorities, the fewest victims;
// then the node's name. Null when none helps.
const std::string* PickPreemptionNode(const std::map<std::string, VictimChoice>& choices);

class VictimChooser {
 public:
  explicit VictimChooser(const ClusterState& state)
      : state_(&state), engine_(state.backends(), state.quotas()) {}

  VictimChoice Choose(const PreemptionQuery& q);
  // The same for `preemptor` on `node` as the ledger has it: the pods bound there found with `find`
  // (PodsHoldingDevices), the holds nominated there that it does not outrank counted as taken.
  VictimChoice ChooseOn(const PodView& preemptor, const PodContext& ctx, const PodRequests& requests,
                        const NodeEntry& node, std::span<const PodView* const> required,
                        const std::function<const PodView*(const std::string&)>& find,
                        std::span<const DisruptionBudgetView> budgets);

 private:
  struct Candidate : PodHolding {
    bool violates = false;
    bool on_chosen_cards = false;
    std::int64_t mem = 0;
    bool evicted = false;
  };
  // Starts the what-if: the node's usage with the nominated holds added and the required victims and the
  // pods terminating taken away; fills candidates_ with the pods of lower priority holding devices there.
  void Begin(const PreemptionQuery& q);
  // Evicts (or gives back) one candidate in the what-if.
  void Evict(const PreemptionQuery& q, Candidate& c, bool evicted);
  bool Fits(const PreemptionQuery& q, PodDevices* out, std::string* reason);
  void Reprieve(const PreemptionQuery& q, const PodDevices& all_gone);
  void Conclude(const PreemptionQuery& q, VictimChoice& out);

  const ClusterState* state_;
  FitEngine engine_;
  std::vector<Candidate> candidates_;
  std::vector<const PodAllocation*> nominated_;  // ChooseOn's
  // The what-if's counters, changed one pod at a time (index-aligned with the node's devices).
  std::vector<DeviceUsage> usage_;
  std::vector<std::vector<MigInUse>> mig_;
  std::vector<CardClasses> classes_;
  NodeTotals totals_;
};

}  // namespace hami
