#include "backends/hygon/hygon.h"

#include <fmt/format.h>

#include "backends/common.h"

namespace hami::backends::hygon {
namespace {

// The to-allocate key HAMi's Hygon device plugin reads.
constexpr std::string_view kHamiToAllocate = "hami.io/dcu-devices-to-allocate";

class HygonBackend final : public Hooked<HygonBackend, BasicBackend> {
 public:
  using Hooked::Hooked;

  Result<std::vector<DeviceInfo>> Discover(const NodeView& node) const override {
    return LegacyDevices(node, spec_.keys.register_annotation);
  }
  // The legacy colon list; ":" is its spelling of "no devices".
  NodePublication Publish(const std::vector<DeviceInfo>& cards) const override {
    return LegacyPublication(spec_, cards);
  }

  Result<std::optional<DeviceRequest>> RequestFor(const ContainerView& c) const override {
    return SharedCardRequest(c, spec_, "MiB", "percent of a DCU",
                             std::max<std::int64_t>(1, spec_.resources.memory_factor), 100);
  }
};

}  // namespace

BackendSpec DefaultSpec() {
  BackendSpec s;
  s.vendor = "DCU";
  s.config_section = "hygon";
  s.display_name = "Hygon DCU";
  s.health = HealthRule::kHandshake;
  s.keys.register_annotation = "hami.io/node-dcu-register";
  s.keys.handshake = "hami.io/node-handshake-dcu";
  s.keys.allocated = "hami.io/dcu-devices-allocated";
  s.keys.to_allocate = "hami.io/hcu-devices-to-allocate";  // docs/DECISIONS.md, D2 (HAMi's: kHamiToAllocate)
  s.keys.node_lock = "hami.io/mutex.lock";
  s.keys.use_uuid = "hygon.com/use-gpuuuid";
  s.keys.nouse_uuid = "hygon.com/nouse-gpuuuid";
  s.keys.use_type = "hygon.com/use-dcutype";
  s.keys.nouse_type = "hygon.com/nouse-dcutype";
  s.resources = {"hygon.com/dcunum", "hygon.com/dcumem", "", "hygon.com/dcucores", "", 1};
  return s;
}

Result<BackendPtr> Create(const VendorSettings& settings) {
  BackendSpec spec = DefaultSpec();
  if (auto ok = ApplySettings(settings, true, spec); !ok) return ok.error();
  return BackendPtr(std::make_unique<HygonBackend>(std::move(spec)));
}

// HAMi's own device config (a hygon: section, as its chart writes one) leaves the to-allocate key at our
// default, which HAMi's Hygon device plugin does not read: its pods would wait for an allocation forever.
std::vector<std::string> Advise(const VendorSettings& settings) {
  if (settings.values.empty() || settings.Has("annotations.toAllocate")) return {};
  return {fmt::format(
      "hygon: pods get their devices under {} (docs/DECISIONS.md, D2), but HAMi's Hygon device plugin reads "
      "{}; with that plugin add `annotations: {{toAllocate: {}}}` to the hygon: section of the device config",
      DefaultSpec().keys.to_allocate, kHamiToAllocate, kHamiToAllocate)};
}

VendorModule Module() {
  VendorModule module{"hygon", BasicSchema({{"memoryFactor", SettingKind::kInt32}}), SingleBackend(&Create),
                      &Advise, ResourceNameFlags("dcu", "hygon")};
  module.demo.nodes = {{"dcu-k100-1", DemoCards("DCU-k100a", 2, 4, 65536, 100, "DCU-K100")}};
  module.demo.pods = R"(
- {name: dcu-slice, limits: {hygon.com/dcunum: "1", hygon.com/dcumem: "2000", hygon.com/dcucores: "60"}}
)";
  return module;
}

}  // namespace hami::backends::hygon
