#pragma once
// Node health per backend (PROTOCOL.md §3), as a pure function of the node, what the previous pass
// remembered, and the time. The caller performs the effects (handshake patch, clean-up) and stores `memory`.
#include <chrono>
#include <optional>
#include <string>

#include "core/backend.h"
#include "core/clock.h"
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

// status.allocatable[resource] rounded up; 0 when absent or unreadable.
std::int64_t AllocatableCount(const NodeView& node, const std::string& resource);

}  // namespace hami
