#include "backends/builtin.h"

#include "backends/cambricon/cambricon.h"
#include "backends/hygon/hygon.h"
#include "backends/mthreads/mthreads.h"
#include "backends/nvidia/nvidia.h"

namespace hami::backends {

Result<void> RegisterBuiltinBackends(BackendRegistry& registry) {
  if (auto ok = registry.Register("nvidia", &nvidia::Create); !ok) return ok;
  if (auto ok = registry.Register("cambricon", &cambricon::Create); !ok) return ok;
  if (auto ok = registry.Register("mthreads", &mthreads::Create); !ok) return ok;
  if (auto ok = registry.Register("hygon", &hygon::Create); !ok) return ok;
  return {};
}

}  // namespace hami::backends
