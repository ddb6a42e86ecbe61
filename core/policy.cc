#include "core/policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "core/strings.h"

namespace hami {

Result<ScoringWeights> ParseScoringWeights(std::string_view value) {
  const auto fail = [&](std::string_view why) {
    return Error{fmt::format("invalid hami.io/device-scoring-weights annotation \"{}\": {}", value, why)};
  };
  const auto items = Split(value, ',');
  if (items.size() != 3) return fail("expected slot, core, and memory weights (e.g. slot=1,core=1,memory=1)");
  ScoringWeights w;
  std::array<bool, 3> seen{};
  bool positive = false;
  for (std::string_view item : items) {
    const auto eq = item.find('=');
    if (eq == std::string_view::npos) return fail("expected key=value entries");
    const std::string_view key = Trim(item.substr(0, eq));
    const std::string_view val = Trim(item.substr(eq + 1));
    int slot = -1;
    if (key == "slot") slot = 0;
    if (key == "core") slot = 1;
    if (key == "memory") slot = 2;
    if (slot < 0) return fail(fmt::format("unknown weight \"{}\"", key));
    if (seen[static_cast<std::size_t>(slot)]) return fail(fmt::format("duplicate \"{}\" weight", key));
    seen[static_cast<std::size_t>(slot)] = true;
    auto n = ParseInt64(val, key);
    if (!n) return fail(fmt::format("\"{}\" weight must be an integer", key));
    if (*n < 0) return fail(fmt::format("\"{}\" weight must not be negative", key));
    positive = positive || *n > 0;
    (slot == 0 ? w.slot : slot == 1 ? w.core : w.memory) = static_cast<double>(*n);
  }
  if (!positive) return fail("at least one weight must be positive");
  return w;
}

bool PolicyContains(std::string_view policy, std::string_view name) {
  for (std::string_view p : Split(policy, ',')) {
    if (Trim(p) == name) return true;
  }
  return false;
}

DeviceOrder::DeviceOrder(std::string_view gpu_policy, bool numa_bind) {
  if (gpu_policy.find(',') != std::string_view::npos || gpu_policy == kPolicyNuma) {
    mode_ = Mode::kChain;
    for (std::string_view raw : Split(gpu_policy, ',')) {
      const std::string_view p = Trim(raw);
      Key k;
      if (p == kPolicyBinpack) {
        k = Key::kBinpack;
      } else if (p == kPolicySpread) {
        k = Key::kSpread;
      } else if (p == kPolicyNuma) {
        k = Key::kNuma;
      } else {
        continue;  // mutex / topology-aware act as fit filters, not sort keys
      }
      if (std::find(chain_.begin(), chain_.end(), k) == chain_.end()) chain_.push_back(k);
    }
    if (chain_.empty()) chain_.push_back(Key::kSpread);
    if (numa_bind && chain_.front() != Key::kNuma) {
      chain_.erase(std::remove(chain_.begin(), chain_.end(), Key::kNuma), chain_.end());
      chain_.insert(chain_.begin(), Key::kNuma);
    }
  } else if (gpu_policy == kPolicyMutex) {
    mode_ = Mode::kMutex;
  } else if (gpu_policy == kPolicyBinpack) {
    mode_ = numa_bind ? Mode::kBinpackNuma : Mode::kBinpack;
  } else {
    mode_ = numa_bind ? Mode::kSpreadNuma : Mode::kSpread;
  }
}

namespace {

// Ties end on index, then on the caller's device handle: a strict total order, so every correct sort gives
// the same result.
bool ByIndex(const DeviceOrder::Item& a, const DeviceOrder::Item& b) {
  if (a.index != b.index) return a.index < b.index;
  return a.device < b.device;
}

// A node has a handful of devices: insertion sort with the comparator inlined beats std::sort there.
template <class Less>
void SortItems(std::vector<DeviceOrder::Item>& items, Less less) {
  if (items.size() > 16) {
    std::sort(items.begin(), items.end(), less);
    return;
  }
  for (std::size_t i = 1; i < items.size(); ++i) {
    DeviceOrder::Item x = items[i];
    std::size_t j = i;
    for (; j > 0 && less(x, items[j - 1]); --j) items[j] = items[j - 1];
    items[j] = x;
  }
}

}  // namespace

bool DeviceOrder::Less(const Item& a, const Item& b) const {
  switch (mode_) {
    case Mode::kChain:
      for (Key k : chain_) {
        if (k == Key::kBinpack && a.score != b.score) return a.score < b.score;
        if (k == Key::kSpread && a.score != b.score) return a.score > b.score;
        if (k == Key::kNuma && a.numa != b.numa) return a.numa < b.numa;
      }
      break;
    case Mode::kMutex:
      if (a.used != b.used) return a.used > b.used;
      if (a.numa != b.numa) return a.numa < b.numa;
      break;
    case Mode::kBinpackNuma:
      if (a.numa != b.numa) return a.numa > b.numa;
      if (a.score != b.score) return a.score < b.score;
      break;
    case Mode::kSpreadNuma:
      if (a.numa != b.numa) return a.numa < b.numa;
      if (a.score != b.score) return a.score > b.score;
      break;
    case Mode::kBinpack:
      if (a.score != b.score) return a.score < b.score;
      if (a.numa != b.numa) return a.numa < b.numa;
      break;
    case Mode::kSpread:
      if (a.score != b.score) return a.score > b.score;
      if (a.numa != b.numa) return a.numa < b.numa;
      break;
  }
  return ByIndex(a, b);
}

void DeviceOrder::Sort(std::vector<Item>& items) const {
  // The two single-policy orders every default configuration uses get their comparator inlined; the others
  // go through Less (the same order).
  switch (mode_) {
    case Mode::kBinpack:
      return SortItems(items, [](const Item& a, const Item& b) {
        if (a.score != b.score) return a.score < b.score;
        if (a.numa != b.numa) return a.numa < b.numa;
        return ByIndex(a, b);
      });
    case Mode::kSpread:
      return SortItems(items, [](const Item& a, const Item& b) {
        if (a.score != b.score) return a.score > b.score;
        if (a.numa != b.numa) return a.numa < b.numa;
        return ByIndex(a, b);
      });
    default:
      return SortItems(items, [this](const Item& a, const Item& b) { return Less(a, b); });
  }
}

DeviceCaps DeviceCaps::Of(const DeviceInfo& d) {
  return DeviceCaps{d.devmem.value(), d.devcore.value(), d.count,         d.index,
                    d.numa,           d.health,          d.mode == "mig", false};
}

double NodeTotals::Score() const {
  if (count == 0 || cores == 0 || mem == 0) return 0;
  return 10 * (static_cast<double>(used) / static_cast<double>(count) +
               static_cast<double>(used_cores) / static_cast<double>(cores) +
               static_cast<double>(used_mem) / static_cast<double>(mem));
}

namespace {

std::vector<std::string> Members(const Annotations& a, std::string_view key) {
  std::vector<std::string> out;
  if (key.empty()) return out;
  auto it = a.find(key);
  if (it == a.end()) return out;
  for (std::string_view m : Split(it->second, ',')) {
    const std::string_view t = Trim(m);
    if (!t.empty()) out.emplace_back(t);
  }
  return out;
}

}  // namespace

Selector ReadSelector(const Annotations& annotations, std::string_view use_key, std::string_view nouse_key) {
  return Selector{Members(annotations, use_key), Members(annotations, nouse_key)};
}

bool SelectorAllowsUuid(const Selector& s, std::string_view uuid) {
  if (!s.use.empty() && std::find(s.use.begin(), s.use.end(), uuid) == s.use.end()) return false;
  if (std::find(s.nouse.begin(), s.nouse.end(), uuid) != s.nouse.end()) return false;
  return true;
}

bool SelectorAllowsType(const Selector& s, std::string_view card_type) {
  const std::string upper = ToUpper(card_type);
  const auto matches = [&](const std::string& m) { return upper.find(ToUpper(m)) != std::string::npos; };
  if (!s.use.empty() && std::none_of(s.use.begin(), s.use.end(), matches)) return false;
  if (std::any_of(s.nouse.begin(), s.nouse.end(), matches)) return false;
  return true;
}

}  // namespace hami
