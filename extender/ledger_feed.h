#pragma once
// Watch events -> the node registry and the usage ledger (core::ClusterState), which this service owns.
// Ledger rules (docs/DECISIONS.md, "The ledger" and "Fail closed"): a pod counts once our filter reserved
// devices for it, and once it is bound and its allocation annotations decode: on the node it is bound to
// only (never on another node they name), and only for the vendors it asks for; annotations of a pod nobody
// bound charge nothing. Succeeded/Failed and deleted pods release; terminating pods keep holding; after a
// restart the ledger is rebuilt from annotations alone. A bound pod whose allocation cannot be decoded (or
// names no device of a vendor it asks for) closes its node to new pods of those vendors until it reads or
// the pod is gone. Unreadable input is reported once: per node, vendor and value for device registrations
// (a warning event on the node), per pod and value for allocation annotations (a warning event on the node
// it runs on).
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/cluster_state.h"
#include "core/free_capacity.h"
#include "extender/cluster_writer.h"
#include "k8s/metrics.h"

namespace hami::extender {

class LedgerFeed {
 public:
  LedgerFeed(const Backends& backends, ClusterWriter& writer);

  ClusterState& state() { return state_; }
  const ClusterState& state() const { return state_; }

  // Stores the node and runs every backend's discovery on it; reports registrations that became unreadable.
  void UpsertNode(const NodeView& node);
  void RemoveNode(const std::string& name);
  // Records the allocation a pod's annotations carry (a pod with hami.io/vgpu-node that is neither finished
  // nor reserved by our filter); charges it only once the pod is bound.
  void RecordAllocation(const PodView& pod);
  // The pod carries no allocation (any more): a block its unreadable one caused is lifted.
  void ClearUnreadable(const std::string& uid);
  // A pod of ours (`ours`: its spec.schedulerName is the one we serve) that is not bound, finished or
  // terminating and asks for devices waits for a decision: the decision reads how many wait (a burst).
  void TrackWaiting(const PodView& pod, bool ours);
  void StopWaiting(const std::string& uid);  // the pod is gone
  // The pod's hold is released and what was reported about it forgotten (it may still wait: a released
  // reservation, a failed bind).
  void Forget(const std::string& uid);
  // The uids of ledger entries that `pods` (the pod cache, "ns/name" keys) no longer backs (the pod is gone,
  // or not bound and without an allocation) and that `reserved` does not claim.
  std::vector<std::string> Orphans(const std::map<std::string, PodView>& pods,
                                   const std::function<bool(const std::string& uid)>& reserved) const;

  // Node-vendor registrations that cannot be read now.
  std::size_t unreadable_registrations() const;
  // Bound pods whose allocation annotations cannot be read now (each closes its node to their vendors).
  std::size_t unreadable_allocations() const { return unreadable_.size(); }
  struct Stats {
    std::size_t annotation_errors = 0;    // pod events whose allocation annotations could not be decoded
    std::size_t registration_errors = 0;  // unreadable device registrations (once per node, vendor, value)
    std::size_t foreign_charges = 0;  // pod events whose allocation was not charged (other node, no request)
  };
  const Stats& stats() const { return stats_; }
  // The ledger's gauges: nodes, pods, unreadable registrations, HAMi's per-device, quota and per-pod
  // families with HAMi's names and labels (docs/DECISIONS.md, "Metrics under HAMi's names"; `legacy`:
  // HAMi's older names besides them), and the free capacity: each node's largest free slice per vendor and,
  // per shape of `shapes`, how many such pods fit on each node and in all, fit under the default device
  // policy `gpu_policy` (docs/DECISIONS.md, "Free capacity").
  void WriteMetrics(k8s::prom::TextWriter& w, bool legacy, std::span<const CapacityShape> shapes = {},
                    std::string_view gpu_policy = kPolicySpread) const;

 private:
  struct UnreadableAllocation {
    std::string pod;   // "ns/name"
    std::string node;  // the pod's spec.nodeName
    std::vector<std::size_t> backends;
    std::string error;
  };
  void ReportRegistrationErrors(const NodeView& node);
  // The backends whose resources the pod asks for (nullopt: its requests cannot be read).
  std::optional<std::set<std::size_t>> AskedBackends(const PodView& pod) const;
  // Drops from the allocation what the ledger must not charge; the reason when something was dropped.
  std::optional<std::string> KeepChargeable(const PodView& pod,
                                            const std::optional<std::set<std::size_t>>& asked,
                                            PodAllocation& allocation) const;
  // The bound pod's allocation of `backends` cannot be read: its node takes no new pod of them.
  void MarkUnreadable(const PodView& pod, std::string error, std::vector<std::size_t> backends);
  void RefreshBlocks(const std::string& node);

  const Backends* backends_;
  ClusterWriter* writer_;
  ClusterState state_;
  std::unordered_set<std::string> annotation_warned_;  // pods whose unreadable annotations were logged
  std::unordered_set<std::string> foreign_warned_;     // pods whose allocation was not charged, logged
  std::unordered_map<std::string, UnreadableAllocation> unreadable_;  // uid -> bound, unreadable
  // node -> the registration error last reported per backend ("" = readable), for nodes with one.
  std::unordered_map<std::string, std::vector<std::string>> registration_errors_;
  Stats stats_;
};

}  // namespace hami::extender
