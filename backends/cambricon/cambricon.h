#pragma once
// Cambricon MLU: devices synthesized from node capacity (vcore / vmemory in 256 MiB units), always healthy,
// its own bare-timestamp node lock with a 2-minute expiry, and the CAMBRICON_DSMLU_* pod annotations.
#include "core/backend.h"

namespace hami::backends::cambricon {

// The section `cambricon`: its schema and factory, for the explicit registration list (backends/builtin.cc).
VendorModule Module();
Result<BackendPtr> Create(const VendorSettings& settings);
BackendSpec DefaultSpec();

}  // namespace hami::backends::cambricon
