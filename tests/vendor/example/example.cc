#include "tests/vendor/example/example.h"

#include <fmt/format.h>

#include "backends/common.h"
#include "core/codec/node_devices.h"

namespace hami::testing::example {
namespace {

class ExampleBackend final : public Hooked<ExampleBackend, backends::BasicBackend> {
 public:
  ExampleBackend(BackendSpec spec, std::int64_t max_cards)
      : Hooked(std::move(spec)), max_cards_(max_cards) {}

  Result<std::vector<DeviceInfo>> Discover(const NodeView& node) const override {
    const auto& key = spec_.keys.register_annotation;
    auto it = node.annotations.find(key);
    if (it == node.annotations.end()) return std::vector<DeviceInfo>();
    auto devices = codec::DecodeDeviceManifest(it->second);
    if (!devices) return Error{fmt::format("annotation {}: {}", key, devices.error().message)};
    if (static_cast<std::int64_t>(devices->size()) > max_cards_)
      return Error{fmt::format("annotation {}: {} cards, more than example.maxCards={}", key, devices->size(),
                               max_cards_)};
    return devices;
  }

  Result<std::optional<DeviceRequest>> RequestFor(const ContainerView& c) const override {
    auto ask = backends::ReadAsk(c, spec_.resources, "units of 256 MiB", "percent of a card");
    if (!ask) return ask.error();
    if (!*ask) return std::optional<DeviceRequest>();
    DeviceRequest req;
    req.vendor = spec_.vendor;
    req.count = (*ask)->count;
    req.memory = MiB((*ask)->memory.value_or(0) * spec_.resources.memory_factor);
    req.mem_percent = req.memory.value() == 0 ? 100 : 0;
    req.cores = Cores((*ask)->cores.value_or(0));
    return std::optional<DeviceRequest>(req);
  }

 private:
  std::int64_t max_cards_;
};

BackendSpec DefaultSpec() {
  BackendSpec s;
  s.vendor = "EXAMPLE";
  s.config_section = "example";
  s.display_name = "Example accelerator";
  s.health = HealthRule::kHandshake;
  s.keys.register_annotation = "example.com/node-register";
  s.keys.handshake = "example.com/node-handshake";
  s.keys.allocated = "example.com/devices-allocated";
  s.keys.to_allocate = "example.com/devices-to-allocate";
  s.keys.node_lock = "example.com/node.lock";
  s.keys.use_uuid = "example.com/use-uuid";
  s.keys.nouse_uuid = "example.com/nouse-uuid";
  s.resources = {"example.com/card", "example.com/card-memory", "", "example.com/card-cores", "", 256};
  return s;
}

}  // namespace

Result<BackendPtr> Create(const VendorSettings& settings) {
  BackendSpec spec = DefaultSpec();
  if (auto ok = backends::ApplySettings(settings, true, spec); !ok) return ok.error();
  const std::int64_t max_cards = settings.Int("maxCards").value_or(16);
  if (max_cards < 1) return Error{fmt::format("example.maxCards: {} is below 1", max_cards)};
  return BackendPtr(std::make_unique<ExampleBackend>(std::move(spec), max_cards));
}

VendorModule Module() {
  return VendorModule{
      "example",
      backends::BasicSchema({{"memoryFactor", SettingKind::kInt32}, {"maxCards", SettingKind::kInt32}}),
      SingleBackend(&Create)};
}

}  // namespace hami::testing::example
