#include "backends/cambricon/cambricon.h"

#include <fmt/format.h>

#include "backends/common.h"

namespace hami::backends::cambricon {
namespace {

constexpr std::int64_t kMiBPerUnit = 256;
constexpr std::int64_t kCoresPerCard = 100;

class CambriconBackend final : public Hooked<CambriconBackend, BasicBackend> {
 public:
  using Hooked::Hooked;

  Result<std::vector<DeviceInfo>> Discover(const NodeView& node) const override {
    return CapacityDevices(node, spec_, kCoresPerCard, "cambricon-mlu");
  }
  NodePublication Publish(const std::vector<DeviceInfo>& cards) const override {
    return CapacityPublication(spec_, cards, kCoresPerCard);
  }

  Result<std::optional<DeviceRequest>> RequestFor(const ContainerView& c) const override {
    return SharedCardRequest(c, spec_, "256 MiB units", "percent of an MLU", kMiBPerUnit, kCoresPerCard);
  }

  void Annotate(const PodView& pod, const PodVendorDevices& devices, const Annotations& written,
                TimePoint now, Annotations& out) const override {
    BasicBackend::Annotate(pod, devices, written, now, out);
    out["CAMBRICON_DSMLU_ASSIGNED"] = "false";
    for (const auto& ctr : devices) {
      if (ctr.empty()) continue;
      const auto& d = ctr.front();
      out["CAMBRICON_DSMLU_PROFILE"] =
          fmt::format("{}_{}_{}", d.index, d.cores.value(), d.mem.value() / kMiBPerUnit);
      break;
    }
  }
};

}  // namespace

BackendSpec DefaultSpec() {
  BackendSpec s;
  s.vendor = "MLU";
  s.config_section = "cambricon";
  s.display_name = "Cambricon MLU";
  s.health = HealthRule::kAlwaysHealthy;
  s.keys.allocated = "hami.io/cambricon-mlu-devices-allocated";
  s.keys.to_allocate = "hami.io/cambricon-mlu-devices-to-allocate";
  s.keys.node_lock = "cambricon.com/dsmlu.lock";
  s.keys.use_uuid = "cambricon.com/use-gpuuuid";
  s.keys.nouse_uuid = "cambricon.com/nouse-gpuuuid";
  s.resources = {
      "cambricon.com/vmlu", "cambricon.com/mlu.smlu.vmemory", "", "cambricon.com/mlu.smlu.vcore", "",
      kMiBPerUnit};
  s.fit.quota_in_fit = true;
  s.lock.owner_aware = false;
  s.lock.fixed_expiry = std::chrono::minutes(2);
  return s;
}

Result<BackendPtr> Create(const VendorSettings& settings) {
  BackendSpec spec = DefaultSpec();
  if (auto ok = ApplySettings(settings, false, spec); !ok) return ok.error();
  return BackendPtr(std::make_unique<CambriconBackend>(std::move(spec)));
}

VendorModule Module() {
  VendorModule module{"cambricon", BasicSchema(), SingleBackend(&Create), nullptr,
                      ResourceNameFlags("cambricon-mlu", "cambricon")};
  module.demo.nodes = {{"mlu-370-1", DemoCards("MLU", 2, 100, 24576, 100, "MLU370")}};
  module.demo.pods = R"(
- {name: mlu-slice, limits: {cambricon.com/vmlu: "1", cambricon.com/mlu.smlu.vmemory: "4", cambricon.com/mlu.smlu.vcore: "10"}}
)";
  return module;
}

}  // namespace hami::backends::cambricon
