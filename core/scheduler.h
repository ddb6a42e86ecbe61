#pragma once
// The filter decision: which node a pod goes to and which devices it gets there. Reads ClusterState;
// Reserve() records a decision in the ledger so the next decision sees it (before any API call is made).
#include <functional>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/cluster_state.h"
#include "core/fit.h"

namespace hami {

struct SchedulerOptions {
  std::string gpu_policy = std::string(kPolicySpread);    // default device policy
  std::string node_policy = std::string(kPolicyBinpack);  // default node policy
  // A node with this many allocations in flight (NodeEntry::allocations_in_flight: reserved or bound, not
  // yet set up by its device plugin) is busy: the node lock lets one pod at a time allocate on a node, so
  // a pod sent there queues behind the others. Binpack then takes the next node in its own order that is
  // not busy, but only among the nodes it fills with the pods waiting for a decision (the burst, taken as
  // pods like this one): the burst fills the nodes binpack fills, several at once, and never opens a node
  // binpack would leave empty. Spread ranks busy nodes below the others. With nothing in flight, or 0
  // here, the policy alone decides (docs/DECISIONS.md, "Bursts under binpack").
  int busy_node_threshold = 2;
};

// The pod's context for a decision under `options`: its policy annotations read (MakePodContext), and the
// node policy its annotation or the default names.
Result<PodContext> DecisionContext(const PodView& pod, const ClusterState& state,
                                   const SchedulerOptions& options);

struct FilterOutcome {
  enum class Kind {
    kPassThrough,    // the pod asks for no device we manage: every candidate passes
    kScheduled,      // `node` chosen
    kUnschedulable,  // no candidate fits; `failed_nodes` says why for each
    kError,  // no decision: the pod is invalid (bad resource value, bad annotation) or the request was
             // refused (not ready, not the leader, another pod's uid); `error` says why
  };
  Kind kind = Kind::kError;
  std::string node;
  PodDevices devices;
  Annotations annotations;  // what to write on the pod (scheduled only)
  std::map<std::string, std::string> failed_nodes;
  // Unschedulable only: the failed nodes where no pod leaving makes room (kube-scheduler's
  // FailedAndUnresolvableNodes: unregistered, a type or UUID refused, cards too few or too small).
  std::set<std::string> unresolvable;
  std::size_t fitting_count = 0;
  std::vector<std::pair<std::string, double>> best;  // up to 10 fitting nodes with scores, best first
  // Binpack's best node when it was busy, and the pods of the burst counted for these candidates (itself
  // included); `node` is that node again when the burst fits the busy nodes (docs/DECISIONS.md "Bursts under
  // binpack").
  std::string busy_best;
  int burst = 0;
  std::string error;
};

class Scheduler {
 public:
  Scheduler(ClusterState& state, SchedulerOptions options);

  const SchedulerOptions& options() const { return options_; }

  // Decides for `pod` among `candidates` (node names). Does not change any state.
  FilterOutcome Filter(const PodView& pod, const std::vector<std::string>& candidates, TimePoint now);
  // The same with the pod's requests collected already (CollectRequests(pod, backends)): a caller that
  // needs them before deciding collects them once.
  FilterOutcome Filter(const PodView& pod, const Result<PodRequests>& requests,
                       const std::vector<std::string>& candidates, TimePoint now);

  // Records a scheduled outcome for `pod` in the ledger (replacing any earlier reservation of the pod): in
  // flight until its device plugin sets it up, or set up already (an offline run that places pods one
  // after another, each set up before the next).
  enum class Hold { kInFlight, kSetUp };
  void Reserve(const PodView& pod, const FilterOutcome& outcome, Hold hold = Hold::kInFlight);
  // What Reserve records in the ledger for a scheduled outcome (the caller that owns the decision records it).
  PodAllocation Decision(const PodView& pod, const FilterOutcome& outcome, Hold hold = Hold::kInFlight) const;

  // Which of `pods` fit `node` now, taken one after another in the order given (each against the usage the
  // ones before it would leave); reserves nothing. A pod whose requests or policy cannot be read fits
  // nowhere; so does every pod on a node not registered.
  std::vector<bool> FitInTurn(std::span<const PodView* const> pods, const std::string& node);

 private:
  // The burst `pod` is part of (itself and the pods waiting for a decision that ask for a vendor it asks
  // for): the part of it that a window of `candidates` nodes can expect to receive.
  std::size_t BurstShare(const PodView& pod, const PodRequests& requests, std::size_t candidates) const;

  struct Fitting {
    std::size_t index;  // into candidates
    double score;
    bool busy;  // allocations in flight at the threshold
  };
  // Fits the pod on every candidate: the fitting ones into fitting_, the others' reasons into `out`.
  void FitCandidates(const PodContext& ctx, const PodRequests& requests,
                     const std::vector<std::string>& candidates, FilterOutcome& out);
  // Fit on one node, with the devices of the pods nominated there that the pod does not outrank taken.
  bool FitNode(const PodContext& ctx, const PodRequests& requests, const NodeEntry& node, PodDevices* out,
               std::string* reason);
  void PrefetchAhead(std::size_t i, std::size_t first_asked) const;
  void MarkUnresolvable(const PodContext& ctx, const PodRequests& requests,
                        const std::vector<std::string>& candidates, FilterOutcome& out);
  // Orders fitting_ by the node policy, the chosen node first.
  void Rank(const PodView& pod, const PodContext& ctx, const PodRequests& requests,
            const std::vector<std::string>& candidates, FilterOutcome& out);
  // Binpack's best node is busy: the position in fitting_ of the node the pod goes to instead (0: that
  // busy node after all; docs/DECISIONS.md "Bursts under binpack").
  std::size_t PickPastBusy(const PodView& pod, const PodContext& ctx, const PodRequests& requests,
                           const std::vector<std::string>& candidates, std::size_t top,
                           const std::function<bool(const Fitting&, const Fitting&)>& by_policy,
                           FilterOutcome& out);
  // The chosen node's devices and the annotations that record them.
  void WriteDecision(const PodView& pod, const PodContext& ctx, const PodRequests& requests, TimePoint now,
                     FilterOutcome& out);

  ClusterState* state_;
  SchedulerOptions options_;
  FitEngine engine_;
  std::vector<const NodeEntry*> resolved_;  // scratch: candidates resolved to registry entries
  std::vector<Fitting> fitting_;            // scratch: the candidates that fit
  std::vector<const PodAllocation*> held_;  // scratch: nominated holds on the node being fitted
};

}  // namespace hami
