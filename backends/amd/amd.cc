#include "backends/amd/amd.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <span>

#include "backends/common.h"
#include "core/names.h"
#include "core/strings.h"

namespace hami::backends::amd {
namespace {

constexpr std::string_view kSection = "amd";
constexpr std::string_view kCoreUnit = "percent of a card's compute units";

// Compute units per GPU as the driver reports them (an MI250X is two GPUs of 110).
struct Model {
  std::string_view name;
  std::int32_t units;
};
constexpr std::array<Model, 5> kModels = {
    {{"MI325X", 304}, {"MI300X", 304}, {"MI250X", 110}, {"MI210", 104}, {"MI100", 120}}};

class AmdBackend final : public Hooked<AmdBackend, BasicBackend> {
 public:
  using Hooked::Hooked;

  // The cards count while the node's capacity does: a plugin that stopped (capacity 0 or gone) leaves its
  // annotation behind.
  Result<std::vector<DeviceInfo>> Discover(const NodeView& node) const override {
    auto cards = CapacityCount(node, spec_.resources.count);
    if (!cards) return cards.error();
    if (*cards == 0) return std::vector<DeviceInfo>();
    return ManifestDevices(node, spec_.keys.register_annotation);
  }

  // The plugin publishes each card's compute units, which it reads from the driver.
  void AddPluginFacts(std::vector<DeviceInfo>& cards) const override {
    for (DeviceInfo& d : cards) {
      if (const std::int32_t units = ComputeUnits(d.type); units > 0) d.devcore = Cores(units);
    }
  }

  // HAMi reads the AMD resources from a container's limits only.
  Result<std::optional<DeviceRequest>> RequestFor(const ContainerView& c) const override {
    const ContainerView limits = LimitsOnly(c);
    const auto& r = spec_.resources;
    auto count = CountResource(limits, r.count);
    if (!count) return count.error();
    if (!*count) return std::optional<DeviceRequest>();
    auto memory = IntegerResource(limits, r.memory, "MiB", 0, kInt32Max);
    if (!memory) return memory.error();
    auto cores = IntegerResource(limits, r.cores, kCoreUnit, 1, 100);
    if (!cores) return cores.error();
    DeviceRequest req;
    req.vendor = spec_.vendor;
    req.count = **count;
    req.memory = MiB(memory->value_or(0));
    req.mem_percent = req.memory.value() == 0 ? 100 : 0;  // no memory (or 0): the whole card's
    req.cores = Cores(cores->value_or(100));              // percent; the fit takes that share of the units
    return std::optional<DeviceRequest>(req);
  }

  // The allocation names each card by the product name its plugin registered (`GPU-a,AMD-MI300X,16384,76`),
  // as HAMi's does; a card registered without one keeps the vendor key. The ledger reads an allocation by its
  // annotation's key, so either reads back.
  void AnnotateOnNode(const PodView& pod, const PodVendorDevices& devices, std::span<const DeviceInfo> cards,
                      const Annotations& written, TimePoint now, Annotations& out) const override {
    PodVendorDevices named = devices;
    for (ContainerDevices& container : named) {
      for (ContainerDevice& d : container) {
        const auto card =
            std::find_if(cards.begin(), cards.end(), [&](const DeviceInfo& c) { return c.id == d.uuid; });
        if (card != cards.end() && !card->type.empty()) d.vendor = card->type;
      }
    }
    Annotate(pod, named, written, now, out);
  }

  // A container with any of the three resources in its limits is the scheduler's (a memory or core limit
  // without a count asks for no card, as upstream); a core percent beside a count must be 1 to 100.
  Result<bool> Admit(ContainerView& c, PodView&) const override {
    const auto& r = spec_.resources;
    const bool count = c.limits.contains(r.count);
    if (count && c.limits.contains(r.cores) && !IntegerResource(LimitsOnly(c), r.cores, kCoreUnit, 1, 100)) {
      return Error{fmt::format("{} must be an integer percentage between 1 and 100, got {}", r.cores,
                               Quoted(c.limits.at(r.cores)))};
    }
    return count || (!r.memory.empty() && c.limits.contains(r.memory)) ||
           (!r.cores.empty() && c.limits.contains(r.cores));
  }
};

Result<BackendPtr> Create(const VendorSettings& settings) {
  BackendSpec spec = DefaultSpec();
  if (auto ok = ApplySettings(settings, false, spec); !ok) return ok.error();
  return BackendPtr(std::make_unique<AmdBackend>(std::move(spec)));
}

}  // namespace

std::int32_t ComputeUnits(std::string_view type) {
  const std::string upper = ToUpper(type);
  for (const Model& m : kModels) {
    if (upper.find(m.name) != std::string::npos) return m.units;
  }
  return 0;
}

BackendSpec DefaultSpec() {
  BackendSpec s;
  s.vendor = "AMD";
  s.config_section = std::string(kSection);
  s.display_name = "AMD GPU";
  s.health = HealthRule::kAlwaysHealthy;  // the capacity gate in Discover
  s.keys.register_annotation = "hami.io/node-amd-register";
  s.keys.allocated = "hami.io/amd-devices-allocated";
  s.keys.to_allocate = "hami.io/amd-devices-to-allocate";
  s.keys.node_lock = "hami.io/mutex.lock";
  s.keys.use_uuid = "amd.com/use-gpu-uuid";
  s.keys.nouse_uuid = "amd.com/nouse-gpu-uuid";
  s.keys.use_type = "amd.com/use-gputype";
  s.keys.nouse_type = "amd.com/nouse-gputype";
  s.resources = {"amd.com/gpu", "amd.com/gpumem", "", "amd.com/gpucores", "", 1, true};
  return s;
}

VendorModule Module() {
  VendorModule module{std::string(kSection), BasicSchema(), SingleBackend(&Create)};
  // Two MI300X GPUs of 192 GiB and 304 compute units, each shared by up to four pods.
  module.demo.nodes = {{"amd-mi300x-1", DemoCards("amd-mi300x", 2, 4, 196608, 304, "AMD-Instinct-MI300X")}};
  module.demo.pods = R"(
- {name: amd-quarter, limits: {amd.com/gpu: "1", amd.com/gpumem: "16384", amd.com/gpucores: "25"}}
- {name: amd-whole, limits: {amd.com/gpu: "1"}}
)";
  return module;
}

}  // namespace hami::backends::amd
