#pragma once
// Cambricon MLU: devices synthesized from node capacity (vcore / vmemory in 256 MiB units), always healthy,
// its own bare-timestamp node lock with a 2-minute expiry, and the CAMBRICON_DSMLU_* pod annotations.
#include "core/backend.h"

namespace hami::backends::cambricon {

Result<BackendPtr> Create(const VendorSettings& settings);
BackendSpec DefaultSpec();

}  // namespace hami::backends::cambricon
