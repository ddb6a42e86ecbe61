#include "backends/iluvatar/iluvatar.h"

#include <fmt/format.h>

#include <algorithm>

#include "backends/common.h"

namespace hami::backends::iluvatar {
namespace {

constexpr std::string_view kSection = "iluvatars";
constexpr std::string_view kChips = "chips";  // the list, when the section is written as a map (ours)
constexpr std::int64_t kMiBPerUnit = 256;
// The variable the Iluvatar runtime reads the container's name from (its spelling).
constexpr std::string_view kContainerNameEnv = "SOL_CONTINER_NAME";

class IluvatarBackend final : public Hooked<IluvatarBackend, BasicBackend> {
 public:
  using Hooked::Hooked;

  Result<std::vector<DeviceInfo>> Discover(const NodeView& node) const override {
    return LegacyDevices(node, spec_.keys.register_annotation);
  }
  NodePublication Publish(const std::vector<DeviceInfo>& cards) const override {
    return LegacyPublication(spec_, cards);
  }

  Result<std::optional<DeviceRequest>> RequestFor(const ContainerView& c) const override {
    auto req = SharedCardRequest(c, spec_, "256 MiB units", "percent of a GPU", kMiBPerUnit, 0);
    // Percent of one card: the webhook writes count x 100 for several cards, each of which takes 100.
    if (req && *req) (*req)->cores = std::min((*req)->cores, Cores(100));
    return req;
  }

  // Several cards are taken whole (cores count x 100); the runtime learns the container's name.
  Result<bool> Admit(ContainerView& container, PodView&) const override {
    if (!container.limits.contains(spec_.resources.count)) return false;
    auto count = CountResource(container, spec_.resources.count);
    if (!count) return count.error();
    if (*count && **count > 1 && !spec_.resources.cores.empty()) {
      container.limits[spec_.resources.cores] = std::to_string(std::int64_t{**count} * 100);
    }
    if (!container.name.empty() &&
        std::none_of(container.env.begin(), container.env.end(),
                     [](const EnvVar& e) { return e.name == kContainerNameEnv; })) {
      container.env.push_back(EnvVar{std::string(kContainerNameEnv), container.name});
    }
    return true;
  }
};

Chip ChartChip(const std::string& cw) {
  const std::string prefix = "iluvatar.ai/" + cw;
  return Chip{cw, prefix + "-vgpu", prefix + ".vMem", prefix + ".vCore"};
}

Result<Chip> ReadChip(const SettingRecord& r, std::size_t i) {
  const std::string at = fmt::format("{}[{}]", kSection, i);
  Chip chip;
  chip.common_word = r.String("commonWord").value_or("");
  if (auto ok = CheckCommonWord(chip.common_word, at); !ok) return ok.error();
  chip.count_resource = r.String("resourceCountName").value_or("");
  chip.memory_resource = r.String("resourceMemoryName").value_or("");
  chip.core_resource = r.String("resourceCoreName").value_or("");
  if (chip.count_resource.empty()) return Error{fmt::format("{}.resourceCountName: must not be empty", at)};
  return chip;
}

Result<std::vector<BackendPtr>> Create(const VendorSettings& settings) {
  std::vector<Chip> chips;
  if (!settings.Has(kChips)) {
    chips = ChartChips();
  } else {
    const auto records = settings.Records(kChips);
    for (std::size_t i = 0; i < records.size(); ++i) {
      auto chip = ReadChip(records[i], i);
      if (!chip) return chip.error();
      for (std::size_t j = 0; j < chips.size(); ++j) {
        if (chips[j].common_word == chip->common_word) {
          return Error{fmt::format("{}[{}].commonWord: {} is configured already ({}[{}])", kSection, i,
                                   chip->common_word, kSection, j)};
        }
      }
      chips.push_back(std::move(*chip));
    }
  }
  std::vector<BackendPtr> backends;
  for (const Chip& chip : chips) {
    auto backend = MakeBackend(chip);
    if (!backend) return backend.error();
    backends.push_back(std::move(*backend));
  }
  return backends;
}

VendorSchema Schema() {
  // chipName is the device plugin's; read so that --print-config keeps it.
  const std::vector<SettingField> chip = {{"commonWord", SettingKind::kString, {}, true},
                                          {"chipName", SettingKind::kString},
                                          {"resourceCountName", SettingKind::kString, {}, true},
                                          {"resourceMemoryName", SettingKind::kString},
                                          {"resourceCoreName", SettingKind::kString}};
  VendorSchema schema;
  schema.fields = {{std::string(kChips), SettingKind::kRecordList, chip}};
  schema.list_field = std::string(kChips);
  return schema;
}

}  // namespace

std::vector<Chip> ChartChips() {
  return {ChartChip("MR-V100"), ChartChip("MR-V50"), ChartChip("BI-V150"), ChartChip("BI-V100")};
}

Result<BackendPtr> MakeBackend(const Chip& chip) {
  const std::string& cw = chip.common_word;
  BackendSpec s;
  s.vendor = cw;
  s.config_section = std::string(kSection);
  s.display_name = "Iluvatar " + cw;
  s.health = HealthRule::kHandshake;
  s.keys.register_annotation = "hami.io/node-" + cw + "-register";
  s.keys.handshake = "hami.io/node-handshake-" + cw;
  s.keys.allocated = "hami.io/" + cw + "-devices-allocated";
  s.keys.to_allocate = "hami.io/" + cw + "-devices-to-allocate";
  s.keys.node_lock = "hami.io/mutex.lock";
  s.keys.use_uuid = "hami.io/use-" + cw + "-uuid";
  s.keys.nouse_uuid = "hami.io/no-use-" + cw + "-uuid";
  s.resources = {chip.count_resource, chip.memory_resource, "", chip.core_resource, "", kMiBPerUnit};
  return BackendPtr(std::make_unique<IluvatarBackend>(std::move(s)));
}

VendorModule Module() {
  VendorModule module{std::string(kSection), Schema(), &Create};
  module.flags = {VendorFlag{"enable-iluvatar", VendorFlag::Effect::kEnables, true,
                             "schedule Iluvatar GPUs: one backend per chip of the iluvatars: list"}};
  module.enabled_by_default = false;
  module.demo.nodes = {
      {"iluvatar-mr-v100-1", DemoCards("GPU-mrv100", 2, 10, 32768, 100, "MR-V100"), "MR-V100"}};
  module.demo.pods = R"(
- {name: iluvatar-slice,
   limits: {iluvatar.ai/MR-V100-vgpu: "1", iluvatar.ai/MR-V100.vMem: "16", iluvatar.ai/MR-V100.vCore: "50"}}
)";
  return module;
}

}  // namespace hami::backends::iluvatar
