#include "backends/biren/biren.h"

#include "backends/common.h"

namespace hami::backends::biren {
namespace {

constexpr std::string_view kSection = "biren";

Result<BackendPtr> Create(const VendorSettings& settings) {
  BackendSpec spec = DefaultSpec();
  if (auto ok = ApplySettings(settings, false, spec); !ok) return ok.error();
  return BackendPtr(std::make_unique<PlainCountBackend>(std::move(spec)));
}

}  // namespace

BackendSpec DefaultSpec() {
  BackendSpec s;
  s.vendor = "Biren";
  s.config_section = std::string(kSection);
  s.display_name = "Biren GPU";
  s.health = HealthRule::kHandshake;
  s.keys.register_annotation = "hami.io/node-biren-register";
  s.keys.handshake = "hami.io/node-handshake-biren";
  s.keys.allocated = "hami.io/Biren-devices-allocated";  // the vendor key, capitalised, as upstream
  s.keys.to_allocate = "hami.io/Biren-devices-to-allocate";
  s.keys.node_lock = "hami.io/mutex.lock";
  s.keys.use_uuid = "birentech.com/use-gpuuuid";
  s.keys.nouse_uuid = "birentech.com/nouse-gpuuuid";
  s.resources.count = "birentech.com/gpu";
  return s;
}

VendorModule Module() {
  VendorModule module{std::string(kSection), CountSchema(), SingleBackend(&Create)};
  module.demo.nodes = {{"biren-br106-1", DemoCards("br", 4, 4, 65536, 100, "Biren")}};
  module.demo.pods = R"(
- {name: biren-slot, limits: {birentech.com/gpu: "1"}}
)";
  return module;
}

}  // namespace hami::backends::biren
