#pragma once
// Free capacity per node and vendor, for the tools that cannot see into shared cards (Kueue, capacity
// dashboards): the largest slice of memory one card can still give, and how many pods of a few configured
// shapes still fit (docs/DECISIONS.md, "Free capacity"). The counts come from the fit engine itself, so they
// agree with what /filter would decide for such a pod. Reads ClusterState; changes nothing.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/cluster_state.h"
#include "core/fit.h"
#include "core/result.h"

namespace hami {

// At most this many shapes: each adds a series per node to /metrics.
inline constexpr std::size_t kMaxCapacityShapes = 16;
// Pods of one shape counted per node at most: the count costs one fit per pod, and a dashboard needs no
// more than "plenty" on one node.
inline constexpr int kMaxShapeFits = 64;

// A pod-like request for one vendor's cards, written NAME=VENDOR:COUNTxMEMORY[:CORES]
// (`a10-quarter=NVIDIA:1x6000:25`): COUNT cards, MEMORY MiB and CORES percent of each.
struct CapacityShape {
  std::string name;    // a DNS label (a Prometheus label value as it is)
  std::string vendor;  // a backend's Vendor()
  std::int32_t count = 1;
  std::int64_t memory_mib = 0;
  std::int32_t cores = 0;
  friend bool operator==(const CapacityShape&, const CapacityShape&) = default;
};

// Reads the written form; the error names the input and what was expected. The vendor is not checked here
// (CheckCapacityShapes does, once the backends are known).
Result<CapacityShape> ParseCapacityShape(std::string_view text);
// The written form again (ParseCapacityShape reads it back to the same shape).
std::string FormatCapacityShape(const CapacityShape& shape);
// Whether the shapes can be counted with `backends`: at most kMaxCapacityShapes, names unique, each vendor
// one of the backends', whose resources can ask for it (a memory resource, a core resource when it asks
// for cores) and which reads the request. The error names the shape.
Result<void> CheckCapacityShapes(std::span<const CapacityShape> shapes, const Backends& backends);

// One vendor of one node.
struct VendorCapacity {
  std::string vendor;
  // The most free memory of one card that takes a task more (healthy, not cordoned, a slot free), in MiB,
  // nominated pods' holds counted as taken; 0 when there is none or the vendor takes no new pod on the node
  // (NodeEntry::blocked).
  std::int64_t largest_free_mib = 0;
  // Per shape of this vendor, in the configured order: how many such pods fit one after another, up to
  // kMaxShapeFits.
  std::vector<std::pair<std::string, int>> fits;
};

// Counts free capacity node by node, the shapes' requests read once. A shape counts as a pod without
// annotations in a namespace without quota, under the default device policy `gpu_policy`; nominated pods'
// holds on the node count as taken, as /filter counts them for a pod that does not outrank them. A shape
// whose vendor or request the backends cannot read counts 0 (CheckCapacityShapes refuses it at start).
class FreeCapacity {
 public:
  FreeCapacity(const ClusterState& state, std::span<const CapacityShape> shapes, std::string_view gpu_policy);
  FreeCapacity(const FreeCapacity&) = delete;
  FreeCapacity& operator=(const FreeCapacity&) = delete;
  FreeCapacity(FreeCapacity&&) = default;

  // Per vendor the node has devices of, in Backends order.
  std::vector<VendorCapacity> Of(const NodeEntry& node);

 private:
  // One shape, ready for the fit engine.
  struct Prepared {
    std::string name;
    int backend = -1;  // index into Backends; -1: the shape cannot be counted
    PodView pod;
    PodRequests requests;
    PodContext context;
  };
  // A node's usage counters, copied to be changed.
  struct Counters {
    std::vector<DeviceUsage> usage;
    std::vector<std::vector<MigInUse>> mig;
    std::vector<CardClasses> classes;
    NodeTotals totals;
  };
  // Whether holds are nominated to the node; then held_ is its usage with them charged.
  bool ChargeNominated(const NodeEntry& node);
  int CountWithNominated(const Prepared& shape, const NodeEntry& node);

  const ClusterState* state_;
  FitEngine engine_;
  std::vector<Prepared> shapes_;  // PodContext::pod points into its element: never resized after build
  Counters held_, work_;          // scratch, reused between nodes
};

// One node's free capacity (FreeCapacity for a single node).
std::vector<VendorCapacity> NodeFreeCapacity(const ClusterState& state, const NodeEntry& node,
                                             std::span<const CapacityShape> shapes,
                                             std::string_view gpu_policy);

}  // namespace hami
