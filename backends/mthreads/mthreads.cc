#include "backends/mthreads/mthreads.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <chrono>

#include "backends/common.h"
#include "core/keys.h"

namespace hami::backends::mthreads {
namespace {

constexpr std::int64_t kMiBPerUnit = 512;
constexpr std::int64_t kCoresPerCard = 16;
constexpr std::int64_t kMemoryUnitsPerCard = 96;
constexpr std::array<std::int64_t, 7> kValidMemoryUnits = {2, 4, 8, 16, 32, 64, 96};

class MthreadsBackend final : public Hooked<MthreadsBackend, BasicBackend> {
 public:
  using Hooked::Hooked;

  Result<std::vector<DeviceInfo>> Discover(const NodeView& node) const override {
    return CapacityDevices(node, spec_, kCoresPerCard, "mthreads");
  }
  NodePublication Publish(const std::vector<DeviceInfo>& cards) const override {
    return CapacityPublication(spec_, cards, kCoresPerCard);
  }

  Result<std::optional<DeviceRequest>> RequestFor(const ContainerView& c) const override {
    auto ask = ReadAsk(c, spec_.resources, "512 MiB units", "cores");
    if (!ask) return ask.error();
    if (!*ask) return std::optional<DeviceRequest>();
    DeviceRequest req;
    req.vendor = spec_.vendor;
    req.count = (*ask)->count;
    // Moore Threads resources are pod totals: each device gets its share.
    const std::int64_t memnum = (*ask)->memory.value_or(0) * kMiBPerUnit;
    req.memory = MiB(memnum / req.count);
    req.mem_percent = memnum == 0 ? 100 : 0;
    req.cores = Cores((*ask)->cores.value_or(0) / req.count);
    return std::optional<DeviceRequest>(req);
  }

  void Annotate(const PodView& pod, const PodVendorDevices& devices, const Annotations& written,
                TimePoint now, Annotations& out) const override {
    std::string node;
    if (auto n = written.find(keys::kAssignedNode); n != written.end()) node = n->second;
    // docs/DECISIONS.md, D3: the to-allocate key is written too.
    BasicBackend::Annotate(pod, devices, written, now, out);
    for (const auto& ctr : devices) {
      if (ctr.empty()) continue;
      std::vector<std::int32_t> indexes;
      for (const auto& d : ctr) indexes.push_back(d.index);
      out["mthreads.com/gpu-index"] = fmt::format("{}", fmt::join(indexes, ","));
    }
    out["mthreads.com/predicate-node"] = node;
    out["mthreads.com/predicate-time"] =
        std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count());
  }

  Result<bool> Admit(ContainerView& c, PodView& pod) const override {
    const auto& r = spec_.resources;
    auto count = IntegerResource(c, r.count, "devices", std::numeric_limits<std::int64_t>::min(),
                                 std::numeric_limits<std::int64_t>::max());
    if (!count) return count.error();
    if (!*count) return false;
    if (**count <= 0) return Error{fmt::format("{} must be greater than 0 (container {})", r.count, c.name)};
    if (**count > 1) {
      c.limits[r.cores] = std::to_string(**count * kCoresPerCard);
      c.limits[r.memory] = std::to_string(**count * kMemoryUnitsPerCard);
      pod.annotations["mthreads.com/request-gpu-num"] = std::to_string(**count);
      return true;
    }
    if (!c.limits.contains(r.memory)) {
      c.limits[r.cores] = std::to_string(kCoresPerCard);
      c.limits[r.memory] = std::to_string(kMemoryUnitsPerCard);
      return true;
    }
    auto mem = IntegerResource(c, r.memory, "512 MiB units", 0, kInt32Max);
    if (!mem || !*mem ||
        std::find(kValidMemoryUnits.begin(), kValidMemoryUnits.end(), **mem) == kValidMemoryUnits.end()) {
      return Error{
          fmt::format("{} in container {}: sGPU memory request value is invalid, valid values are "
                      "[2, 4, 8, 16, 32, 64, 96]",
                      r.memory, c.name)};
    }
    return true;
  }
};

}  // namespace

BackendSpec DefaultSpec() {
  BackendSpec s;
  s.vendor = "Mthreads";
  s.config_section = "mthreads";
  s.display_name = "Moore Threads GPU";
  s.health = HealthRule::kAlwaysHealthy;
  s.keys.allocated = "hami.io/mthreads-vgpu-devices-allocated";
  s.keys.to_allocate = "hami.io/mthreads-vgpu-devices-to-allocate";
  s.keys.use_uuid = "mthreads.ai/use-gpuuuid";
  s.keys.nouse_uuid = "mthreads.ai/nouse-gpuuuid";
  s.resources = {"mthreads.com/vgpu", "mthreads.com/sgpu-memory", "", "mthreads.com/sgpu-core", "",
                 kMiBPerUnit};
  s.fit.same_device_across_containers = true;
  return s;
}

Result<BackendPtr> Create(const VendorSettings& settings) {
  BackendSpec spec = DefaultSpec();
  if (auto ok = ApplySettings(settings, false, spec); !ok) return ok.error();
  return BackendPtr(std::make_unique<MthreadsBackend>(std::move(spec)));
}

VendorModule Module() {
  VendorModule module{"mthreads", BasicSchema(), SingleBackend(&Create), nullptr,
                      ResourceNameFlags("mthreads", "mthreads")};
  module.demo.nodes = {{"mthreads-s4000-1", DemoCards("MT", 2, 100, 49152, 16, "MTT S4000")}};
  module.demo.pods = R"(
- {name: mthreads-slice, limits: {mthreads.com/vgpu: "1", mthreads.com/sgpu-memory: "32", mthreads.com/sgpu-core: "8"}}
)";
  return module;
}

}  // namespace hami::backends::mthreads
