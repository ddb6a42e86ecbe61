#include "backends/vastai/vastai.h"

#include <algorithm>
#include <map>
#include <string>

#include "backends/common.h"

namespace hami::backends::vastai {
namespace {

constexpr std::string_view kSection = "vastai";
constexpr std::string_view kStrategy = "DeviceStrategy";  // custominfo: "die" in die mode
constexpr std::string_view kDie = "die";
constexpr std::string_view kCard = "AIC";  // custominfo: the card that hosts the die

bool IsDie(const DeviceInfo& d) {
  const std::string* strategy = d.CustomInfo(kStrategy);
  return strategy != nullptr && *strategy == kDie;
}

// The card hosting a die, or null (not a die, or the plugin names no card).
const std::string* CardOf(const DeviceInfo& d) { return IsDie(d) ? d.CustomInfo(kCard) : nullptr; }

class VastaiBackend final : public Hooked<VastaiBackend, CountBackend> {
 public:
  using Hooked::Hooked;

  // A mutex pod keeps a whole card: no die of a card another die of which is in use.
  std::optional<Reason> RefuseCard(const DeviceInfo& card, const DeviceUsage&, const DeviceRequest&,
                                   const CardCheckView& node) const override {
    const std::string* host = node.mutex ? CardOf(card) : nullptr;
    if (host == nullptr) return std::nullopt;
    for (std::size_t i = 0; i < node.cards.size(); ++i) {
      const std::string* other = CardOf(node.cards[i]);
      if (node.used[i].used > 0 && other != nullptr && *other == *host) {
        return Reason::kExclusiveDeviceAllocateConflict;
      }
    }
    return std::nullopt;
  }

  bool ChoosesCards(const ChoiceView&) const override { return true; }
  CardChoice ChooseCards(std::span<const DeviceInfo* const> candidates, std::int32_t want,
                         const ChoiceView&) const override {
    if (TooFew(candidates, want)) return {};
    return Arranged(ChooseDies(candidates, want), want);
  }

  // Per container of two dies or more, the share of its dies on its fullest card; 0 for the node when such
  // a container holds a device that is no die of a named card.
  double AllocationScore(const AllocationView& view) const override {
    double score = 0;
    std::map<std::string, int, std::less<>> per_card;
    for (const std::vector<int>& positions : view.containers) {
      if (positions.size() < 2) continue;  // one die is together anywhere: nothing to rank nodes by
      per_card.clear();
      int fullest = 0;
      for (int p : positions) {
        const std::string* host = CardOf(view.cards[static_cast<std::size_t>(p)]);
        if (host == nullptr) return 0;
        auto it = per_card.find(*host);
        if (it == per_card.end()) it = per_card.emplace(*host, 0).first;
        fullest = std::max(fullest, ++it->second);
      }
      score += static_cast<double>(fullest) / static_cast<double>(positions.size());
    }
    return score;
  }
};

Result<BackendPtr> Create(const VendorSettings& settings) {
  BackendSpec spec = DefaultSpec();
  if (auto ok = ApplySettings(settings, false, spec); !ok) return ok.error();
  return BackendPtr(std::make_unique<VastaiBackend>(std::move(spec)));
}

}  // namespace

std::vector<std::size_t> ChooseDies(std::span<const DeviceInfo* const> candidates, std::int32_t want) {
  const auto n = static_cast<std::size_t>(std::max(want, 0));
  if (candidates.size() < n) return {};
  std::vector<std::size_t> out;
  const bool dies =
      std::all_of(candidates.begin(), candidates.end(), [](const DeviceInfo* d) { return IsDie(*d); });
  if (n <= 1 || candidates.size() == n || !dies) {
    for (std::size_t i = 0; i < n; ++i) out.push_back(i);
    return out;
  }
  // Cards in the order of their first candidate, each with its candidates' positions.
  std::vector<std::pair<std::string, std::vector<std::size_t>>> cards;
  std::vector<std::size_t> loose;  // dies whose card the plugin does not name
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const std::string* host = CardOf(*candidates[i]);
    if (host == nullptr) {
      loose.push_back(i);
      continue;
    }
    auto it = std::find_if(cards.begin(), cards.end(), [&](const auto& c) { return c.first == *host; });
    if (it == cards.end()) {
      cards.emplace_back(*host, std::vector<std::size_t>{i});
    } else {
      it->second.push_back(i);
    }
  }
  std::stable_sort(cards.begin(), cards.end(),
                   [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
  for (std::size_t i : loose) cards.emplace_back(std::string(), std::vector<std::size_t>{i});
  for (const auto& [host, positions] : cards) {
    for (std::size_t i : positions) {
      if (out.size() == n) return out;
      out.push_back(i);
    }
  }
  return out;
}

BackendSpec DefaultSpec() {
  BackendSpec s;
  s.vendor = "Vastai";
  s.config_section = std::string(kSection);
  s.display_name = "Vastai accelerator";
  s.health = HealthRule::kHandshake;
  s.keys.register_annotation = "hami.io/node-va-register";
  s.keys.handshake = "hami.io/node-handshake-va";
  s.keys.allocated = "hami.io/Vastai-devices-allocated";  // the vendor key, capitalised, as upstream
  s.keys.to_allocate = "hami.io/Vastai-devices-to-allocate";
  s.keys.node_lock = "hami.io/mutex.lock";
  s.keys.use_uuid = "vastaitech.com/use-gpuuuid";
  s.keys.nouse_uuid = "vastaitech.com/nouse-gpuuuid";
  s.resources.count = "vastaitech.com/va";
  s.fit.vendor_score_together = true;
  return s;
}

VendorModule Module() {
  VendorModule module{std::string(kSection), CountSchema(), SingleBackend(&Create)};
  module.demo.nodes = {{"vastai-va1-1", DemoCards("va", 4, 4, 32768, 100, "Vastai")}};
  module.demo.pods = R"(
- {name: va-pair, limits: {vastaitech.com/va: "2"}}
)";
  return module;
}

}  // namespace hami::backends::vastai
