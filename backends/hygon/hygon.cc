#include "backends/hygon/hygon.h"

#include <fmt/format.h>

#include "backends/common.h"
#include "core/codec/node_devices.h"

namespace hami::backends::hygon {
namespace {

class HygonBackend final : public BasicBackend {
 public:
  using BasicBackend::BasicBackend;

  Result<std::vector<DeviceInfo>> Discover(const NodeView& node) const override {
    const auto& key = spec_.keys.register_annotation;
    auto it = node.annotations.find(key);
    if (it == node.annotations.end()) return std::vector<DeviceInfo>();  // no Hygon device plugin here
    auto devices = codec::DecodeLegacyDevices(it->second);
    if (!devices) return Error{fmt::format("annotation {}: {}", key, devices.error().message)};
    return devices;
  }

  Result<std::optional<DeviceRequest>> RequestFor(const ContainerView& c) const override {
    const auto& r = spec_.resources;
    auto count = CountResource(c, r.count);
    if (!count) return count.error();
    if (!*count) return std::optional<DeviceRequest>();
    const std::int64_t factor = std::max<std::int64_t>(1, r.memory_factor);
    auto mem = IntegerResource(c, r.memory, "MiB", 0, kInt32Max / factor);
    if (!mem) return mem.error();
    auto cores = IntegerResource(c, r.cores, "percent of a DCU", 0, kInt32Max);
    if (!cores) return cores.error();
    DeviceRequest req;
    req.vendor = spec_.vendor;
    req.count = **count;
    req.memory = MiB(mem->value_or(0) * factor);
    req.mem_percent = req.memory.value() == 0 ? 100 : 0;
    req.cores = Cores(cores->value_or(100));
    return std::optional<DeviceRequest>(req);
  }
};

}  // namespace

BackendSpec DefaultSpec() {
  BackendSpec s;
  s.vendor = "DCU";
  s.config_section = "hygon";
  s.display_name = "Hygon DCU";
  s.discovery = Discovery::kLegacyAnnotation;
  s.health = HealthRule::kHandshake;
  s.keys.register_annotation = "hami.io/node-dcu-register";
  s.keys.handshake = "hami.io/node-handshake-dcu";
  s.keys.allocated = "hami.io/dcu-devices-allocated";
  s.keys.to_allocate = "hami.io/hcu-devices-to-allocate";  // PROTOCOL.md D2
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

}  // namespace hami::backends::hygon
