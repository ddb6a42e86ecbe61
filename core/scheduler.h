#pragma once
// The filter decision: which node a pod goes to and which devices it gets there. Reads ClusterState;
// Reserve() records a decision in the ledger so the next decision sees it (before any API call is made).
#include <map>
#include <string>
#include <vector>

#include "core/cluster_state.h"
#include "core/fit.h"

namespace hami {

struct SchedulerOptions {
  std::string gpu_policy = std::string(kPolicySpread);    // default device policy
  std::string node_policy = std::string(kPolicyBinpack);  // default node policy
  // A node with this many allocations in flight (NodeEntry::allocations_in_flight: reserved or bound, not
  // yet set up by its device plugin) ranks below every fitting node with fewer, whatever the policy says:
  // the node lock lets one pod at a time allocate on a node, so a burst that binpack would send to one node
  // spreads over the nodes that fit instead of queueing behind that node's lock. Once the burst is set up,
  // the policy alone decides again. 0: the policy alone, always.
  int busy_node_threshold = 2;
};

struct FilterOutcome {
  enum class Kind {
    kPassThrough,    // the pod asks for no device we manage: every candidate passes
    kScheduled,      // `node` chosen
    kUnschedulable,  // no candidate fits; `failed_nodes` says why for each
    kError,          // the pod itself is invalid (bad resource value, bad annotation); `error` says why
  };
  Kind kind = Kind::kError;
  std::string node;
  PodDevices devices;
  Annotations annotations;  // what to write on the pod (scheduled only)
  std::map<std::string, std::string> failed_nodes;
  std::size_t fitting_count = 0;
  std::vector<std::pair<std::string, double>> best;  // up to 10 fitting nodes with scores, best first
  std::string error;
};

class Scheduler {
 public:
  Scheduler(ClusterState& state, SchedulerOptions options);

  const SchedulerOptions& options() const { return options_; }

  // Decides for `pod` among `candidates` (node names). Does not change any state.
  FilterOutcome Filter(const PodView& pod, const std::vector<std::string>& candidates, TimePoint now);

  // Records a scheduled outcome for `pod` in the ledger (replacing any earlier reservation of the pod).
  void Reserve(const PodView& pod, const FilterOutcome& outcome);

 private:
  ClusterState* state_;
  SchedulerOptions options_;
  NodeFitter fitter_;
  std::vector<const NodeEntry*> resolved_;  // scratch: candidates resolved to registry entries
};

}  // namespace hami
