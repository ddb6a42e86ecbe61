#include "backends/builtin.h"

#include "backends/amd/amd.h"
#include "backends/ascend/ascend.h"
#include "backends/awsneuron/awsneuron.h"
#include "backends/biren/biren.h"
#include "backends/cambricon/cambricon.h"
#include "backends/enflame/enflame.h"
#include "backends/hygon/hygon.h"
#include "backends/iluvatar/iluvatar.h"
#include "backends/kunlun/kunlun.h"
#include "backends/metax/metax.h"
#include "backends/mthreads/mthreads.h"
#include "backends/nvidia/nvidia.h"
#include "backends/remotegpu/remotegpu.h"
#include "backends/vastai/vastai.h"

namespace hami::backends {
namespace {

// HAMi's other vendors: their device-config sections and chart flags are accepted with a warning.
std::vector<UnimplementedVendor> Unimplemented() {
  return {
      {"Iluvatar", {"iluvatar"}, {}},  // not HAMi's key (its chips are the iluvatars: list)
  };
}

}  // namespace

Result<void> RegisterBuiltinBackends(BackendRegistry& registry) {
  // The explicit list: a vendor is its folder (the build finds its sources), its #include and one entry here.
  for (VendorModule module :
       {nvidia::Module(), cambricon::Module(), hygon::Module(), mthreads::Module(), ascend::Module(),
        kunlun::Module(), iluvatar::Module(), awsneuron::Module(), amd::Module(), vastai::Module(),
        biren::Module(), enflame::Module(), metax::Module(), remotegpu::Module()}) {
    if (auto ok = registry.Register(std::move(module)); !ok) return ok;
  }
  for (UnimplementedVendor vendor : Unimplemented()) {
    if (auto ok = registry.RegisterUnimplemented(std::move(vendor)); !ok) return ok;
  }
  return {};
}

}  // namespace hami::backends
