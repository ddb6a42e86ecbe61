#pragma once
// Node health per backend (docs/DECISIONS.md, "HAMi's protocol"), as a pure function of the node, the last
// pass's memory and the time. The caller performs the effects (handshake patch, clean-up), stores `memory`.
#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/clock.h"
#include "core/cluster_state.h"
#include "core/model.h"

namespace hami {

// What one pass remembers for the next, per node and backend.
struct HealthMemory {
  std::int64_t reported_count = 0;           // allocatable count seen last (NVIDIA device checks)
  std::string reported_register;             // register annotation text seen last (NVIDIA device checks)
  std::optional<TimePoint> malformed_since;  // first time an unreadable Requesting_ value was seen (D8)
};

struct HealthVerdict {
  bool healthy = true;   // false: drop this vendor's devices and remove the handshake annotation
  bool refresh = false;  // re-read the devices from the node
  std::optional<std::string> handshake_patch;  // value to write to the handshake annotation
  HealthMemory memory;
  std::string why;  // one line for logs and `inspect`
};

HealthVerdict EvaluateHealth(const BackendSpec& spec, const NodeView& node, const HealthMemory& previous,
                             TimePoint now, std::chrono::seconds grace);

// What `serve` keeps about one node from one health pass to the next.
struct NodeHealthRecord {
  std::vector<HealthMemory> memory;  // per backend
  std::set<std::size_t> unhealthy;   // backends whose devices are withheld until the plugin shows life
};

// One backend's part of a node's health pass, for the caller to carry out.
struct NodeHealthStep {
  std::size_t backend = 0;
  HealthVerdict verdict;  // its handshake_patch is to be written (by serve; an offline run writes nothing)
  bool withhold = false;  // unhealthy from now on: drop the vendor's devices, remove the handshake annotation
  bool restore = false;   // healthy again: read the node's devices anew (and re-apply other withholds)
};

// The health pass `serve` runs over one node every --health-check-interval, for each backend that publishes
// on it (a register annotation, devices in `entry`, or withheld devices); updates `record`. `entry` is the
// node in the cluster state, or null. `simulate` runs it once with an empty record: the verdict of a serve
// started at `now` on the same snapshot, which answers no filter before its first pass.
std::vector<NodeHealthStep> NodeHealthPass(const Backends& backends, const NodeView& node,
                                           const NodeEntry* entry, NodeHealthRecord& record, TimePoint now,
                                           std::chrono::seconds grace);

// Whether the node shows its device plugin is alive for `spec`: allocatable devices, or a Reported_
// handshake. A request of ours is no such sign.
bool ShowsLife(const BackendSpec& spec, const NodeView& node);

// status.allocatable[resource] rounded up; 0 when absent or unreadable.
std::int64_t AllocatableCount(const NodeView& node, const std::string& resource);

}  // namespace hami
