#pragma once
// Why a pod is pending, node by node and down to the card: the fit the filter makes, traced (each card's
// first refusal and how far it was from fitting), with the card that came closest on each node and what
// would make the pod fit. Reads ClusterState; changes nothing. The `explain` command prints it.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/cluster_state.h"
#include "core/reason.h"
#include "core/scheduler.h"

namespace hami {

// The card of a node that came closest to taking one of the pod's requests.
struct ClosestCard {
  std::string device;  // its ID
  std::string container;
  Reason reason = Reason::kCount;
  // MiB for memory, cores for cores, tasks for a card shared by as many as it takes.
  std::int64_t short_by = 0;
  std::int64_t wanted = 0;    // what the request asks of one card, in the same unit
  // The card as the ledger shows it.
  std::int64_t mem_free = 0, mem_total = 0;
  std::int64_t cores_used = 0, cores_total = 0;
  std::int64_t tasks = 0, task_limit = 0;
};

struct NodeExplanation {
  std::string node;
  bool fits = false;
  std::string reason;       // the filter's, as /filter answers it (empty when it fits)
  // Pods leaving the node could make room (not a type, UUID, health or size refusal).
  bool resolvable = false;
  std::optional<ClosestCard> closest;
  // One line: "fits", or the reason down to the card ("needs 6000 MiB on one card; the closest, GPU-ab12,
  // has 4096 MiB free (1904 MiB short), cores 70/100 used").
  std::string Summary() const;
};

struct PodExplanation {
  std::string pod;                    // "ns/name"
  std::string error;  // the requests or policy annotations cannot be read (nothing else is set)
  std::vector<std::string> requests;  // per request as read: "app: 1 x NVIDIA, 6000 MiB, 30 cores each"
  std::vector<NodeExplanation> nodes;  // in the candidates' order
  // What would make it fit: the nodes where it fits now, or the largest request that fits the closest card.
  std::vector<std::string> hints;
};

// The pod's fit on every candidate, as the filter makes it (nominated pods' holds counted), traced.
PodExplanation ExplainPod(const ClusterState& state, const SchedulerOptions& options, const PodView& pod,
                          const std::vector<std::string>& candidates);

}  // namespace hami
