#include "backends/kunlun/kunlun.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <climits>

#include "backends/common.h"
#include "core/strings.h"

namespace hami::backends::kunlun {
namespace {

constexpr std::string_view kSection = "kunlun";
constexpr std::string_view kWholeVendor = "kunlun";
constexpr std::string_view kSharedVendor = "XPU";
// The card indexes the kunlun device plugin hands the container (the last container with cards wins).
constexpr std::string_view kDeviceIndexes = "BAIDU_COM_DEVICE_IDX";
constexpr std::int32_t kWing = 4;   // cards per wing
constexpr std::int32_t kCards = 8;  // cards the interconnect links

bool Linked(std::int32_t a, std::int32_t b) {
  return (a < kWing) == (b < kWing) || a - b == kWing || b - a == kWing;
}

// Both backends: the positions of the candidates SelectByWings takes, in its order.
std::vector<std::size_t> ChooseOnWings(std::span<const DeviceInfo* const> candidates, std::int32_t want) {
  std::vector<std::int32_t> usable = CandidateIndexes(candidates);
  std::erase_if(usable, [](std::int32_t i) { return i < 0 || i >= kCards; });
  return PositionsOf(candidates, SelectByWings(usable, want));
}

void SetUuidKeys(BackendSpec& s) {
  s.keys.use_uuid = "hami.io/use-xpu-uuid";
  s.keys.nouse_uuid = "hami.io/no-use-xpu-uuid";
  s.keys.use_uuid_alt = "baidu.com/use-gpuuuid";
  s.keys.nouse_uuid_alt = "baidu.com/nouse-gpuuuid";
}

// Whole XPUs from the node's capacity; a card is taken whole or not at all.
class WholeBackend final : public Hooked<WholeBackend, BasicBackend> {
 public:
  using Hooked::Hooked;

  Result<std::vector<DeviceInfo>> Discover(const NodeView& node) const override {
    DeviceInfo card;
    card.count = 100;
    card.devmem = MiB(kCardMemory);
    card.devcore = Cores(100);
    card.type = std::string(kWholeVendor);
    auto out = CapacityCardList(node, spec_.resources.count, "kunlun", card);
    if (!out) return out;
    for (DeviceInfo& d : *out) d.numa = d.index >= static_cast<std::int32_t>(out->size() / 2) ? 1 : 0;
    return out;
  }
  // The plugin's capacity counts the healthy cards.
  NodePublication Publish(const std::vector<DeviceInfo>& cards) const override {
    return CapacityCardCount(spec_.resources.count, cards);
  }

  Result<std::optional<DeviceRequest>> RequestFor(const ContainerView& c) const override {
    return WholeCardRequest(c, spec_);
  }

  void Annotate(const PodView& pod, const PodVendorDevices& devices, const Annotations& written,
                TimePoint now, Annotations& out) const override {
    BasicBackend::Annotate(pod, devices, written, now, out);
    for (const auto& ctr : devices) {
      if (ctr.empty()) continue;
      std::vector<std::string> indexes;
      for (const auto& d : ctr) indexes.push_back(std::to_string(d.index));
      out[std::string(kDeviceIndexes)] = Join(indexes, ",");
    }
  }

  bool ChoosesCards(const ChoiceView&) const override { return true; }
  CardChoice ChooseCards(std::span<const DeviceInfo* const> candidates, std::int32_t want,
                         const ChoiceView&) const override {
    if (TooFew(candidates, want)) return {};
    return Arranged(ChooseOnWings(candidates, want), want);
  }

  // Only on a node of whole XPUs alone (the wings are theirs).
  double AllocationScore(const AllocationView& view) const override {
    for (const DeviceInfo& d : view.node_cards) {
      if (d.type.find(kWholeVendor) == std::string::npos) return 0;
    }
    std::vector<std::int32_t> in_use, chosen;
    for (std::size_t i = 0; i < view.cards.size(); ++i) {
      if (view.before[i].used > 0) in_use.push_back(view.cards[i].index);
    }
    for (int i : view.chosen) chosen.push_back(view.cards[static_cast<std::size_t>(i)].index);
    return WingScore(in_use, chosen);
  }
};

// vXPUs from the register annotation: a card hosts vXPUs of one size only.
class SharedBackend final : public Hooked<SharedBackend, BasicBackend> {
 public:
  using Hooked::Hooked;

  Result<std::vector<DeviceInfo>> Discover(const NodeView& node) const override {
    return ManifestDevices(node, spec_.keys.register_annotation);
  }

  Result<std::optional<DeviceRequest>> RequestFor(const ContainerView& c) const override {
    auto count = CountResource(c, spec_.resources.count);
    if (!count) return count.error();
    if (!*count) return std::optional<DeviceRequest>();
    auto memory = Memory(c);
    if (!memory) return memory.error();
    DeviceRequest req;
    req.vendor = spec_.vendor;
    req.count = **count;
    if (*memory) {
      req.memory = MiB(RoundToSize(**memory));
      req.mem_percent = 0;
      req.cores = Cores(req.memory.value() * 100 / kCardMemory);
    } else {
      req.memory = MiB(kCardMemory);
      req.mem_percent = 100;
      req.cores = Cores(100);
    }
    return std::optional<DeviceRequest>(req);
  }

  // The vXPU size goes into the limits (and requests), where the device plugin reads it.
  Result<bool> Admit(ContainerView& container, PodView&) const override {
    if (!container.limits.contains(spec_.resources.count)) return false;
    if (container.limits.contains(spec_.resources.memory)) {
      auto memory = Memory(container);
      if (!memory) return memory.error();
      const std::string size = std::to_string(RoundToSize(**memory));
      container.limits[spec_.resources.memory] = size;
      container.requests[spec_.resources.memory] = size;
    }
    return true;
  }

  // Same-size sharing: a card in use takes only vXPUs of the size already on it.
  std::optional<Reason> RefuseCard(const DeviceInfo&, const DeviceUsage& used, const DeviceRequest& request,
                                   const CardCheckView&) const override {
    if (used.used > 0 && used.mem.value() / used.used != request.memory.value()) {
      return Reason::kCardSizeMismatch;
    }
    return std::nullopt;
  }

  bool ChoosesCards(const ChoiceView&) const override { return true; }
  CardChoice ChooseCards(std::span<const DeviceInfo* const> candidates, std::int32_t want,
                         const ChoiceView&) const override {
    if (TooFew(candidates, want)) return {};
    return Arranged(ChooseOnWings(candidates, want), want);
  }

 private:
  Result<std::optional<std::int64_t>> Memory(const ContainerView& c) const {
    return IntegerResource(c, spec_.resources.memory, "MiB", 0, kInt32Max);
  }
};

BackendSpec WholeSpec() {
  BackendSpec s;
  s.vendor = std::string(kWholeVendor);
  s.config_section = std::string(kSection);
  s.display_name = "Kunlunxin XPU";
  s.health = HealthRule::kAlwaysHealthy;
  s.keys.allocated = "hami.io/kunlun-allocated";
  SetUuidKeys(s);
  s.resources.count = "kunlunxin.com/xpu";
  return s;
}

BackendSpec SharedSpec() {
  BackendSpec s;
  s.vendor = std::string(kSharedVendor);
  s.config_section = std::string(kSection);
  s.display_name = "Kunlunxin vXPU";
  s.health = HealthRule::kHandshake;
  s.keys.register_annotation = "hami.io/node-register-xpu";
  s.keys.handshake = "hami.io/node-handshake-xpu";
  s.keys.allocated = "hami.io/xpu-devices-allocated";
  s.keys.to_allocate = "hami.io/xpu-devices-to-allocate";
  s.keys.node_lock = "hami.io/mutex.lock";
  SetUuidKeys(s);
  s.resources.count = "kunlunxin.com/vxpu";
  s.resources.memory = "kunlunxin.com/vxpu-memory";
  s.fit.split_count_limits = false;
  return s;
}

Result<std::vector<BackendPtr>> Create(const VendorSettings& settings) {
  BackendSpec whole = WholeSpec();
  BackendSpec shared = SharedSpec();
  using Name = std::pair<std::string_view, std::string*>;
  for (const auto& [key, name] : {Name{"resourceCountName", &whole.resources.count},
                                  Name{"resourceVCountName", &shared.resources.count},
                                  Name{"resourceVMemoryName", &shared.resources.memory}}) {
    if (auto v = settings.String(key)) *name = *v;
  }
  if (whole.resources.count.empty() || shared.resources.count.empty()) {
    return Error{fmt::format("{}.{}: must not be empty", kSection,
                             whole.resources.count.empty() ? "resourceCountName" : "resourceVCountName")};
  }
  std::vector<BackendPtr> out;
  out.push_back(std::make_unique<WholeBackend>(std::move(whole)));
  out.push_back(std::make_unique<SharedBackend>(std::move(shared)));
  return out;
}

VendorFlag NoEffect(std::string flag, std::string_view key) {
  return VendorFlag{std::move(flag), VendorFlag::Effect::kNoEffect, false,
                    fmt::format("no effect: set {}.{}", kSection, key)};
}

}  // namespace

std::int64_t RoundToSize(std::int64_t memory) {
  for (const std::int64_t size : {kCardMemory / 4, kCardMemory / 2}) {
    if (memory <= size) return size;
  }
  return kCardMemory;
}

std::vector<std::int32_t> SelectByWings(std::span<const std::int32_t> usable, std::int32_t want) {
  const auto left = static_cast<std::int32_t>(
      std::count_if(usable.begin(), usable.end(), [](std::int32_t i) { return i < kWing; }));
  const auto right = static_cast<std::int32_t>(usable.size()) - left;
  const auto first_from = [&](std::int32_t lowest) {
    std::vector<std::int32_t> out;
    for (std::int32_t i : usable) {
      if (i >= lowest && static_cast<std::int32_t>(out.size()) < want) out.push_back(i);
    }
    return out;
  };
  if (want == kCards) {
    return static_cast<std::int32_t>(usable.size()) == kCards ? first_from(INT_MIN)
                                                               : std::vector<std::int32_t>{};
  }
  if (want != 1 && want != 2 && want != 4) return {};
  if (left >= want || right >= want) {
    // Best fit: the wing whose usable cards the request fills exactly, else the one it leaves fewest.
    static constexpr std::array<std::int32_t, 4> kOddLevels = {1, 3, 2, 4};
    for (std::int32_t level = want; level <= kWing; ++level) {
      const std::int32_t fill = want % 2 == 1 ? kOddLevels[static_cast<std::size_t>(level - 1)] : level;
      if (left == fill) return first_from(INT_MIN);
      if (right == fill) return first_from(kWing);
    }
    return {};
  }
  // Across the wings: two twins, or four cards of one of the linked groups.
  if (want == 2) {
    for (std::int32_t a : usable) {
      for (std::int32_t b : usable) {
        if (b - a == kWing) return {a, b};
      }
    }
    return {};
  }
  static constexpr std::array<std::array<std::int32_t, 4>, 6> kGroups = {
      {{0, 1, 4, 5}, {2, 3, 6, 7}, {0, 2, 4, 6}, {1, 3, 5, 7}, {0, 3, 4, 7}, {1, 2, 5, 6}}};
  const auto has = [&](std::int32_t i) { return std::binary_search(usable.begin(), usable.end(), i); };
  const auto contained = [&](const auto& g) { return std::all_of(g.begin(), g.end(), has); };
  const std::size_t n = usable.size();
  std::vector<std::int32_t> last;
  for (const auto& g : kGroups) {
    if (!contained(g)) continue;
    if (n == 4 || n == 5) return {g.begin(), g.end()};
    if (n != 6) return {};
    last.assign(g.begin(), g.end());
    std::vector<std::int32_t> rest;  // the two cards the group leaves
    for (std::int32_t i : usable) {
      if (std::find(g.begin(), g.end(), i) == g.end()) rest.push_back(i);
    }
    if (Linked(rest[0], rest[1])) return last;  // the leftover pair can still serve a two-card pod
  }
  return last;
}

double WingScore(std::span<const std::int32_t> in_use, std::span<const std::int32_t> chosen) {
  // Gaps a set of cards leaves: per wing, 0 when it is full, 2 for a lone card, 1 otherwise.
  const auto bubbles = [](std::span<const std::int32_t> cards) {
    if (cards.empty()) return 1;
    const auto left = std::count_if(cards.begin(), cards.end(), [](std::int32_t i) { return i < kWing; });
    const auto right = static_cast<std::int64_t>(cards.size()) - left;
    const auto value = [](std::int64_t k) { return k == kWing ? 0 : k == 1 ? 2 : 1; };
    return value(left) + value(right);
  };
  switch (bubbles(chosen) - bubbles(in_use)) {
    case -1:
      return 3000;
    case 0:
      return 2000;
    case 2:
      return 0;
    default:
      return 1000;
  }
}

VendorModule Module() {
  VendorModule module{std::string(kSection), VendorSchema{}, &Create};
  module.schema.fields = {{"resourceCountName", SettingKind::kString},
                          {"resourceVCountName", SettingKind::kString},
                          {"resourceVMemoryName", SettingKind::kString}};
  module.flags = {NoEffect("kunlun-name", "resourceCountName"),
                  NoEffect("kunlun-vcount", "resourceVCountName"),
                  NoEffect("kunlun-vmemory", "resourceVMemoryName")};
  module.demo.nodes = {
      {"kunlun-p800-1", DemoCards("kunlun", 8, 100, kCardMemory, 100, "kunlun"), std::string(kWholeVendor)},
      {"kunlun-vxpu-1", DemoCards("xpu", 8, 4, kCardMemory, 100, "XPU"), std::string(kSharedVendor)}};
  module.demo.pods = R"(
- {name: xpu-pair, limits: {kunlunxin.com/xpu: "2"}}
- {name: vxpu-quarter, limits: {kunlunxin.com/vxpu: "1", kunlunxin.com/vxpu-memory: "20000"}}
)";
  return module;
}

}  // namespace hami::backends::kunlun
