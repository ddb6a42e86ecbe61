#pragma once
// Scheduling policies: device scoring weights, device ordering by GPU policy, node policy, and the
// use/nouse selectors of pod annotations.
#include <string>
#include <string_view>
#include <vector>

#include "core/model.h"
#include "core/result.h"

namespace hami {

inline constexpr std::string_view kPolicyBinpack = "binpack";
inline constexpr std::string_view kPolicySpread = "spread";
inline constexpr std::string_view kPolicyTopologyAware = "topology-aware";
inline constexpr std::string_view kPolicyMutex = "mutex";
inline constexpr std::string_view kPolicyNuma = "numa";

// hami.io/device-scoring-weights: "slot=a,core=b,memory=c".
struct ScoringWeights {
  double slot = 1;
  double core = 1;
  double memory = 1;
};
Result<ScoringWeights> ParseScoringWeights(std::string_view value);

// True when the comma-separated policy contains `name` (trimmed, exact).
bool PolicyContains(std::string_view policy, std::string_view name);

// How devices are ordered for one request; Fit walks the list from the end, so the last is preferred.
class DeviceOrder {
 public:
  DeviceOrder(std::string_view gpu_policy, bool numa_bind);

  struct Item {
    int device = 0;  // caller's handle
    double score = 0;
    std::int32_t numa = 0;
    std::int32_t index = 0;
    std::int32_t used = 0;
  };
  // Sorts ascending by the policy; ties end on device index, so the order is deterministic.
  void Sort(std::vector<Item>& items) const;

 private:
  enum class Key { kBinpack, kSpread, kNuma };
  enum class Mode { kChain, kMutex, kBinpackNuma, kSpreadNuma, kBinpack, kSpread };
  bool Less(const Item& a, const Item& b) const;
  Mode mode_;
  std::vector<Key> chain_;
};

// Usage counters of one device.
struct DeviceUsage {
  std::int32_t used = 0;  // tasks (slots)
  MiB mem;
  Cores cores;
  friend bool operator==(const DeviceUsage&, const DeviceUsage&) = default;
};

// The fields of a device the decision path reads, packed so a node's devices share a few cache lines.
struct DeviceCaps {
  std::int64_t devmem = 0;
  std::int64_t devcore = 0;
  std::int32_t count = 0;
  std::int32_t index = 0;
  std::int32_t numa = 0;
  bool health = false;
  bool mig = false;       // mode == "mig"
  bool cordoned = false;  // listed in the node's hami.io/device-cordon
  static DeviceCaps Of(const DeviceInfo& d);
};

// 10 * (ws*(req+used)/count + wc*(cores+usedcores)/devcore + wm*(mem+usedmem)/devmem); 0 for a device with a
// zero count, core or memory capacity.
// Inline: the decision computes it for every device of every candidate.
inline double DeviceScore(const DeviceCaps& d, const DeviceUsage& u, const DeviceRequest* r,
                          const ScoringWeights& w) {
  if (d.count == 0 || d.devcore == 0 || d.devmem == 0) return 0;
  double req = 0, cores = 0, mem = 0;
  if (r != nullptr) {
    req = 1;  // one slot per request entry, whatever its count
    cores = static_cast<double>(r->cores.value());
    if (r->mem_percent != 0 && r->mem_percent != kPercentUnset) {
      mem = static_cast<double>(d.devmem * r->mem_percent / 100);
    } else {
      mem = static_cast<double>(r->memory.value());
    }
  }
  return 10 * (w.slot * (req + u.used) / d.count +
               w.core * (cores + static_cast<double>(u.cores.value())) / static_cast<double>(d.devcore) +
               w.memory * (mem + static_cast<double>(u.mem.value())) / static_cast<double>(d.devmem));
}
inline double DeviceScore(const DeviceInfo& device, const DeviceUsage& usage, const DeviceRequest* request,
                          const ScoringWeights& w) {
  return DeviceScore(DeviceCaps::Of(device), usage, request, w);
}

// Sums over a node's devices, kept up to date incrementally for the node score.
struct NodeTotals {
  std::int64_t count = 0, cores = 0, mem = 0;           // capacity
  std::int64_t used = 0, used_cores = 0, used_mem = 0;  // usage
  // Node score before the pod: 10 * (Σused/Σcount + Σcores/Σdevcore + Σmem/Σdevmem), 0 if a denominator is 0.
  double Score() const;
};

// Comma lists of pod annotations: empty or whitespace-only = no constraint; empty members ignored.
struct Selector {
  std::vector<std::string> use;    // trimmed members
  std::vector<std::string> nouse;  // trimmed members
  bool active() const { return !use.empty() || !nouse.empty(); }
};
Selector ReadSelector(const Annotations& annotations, std::string_view use_key, std::string_view nouse_key);
// UUIDs: exact match.
bool SelectorAllowsUuid(const Selector& s, std::string_view uuid);
// Card types: case-insensitive substring of the card type.
bool SelectorAllowsType(const Selector& s, std::string_view card_type);

}  // namespace hami
