#include "backends/builtin.h"

#include "backends/cambricon/cambricon.h"
#include "backends/hygon/hygon.h"
#include "backends/mthreads/mthreads.h"
#include "backends/nvidia/nvidia.h"

namespace hami::backends {

Result<void> RegisterBuiltinBackends(BackendRegistry& registry) {
  // The explicit list: a vendor is its folder, one line here and one in CMakeLists.txt.
  for (VendorModule module : {nvidia::Module(), cambricon::Module(), hygon::Module(), mthreads::Module()}) {
    if (auto ok = registry.Register(std::move(module)); !ok) return ok;
  }
  return {};
}

}  // namespace hami::backends
