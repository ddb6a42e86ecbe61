#pragma once
// The read-only JSON of the metrics listener's /api/ about the cluster's devices, from the registry and
// the ledger as they are (no API request): GET /api/overview (per vendor) and GET /api/nodes (per node and
// card). Names are JSON strings: whoever shows them escapes them for its own medium.
#include <string>

#include "core/cluster_state.h"

namespace hami::extender {

// {"nodes": N, "pods": N, "vendors": [{"vendor", "nodes", "nodesBlocked", "devices", "devicesUnhealthy",
//  "memoryMiB": {"used", "total"}, "cores": {"used", "total"}, "tasks": {"used", "total"}, "pods",
//  "podsWaiting"}]}: "pods" hold devices of the vendor, "podsWaiting" wait for a decision asking for it.
std::string OverviewJson(const ClusterState& state);

// {"nodes": [{"node", "allocationsInFlight", "blocked": {vendor: why}, "largestFreeMiB": {vendor: MiB},
//  "cards": [{"id", "vendor", "type", "numa", "health", "memoryMiB": {"used", "total"},
//  "cores": {"used", "total"}, "tasks": {"used", "total"}}]}]}, nodes by name. "largestFreeMiB": the most
//  memory free on one healthy card of the vendor that can take one more task.
std::string NodesJson(const ClusterState& state);

// {"quotas": [{"namespace", "resource", "used", "limit"}]}: per namespace and device resource, what the
// ledger charges (memory in MiB, cores in percent) against the tightest ResourceQuota limit (null: none).
std::string QuotasJson(const ClusterState& state);

}  // namespace hami::extender
