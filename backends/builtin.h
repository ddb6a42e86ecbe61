#pragma once
// The single list of vendors compiled into the binary.
#include "core/backend.h"

namespace hami::backends {

// Registers every vendor of backends/ under its HAMi config section name ("nvidia", "cambricon",
// ...), and accepts the sections of HAMi's vendors this build does not implement with a warning.
Result<void> RegisterBuiltinBackends(BackendRegistry& registry);

}  // namespace hami::backends
