#pragma once
// The health pass (docs/DECISIONS.md, "HAMi's protocol"), every --health-check-interval: asks each node's
// device plugins for a handshake, withholds a vendor's devices from a node whose plugin stopped answering,
// gives them back when it answers again. The decision per node is core's (NodeHealthPass; `simulate` runs
// the same one); this service keeps the per-node records and carries the effects out (background writes).
#include <chrono>
#include <cstddef>
#include <map>
#include <string>
#include <unordered_map>

#include "core/cluster_state.h"
#include "core/health.h"
#include "extender/cluster_writer.h"
#include "k8s/metrics.h"
#include "k8s/waits.h"

namespace hami::extender {

class HealthService {
 public:
  // `decided` (optional) is notified once each pass has decided (before its writes): readiness waits on it.
  HealthService(const Backends& backends, ClusterWriter& writer, const Clock& clock,
                std::chrono::seconds handshake_timeout, k8s::Signal* decided = nullptr);

  // One pass over `nodes` (the node cache); the registry loses or regains vendors' devices in `state`.
  boost::asio::awaitable<void> Pass(const std::map<std::string, NodeView>& nodes, ClusterState& state);
  // Withholds the devices of vendors the last pass found unhealthy on `node` (after a registry update).
  void ApplyMask(const std::string& node, ClusterState& state) const;
  // A deleted node: one re-created under the same name starts clean.
  void Forget(const std::string& node) { records_.erase(node); }

  struct Stats {
    std::size_t passes = 0;
    std::size_t handshake_patches = 0;  // Requesting_ handshakes written
    std::size_t cleanups = 0;           // times a vendor's devices were withheld from a node
  };
  const Stats& stats() const { return stats_; }
  void WriteMetrics(k8s::prom::TextWriter& w) const;

 private:
  const Backends* backends_;
  ClusterWriter* writer_;
  const Clock* clock_;
  std::chrono::seconds handshake_timeout_;
  k8s::Signal* decided_;
  std::unordered_map<std::string, NodeHealthRecord> records_;
  Stats stats_;
};

}  // namespace hami::extender
