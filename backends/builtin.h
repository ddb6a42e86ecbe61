#pragma once
// The single list of vendors compiled into the binary.
#include "core/backend.h"

namespace hami::backends {

// Registers NVIDIA, Cambricon MLU, Moore Threads and Hygon under their HAMi config section names
// ("nvidia", "cambricon", "mthreads", "hygon").
Result<void> RegisterBuiltinBackends(BackendRegistry& registry);

}  // namespace hami::backends
