#pragma once
// kube-scheduler extender v1 wire types (k8s.io/kube-scheduler/extender/v1). The Go structs have no JSON
// tags: keys are read case-insensitively and written as the Go field names (PascalCase), every key present,
// null for unset pointers. Pure functions; the HTTP adapter that calls them is extender/http_routes.
#include <boost/json/value.hpp>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/model.h"
#include "core/result.h"
#include "core/scheduler.h"

namespace hami::k8s {

// Reading JSON the way Go's encoding/json does for these untagged types (both ends of the protocol use them).
// The value of `key` matched case-insensitively; an exact match wins. nullptr when absent.
const boost::json::value* FindKey(const boost::json::object& o, std::string_view key);
// `body` as a JSON object; errors name `what` ("ExtenderArgs: invalid JSON: ...", an empty body is "EOF").
Result<boost::json::object> ParseObject(std::string_view body, std::string_view what);
// A string field whose key is matched in any case (FindKey): "" when absent or null, an error naming
// `what`.`key` otherwise. (An AdmissionReview's fields are matched exactly: k8s/admission.cc.)
Result<std::string> StringFieldAnyCase(const boost::json::object& o, std::string_view key,
                                       std::string_view what);

struct ExtenderArgs {
  PodView pod;
  std::optional<std::vector<std::string>> node_names;  // nodeCacheCapable: true
  // nodeCacheCapable: false: the names of Nodes.items (the registry has the nodes themselves), and the items
  // as sent, to echo back.
  std::optional<std::vector<std::string>> nodes;
  std::vector<boost::json::value> nodes_json;
};
// Errors: invalid JSON names the decoder's message; a missing Pod is "extender args missing pod".
Result<ExtenderArgs> ParseExtenderArgs(std::string_view body);
// The candidate node names the request carries: NodeNames, or the names of Nodes.items (none: empty).
const std::vector<std::string>& CandidatesOf(const ExtenderArgs& args);
// The posted Nodes.items that `registered` does not know (Cluster Autoscaler's template nodes), read as
// nodes; an item that cannot be read is an error naming it. Only those are read: a kube-scheduler configured
// with nodeCacheCapable: false posts every node on every filter, and the registry has those already.
Result<std::vector<NodeView>> UnregisteredNodes(const ExtenderArgs& args,
                                                const std::function<bool(std::string_view)>& registered);

struct ExtenderFilterResult {
  std::optional<std::vector<boost::json::value>> nodes;  // NodeList items, for nodeCacheCapable: false
  std::optional<std::vector<std::string>> node_names;
  std::map<std::string, std::string> failed_nodes;
  std::map<std::string, std::string> failed_and_unresolvable;
  std::string error;
};
std::string ToJson(const ExtenderFilterResult& result);

// What kube-scheduler should hear for a decision: the chosen node, or in all-fitting mode every fitting node
// (NodeNames, or Nodes when the request carried Nodes), every rejected candidate with its reason unless a
// node was chosen, and "NodeNames": [] (not null) when none fits.
// A pod without device requests passes every candidate through.
ExtenderFilterResult ToFilterResult(const FilterOutcome& outcome, const ExtenderArgs& args);

// POST /prioritize's answer, HostPriorityList: [{"Host": node, "Score": 0..10}, ...].
std::string HostPriorityListJson(const std::vector<std::pair<std::string, int>>& scores);

// POST /preempt (ExtenderPreemptionArgs): the pod and, per candidate node, the victims kube-scheduler chose
// there (possibly none), by UID: NodeNameToMetaVictims (nodeCacheCapable: true) or the UIDs of
// NodeNameToVictims' full pods (false).
struct ExtenderPreemptionArgs {
  PodView pod;
  std::map<std::string, std::vector<std::string>> victims;  // node -> victim UIDs
  std::map<std::string, std::int64_t> pdb_violations;        // node -> NumPDBViolations as sent
};
// Errors name the field; a pod, node name or UID the API server would not accept is refused.
Result<ExtenderPreemptionArgs> ParsePreemptionArgs(std::string_view body);

// ExtenderPreemptionResult: NodeNameToMetaVictims for the nodes where preemption helps.
struct MetaVictims {
  std::vector<std::string> uids;  // most important first (kube-scheduler reads the first as the highest)
  std::int64_t pdb_violations = 0;
};
std::string ToJson(const std::map<std::string, MetaVictims>& result);

struct ExtenderBindingArgs {
  std::string pod_name;
  std::string pod_namespace;
  std::string pod_uid;
  std::string node;
};
Result<ExtenderBindingArgs> ParseBindingArgs(std::string_view body);
std::string BindingResultJson(std::string_view error);

}  // namespace hami::k8s
