#pragma once
// ResourceQuota accounting for device memory and cores (HAMi's own accounting; status.used is not read).
// Limits come from `limits.<resource>` keys of spec.hard where <resource> is a backend's memory or core
// resource. Several quotas in one namespace all apply (the tightest limit wins), as Kubernetes does.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/model.h"

namespace hami {

class QuotaBook {
 public:
  explicit QuotaBook(const Backends& backends) : backends_(&backends) {}

  void UpsertQuota(const ResourceQuotaView& quota);
  void RemoveQuota(std::string_view ns, std::string_view name);

  void AddUsage(std::string_view ns, const std::vector<DeviceCharge>& charges);
  void RemoveUsage(std::string_view ns, const std::vector<DeviceCharge>& charges);

  // The first limit that `mem` MiB and `cores` more of `vendor` would exceed in the namespace (memory
  // before cores), or nullopt when they fit. `limit` is in the unit `used` is kept in (memory: scaled MiB).
  struct Shortfall {
    std::string resource;  // e.g. nvidia.com/gpumem
    std::int64_t requested = 0, used = 0, limit = 0;
  };
  std::optional<Shortfall> Exceeded(std::string_view ns, std::string_view vendor, MiB mem, Cores cores) const;
  bool Fits(std::string_view ns, std::string_view vendor, MiB mem, Cores cores) const {
    return !Exceeded(ns, vendor, mem, cores);
  }
  // True when some quota in the namespace limits a device resource (lets the hot path skip quota work).
  bool HasLimits(std::string_view ns) const;

  struct Entry {
    std::string ns;
    std::string resource;
    std::int64_t used = 0;              // memory in MiB (scaled), cores in percent
    std::optional<std::int64_t> limit;  // in resource units, as written in the quota
  };
  std::vector<Entry> Entries() const;
  // Counts every change of a limit or of the use (ClusterState::generation).
  std::uint64_t changes() const { return changes_; }

 private:
  struct ResourceState {
    std::int64_t used = 0;
    std::map<std::string, std::int64_t, std::less<>> limits;  // quota name -> limit
  };
  void Charge(std::string_view ns, const std::vector<DeviceCharge>& charges, int sign);
  std::optional<std::int64_t> Limit(const ResourceState& s) const;

  const Backends* backends_;
  std::uint64_t changes_ = 0;
  std::map<std::string, std::map<std::string, ResourceState, std::less<>>, std::less<>> by_ns_;
};

}  // namespace hami
