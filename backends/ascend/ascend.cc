#include "backends/ascend/ascend.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/json.hpp>
#include <chrono>
#include <map>
#include <span>

#include "backends/common.h"
#include "core/names.h"

namespace hami::backends::ascend {
namespace {

namespace json = boost::json;

constexpr std::string_view kSection = "vnpus";
constexpr std::string_view kFamily910 = "Ascend910";  // chips with an interconnect (NetworkID) topology
constexpr std::string_view k910C = "Ascend910C";      // chips paired in modules

// A request of several 910 chips takes the largest interconnect groups first: among the candidates (in the
// policy's order), the groups by size, largest first (equal sizes by network id), each group's cards in
// candidate order, until `want` are taken.
std::vector<std::size_t> ChooseNetworkGroups(std::span<const DeviceInfo* const> candidates, std::int32_t want) {
  std::map<std::int32_t, int> size;
  for (const DeviceInfo* d : candidates) ++size[*d->network];
  std::vector<std::pair<int, std::int32_t>> order;  // (size, network)
  for (const auto& [network, n] : size) order.emplace_back(n, network);
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::size_t> chosen;
  for (const auto& [n, network] : order) {
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      if (static_cast<std::int32_t>(chosen.size()) == want) break;
      if (*candidates[i]->network == network) chosen.push_back(i);
    }
  }
  return chosen;
}

// A 910C request takes whole modules of two chips (index / 2), in the order their first candidate comes
// (the policy's preference), until at least `want` chips are taken; a module with one usable chip is skipped.
std::vector<std::size_t> ChooseModulePairs(std::span<const DeviceInfo* const> candidates, std::int32_t want) {
  std::vector<std::pair<std::int32_t, std::vector<std::size_t>>> modules;  // (module, positions)
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const std::int32_t module = candidates[i]->index / 2;
    auto it = std::find_if(modules.begin(), modules.end(), [&](const auto& m) { return m.first == module; });
    if (it == modules.end()) {
      modules.push_back({module, {i}});
    } else {
      it->second.push_back(i);
    }
  }
  std::vector<std::size_t> chosen;
  for (const auto& [module, positions] : modules) {
    if (static_cast<std::int32_t>(chosen.size()) >= want) break;
    if (positions.size() == 2) chosen.insert(chosen.end(), positions.begin(), positions.end());
  }
  return chosen;
}
constexpr std::string_view kModeAnnotation = "huawei.com/vnpu-mode";
constexpr std::string_view kSoftSplit = "hami-core";
constexpr std::string_view kNodeSoftSplit = "hami-vnpu-core";
constexpr std::string_view kVisibleDevices = "ASCEND_VISIBLE_DEVICES";
constexpr std::string_view kPredicateTime = "predicate-time";

bool SoftSplitPod(const PodView& pod) {
  auto it = pod.annotations.find(kModeAnnotation);
  return it != pod.annotations.end() && it->second == kSoftSplit;
}

class AscendBackend final : public Hooked<AscendBackend, BasicBackend> {
 public:
  AscendBackend(BackendSpec spec, Chip chip, std::vector<std::string> npu_resources)
      : Hooked(std::move(spec)), chip_(std::move(chip)), npu_resources_(std::move(npu_resources)) {}

  Result<std::vector<DeviceInfo>> Discover(const NodeView& node) const override {
    return ManifestDevices(node, spec_.keys.register_annotation);
  }

  // The Ascend plugin numbers a 910 card's network by its position: chips 0-3 share one HCCS ring, 4-7
  // the next; a 910C node is one network.
  void AddPluginFacts(std::vector<DeviceInfo>& cards) const override {
    if (!chip_.common_word.starts_with(kFamily910)) return;
    for (DeviceInfo& d : cards) {
      if (!d.network) d.network = chip_.common_word == k910C ? 0 : std::max(0, d.index) / 4;
    }
  }

  // 10 x, per container of two cards or more, the share of its cards in its largest interconnect group:
  // nodes that keep a container's cards together rank first. A card without a group: no container is scored.
  double AllocationScore(const AllocationView& view) const override {
    if (!chip_.common_word.starts_with(kFamily910)) return 0;  // no interconnect groups
    double score = 0;
    std::map<std::int32_t, int> per_network;
    for (const std::vector<int>& positions : view.containers) {
      if (positions.size() < 2) continue;  // one card is together anywhere: nothing to rank nodes by
      per_network.clear();
      int largest = 0;
      for (int i : positions) {
        const auto& network = view.cards[static_cast<std::size_t>(i)].network;
        if (!network) return 0;
        largest = std::max(largest, ++per_network[*network]);
      }
      score += static_cast<double>(largest) / static_cast<double>(positions.size());
    }
    return 10 * score;
  }

  // Several 910 chips are placed by interconnect: whole modules on a 910C, the largest groups elsewhere
  // (when every chip of the node has one; else the policy's first, as any vendor's).
  bool ChoosesCards(const ChoiceView& view) const override {
    return view.request != nullptr && view.request->count > 1 && chip_.common_word.starts_with(kFamily910);
  }
  CardChoice ChooseCards(std::span<const DeviceInfo* const> candidates, std::int32_t want,
                         const ChoiceView& view) const override {
    if (chip_.common_word == k910C) {
      std::vector<std::size_t> pairs = ChooseModulePairs(candidates, want);
      if (static_cast<std::int32_t>(pairs.size()) == want) return CardChoice{std::move(pairs), {}, 0, false};
      // Counted against the request: the chips were there, the modules were not whole.
      return CardChoice{{}, Reason::kAllocatedCardsInsufficientRequest, static_cast<int>(pairs.size()), true};
    }
    if (TooFew(candidates, want)) return {};
    const bool grouped =
        std::all_of(view.cards.begin(), view.cards.end(), [](const DeviceInfo& d) { return d.network; });
    if (grouped) return CardChoice{ChooseNetworkGroups(candidates, want), {}, 0, false};
    std::vector<std::size_t> first(static_cast<std::size_t>(want));
    for (std::size_t i = 0; i < first.size(); ++i) first[i] = i;
    return CardChoice{std::move(first), {}, 0, false};
  }

  Result<std::optional<DeviceRequest>> RequestFor(const ContainerView& c) const override {
    auto count = CountResource(c, chip_.count_resource);
    if (!count) return count.error();
    if (!*count) return std::optional<DeviceRequest>();
    if (chip_.super_pod && **count % 2 != 0) {
      // The webhook rounds 1 up to 2 and refuses other odd counts; a pod it did not see is refused here,
      // rather than given half a module or more NPUs than the kubelet counts.
      return Error{fmt::format("{}: a super-pod {} is allocated whole modules of 2 NPUs, so the count must "
                               "be even, got {} (the webhook rounds 1 up to 2: is it running?)",
                               chip_.count_resource, chip_.common_word, **count)};
    }
    auto memory = IntegerResource(c, chip_.memory_resource, MemoryUnit(), 0, kInt32Max / chip_.memory_factor);
    if (!memory) return memory.error();
    auto cores = IntegerResource(c, chip_.core_resource, "percent of an NPU", 0, kInt32Max);
    if (!cores) return cores.error();
    DeviceRequest req;
    req.vendor = spec_.vendor;
    req.count = **count;
    req.memory = MiB(memory->value_or(0) * chip_.memory_factor);
    req.mem_percent = req.memory.value() == 0 ? 100 : 0;
    req.cores = Cores(cores->value_or(0));
    return std::optional<DeviceRequest>(req);
  }

  // `predicate-time`, and `huawei.com/<chip>`: every card of every container in order, with the template
  // the device plugin carves (none for a whole card and for soft-split pods).
  void Annotate(const PodView& pod, const PodVendorDevices& devices, const Annotations& written,
                TimePoint now, Annotations& out) const override {
    BasicBackend::Annotate(pod, devices, written, now, out);
    out[std::string(kPredicateTime)] =
        std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count());
    const bool soft = SoftSplitPod(pod);
    json::array cards;
    for (const ContainerDevices& container : devices) {
      for (const ContainerDevice& d : container) {
        json::object card;
        card["UUID"] = d.uuid;
        if (!soft) {
          std::string name = RoundToTemplate(chip_, d.mem.value()).name;
          if (!name.empty()) card["temp"] = std::move(name);
        }
        if (d.mem.value() != 0) card["memory"] = d.mem.value();
        if (d.cores.value() != 0) card["core"] = d.cores.value();
        cards.push_back(std::move(card));
      }
    }
    out["huawei.com/" + chip_.common_word] = json::serialize(cards);
  }

  // The webhook: memory rounded to the vNPU the driver will carve (soft split: as asked), written into
  // limits and requests; cores only in soft-split mode; the 910C pair rule; the runtime class.
  Result<bool> Admit(ContainerView& container, PodView& pod) const override {
    if (!container.limits.contains(chip_.count_resource)) {
      if (chip_.overwrite_env) HideNpus(container);
      return false;
    }
    auto count = CountResource(container, chip_.count_resource);
    if (!count) return count.error();
    if (!*count) return false;
    const std::int32_t asked_count = **count;
    if (chip_.super_pod) {
      // A super-pod 910C is allocated a module (two NPUs) at a time: one NPU, whole or a vNPU, becomes its
      // module's pair, as upstream rounds it (docs/DECISIONS.md "Ascend").
      if (asked_count == 1) {
        container.limits[chip_.count_resource] = "2";
        if (container.requests.contains(chip_.count_resource)) container.requests[chip_.count_resource] = "2";
      } else if (asked_count % 2 != 0) {
        return Error{fmt::format("{}: {} device request must be 1 or 2*n, got {}", chip_.count_resource,
                                 chip_.common_word, asked_count)};
      }
    }
    const bool soft = SoftSplitPod(pod);
    if (!soft && !chip_.core_resource.empty()) {
      auto cores = IntegerResource(container, chip_.core_resource, "percent of an NPU", 0, kInt32Max);
      if (!cores) return cores.error();
      if (cores->value_or(0) > 0) {
        return Error{fmt::format("{} is only supported in hami-core (soft split) mode: add the pod "
                                 "annotation {}: {} or remove it",
                                 chip_.core_resource, kModeAnnotation, kSoftSplit)};
      }
    }
    std::int64_t target = chip_.memory_allocatable;  // MiB
    if (container.limits.contains(chip_.memory_resource)) {
      auto memory = IntegerResource(container, chip_.memory_resource, MemoryUnit(), 0,
                                    kInt32Max / chip_.memory_factor);
      if (!memory) return memory.error();
      const std::int64_t asked = memory->value_or(0) * chip_.memory_factor;
      if (soft) {
        target = asked;
      } else {
        target = RoundToTemplate(chip_, asked).memory;
        if (target == 0) {
          return Error{fmt::format("{} {} is invalid: more than the {} MiB of one {} card",
                                   chip_.memory_resource, **memory, chip_.memory_capacity,
                                   chip_.common_word)};
        }
      }
    }
    if (!soft && asked_count > 1 && target != chip_.memory_allocatable) {
      return Error{fmt::format("{}: {} cards with {} {}: vNPU not supported for multiple devices (ask for "
                               "whole cards, or one vNPU)",
                               chip_.count_resource, asked_count, chip_.memory_resource,
                               Quoted(container.limits.at(chip_.memory_resource)))};
    }
    const std::string units = std::to_string((target + chip_.memory_factor - 1) / chip_.memory_factor);
    container.limits[chip_.memory_resource] = units;
    container.requests[chip_.memory_resource] = units;
    if (!chip_.runtime_class.empty() && !pod.runtime_class_name) pod.runtime_class_name = chip_.runtime_class;
    return true;
  }

 private:
  std::string_view MemoryUnit() const { return chip_.memory_factor == 1 ? "MiB" : "memory units"; }

  // `overwriteEnv`: a container that asks for no NPU of any chip sees none. The variable's last entry is the
  // one the container gets (the pod's env comes after the device plugin's), so an empty one goes last unless
  // it is there already; a container with NPUs of another chip keeps the value its device plugin gives it
  // (docs/DECISIONS.md "Ascend").
  void HideNpus(ContainerView& container) const {
    for (const std::string& resource : npu_resources_) {
      if (container.limits.contains(resource)) return;
    }
    const auto last = std::find_if(container.env.rbegin(), container.env.rend(),
                                   [](const EnvVar& e) { return e.name == kVisibleDevices; });
    if (last == container.env.rend() || !last->value.empty())
      container.env.push_back(EnvVar{std::string(kVisibleDevices), ""});
  }

  Chip chip_;
  std::vector<std::string> npu_resources_;  // every chip's count resource, this one's included
};

Chip ChartChip(std::string cw, std::int64_t allocatable, std::int64_t capacity,
               std::vector<VnpuTemplate> templates, bool super_pod = false) {
  Chip chip;
  chip.count_resource = "huawei.com/" + cw;
  chip.memory_resource = chip.count_resource + "-memory";
  chip.core_resource = chip.count_resource + "-core";
  chip.common_word = std::move(cw);
  chip.memory_allocatable = allocatable;
  chip.memory_capacity = capacity;
  chip.super_pod = super_pod;
  chip.templates = std::move(templates);
  return chip;
}

Result<Chip> ReadChip(const SettingRecord& r, std::size_t i) {
  const std::string at = fmt::format("{}.configs[{}]", kSection, i);
  Chip chip;
  chip.common_word = r.String("commonWord").value_or("");
  if (auto ok = CheckCommonWord(chip.common_word, at); !ok) return ok.error();
  chip.count_resource = r.String("resourceName").value_or("");
  chip.memory_resource = r.String("resourceMemoryName").value_or("");
  chip.core_resource = r.String("resourceCoreName").value_or("");
  if (chip.count_resource.empty()) return Error{fmt::format("{}.resourceName: must not be empty", at)};
  if (chip.memory_resource.empty()) return Error{fmt::format("{}.resourceMemoryName: must not be empty", at)};
  chip.memory_allocatable = r.Int("memoryAllocatable").value_or(0);
  if (chip.memory_allocatable <= 0) {
    return Error{fmt::format("{}.memoryAllocatable: {} is not a positive number of MiB", at,
                             chip.memory_allocatable)};
  }
  chip.memory_capacity = r.Int("memoryCapacity").value_or(chip.memory_allocatable);
  if (chip.memory_capacity < chip.memory_allocatable) {
    return Error{fmt::format("{}.memoryCapacity: {} MiB is below memoryAllocatable ({} MiB)", at,
                             chip.memory_capacity, chip.memory_allocatable)};
  }
  const std::int64_t factor = r.Int("memoryFactor").value_or(1);
  if (factor < 0) {
    return Error{fmt::format("{}.memoryFactor: {} is negative (want MiB per unit)", at, factor)};
  }
  chip.memory_factor = std::max<std::int64_t>(1, factor);  // 0 (the 910C entry has none) counts in MiB
  chip.runtime_class = r.String("runtimeClassName").value_or("");
  if (!chip.runtime_class.empty() && !IsDns1123Subdomain(chip.runtime_class)) {
    return Error{fmt::format("{}.runtimeClassName: {} is not a DNS subdomain (a RuntimeClass name)", at,
                             Quoted(chip.runtime_class))};
  }
  chip.overwrite_env = r.Bool("overwriteEnv").value_or(false);
  chip.super_pod = r.Bool("superPod").value_or(false);
  std::size_t t = 0;
  for (const SettingRecord& tr : r.Records("templates")) {
    VnpuTemplate tpl{tr.String("name").value_or(""), tr.Int("memory").value_or(0)};
    if (tpl.name.empty()) return Error{fmt::format("{}.templates[{}].name: must not be empty", at, t)};
    if (tpl.memory <= 0) {
      return Error{
          fmt::format("{}.templates[{}].memory: {} is not a positive number of MiB", at, t, tpl.memory)};
    }
    if (tpl.memory > chip.memory_capacity) {
      return Error{fmt::format("{}.templates[{}]: {} ({} MiB) is larger than the card ({} MiB)", at, t,
                               tpl.name, tpl.memory, chip.memory_capacity)};
    }
    chip.templates.push_back(std::move(tpl));
    ++t;
  }
  std::stable_sort(chip.templates.begin(), chip.templates.end(),
                   [](const VnpuTemplate& a, const VnpuTemplate& b) { return a.memory < b.memory; });
  return chip;
}

Result<std::vector<BackendPtr>> Create(const VendorSettings& settings) {
  std::vector<Chip> chips;
  if (!settings.Has("configs")) {
    // The chart's chips, with the chart's per-chip values given once for all of them (our extension).
    const std::string runtime_class = settings.String("runtimeClassName").value_or("");
    if (!runtime_class.empty() && !IsDns1123Subdomain(runtime_class)) {
      return Error{fmt::format("{}.runtimeClassName: {} is not a DNS subdomain (a RuntimeClass name)", kSection,
                               Quoted(runtime_class))};
    }
    chips = ChartChips();
    for (Chip& chip : chips) {
      chip.runtime_class = runtime_class;
      chip.overwrite_env = settings.Bool("overwriteEnv").value_or(false);
    }
  } else {
    const auto records = settings.Records("configs");
    for (std::size_t i = 0; i < records.size(); ++i) {
      auto chip = ReadChip(records[i], i);
      if (!chip) return chip.error();
      for (std::size_t j = 0; j < chips.size(); ++j) {
        if (chips[j].common_word == chip->common_word) {
          return Error{fmt::format("{}.configs[{}].commonWord: {} is configured already (configs[{}])",
                                   kSection, i, chip->common_word, j)};
        }
      }
      chips.push_back(std::move(*chip));
    }
  }
  const bool soft_default = settings.Bool("hamiVnpuCore").value_or(false);
  std::vector<std::string> npu_resources;
  for (const Chip& chip : chips) npu_resources.push_back(chip.count_resource);
  std::vector<BackendPtr> backends;
  for (const Chip& chip : chips) {
    auto backend = MakeBackend(chip, soft_default, npu_resources);
    if (!backend) return backend.error();
    backends.push_back(std::move(*backend));
  }
  return backends;
}

VendorSchema Schema() {
  const std::vector<SettingField> templates = {{"name", SettingKind::kString, {}, true},
                                               {"memory", SettingKind::kInt32, {}, true},
                                               {"aiCore", SettingKind::kInt32},
                                               {"aiCPU", SettingKind::kInt32}};
  // chipName, aiCore and aiCPU are the device plugin's; read so that --print-config keeps them.
  const std::vector<SettingField> chip = {{"commonWord", SettingKind::kString, {}, true},
                                          {"chipName", SettingKind::kString},
                                          {"resourceName", SettingKind::kString, {}, true},
                                          {"resourceMemoryName", SettingKind::kString, {}, true},
                                          {"resourceCoreName", SettingKind::kString},
                                          {"memoryAllocatable", SettingKind::kInt32, {}, true},
                                          {"memoryCapacity", SettingKind::kInt32},
                                          {"memoryFactor", SettingKind::kInt32},
                                          {"aiCore", SettingKind::kInt32},
                                          {"aiCPU", SettingKind::kInt32},
                                          {"runtimeClassName", SettingKind::kString},
                                          {"overwriteEnv", SettingKind::kBool},
                                          {"superPod", SettingKind::kBool},
                                          {"templates", SettingKind::kRecordList, templates}};
  VendorSchema schema;
  // runtimeClassName and overwriteEnv beside configs (ours) apply to the chart's chips when configs is absent.
  schema.fields = {{"hamiVnpuCore", SettingKind::kBool},
                   {"runtimeClassName", SettingKind::kString},
                   {"overwriteEnv", SettingKind::kBool},
                   {"configs", SettingKind::kRecordList, chip}};
  return schema;
}

}  // namespace

std::vector<Chip> ChartChips() {
  using T = VnpuTemplate;
  return {
      ChartChip("Ascend910A", 32768, 32768,
                {T{"vir02", 2184}, T{"vir04", 4369}, T{"vir08", 8738}, T{"vir16", 17476}}),
      ChartChip("Ascend910B2", 65536, 65536,
                {T{"vir03_1c_8g", 8192}, T{"vir06_1c_16g", 16384}, T{"vir12_3c_32g", 32768}}),
      ChartChip("Ascend910B3", 65536, 65536, {T{"vir05_1c_16g", 16384}, T{"vir10_3c_32g", 32768}}),
      ChartChip("Ascend910B4-1", 65536, 65536, {T{"vir05_1c_16g", 16384}, T{"vir10_3c_32g", 32768}}),
      ChartChip("Ascend910B4", 32768, 32768, {T{"vir05_1c_8g", 8192}, T{"vir10_3c_16g", 16384}}),
      ChartChip("Ascend310P", 21527, 24576, {T{"vir01", 3072}, T{"vir02", 6144}, T{"vir04", 12288}}),
      ChartChip("Ascend910C", 65536, 65536, {T{"vir05_1c_16g", 16384}, T{"vir10_3c_32g", 32768}}, true),
  };
}

Rounded RoundToTemplate(const Chip& chip, std::int64_t memory) {
  for (const VnpuTemplate& t : chip.templates) {
    if (t.memory >= memory) return Rounded{t.memory, t.name};
  }
  if (memory <= chip.memory_capacity) return Rounded{chip.memory_allocatable, ""};
  return Rounded{};
}

Result<BackendPtr> MakeBackend(const Chip& chip, bool soft_split_by_default,
                               std::vector<std::string> npu_resources) {
  if (std::find(npu_resources.begin(), npu_resources.end(), chip.count_resource) == npu_resources.end())
    npu_resources.push_back(chip.count_resource);
  const std::string& cw = chip.common_word;
  BackendSpec s;
  s.vendor = cw;
  s.config_section = std::string(kSection);
  s.display_name = "Huawei " + cw;
  s.health = HealthRule::kHandshake;
  s.keys.register_annotation = "hami.io/node-register-" + cw;
  s.keys.handshake = "hami.io/node-handshake-" + cw;
  s.keys.allocated = "hami.io/" + cw + "-devices-allocated";
  s.keys.to_allocate = "hami.io/" + cw + "-devices-to-allocate";
  s.keys.node_lock = "hami.io/mutex.lock";
  s.keys.use_uuid = "hami.io/use-" + cw + "-uuid";
  s.keys.nouse_uuid = "hami.io/no-use-" + cw + "-uuid";
  s.resources = {chip.count_resource, chip.memory_resource, "", chip.core_resource, "", chip.memory_factor};
  s.fit.soft_split = SoftSplitRule{std::string(kModeAnnotation), std::string(kSoftSplit),
                                   std::string(kNodeSoftSplit), soft_split_by_default};
  // The together-score of interconnect groups (AllocationScore, 910 chips only) ranks first under either
  // policy.
  s.fit.vendor_score_together = cw.starts_with(kFamily910);
  return BackendPtr(std::make_unique<AscendBackend>(std::move(s), chip, std::move(npu_resources)));
}

VendorModule Module() {
  VendorModule module{std::string(kSection), Schema(), &Create};
  module.flags = {VendorFlag{"enable-ascend", VendorFlag::Effect::kEnables, true,
                             "schedule Huawei Ascend NPUs: one backend per chip of the vnpus: section"}};
  module.enabled_by_default = false;
  // Eight 910B3 chips (two HCCS rings of four), each shared by up to four vNPUs.
  module.demo.nodes = {
      {"ascend-910b3-1", DemoCards("Ascend910B3", 8, 4, 65536, 20, "Ascend910B3"), "Ascend910B3"}};
  module.demo.pods = R"(
- {name: npu-vnpu, limits: {huawei.com/Ascend910B3: "1", huawei.com/Ascend910B3-memory: "16384"}}
- {name: npu-pair, limits: {huawei.com/Ascend910B3: "2"}}
)";
  return module;
}

}  // namespace hami::backends::ascend
