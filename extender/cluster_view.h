#pragma once
// The read-only JSON of the metrics listener's /api/ about the cluster's devices, from the registry, the
// ledger, the pod cache and the refused pods as they are (no API request): GET /api/overview (per vendor),
// /api/nodes (per node and card), /api/pods (holders and refused pods), /api/quotas and
// /api/explain/<ns>/<pod>. Names are JSON strings: whoever shows them escapes them for its own medium.
#include <cstdint>
#include <map>
#include <span>
#include <string>

#include "core/cluster_state.h"
#include "core/explain.h"
#include "core/free_capacity.h"
#include "extender/requeue.h"

namespace hami::extender {

// What the /api/ routes read, in one place; owned by the Extender, read on the event loop.
class ClusterView {
 public:
  // `pods`: the pod cache ("ns/name" -> pod). All alive as long as the view.
  // `shapes`: --capacity-shape, for /api/capacity.
  ClusterView(const ClusterState& state, const std::map<std::string, PodView>& pods, const Requeue& requeue,
              const SchedulerOptions& policies, std::span<const CapacityShape> shapes)
      : state_(&state), pods_(&pods), requeue_(&requeue), policies_(&policies), shapes_(shapes) {}

  // Grows with every change any answer below reflects: an answer given at generation G is still true
  // while it is G (the page polls with it and is sent nothing new).
  std::uint64_t Generation() const { return state_->generation() + requeue_->changes(); }
  std::string Overview() const;
  std::string Nodes() const;
  std::string Pods() const;
  std::string Quotas() const;
  std::string Capacity() const;
  // Why pod `ns`/`name` (as the pod cache has it) is pending, on every registered node (core/explain); an
  // error when the cache has no such pod.
  Result<PodExplanation> Explain(const std::string& ns, const std::string& name) const;
  // The pod as the cache has it ("ns/name"); null when it has none.
  const PodView* CachedPod(const std::string& key) const {
    const auto it = pods_->find(key);
    return it == pods_->end() ? nullptr : &it->second;
  }

 private:
  const ClusterState* state_;
  const std::map<std::string, PodView>* pods_;
  const Requeue* requeue_;
  const SchedulerOptions* policies_;
  std::span<const CapacityShape> shapes_;
};

// {"nodes": N, "pods": N, "podsRefused": N, "vendors": [{"vendor", "nodes", "nodesBlocked", "devices",
//  "devicesUnhealthy",
//  "memoryMiB": {"used", "total"}, "cores": {"used", "total"}, "tasks": {"used", "total"}, "pods",
//  "podsWaiting", "podsRefused"}]}: "pods" hold devices of the vendor, "podsWaiting" wait for a decision
//  asking for it, "podsRefused" asking for it found no node at their last filter; the top-level
//  "podsRefused" (`refused`) counts the pods refused for their devices that wait for room.
std::string OverviewJson(const ClusterState& state, std::size_t refused);

// {"nodes": [{"node", "allocationsInFlight", "blocked": {vendor: why}, "largestFreeMiB": {vendor: MiB},
//  "locks": [{"annotation", "holder", "since"}],
//  "cards": [{"id", "vendor", "type", "numa", "health", "memoryMiB": {"used", "total"},
//  "cores": {"used", "total"}, "tasks": {"used", "total"}}]}]}, nodes by name. "largestFreeMiB": the most
//  memory one card of the vendor can still give a pod (FreeCapacity's largest slice). "locks": the node lock
//  annotations set on it, with the pod holding each ("ns/name"; "" for an owner-less lock) and since when
//  (as written; a value that cannot be read is shown as "holder": null, "value": as written).
std::string NodesJson(const ClusterState& state);

// {"holders": [{"namespace", "name", "node", "phase", "created", "devices": [{"container", "vendor", "id",
//  "memoryMiB", "cores"}]}], "refused": [{"namespace", "name", "at", "nodes", "reasons": [{"node",
//  "reason"}]}]}, each by namespace and name. "phase": "allocating" until the device plugin set the pod up,
//  then "allocated"; "created": metadata.creationTimestamp as the cache has it ("" when not cached). "at":
//  the refusal's time (RFC 3339); "nodes": how many nodes refused it, of which "reasons" lists the first
//  Requeue::kShownReasons.
std::string PodsJson(const ClusterState& state, const std::map<std::string, PodView>& pods,
                     const Requeue& requeue);

// {"quotas": [{"namespace", "resource", "used", "limit"}]}: per namespace and device resource, what the
// ledger charges (memory in MiB, cores in percent) against the tightest ResourceQuota limit (null: none).
std::string QuotasJson(const ClusterState& state);

// {"shapes": [{"shape", "vendor", "count", "memoryMiB", "cores", "fits"}], "nodes": [{"node", "vendor",
//  "largestFreeMiB", "fits": {shape: N}}]}: how many pods of each configured shape still fit, in all and on
//  each node with devices of the shape's vendor (core/free_capacity; at most kMaxShapeFits per node).
std::string CapacityJson(const ClusterState& state, std::span<const CapacityShape> shapes,
                         std::string_view gpu_policy);

}  // namespace hami::extender
