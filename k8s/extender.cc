#include "k8s/extender.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <tuple>

#include "core/names.h"
#include "core/strings.h"
#include "k8s/objects.h"

namespace hami::k8s {
namespace json = boost::json;

const json::value* FindKey(const json::object& o, std::string_view key) {
  if (const auto* exact = o.if_contains(key)) return exact;
  for (const auto& kv : o) {
    if (EqualsIgnoreCase(kv.key(), key)) return &kv.value();
  }
  return nullptr;
}

namespace {

// A number too large for a double (1e400) parses as infinity, which no JSON text can carry: echoing it back
// would answer with a bare `Infinity`. Go's decoder refuses such numbers too.
bool HasNonFiniteNumber(const json::value& root) {
  std::vector<const json::value*> todo{&root};
  while (!todo.empty()) {
    const json::value* v = todo.back();
    todo.pop_back();
    if (v->is_double() && !std::isfinite(v->get_double())) return true;
    if (v->is_array()) {
      for (const auto& e : v->get_array()) todo.push_back(&e);
    } else if (v->is_object()) {
      for (const auto& kv : v->get_object()) todo.push_back(&kv.value());
    }
  }
  return false;
}

}  // namespace

Result<json::object> ParseObject(std::string_view body, std::string_view what) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec) return Error{fmt::format("{}: invalid JSON: {}", what, body.empty() ? "EOF" : ec.message())};
  if (!v.is_object()) return Error{fmt::format("{}: expected a JSON object", what)};
  if (HasNonFiniteNumber(v)) {
    return Error{fmt::format("{}: a number is out of range (larger than a 64-bit float can hold)", what)};
  }
  return std::move(v.get_object());
}

Result<std::string> StringFieldAnyCase(const json::object& o, std::string_view key,
                                       std::string_view what) {
  const json::value* v = FindKey(o, key);
  if (v == nullptr || v->is_null()) return Ok(std::string());
  if (!v->is_string()) return Error{fmt::format("{}.{}: expected a string", what, key)};
  return Ok(std::string(v->get_string()));
}

namespace {

json::value StringMap(const std::map<std::string, std::string>& m) {
  json::object o;
  for (const auto& [k, v] : m) o[k] = v;
  return o;
}

// A UID is echoed in errors and logs and keys the pod ledger: printable ASCII, as the API server's are.
bool IsUid(std::string_view uid) {
  return uid.size() <= 128 && std::all_of(uid.begin(), uid.end(), [](char c) {
           return c > ' ' && c < 0x7f && c != '/' && c != '\\' && c != '"';
         });
}

}  // namespace

Result<ExtenderArgs> ParseExtenderArgs(std::string_view body) {
  auto root = ParseObject(body, "ExtenderArgs");
  if (!root) return root.error();
  ExtenderArgs args;
  const json::value* pod = FindKey(*root, "Pod");
  if (pod == nullptr || pod->is_null()) return Error{"extender args missing pod"};
  auto view = PodFromJson(*pod);
  if (!view) return Error{fmt::format("ExtenderArgs.Pod: {}", view.error().message)};
  // The names go into API paths, annotations and logs: only what the API server itself accepts passes.
  if (auto ok = ValidateName("ExtenderArgs.Pod.metadata.namespace", view->ns, NameKind::kNamespace); !ok)
    return ok.error();
  if (auto ok = ValidateName("ExtenderArgs.Pod.metadata.name", view->name, NameKind::kPod); !ok)
    return ok.error();
  if (!IsUid(view->uid))
    return Error{fmt::format("ExtenderArgs.Pod.metadata.uid: {} is not a UID", Quoted(view->uid))};
  args.pod = std::move(*view);
  if (const json::value* names = FindKey(*root, "NodeNames"); names && !names->is_null()) {
    if (!names->is_array()) return Error{"ExtenderArgs.NodeNames: expected a list of node names"};
    args.node_names.emplace();
    for (const auto& n : names->get_array()) {
      if (!n.is_string()) return Error{"ExtenderArgs.NodeNames: every entry must be a string"};
      const std::string what = fmt::format("ExtenderArgs.NodeNames[{}]", args.node_names->size());
      if (auto ok = ValidateName(what, n.get_string(), NameKind::kNode); !ok) return ok.error();
      args.node_names->emplace_back(n.get_string());
    }
  }
  if (const json::value* nodes = FindKey(*root, "Nodes"); nodes && !nodes->is_null()) {
    const json::value* items = nodes->is_object() ? FindKey(nodes->get_object(), "items") : nullptr;
    if (items == nullptr || !(items->is_array() || items->is_null())) {
      return Error{"ExtenderArgs.Nodes: expected a NodeList with items"};
    }
    args.nodes.emplace();
    if (items->is_array()) {
      for (const auto& item : items->get_array()) {
        // Only the name is read: the decision uses the registry's node of that name.
        const std::string what =
            fmt::format("ExtenderArgs.Nodes.items[{}].metadata.name", args.nodes->size());
        const json::value* meta = item.is_object() ? item.get_object().if_contains("metadata") : nullptr;
        const json::value* name =
            meta && meta->is_object() ? meta->get_object().if_contains("name") : nullptr;
        if (name == nullptr || !name->is_string()) return Error{fmt::format("{}: expected a string", what)};
        if (auto ok = ValidateName(what, name->get_string(), NameKind::kNode); !ok) return ok.error();
        args.nodes->emplace_back(name->get_string());
        args.nodes_json.push_back(item);
      }
    }
  }
  return args;
}

namespace {

// One node's victims: a MetaVictims ({"Pods": [{"UID": ...}]}) or a Victims ({"Pods": [Pod objects]}).
Result<std::vector<std::string>> VictimUids(const json::value& victims, const std::string& what, bool meta,
                                            std::int64_t& pdb_violations) {
  if (victims.is_null()) return std::vector<std::string>{};
  if (!victims.is_object()) return Error{fmt::format("{}: expected an object with Pods", what)};
  if (const json::value* n = FindKey(victims.get_object(), "NumPDBViolations"); n && !n->is_null()) {
    if (!n->is_int64() || n->get_int64() < 0)
      return Error{fmt::format("{}.NumPDBViolations: expected a count", what)};
    pdb_violations = n->get_int64();
  }
  std::vector<std::string> uids;
  const json::value* pods = FindKey(victims.get_object(), "Pods");
  if (pods == nullptr || pods->is_null()) return uids;
  if (!pods->is_array()) return Error{fmt::format("{}.Pods: expected a list", what)};
  for (const json::value& p : pods->get_array()) {
    const std::string at = fmt::format("{}.Pods[{}]", what, uids.size());
    const json::value* uid = nullptr;
    if (meta) {
      uid = p.is_object() ? FindKey(p.get_object(), "UID") : nullptr;
    } else if (const json::value* md = p.is_object() ? p.get_object().if_contains("metadata") : nullptr;
               md != nullptr && md->is_object()) {
      uid = md->get_object().if_contains("uid");
    }
    const std::string field = meta ? at + ".UID" : at + ".metadata.uid";
    if (uid == nullptr || !uid->is_string()) return Error{fmt::format("{}: expected a string", field)};
    if (uid->get_string().empty() || !IsUid(uid->get_string()))
      return Error{fmt::format("{}: {} is not a UID", field, Quoted(uid->get_string()))};
    uids.emplace_back(uid->get_string());
  }
  return uids;
}

}  // namespace

Result<ExtenderPreemptionArgs> ParsePreemptionArgs(std::string_view body) {
  auto root = ParseObject(body, "ExtenderPreemptionArgs");
  if (!root) return root.error();
  ExtenderPreemptionArgs args;
  const json::value* pod = FindKey(*root, "Pod");
  if (pod == nullptr || pod->is_null()) return Error{"ExtenderPreemptionArgs: missing Pod"};
  auto view = PodFromJson(*pod);
  if (!view) return Error{fmt::format("ExtenderPreemptionArgs.Pod: {}", view.error().message)};
  if (auto ok = ValidateName("ExtenderPreemptionArgs.Pod.metadata.namespace", view->ns, NameKind::kNamespace);
      !ok)
    return ok.error();
  if (auto ok = ValidateName("ExtenderPreemptionArgs.Pod.metadata.name", view->name, NameKind::kPod); !ok)
    return ok.error();
  if (!IsUid(view->uid))
    return Error{fmt::format("ExtenderPreemptionArgs.Pod.metadata.uid: {} is not a UID", Quoted(view->uid))};
  args.pod = std::move(*view);
  // kube-scheduler fills one of the two maps (nodeCacheCapable decides which).
  for (const bool meta : {true, false}) {
    const std::string_view key = meta ? "NodeNameToMetaVictims" : "NodeNameToVictims";
    const json::value* map = FindKey(*root, key);
    if (map == nullptr || map->is_null()) continue;
    if (!map->is_object()) return Error{fmt::format("ExtenderPreemptionArgs.{}: expected an object", key)};
    for (const auto& kv : map->get_object()) {
      const std::string what = fmt::format("ExtenderPreemptionArgs.{}[{}]", key, Quoted(kv.key()));
      if (auto ok = ValidateName(what, kv.key(), NameKind::kNode); !ok) return ok.error();
      const std::string node(kv.key());
      if (args.victims.contains(node)) return Error{fmt::format("{}: the node is listed twice", what)};
      std::int64_t violations = 0;
      auto uids = VictimUids(kv.value(), what, meta, violations);
      if (!uids) return uids.error();
      args.victims.emplace(node, std::move(*uids));
      args.pdb_violations[node] = violations;
    }
  }
  return args;
}

std::string ToJson(const std::map<std::string, MetaVictims>& result) {
  json::object nodes;
  for (const auto& [node, victims] : result) {
    json::array pods;
    for (const std::string& uid : victims.uids) pods.push_back(json::object{{"UID", uid}});
    nodes[node] = json::object{{"Pods", std::move(pods)}, {"NumPDBViolations", victims.pdb_violations}};
  }
  return json::serialize(json::object{{"NodeNameToMetaVictims", std::move(nodes)}});
}

std::string ToJson(const ExtenderFilterResult& r) {
  json::object o;
  if (r.nodes) {
    json::array items(r.nodes->begin(), r.nodes->end());
    o["Nodes"] = json::object{{"metadata", json::object{}}, {"items", std::move(items)}};
  } else {
    o["Nodes"] = nullptr;
  }
  if (r.node_names) {
    json::array names;
    for (const auto& n : *r.node_names) names.emplace_back(n);
    o["NodeNames"] = std::move(names);
  } else {
    o["NodeNames"] = nullptr;
  }
  o["FailedNodes"] = StringMap(r.failed_nodes);
  o["FailedAndUnresolvableNodes"] = StringMap(r.failed_and_unresolvable);
  o["Error"] = r.error;
  return json::serialize(o);
}

const std::vector<std::string>& CandidatesOf(const ExtenderArgs& args) {
  static const std::vector<std::string> kNone;
  if (args.node_names) return *args.node_names;
  return args.nodes ? *args.nodes : kNone;
}

Result<std::vector<NodeView>> UnregisteredNodes(const ExtenderArgs& args,
                                                const std::function<bool(std::string_view)>& registered) {
  std::vector<NodeView> out;
  if (!args.nodes) return out;
  for (std::size_t i = 0; i < args.nodes->size(); ++i) {
    if (registered((*args.nodes)[i])) continue;
    auto node = NodeFromJson(args.nodes_json[i]);
    if (!node) return Error{fmt::format("ExtenderArgs.Nodes.items[{}]: {}", i, node.error().message)};
    out.push_back(std::move(*node));
  }
  return out;
}

ExtenderFilterResult ToFilterResult(const FilterOutcome& outcome, const ExtenderArgs& args) {
  ExtenderFilterResult r;
  const bool by_nodes = args.nodes.has_value();
  switch (outcome.kind) {
    case FilterOutcome::Kind::kError:
      r.error = outcome.error;
      return r;
    case FilterOutcome::Kind::kPassThrough:
      // Echo what came in, in the form it came in (upstream drops Nodes here).
      if (by_nodes) {
        r.nodes = args.nodes_json;
      } else {
        r.node_names = args.node_names.value_or(std::vector<std::string>{});
      }
      return r;
    case FilterOutcome::Kind::kScheduled:
    case FilterOutcome::Kind::kFitting:
    case FilterOutcome::Kind::kUnschedulable:
      break;
  }
  const bool scheduled = outcome.kind == FilterOutcome::Kind::kScheduled;
  // With a node chosen, kube-scheduler keeps only that node and never reads the reasons for the others (HAMi
  // sends none either); writing a reason per candidate would double the cost of a decision on large clusters.
  if (!scheduled) {
    // kube-scheduler's two kinds of refusal: a node where pods leaving could make room, and one where none
    // can (its preemption skips those).
    for (const auto& [node, reason] : outcome.failed_nodes)
      (outcome.unresolvable.contains(node) ? r.failed_and_unresolvable : r.failed_nodes)[node] = reason;
  }
  // The nodes that pass: the chosen one, or every fitting one (in the request's order).
  const auto passes = [&](const std::string& node) {
    if (scheduled) return node == outcome.node;
    return outcome.kind == FilterOutcome::Kind::kFitting &&
           std::find(outcome.fitting.begin(), outcome.fitting.end(), node) != outcome.fitting.end();
  };
  if (by_nodes) {
    r.nodes.emplace();
    for (std::size_t i = 0; i < args.nodes->size(); ++i) {
      if (passes((*args.nodes)[i])) r.nodes->push_back(args.nodes_json[i]);
    }
  } else if (outcome.kind == FilterOutcome::Kind::kFitting) {
    r.node_names = outcome.fitting;
  } else {
    r.node_names.emplace();
    if (scheduled) r.node_names->push_back(outcome.node);
  }
  return r;
}

std::string HostPriorityListJson(const std::vector<std::pair<std::string, int>>& scores) {
  json::array list;
  list.reserve(scores.size());
  for (const auto& [host, score] : scores) list.push_back(json::object{{"Host", host}, {"Score", score}});
  return json::serialize(list);
}

Result<ExtenderBindingArgs> ParseBindingArgs(std::string_view body) {
  auto root = ParseObject(body, "ExtenderBindingArgs");
  if (!root) return root.error();
  ExtenderBindingArgs a;
  for (auto [key, field] : {std::pair<std::string_view, std::string*>{"PodName", &a.pod_name},
                            {"PodNamespace", &a.pod_namespace},
                            {"PodUID", &a.pod_uid},
                            {"Node", &a.node}}) {
    auto v = StringFieldAnyCase(*root, key, "ExtenderBindingArgs");
    if (!v) return v.error();
    *field = std::move(*v);
  }
  if (a.pod_name.empty() || a.node.empty()) {
    return Error{"ExtenderBindingArgs: PodName and Node are required"};
  }
  if (a.pod_namespace.empty()) a.pod_namespace = "default";
  for (auto [what, value, kind] :
       {std::tuple{"ExtenderBindingArgs.PodNamespace", &a.pod_namespace, NameKind::kNamespace},
        std::tuple{"ExtenderBindingArgs.PodName", &a.pod_name, NameKind::kPod},
        std::tuple{"ExtenderBindingArgs.Node", &a.node, NameKind::kNode}}) {
    if (auto ok = ValidateName(what, *value, kind); !ok) return ok.error();
  }
  if (!IsUid(a.pod_uid))
    return Error{fmt::format("ExtenderBindingArgs.PodUID: {} is not a UID", Quoted(a.pod_uid))};
  return a;
}

std::string BindingResultJson(std::string_view error) {
  return json::serialize(json::object{{"Error", error}});
}

}  // namespace hami::k8s
