#pragma once
// NVIDIA GPUs: JSON device manifest, handshake plus device-count and manifest checks, memory/percentage/cores
// requests, type/UUID/mode selectors, cordon, NUMA binding, topology-aware pairs and MIG instances.
#include "core/backend.h"

namespace hami::backends::nvidia {

// The section `nvidia`: its schema and factory, for the explicit registration list (backends/builtin.cc).
VendorModule Module();
Result<BackendPtr> Create(const VendorSettings& settings);
BackendSpec DefaultSpec();

}  // namespace hami::backends::nvidia
