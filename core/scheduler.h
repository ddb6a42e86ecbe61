#pragma once
// The filter decision: which node a pod goes to and which devices it gets there. Reads ClusterState;
// Reserve() records a decision in the ledger so the next decision sees it (before any API call is made).
#include <functional>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/cluster_state.h"
#include "core/fit.h"

namespace hami {

// What /filter answers kube-scheduler (--filter-mode; docs/DECISIONS.md "Filter modes"). One node: the node
// the device policy chose, its devices reserved at once (HAMi's answer; kube-scheduler then scores nothing).
// All fitting: every node where the pod fits, nothing reserved; /prioritize scores them by the device policy
// next to kube-scheduler's own soft constraints, and /bind fits the pod on the node kube-scheduler chose.
enum class FilterMode { kOneNode, kAllFitting };
std::string_view FilterModeName(FilterMode mode);
// "one-node" or "all-fitting"; anything else is an error naming both.
Result<FilterMode> ParseFilterMode(std::string_view text);

// The extender's score range (kube-scheduler's MaxExtenderPriority): kube-scheduler multiplies a score by
// the extender's weight and by 10 (its MaxNodeScore over this) before adding it to its plugins' sum.
inline constexpr int kMaxExtenderScore = 10;

// The devices of pods filtered in all-fitting mode and not bound yet, by the node they are expected on.
using PendingFits = std::unordered_map<std::string, std::vector<const PodAllocation*>>;

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
  FilterMode filter_mode = FilterMode::kOneNode;
};

// The pod's context for a decision under `options`: its policy annotations read (MakePodContext), and the
// node policy its annotation or the default names.
Result<PodContext> DecisionContext(const PodView& pod, const ClusterState& state,
                                   const SchedulerOptions& options);

struct FilterOutcome {
  enum class Kind {
    kPassThrough,    // the pod asks for no device we manage: every candidate passes
    kScheduled,      // `node` chosen
    kFitting,  // all-fitting mode: `fitting` lists every candidate the pod fits (nothing chosen); `node` and
               // `devices` are where the device policy alone would put it (the pod's expected place)
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
  std::vector<std::string> fitting;  // kFitting: in the candidates' order
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

  // The decision on `node` alone, made as the one-node filter makes it whatever the mode (all-fitting mode's
  // /bind: kube-scheduler chose the node, and the pod is fitted there against the ledger as it is now).
  FilterOutcome PlaceOn(const PodView& pod, const Result<PodRequests>& requests, const std::string& node,
                        TimePoint now);

  // All-fitting mode's POST /prioritize: the node policy's score for each candidate, in kube-scheduler's
  // extender range: 1 (the policy's worst fitting node) to kMaxExtenderScore (its best), in proportion
  // between; 0 where the pod does not fit with `pending` (the devices the pods filtered before it are
  // expected to take) counted as used, or does not fit at all. `best` is the highest scored node (ties: the
  // first candidate), `devices` what the pod would take there; none of it for a pod that asks for no device
  // of ours.
  struct Scores {
    std::vector<std::pair<std::string, int>> scores;  // in the candidates' order
    std::string best;
    PodDevices devices;
    std::string error;  // the pod's requests or policy annotations cannot be read; every score 0
  };
  Scores Prioritize(const PodView& pod, const Result<PodRequests>& requests,
                    const std::vector<std::string>& candidates, const PendingFits& pending);

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
  FilterOutcome Decide(const PodView& pod, const Result<PodRequests>& requests,
                       const std::vector<std::string>& candidates, TimePoint now, FilterMode mode);
  // Fit on one node, with the devices of the pods nominated there that the pod does not outrank taken, and
  // `pending` too.
  bool FitNode(const PodContext& ctx, const PodRequests& requests, const NodeEntry& node, PodDevices* out,
               std::string* reason, std::span<const PodAllocation* const> pending = {});
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
  // The chosen node's devices; in one-node mode the annotations that record them too.
  void WriteDecision(const PodView& pod, const PodContext& ctx, const PodRequests& requests, TimePoint now,
                     FilterMode mode, FilterOutcome& out);

  ClusterState* state_;
  SchedulerOptions options_;
  FitEngine engine_;
  std::vector<const NodeEntry*> resolved_;  // scratch: candidates resolved to registry entries
  std::vector<Fitting> fitting_;            // scratch: the candidates that fit
  std::vector<const PodAllocation*> held_;  // scratch: nominated holds on the node being fitted
};

}  // namespace hami
