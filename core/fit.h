#pragma once
// The fit engine: whether a pod fits a node, on which cards, with what score, and, when asked, which check
// refused each card and by how much it missed. Every decision that asks "does it fit" asks it here (/filter,
// `simulate`, the requeue's what-ifs): nothing else decides a fit.
//
// It follows upstream's check order and reason names (docs/DECISIONS.md, "The fit keeps HAMi's check order
// and reasons") and is deterministic. It reads ClusterState and never changes it: a what-if (some pods gone
// from the node, or others added) is an overlay the engine applies to its own copy of the node's few usage
// counters. Scratch buffers are reused between nodes, so a decision over thousands of nodes allocates little.
//
// Per request, the cards of the asked vendor are ordered by the pod's policy and tried one by one through
// the card checks in HAMi's order (docs/ARCHITECTURE.md, "The fit engine"); the vendor's hooks
// (BackendHooks) join the shared checks where the vendor overrides them, and a vendor that places several
// cards itself (Backend::ChooseCards) chooses among every card that passed.
#include <array>
#include <cstdint>
#include <optional>
#include <span>
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
  bool spread = false;  // the node policy is spread
  struct Vendor {
    Selector uuids;
    Selector alt_uuids;  // BackendKeys::use_uuid_alt / nouse_uuid_alt
    Selector types;
    std::optional<std::string> mode_filter;
    bool numa_bind = false;
    bool soft_split = false;  // the pod asks for the vendor's soft-split mode (FitRules::soft_split)
    DeviceOrder order{"spread", false};
    std::uint8_t pod_class = 0;  // Backend::PodClass
    // Backend::ChoosesCards' answer for requests of `chooses_for` cards, asked once per decision.
    mutable std::int32_t chooses_for = -1;
    mutable bool chooses = false;
  };
  std::vector<Vendor> vendors;  // per backend
};
// Reads the pod's policy annotations; an invalid hami.io/device-scoring-weights is an error.
Result<PodContext> MakePodContext(const PodView& pod, const Backends& backends, const QuotaBook& quotas,
                                  std::string_view default_gpu_policy);

// A what-if: the node's usage as the ledger has it, with the charges of `without` taken away (pods that
// would leave it, e.g. a preemption's victims) and those of `with` added (pods placed on it first). Pods
// charged to another node change nothing.
struct UsageOverlay {
  std::span<const PodAllocation* const> without;
  std::span<const PodAllocation* const> with;
};

// One card's first refusal for one request, and how far it was from fitting: `short_by` is the MiB missing
// for memory, the cores missing for cores, the slots missing for a card shared by as many tasks as it
// takes; 0 for a refusal that no amount of room lifts (a type, a UUID, health, a policy).
struct CardRefusal {
  std::size_t container = 0;  // init containers first
  int backend = 0;            // index into Backends
  int device = 0;             // index into NodeEntry::devices
  Reason reason = Reason::kCount;
  std::int64_t short_by = 0;
};

class FitEngine {
 public:
  FitEngine(const Backends& backends, const QuotaBook& quotas) : backends_(&backends), quotas_(&quotas) {}

  // Whether the pod fits `node` against its usage in the ledger. On success and when `out` is given, fills
  // the per-vendor, per-container devices (index-aligned with the pod's containers), and Score() says how
  // the node ranks. On failure `reason` says why, as HAMi words it.
  bool Fit(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& node, PodDevices* out,
           std::string* reason);
  // The same against the node's usage changed by `overlay` (nothing in the ledger changes).
  bool FitWith(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& node,
               const UsageOverlay& overlay, PodDevices* out, std::string* reason);
  // The same against `usage`: the node's counters as a caller changed them (a what-if built up pod by pod
  // with ApplyCharges, each step one pod's charges, rather than an overlay applied anew for every fit).
  bool FitAgainst(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& node,
                  const NodeUsage& usage, PodDevices* out, std::string* reason);
  // After a fit that succeeded: the node's score for the pod's node policy (higher ranks first under
  // binpack, lower under spread): the node's usage, the vendor's packing score, and its together-score
  // (FitRules::vendor_score_together), which counts for either policy.
  double Score() const { return score_; }
  // How many copies of the pod fit `node` one after another (each fit against the usage the ones before it
  // leave), counting up to `limit`.
  int Capacity(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& node, int limit);
  // Whether the pod would fit `node` were every pod gone from it (its devices idle, no vendor closed by a
  // pod's unreadable allocation): false when no pod leaving the node can make room (a type or UUID it
  // refuses, cards too few or too small, unhealthy). `ctx` counts no quota (a quota is the namespace's).
  bool FitsIdle(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& node);
  // Whether the pod fits `node` with `usage` and `mig` as its usage (the node's, with pods fitted before
  // added); on success the pod's app containers are added to them.
  bool FitOnto(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& node,
               std::vector<DeviceUsage>& usage, std::vector<std::vector<MigInUse>>& mig);

  // The entry a fit of `reqs` on `node` reads: the cluster's pool (NodeEntry::pool) for a pod asking for pool
  // vendors only (BackendSpec::pool) on a client node; the node itself otherwise. Its devices are what a
  // fit's positions (CardRefusal::device) and the pod's cards index. Fit, FitWith, Capacity and FitsIdle
  // read it; FitAgainst and FitOnto take the usage of the entry they are given, which is the one they fit.
  const NodeEntry& Target(const NodeEntry& node, const PodRequests& reqs) const;

  // While set, every fit records each card's first refusal here (cleared at the start of each fit); null:
  // nothing is recorded (the decision path).
  void TraceRefusals(std::vector<CardRefusal>* sink) { trace_ = sink; }

 private:
  struct Pick {
    int device = 0;
    MiB mem;
    Cores cores;
    std::optional<MigSlot> mig;
  };
  using ContainerPicks = std::vector<Pick>;
  // The usage a fit starts from: per device of the node (index-aligned with NodeEntry::devices).
  struct Base {
    const std::vector<DeviceUsage>* usage;
    const std::vector<std::vector<MigInUse>>* mig;
    const std::vector<CardClasses>* classes;
    const NodeTotals* totals;
  };
  struct Scan;  // one request's pass over its vendor's cards (fit.cc)

  bool FitFrom(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& node, const Base& base,
               PodDevices* out, std::string* reason);
  void NoteAsked(const PodRequests& reqs);
  bool PlaceContainers(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& node,
                       const Base& base, std::string* reason);
  void ScoreNode(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& node, const Base& base);
  void WriteDevices(const NodeEntry& node, std::size_t containers, PodDevices& out) const;

  // One request of one container: false (with `reason`) when the node's cards of its vendor cannot serve it.
  bool FitRequest(const PodContext& ctx, const NodeEntry& node, const Base& base, int backend,
                  const DeviceRequest& request, std::size_t container, std::vector<DeviceUsage>& usage,
                  std::vector<std::vector<MigInUse>>& mig, std::string* reason);
  // Whether no card of the node can serve the request (too few cards, a mode the node does not offer), and
  // then `reason`.
  bool RefuseRequest(const PodContext& ctx, const NodeEntry& node, int backend, const DeviceRequest& request,
                     std::string* reason) const;
  void OrderCards(const PodContext& ctx, const NodeEntry& node, int backend, const DeviceRequest& request,
                  const std::vector<DeviceUsage>& usage);
  // The card checks in HAMi's order for the card at `d`: nullopt and `pick` filled when it may be taken.
  std::optional<CardRefusal> FirstChecks(Scan& scan, std::size_t d) const;
  std::optional<CardRefusal> CardChecks(Scan& scan, std::size_t d, Pick& pick) const;
  std::optional<CardRefusal> SizeChecks(Scan& scan, std::size_t d, Pick& pick) const;
  bool Conclude(Scan& scan, std::string* reason);
  void Refused(Scan& scan, const CardRefusal& refusal);
  bool QuotaAllows(const Scan& scan, const Pick& candidate) const;
  std::optional<MigSlot> ChooseMigSlot(const NodeEntry& node, int device, MiB memreq,
                                       const std::vector<MigInUse>& in_use, const ContainerPicks& tmp) const;
  // The backend's ChooseCards over the candidates in `picks`.
  CardChoice ChooseByVendor(const Scan& scan);
  double VendorScore(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& node,
                     std::size_t backend, const Base& base);

  const Backends* backends_;
  const QuotaBook* quotas_;
  std::vector<CardRefusal>* trace_ = nullptr;
  // Scratch, reused between calls.
  std::vector<DeviceUsage> app_usage_, init_usage_;
  std::vector<std::vector<MigInUse>> app_mig_, init_mig_;
  std::vector<DeviceUsage> capacity_usage_;  // Capacity(): the usage the next copy is fit against
  std::vector<std::vector<MigInUse>> capacity_mig_;
  std::vector<DeviceUsage> idle_usage_;  // FitsIdle(): every device idle
  std::vector<std::vector<MigInUse>> idle_mig_;
  std::vector<CardClasses> idle_classes_;
  bool ignore_blocks_ = false;  // FitsIdle(): as if the pods that close vendors were gone
  // FitWith(): the node's usage with the overlay applied.
  std::vector<DeviceUsage> overlay_usage_;
  std::vector<std::vector<MigInUse>> overlay_mig_;
  std::vector<CardClasses> overlay_classes_;
  NodeTotals overlay_totals_;
  std::vector<DeviceOrder::Item> items_;
  std::vector<std::vector<ContainerPicks>> allocated_;  // [backend][container], sized for asked_ only
  std::vector<std::size_t> asked_;                      // the backends the pod asks for
  std::vector<const DeviceInfo*> candidates_;           // ChooseByVendor's
  std::vector<const CardClasses*> candidate_classes_;   // ChooseByVendor's
  std::vector<const DeviceRequest*> requests_;          // VendorScore's, per container
  std::vector<int> chosen_;                             // VendorScore's
  std::vector<std::vector<int>> chosen_per_container_;  // VendorScore's, per container
  double score_ = 0;
};

}  // namespace hami
