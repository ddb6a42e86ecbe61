#pragma once
// Watch events -> the node registry and the usage ledger (core::ClusterState), which this service owns.
// Ledger rules (reference/hami-scheduler.md §5, with upstream quirks 9 and 10 fixed): a pod counts once it
// carries hami.io/vgpu-node and its allocation annotations decode, or once our filter reserved devices for
// it; Succeeded/Failed and deleted pods release; terminating pods keep holding; after a restart the ledger
// is rebuilt from annotations alone. Unreadable input is reported once: per node, vendor and value for
// device registrations (a warning event on the node), per pod for allocation annotations.
#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/cluster_state.h"
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
  // nor reserved by our filter).
  void RecordAllocation(const PodView& pod);
  // The pod's hold is released and what was reported about it forgotten.
  void Forget(const std::string& uid);
  // The uids of ledger entries that `pods` (the pod cache, "ns/name" keys) no longer backs with an
  // allocation and that `reserved` does not claim.
  std::vector<std::string> Orphans(const std::map<std::string, PodView>& pods,
                                   const std::function<bool(const std::string& uid)>& reserved) const;

  // Node-vendor registrations that cannot be read now.
  std::size_t unreadable_registrations() const;
  struct Stats {
    std::size_t annotation_errors = 0;    // pod events whose allocation annotations could not be decoded
    std::size_t registration_errors = 0;  // unreadable device registrations (once per node, vendor, value)
  };
  const Stats& stats() const { return stats_; }
  // The ledger's gauges: nodes, pods, unreadable registrations, and HAMi's per-device, quota and per-pod
  // families with HAMi's names and labels (reference/hami-scheduler.md §8.3; `legacy`: HAMi's older names
  // besides them).
  void WriteMetrics(k8s::prom::TextWriter& w, bool legacy) const;

 private:
  void ReportRegistrationErrors(const NodeView& node);

  const Backends* backends_;
  ClusterWriter* writer_;
  ClusterState state_;
  std::unordered_set<std::string> annotation_warned_;  // pods whose unreadable annotations were logged
  // node -> the registration error last reported per backend ("" = readable), for nodes with one.
  std::unordered_map<std::string, std::vector<std::string>> registration_errors_;
  Stats stats_;
};

// The pod's key in the ledger: its uid, or "ns/name" for a pod without one.
inline std::string UidOf(const PodView& pod) { return pod.uid.empty() ? pod.Key() : pod.uid; }
// Succeeded or Failed: it holds nothing any more.
inline bool Finished(const PodView& pod) { return pod.phase == "Succeeded" || pod.phase == "Failed"; }

}  // namespace hami::extender
