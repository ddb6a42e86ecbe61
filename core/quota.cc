#include "core/quota.h"

#include <algorithm>

#include "core/quantity.h"

namespace hami {
namespace {
constexpr std::string_view kLimitsPrefix = "limits.";
}

void QuotaBook::UpsertQuota(const ResourceQuotaView& quota) {
  // The quota controller rewrites status.used all the time: only a limit of ours that changed is a change.
  const auto limits_of = [&] {
    std::vector<std::pair<std::string, std::int64_t>> out;
    if (auto it = by_ns_.find(quota.ns); it != by_ns_.end()) {
      for (const auto& [resource, state] : it->second) {
        const auto l = state.limits.find(quota.name);
        if (l != state.limits.end()) out.emplace_back(resource, l->second);
      }
    }
    return out;
  };
  const auto before = limits_of();
  const std::uint64_t changes = changes_;
  RemoveQuota(quota.ns, quota.name);
  auto& ns = by_ns_[quota.ns];
  for (const auto& [key, text] : quota.hard) {
    if (!std::string_view(key).starts_with(kLimitsPrefix)) continue;
    const std::string resource = key.substr(kLimitsPrefix.size());
    bool tracked = false;
    for (const auto& b : *backends_) {
      const auto& r = b->Spec().resources;
      tracked =
          tracked || (!r.memory.empty() && r.memory == resource) || (!r.cores.empty() && r.cores == resource);
    }
    if (!tracked) continue;
    auto q = Quantity::Parse(text);
    if (!q) continue;  // the API server validates quantities; nothing sensible to enforce otherwise
    auto v = q->AsInt64();
    if (!v) continue;
    ns[resource].limits[quota.name] = *v;
  }
  changes_ = changes + (limits_of() != before ? 1 : 0);
}

void QuotaBook::RemoveQuota(std::string_view ns, std::string_view name) {
  auto it = by_ns_.find(ns);
  if (it == by_ns_.end()) return;
  for (auto& [resource, state] : it->second) {
    if (auto l = state.limits.find(name); l != state.limits.end()) {
      state.limits.erase(l);
      ++changes_;
    }
  }
}

void QuotaBook::Charge(std::string_view ns, const std::vector<DeviceCharge>& charges, int sign) {
  ++changes_;
  for (const auto& c : charges) {
    const Backend* b = backends_->Find(c.vendor);
    if (b == nullptr) continue;
    const auto& r = b->Spec().resources;
    auto& resources = by_ns_[std::string(ns)];
    if (!r.memory.empty()) {
      auto& s = resources[r.memory];
      s.used = std::max<std::int64_t>(0, s.used + sign * c.mem.value());
    }
    if (!r.cores.empty()) {
      auto& s = resources[r.cores];
      s.used = std::max<std::int64_t>(0, s.used + sign * c.cores.value());
    }
  }
}

void QuotaBook::AddUsage(std::string_view ns, const std::vector<DeviceCharge>& charges) {
  Charge(ns, charges, 1);
}
void QuotaBook::RemoveUsage(std::string_view ns, const std::vector<DeviceCharge>& charges) {
  Charge(ns, charges, -1);
}

std::optional<std::int64_t> QuotaBook::Limit(const ResourceState& s) const {
  std::optional<std::int64_t> out;
  for (const auto& [name, v] : s.limits) out = out ? std::min(*out, v) : v;
  return out;
}

bool QuotaBook::HasLimits(std::string_view ns) const {
  auto it = by_ns_.find(ns);
  if (it == by_ns_.end()) return false;
  return std::any_of(it->second.begin(), it->second.end(),
                     [](const auto& kv) { return !kv.second.limits.empty(); });
}

std::optional<QuotaBook::Shortfall> QuotaBook::Exceeded(std::string_view ns, std::string_view vendor, MiB mem,
                                                        Cores cores) const {
  const Backend* b = backends_->Find(vendor);
  if (b == nullptr) return std::nullopt;
  auto it = by_ns_.find(ns);
  if (it == by_ns_.end()) return std::nullopt;
  const auto& r = b->Spec().resources;
  // `scale`: the limit is written in resource units, the usage kept in MiB (memory) or percent (cores).
  const auto check = [&](const std::string& resource, std::int64_t requested,
                         std::int64_t scale) -> std::optional<Shortfall> {
    if (resource.empty()) return std::nullopt;
    auto s = it->second.find(resource);
    if (s == it->second.end()) return std::nullopt;
    auto limit = Limit(s->second);
    if (!limit) return std::nullopt;
    // Checked: a request near the int64 maximum must not wrap into "fits".
    std::int64_t total = 0, allowed = 0;
    const bool total_overflows = __builtin_add_overflow(s->second.used, requested, &total);
    const bool limit_overflows = __builtin_mul_overflow(*limit, scale, &allowed);
    if (!total_overflows && (limit_overflows || total <= allowed)) return std::nullopt;
    return Shortfall{resource, requested, s->second.used, allowed};
  };
  if (auto m = check(r.memory, mem.value(), r.memory_factor > 1 ? r.memory_factor : 1)) return m;
  return check(r.cores, cores.value(), 1);
}

std::vector<QuotaBook::Entry> QuotaBook::Entries() const {
  std::vector<Entry> out;
  for (const auto& [ns, resources] : by_ns_) {
    for (const auto& [resource, s] : resources) out.push_back(Entry{ns, resource, s.used, Limit(s)});
  }
  return out;
}

}  // namespace hami
