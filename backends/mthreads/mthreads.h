#pragma once
// Moore Threads GPUs: devices synthesized from node capacity (16 cores, memory in 512 MiB units per card),
// always healthy, pod totals divided per device, every container of a pod on one device, no node lock.
#include "core/backend.h"

namespace hami::backends::mthreads {

// The section `mthreads`: its schema and factory, for the explicit registration list (backends/builtin.cc).
VendorModule Module();
Result<BackendPtr> Create(const VendorSettings& settings);
BackendSpec DefaultSpec();

}  // namespace hami::backends::mthreads
