#pragma once
// The node registry and the usage ledger: every node's devices (all vendors) with their usage counters, and
// every pod that holds devices. Updated incrementally: adding or removing a pod touches only its devices;
// a node whose devices change has its usage re-applied from the pods on that node alone. Decisions read it,
// they never rebuild it.
//
// Thread rule: owned by the event loop; no locks.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "core/codec/pod_devices.h"
#include "core/model.h"
#include "core/policy.h"
#include "core/quota.h"

namespace hami {

struct MigInUse {
  std::string profile;
  MigPlacement placement;
};

// One node as the scheduler knows it. The fields the decision reads for every candidate come first, so
// that they share the cache lines of the registry's key (the rest is read only for the chosen node, for
// selectors, or off the decision path).
struct NodeEntry {
  // --- read for every candidate
  std::vector<DeviceCaps> caps;                   // per device: what the decision path reads, packed
  std::vector<DeviceUsage> usage;                 // per device
  std::vector<std::pair<int, int>> vendor_range;  // per backend: [begin, end) into devices
  NodeTotals totals;                              // capacity and usage sums for the node score
  // Pods charged here whose device plugin has not set them up yet (PodAllocation::in_flight): binds queued
  // on the node lock or allocating.
  int allocations_in_flight = 0;
  bool has_mig = false;
  // A client node of the cluster's pool (BackendSpec::pool): the pool's entry, whose cards and usage a fit of
  // pool vendors reads instead (FitEngine::Target); null on a pool server and when no vendor has a pool.
  const NodeEntry* pool = nullptr;
  // Per backend: why the node takes no new pod of that vendor ("" = it does); empty when nothing is blocked.
  std::vector<std::string> blocked;
  // --- read for the chosen node, for selectors, and off the decision path
  std::vector<DeviceInfo> devices;  // grouped by backend, in Backends order
  NodeView node;
  std::vector<int> backend_of;                    // per device: index into Backends
  std::vector<std::vector<MigInUse>> mig_in_use;  // per device; empty unless MIG instances are held
  std::vector<std::string> discovery_error;  // per backend: "" when discovery succeeded
  std::unordered_map<std::string, int> by_uuid;
  std::unordered_set<std::string> pods;  // uids of pods charged to this node
  int unknown_device_charges = 0;        // charges naming a UUID this node does not have
  std::vector<CardClasses> classes_in_use;  // per device: its holders by class (Backend::PodClass)

  bool HasDevices() const { return !caps.empty(); }
};

// A pod's hold on devices, as decided by filter or read back from its annotations.
struct PodAllocation {
  std::string uid;
  std::string ns;
  std::string name;
  std::string node;
  std::size_t num_init = 0;
  PodDevices devices;  // per vendor, per container
  std::vector<codec::MigAllocation> mig;
  // Per vendor that sorts pods into classes (Backend::PodClass) and whose devices the pod holds: the pod's
  // class, when not 0. Sorted by vendor.
  std::vector<std::pair<std::string, std::uint8_t>> classes;
  // Reserved or bound, and not yet set up by the device plugin (no hami.io/bind-phase success or failed).
  bool in_flight = true;
};

// What a pod's charges change on a node: per device (index-aligned with NodeEntry::devices) its usage, its
// MIG instances and its holders by class, and the node's totals. The ledger's own (ClusterState) or a
// what-if's copy of them (FitEngine::FitWith).
struct NodeUsage {
  std::vector<DeviceUsage>& usage;
  std::vector<std::vector<MigInUse>>& mig;
  std::vector<CardClasses>& classes;
  NodeTotals& totals;
};
// Adds (sign +1) or takes away (-1) the charges of `pod` on `node` (its devices by UUID) in `into`; returns
// how many of them name a card the node does not have (they change nothing).
int ApplyCharges(const NodeEntry& node, const PodAllocation& pod, int sign, NodeUsage into);
// The same with the pod's charges collapsed already (codec::CollapseDevices).
int ApplyCharges(const NodeEntry& node, const PodAllocation& pod, const std::vector<DeviceCharge>& charges,
                 int sign, NodeUsage into);

// Lets node lookups take a string_view without building a std::string.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

class ClusterState {
 public:
  explicit ClusterState(const Backends& backends);

  const Backends& backends() const { return *backends_; }
  QuotaBook& quotas() { return quotas_; }
  const QuotaBook& quotas() const { return quotas_; }
  // Grows with every change of the registry, the ledger, the nominations, the waiting pods or the quotas:
  // a reader that saw generation G has nothing new to read while it is still G (the /ui/ page's polls).
  std::uint64_t generation() const { return changes_ + quotas_.changes(); }

  // --- node registry -----------------------------------------------------------------------------------
  // Stores the node object and runs every backend's discovery on it. A vendor whose discovery fails keeps
  // the devices it had (the error is recorded); a vendor that now reports none loses them.
  void UpsertNode(const NodeView& node);
  // Drops one vendor's devices (health clean-up). The node stays known.
  void RemoveVendorDevices(std::string_view node, std::size_t backend);
  void RemoveNode(std::string_view node);
  // Closes (a non-empty reason) or opens each vendor of `node` to new pods: per backend, "" = open. Kept
  // across the node's removal and re-registration (the pods that cause a block outlive their node's entry).
  void SetVendorBlocks(const std::string& node, std::vector<std::string> reasons);
  const NodeEntry* FindNode(std::string_view node) const;
  std::vector<std::string> NodeNames() const;  // sorted
  std::size_t NodeCount() const { return nodes_.size(); }
  // The cluster's pool of the pool vendors (BackendSpec::pool): every server's cards, in server name order,
  // with their usage by pods on any node; null when no vendor has a pool.
  const NodeEntry* Pool() const { return pool_.get(); }
  // Nodes that have devices of `backend` (index into Backends).
  std::size_t NodesWith(std::size_t backend) const {
    return backend < nodes_with_.size() ? nodes_with_[backend] : 0;
  }

  // --- usage ledger --------------------------------------------------------------------------------------
  // Adds (or replaces) a pod's hold; returns false if an identical hold was already recorded (its in_flight
  // flag is updated all the same).
  bool AddPod(PodAllocation allocation);
  // Releases a pod's hold; returns the released allocation, if any.
  std::optional<PodAllocation> RemovePod(std::string_view uid);
  const PodAllocation* FindPod(std::string_view uid) const;
  std::size_t PodCount() const { return pods_.size(); }
  // Visits every pod charged to `node` with its charges (init containers collapsed), in no particular order.
  template <class F>
  void ForEachPodOn(const NodeEntry& node, F&& visit) const {
    for (const std::string& uid : node.pods) {
      if (auto it = pods_.find(uid); it != pods_.end()) visit(it->second.allocation, it->second.charges);
    }
  }
  // After all init containers finished: keep only what the app containers use.
  void ReleaseInitContainers(std::string_view uid);
  // Visits every recorded pod with its charges (init containers collapsed), in no particular order.
  template <class F>
  void ForEachPod(F&& visit) const {
    for (const auto& [uid, record] : pods_) visit(record.allocation, record.charges);
  }

  // --- nominated pods ------------------------------------------------------------------------------------
  // A pod kube-scheduler nominated to a node after a preemption (status.nominatedNodeName) holds the devices
  // it is to get there (`hold`, charged to `hold.node`) until it is bound, gone or nominated elsewhere: a
  // decision for a pod that does not outrank it counts them as taken, so that the devices its victims free
  // are not given away (docs/DECISIONS.md, "Preemption"). Replaces the pod's earlier nomination.
  void Nominate(std::int32_t priority, PodAllocation hold);
  void ClearNomination(const std::string& uid);
  bool HasNominations() const { return !nominated_.empty(); }
  // Appends to `out` the holds nominated to `node` that a decision for pod `uid` of `priority` must leave
  // alone: of other pods, with a priority not below it, and not charged in the ledger already (a decision
  // for the nominated pod charges it there).
  void NominatedHolds(std::string_view node, std::int32_t priority, std::string_view uid,
                      std::vector<const PodAllocation*>& out) const;
  // Visits every hold nominated to `node` and not charged in the ledger: f(priority, hold).
  template <class F>
  void ForEachNominated(std::string_view node, F&& visit) const {
    auto it = nominated_by_node_.find(node);
    if (it == nominated_by_node_.end()) return;
    for (const std::string& uid : it->second) {
      const Nominated& n = nominated_.at(uid);
      if (!pods_.contains(uid)) visit(n.priority, n.hold);
    }
  }
  // The pod's nomination hold; null when it has none.
  const PodAllocation* NominationOf(const std::string& uid) const;

  // --- what grew -----------------------------------------------------------------------------------------
  // Since the last call: the nodes where a hold was released or shrank, the nodes whose devices changed
  // (added, removed, healthy again, a vendor opened again: a pod that did not fit them even idle may now),
  // and the namespaces whose quota use fell. What the requeue of refused pods looks at; each a set, bounded
  // by the nodes and namespaces there are.
  struct Grown {
    std::set<std::string> freed;
    std::set<std::string> changed;
    std::set<std::string> namespaces;
    bool empty() const { return freed.empty() && changed.empty() && namespaces.empty(); }
  };
  Grown TakeGrown() { return std::exchange(grown_, Grown{}); }
  bool HasGrown() const { return !grown_.empty(); }

  // --- pods waiting for a decision -----------------------------------------------------------------------
  // Pods not bound yet that ask for devices of `backends` (indices into Backends). One counts as waiting
  // while the ledger holds nothing for it and its last decision found a node: the decision reads how many
  // wait (a burst in kube-scheduler's queue) to know which nodes binpack fills with them.
  void SetWaiting(const std::string& uid, std::vector<std::size_t> backends);
  // Bound, finished or gone: it waits no more.
  void ClearWaiting(const std::string& uid);
  // No candidate fitted it: it waits for the cluster to change, not for a node of this burst. It counts
  // again after a decision places it and that hold is released (a re-filter).
  void SetUnplaceable(const std::string& uid);
  // Pods that count as waiting and ask for devices of `backend`.
  std::size_t WaitingFor(std::size_t backend) const;
  // Per backend: the pods asking for its devices that no candidate fitted (SetUnplaceable) and that are not
  // charged since. A walk over the waiting pods.
  std::vector<std::size_t> UnplaceableByBackend() const;
  bool CountsAsWaiting(std::string_view uid) const;
  std::size_t WaitingPods() const { return waiting_.size(); }

 private:
  struct PodRecord {
    PodAllocation allocation;
    std::vector<DeviceCharge> charges;
    std::vector<DeviceCharge> quota;  // what the charges take from the namespace's quota (QuotaCharges)
    bool init_released = false;
    bool pool = false;  // some charges are a pool vendor's: they are the pool's, not the node's
  };
  bool IsPoolVendor(std::string_view vendor) const;
  // The node's discovery of pool vendor `b`: a server's cards become its part of the pool (an error keeps
  // the part it had and is the node's); true when its part changed.
  bool DiscoverPoolPart(NodeEntry& entry, std::size_t b, Result<std::vector<DeviceInfo>> discovered);
  bool IsPoolServer(const NodeView& node) const;
  void RebuildPool();
  void ApplyPool(const PodRecord& record, int sign);
  // The charges as the quota counts them: as charged, but the cores of a vendor whose core resource is a
  // share of a card's compute units (ResourceNames::cores_share_of_units) in percent of the card on `node`,
  // rounded up; a card the node does not list counts whole.
  std::vector<DeviceCharge> QuotaCharges(const std::vector<DeviceCharge>& charges,
                                         std::string_view node) const;
  void RebuildLayout(NodeEntry& entry, std::vector<std::vector<DeviceInfo>> per_backend);
  void ReapplyUsage(NodeEntry& entry);
  // Adds `sign` to nodes_with_ for every backend `entry` has devices of.
  void CountVendors(const NodeEntry& entry, int sign);
  void Apply(NodeEntry& entry, const PodRecord& record, int sign);

  const Backends* backends_;
  std::uint64_t changes_ = 0;  // generation(), less the quotas' changes
  Grown grown_;
  bool unit_shares_ = false;  // some backend's cores are shares of compute units (QuotaCharges converts)
  QuotaBook quotas_;
  std::unordered_map<std::string, NodeEntry, StringHash, std::equal_to<>> nodes_;
  std::unordered_map<std::string, PodRecord> pods_;
  std::unordered_map<std::string, std::unordered_set<std::string>> pods_by_node_;  // incl. unknown nodes
  std::unordered_map<std::string, std::vector<std::string>> blocks_;  // node -> NodeEntry::blocked
  std::vector<std::size_t> nodes_with_;                                // per backend: nodes with its devices
  std::vector<std::size_t> pool_backends_;  // the backends with a pool (BackendSpec::pool)
  std::unique_ptr<NodeEntry> pool_;         // their pool; null without one (a stable address for clients)
  // Per server node: its cards per backend (index-aligned with Backends; only pool backends' filled).
  std::map<std::string, std::vector<std::vector<DeviceInfo>>, std::less<>> pool_parts_;
  std::unordered_set<std::string> pool_pods_;  // uids of pods holding pool cards
  struct Waiting {
    std::vector<std::size_t> backends;
    bool unplaceable = false;
  };
  // Adds `sign` to the per-backend counts of `w` (a pod that counts as waiting).
  void CountWaiting(const Waiting& w, int sign);
  struct Nominated {
    std::int32_t priority = 0;
    PodAllocation hold;
  };
  std::unordered_map<std::string, Nominated> nominated_;  // by uid
  std::unordered_map<std::string, std::vector<std::string>, StringHash, std::equal_to<>>
      nominated_by_node_;  // node -> uids
  std::unordered_map<std::string, Waiting> waiting_;
  std::vector<std::size_t> waiting_count_;  // per backend: pods that count as waiting
};

// Reads a pod's allocation back from its annotations (hami.io/vgpu-node and every backend's allocated key).
// nullopt when the pod carries no hami.io/vgpu-node; an error names the annotation that cannot be decoded.
Result<std::optional<PodAllocation>> AllocationFromAnnotations(const PodView& pod, const Backends& backends);
// The hold of `pod` with `devices` on `node` (in flight: not yet set up by its device plugin).
PodAllocation AllocationOf(const PodView& pod, std::string node, PodDevices devices, const Backends& backends,
                           bool in_flight);
// The classes (Backend::PodClass) of `pod` for the vendors of `devices` that sort pods into classes, as
// PodAllocation::classes keeps them.
std::vector<std::pair<std::string, std::uint8_t>> PodClassesOf(const PodView& pod, const Backends& backends,
                                                               const PodDevices& devices);
// The backends whose part of the pod's allocation annotations cannot be decoded (indices into Backends);
// when the unreadable part names no backend (the MIG annotation), every backend whose allocation the pod
// carries, or every backend when it carries none.
std::vector<std::size_t> UnreadableAllocationBackends(const PodView& pod, const Backends& backends);

}  // namespace hami
