#pragma once
// The fit engine: whether a pod fits a node, and on which devices. It follows upstream's check order and
// reason names (docs/DECISIONS.md, "The fit keeps HAMi's check order and reasons") and is deterministic. It
// reads ClusterState and never changes it; scratch buffers are reused between nodes so a decision over
// thousands of nodes allocates little.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/backend.h"
#include "core/cluster_state.h"
#include "core/policy.h"
#include "core/reason.h"

namespace hami {

inline constexpr std::string_view kNodeInsufficientDevice = "NodeInsufficientDevice";
inline constexpr std::string_view kNodeUnregistered = "node unregistered";

// Per-reason device counts of one failed request, formatted like upstream: "1/2 CardInsufficientMemory, ..."
// (entries sorted as strings). A count that was Set is written even when 0 ("0/2 ...": none could be taken).
struct ReasonCounts {
  std::array<int, static_cast<std::size_t>(Reason::kCount)> n{};
  std::array<bool, static_cast<std::size_t>(Reason::kCount)> set{};
  void Add(Reason r, int k = 1) { n[static_cast<std::size_t>(r)] += k; }
  void Set(Reason r, int k) {
    n[static_cast<std::size_t>(r)] = k;
    set[static_cast<std::size_t>(r)] = true;
  }
  std::string Format(int total) const;
};

// What every container of the pod asks, per backend (init containers first).
struct PodRequests {
  std::size_t num_init = 0;
  std::vector<std::vector<std::pair<int, DeviceRequest>>> containers;  // (backend index, request)
  bool Any() const;
  std::vector<std::size_t> BackendsAsked() const;  // sorted, each once
};
// Collects requests from every container; an unreadable resource value is an error naming the container.
Result<PodRequests> CollectRequests(const PodView& pod, const Backends& backends);

// Pod-level inputs computed once per decision.
struct PodContext {
  const PodView* pod = nullptr;
  std::string gpu_policy;
  bool mutex = false;
  bool topology = false;
  ScoringWeights weights;
  bool quota_active = false;
  bool spread = false;  // the node policy is spread (set by the scheduler; vendors' scores read it)
  struct Vendor {
    Selector uuids;
    Selector alt_uuids;  // BackendKeys::use_uuid_alt / nouse_uuid_alt
    Selector types;
    std::optional<std::string> mode_filter;
    bool numa_bind = false;
    bool soft_split = false;  // the pod asks for the vendor's soft-split mode (FitRules::soft_split)
    DeviceOrder order{"spread", false};
    std::uint8_t pod_class = 0;  // Backend::PodClass (FitRules::pod_classes)
  };
  std::vector<Vendor> vendors;  // per backend
};
// Reads the pod's policy annotations; an invalid hami.io/device-scoring-weights is an error.
Result<PodContext> MakePodContext(const PodView& pod, const Backends& backends, const QuotaBook& quotas,
                                  std::string_view default_gpu_policy);

class NodeFitter {
 public:
  NodeFitter(const Backends& backends, const QuotaBook& quotas) : backends_(&backends), quotas_(&quotas) {}

  // Whether the pod fits `node`. On success and when `out` is given, fills the per-vendor, per-container
  // devices (index-aligned with the pod's containers). On failure `reason` says why.
  bool Fit(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& node, PodDevices* out,
           std::string* reason);
  // After a Fit that succeeded: what the chosen devices add to the node score
  // (FitRules::vendor_score_together). Higher is better under either policy: spread subtracts it.
  double AllocationScore() const { return allocation_score_; }
  // After a Fit that succeeded: how well the chosen devices pack (FitRules::vendor_score), added to the
  // node score as it is (binpack takes the highest, spread the lowest).
  double PackingScore() const { return packing_score_; }
  // How many copies of the pod fit `node` one after another (each fit against the usage the ones before it
  // leave), counting up to `limit`.
  int Capacity(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& node, int limit);
  // Whether the pod would fit `node` were every pod gone from it (its devices idle, no vendor closed by a
  // pod's unreadable allocation): false when no pod leaving the node can make room (a type or UUID it
  // refuses, cards too few or too small, unhealthy).
  // `ctx` counts no quota (a quota is the namespace's, not the node's).
  bool FitsIdle(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& node);
  // Whether the pod fits `node` with `usage` and `mig` as its usage (the node's, with pods fitted before
  // added); on success the pod's app containers are added to them.
  bool FitOnto(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& node,
               std::vector<DeviceUsage>& usage, std::vector<std::vector<MigInUse>>& mig);

 private:
  struct Pick {
    int device = 0;
    MiB mem;
    Cores cores;
    std::optional<MigSlot> mig;
  };
  using ContainerPicks = std::vector<Pick>;

  // Fit against `base` (and `base_mig`) instead of the node's recorded usage; on success app_usage_ (and
  // app_mig_) hold the usage with the pod's app containers added.
  bool FitFrom(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& node,
               const std::vector<DeviceUsage>& base, const std::vector<std::vector<MigInUse>>& base_mig,
               PodDevices* out, std::string* reason);

  bool FitRequest(const PodContext& ctx, const NodeEntry& node, int backend, const DeviceRequest& request,
                  std::size_t container, const std::vector<std::vector<ContainerPicks>>& allocated,
                  std::vector<DeviceUsage>& usage, std::vector<std::vector<MigInUse>>& mig,
                  ContainerPicks& picks, std::string* reason);
  bool QuotaAllows(const PodContext& ctx, const NodeEntry& node, int backend, std::size_t container,
                   const std::vector<std::vector<ContainerPicks>>& allocated, const ContainerPicks& tmp,
                   const Pick& candidate) const;
  std::optional<MigSlot> ChooseMigSlot(const NodeEntry& node, int device, MiB memreq,
                                       const std::vector<MigInUse>& in_use, const ContainerPicks& tmp) const;
  void ChooseTopology(const NodeEntry& node, std::int32_t want, ContainerPicks& picks) const;
  void ChooseNetworkGroups(const NodeEntry& node, std::int32_t want, ContainerPicks& picks) const;
  // Whole modules of two cards until at least `want` are taken (fewer when not enough are complete).
  void ChooseModulePairs(const NodeEntry& node, std::int32_t want, ContainerPicks& picks) const;
  // The backend's ChooseCards over the candidates in `picks`; false when it chose none.
  bool ChooseByVendor(const PodContext& ctx, const NodeEntry& node, int backend, const DeviceRequest& request,
                      ContainerPicks& picks);
  double VendorScore(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& node,
                     std::size_t backend, const std::vector<DeviceUsage>& base);

  const Backends* backends_;
  const QuotaBook* quotas_;
  // Scratch, reused between calls.
  std::vector<DeviceUsage> app_usage_, init_usage_;
  std::vector<std::vector<MigInUse>> app_mig_, init_mig_;
  std::vector<DeviceUsage> capacity_usage_;  // Capacity(): the usage the next copy is fit against
  std::vector<DeviceUsage> idle_usage_;      // FitsIdle(): every device idle
  std::vector<std::vector<MigInUse>> idle_mig_;
  bool ignore_blocks_ = false;               // FitsIdle(): as if the pods that close vendors were gone
  std::vector<std::vector<MigInUse>> capacity_mig_;
  std::vector<DeviceOrder::Item> items_;
  std::vector<std::vector<ContainerPicks>> allocated_;  // [backend][container], sized for asked_ only
  std::vector<std::size_t> asked_;                      // the backends the pod asks for
  std::vector<const DeviceInfo*> candidates_;           // ChooseByVendor's
  std::vector<const CardClasses*> candidate_classes_;   // ChooseByVendor's
  std::vector<const DeviceRequest*> requests_;          // VendorScore's, per container
  std::vector<int> chosen_;                             // VendorScore's
  std::vector<std::vector<int>> chosen_per_container_;  // VendorScore's, per container
  double allocation_score_ = 0;
  double packing_score_ = 0;
};

}  // namespace hami
