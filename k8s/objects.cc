#include "k8s/objects.h"

#include <fmt/format.h>

#include <boost/json.hpp>
#include <limits>

#include "core/keys.h"
#include "k8s/logging.h"
#include "k8s/yaml_json.h"

namespace hami::k8s {
namespace json = boost::json;
namespace {

// Walks an object tree with the path of where it is, so every error says which field was wrong.
class Reader {
 public:
  Reader(std::string object, const json::value& root) : object_(std::move(object)), root_(&root) {}

  Error Fail(std::string_view path, std::string_view what) const {
    return Error{fmt::format("{}: {}: {}", object_, path, what)};
  }

  // The object at `path` (dot-separated keys); nullptr when any step is absent or null.
  const json::value* Find(const json::value& from, std::string_view path) const {
    const json::value* cur = &from;
    std::size_t start = 0;
    while (start <= path.size()) {
      const std::size_t dot = path.find('.', start);
      const std::string_view key =
          path.substr(start, dot == std::string_view::npos ? path.npos : dot - start);
      if (!cur->is_object()) return nullptr;
      const json::value* next = cur->get_object().if_contains(key);
      if (next == nullptr || next->is_null()) return nullptr;
      cur = next;
      if (dot == std::string_view::npos) break;
      start = dot + 1;
    }
    return cur;
  }

  Result<std::string> String(const json::value& from, std::string_view path, std::string_view shown) const {
    const json::value* v = Find(from, path);
    if (v == nullptr) return Ok(std::string());
    if (!v->is_string()) return Fail(shown, fmt::format("expected a string, got {}", json::serialize(*v)));
    return Ok(std::string(v->get_string()));
  }

  // A map of strings; scalar numbers and booleans are accepted as their text (YAML input may carry them).
  Result<StringMap> Map(const json::value& from, std::string_view path, std::string_view shown) const {
    StringMap out;
    const json::value* v = Find(from, path);
    if (v == nullptr) return out;
    if (!v->is_object()) return Fail(shown, fmt::format("expected an object, got {}", json::serialize(*v)));
    for (const auto& kv : v->get_object()) {
      const json::value& val = kv.value();
      if (val.is_string()) {
        out.emplace(std::string(kv.key()), std::string(val.get_string()));
      } else if (val.is_int64() || val.is_uint64() || val.is_double() || val.is_bool()) {
        out.emplace(std::string(kv.key()), json::serialize(val));
      } else if (val.is_null()) {
        out.emplace(std::string(kv.key()), std::string());
      } else {
        return Fail(fmt::format("{}[\"{}\"]", shown, std::string_view(kv.key())),
                    fmt::format("expected a string, got {}", json::serialize(val)));
      }
    }
    return out;
  }

  const json::value& root() const { return *root_; }

 private:
  std::string object_;
  const json::value* root_;
};

std::string ObjectName(const json::value& v, std::string_view kind, bool namespaced) {
  std::string ns, name;
  if (v.is_object()) {
    if (const auto* md = v.get_object().if_contains("metadata"); md && md->is_object()) {
      if (const auto* n = md->get_object().if_contains("name"); n && n->is_string()) name = n->get_string();
      if (const auto* n = md->get_object().if_contains("namespace"); n && n->is_string())
        ns = n->get_string();
    }
  }
  if (namespaced)
    return fmt::format("{} {}/{}", kind, ns.empty() ? "default" : ns, name.empty() ? "?" : name);
  return fmt::format("{} {}", kind, name.empty() ? "?" : name);
}

Result<ContainerView> ContainerFromJson(const Reader& r, const json::value& c, const std::string& at) {
  ContainerView out;
  if (!c.is_object()) return r.Fail(at, "expected an object");
  auto name = r.String(c, "name", at + ".name");
  if (!name) return name.error();
  out.name = *name;
  auto limits = r.Map(c, "resources.limits", at + ".resources.limits");
  if (!limits) return limits.error();
  out.limits = std::move(*limits);
  auto requests = r.Map(c, "resources.requests", at + ".resources.requests");
  if (!requests) return requests.error();
  out.requests = std::move(*requests);
  if (const json::value* p = r.Find(c, "securityContext.privileged")) {
    if (!p->is_bool()) return r.Fail(at + ".securityContext.privileged", "expected true or false");
    out.privileged = p->get_bool();
  }
  if (const json::value* env = r.Find(c, "env")) {
    if (!env->is_array()) return r.Fail(at + ".env", "expected a list");
    for (const auto& e : env->get_array()) {
      auto en = r.String(e, "name", at + ".env[].name");
      if (!en) return en.error();
      auto ev = r.String(e, "value", at + ".env[].value");
      if (!ev) return ev.error();
      EnvVar var{*en, *ev, "", false};
      if (const json::value* from = r.Find(e, "valueFrom"); from != nullptr && !from->is_null()) {
        auto path = r.String(e, "valueFrom.fieldRef.fieldPath", at + ".env[].valueFrom.fieldRef.fieldPath");
        if (!path) return path.error();
        var.field_path = *path;
        var.other_source = path->empty();
      }
      out.env.push_back(std::move(var));
    }
  }
  if (const json::value* mounts = r.Find(c, "volumeMounts")) {
    if (!mounts->is_array()) return r.Fail(at + ".volumeMounts", "expected a list");
    for (const auto& m : mounts->get_array()) {
      auto mn = r.String(m, "name", at + ".volumeMounts[].name");
      if (!mn) return mn.error();
      out.volume_mounts.push_back(*mn);
    }
  }
  return out;
}

Result<std::vector<ContainerView>> Containers(const Reader& r, const json::value& pod,
                                              std::string_view field) {
  std::vector<ContainerView> out;
  const json::value* list = r.Find(pod, fmt::format("spec.{}", field));
  if (list == nullptr) return out;
  if (!list->is_array()) return r.Fail(fmt::format("spec.{}", field), "expected a list of containers");
  std::size_t i = 0;
  for (const auto& c : list->get_array()) {
    auto ctr = ContainerFromJson(r, c, fmt::format("spec.{}[{}]", field, i++));
    if (!ctr) return ctr.error();
    out.push_back(std::move(*ctr));
  }
  return out;
}

}  // namespace

Result<NodeView> NodeFromJson(const json::value& v) {
  Reader r(ObjectName(v, "Node", false), v);
  if (!v.is_object()) return r.Fail("(object)", "expected a JSON object");
  NodeView n;
  auto name = r.String(v, "metadata.name", "metadata.name");
  if (!name) return name.error();
  if (name->empty()) return r.Fail("metadata.name", "missing");
  n.name = *name;
  auto uid = r.String(v, "metadata.uid", "metadata.uid");
  if (!uid) return uid.error();
  n.uid = *uid;
  auto rv = r.String(v, "metadata.resourceVersion", "metadata.resourceVersion");
  if (!rv) return rv.error();
  n.resource_version = *rv;
  auto labels = r.Map(v, "metadata.labels", "metadata.labels");
  if (!labels) return labels.error();
  n.labels = std::move(*labels);
  auto annotations = r.Map(v, "metadata.annotations", "metadata.annotations");
  if (!annotations) return annotations.error();
  n.annotations = std::move(*annotations);
  auto capacity = r.Map(v, "status.capacity", "status.capacity");
  if (!capacity) return capacity.error();
  n.capacity = std::move(*capacity);
  auto allocatable = r.Map(v, "status.allocatable", "status.allocatable");
  if (!allocatable) return allocatable.error();
  n.allocatable = std::move(*allocatable);
  if (const json::value* addresses = r.Find(v, "status.addresses"); addresses && addresses->is_array()) {
    for (const json::value& a : addresses->get_array()) {
      const json::value* type = a.is_object() ? a.get_object().if_contains("type") : nullptr;
      const json::value* address = a.is_object() ? a.get_object().if_contains("address") : nullptr;
      if (type && address && type->is_string() && address->is_string() &&
          type->get_string() == "InternalIP") {
        n.internal_ip = std::string(address->get_string());
        break;
      }
    }
  }
  return n;
}

namespace {
// What kube-scheduler's queue reads of a pod: its gates, priority, nomination and PodScheduled condition.
Result<void> ReadSchedulingState(const Reader& r, const json::value& v, PodView& p) {
  if (const json::value* gates = r.Find(v, "spec.schedulingGates")) {
    if (!gates->is_array()) return r.Fail("spec.schedulingGates", "expected a list");
    p.scheduling_gated = !gates->get_array().empty();
  }
  if (const json::value* priority = r.Find(v, "spec.priority")) {
    if (!priority->is_int64() || priority->get_int64() < std::numeric_limits<std::int32_t>::min() ||
        priority->get_int64() > std::numeric_limits<std::int32_t>::max())
      return r.Fail("spec.priority", "expected a 32-bit integer");
    p.priority = static_cast<std::int32_t>(priority->get_int64());
  }
  // Only Never is read: a value a later Kubernetes adds preempts as the default does, and the pod stays in
  // the cache (a pod the cache refused would hold devices no one counts).
  auto policy = r.String(v, "spec.preemptionPolicy", "spec.preemptionPolicy");
  if (!policy) return policy.error();
  p.never_preempts = *policy == "Never";
  auto nominated = r.String(v, "status.nominatedNodeName", "status.nominatedNodeName");
  if (!nominated) return nominated.error();
  p.nominated_node_name = std::move(*nominated);
  const json::value* conditions = r.Find(v, "status.conditions");
  if (conditions == nullptr) return {};
  if (!conditions->is_array()) return r.Fail("status.conditions", "expected a list");
  for (const json::value& c : conditions->get_array()) {
    auto type = r.String(c, "type", "status.conditions[].type");
    if (!type) return type.error();
    if (*type != "PodScheduled") continue;
    SchedulingCondition& s = p.scheduled;
    for (auto [key, field] : {std::pair<std::string_view, std::string*>{"status", &s.status},
                              {"reason", &s.reason},
                              {"message", &s.message},
                              {"lastTransitionTime", &s.last_transition_time}}) {
      auto value = r.String(c, key, fmt::format("status.conditions[PodScheduled].{}", key));
      if (!value) return value.error();
      *field = std::move(*value);
    }
  }
  return {};
}

enum class PodName { kRequired, kOptional };
Result<PodView> ReadPod(const json::value& v, PodName name_rule) {
  Reader r(ObjectName(v, "Pod", true), v);
  if (!v.is_object()) return r.Fail("(object)", "expected a JSON object");
  PodView p;
  const auto str = [&](std::string_view path, std::string& out) -> Result<void> {
    auto s = r.String(v, path, path);
    if (!s) return s.error();
    out = std::move(*s);
    return {};
  };
  for (auto [path, field] : {std::pair<std::string_view, std::string*>{"metadata.name", &p.name},
                             {"metadata.namespace", &p.ns},
                             {"metadata.uid", &p.uid},
                             {"metadata.resourceVersion", &p.resource_version},
                             {"spec.nodeName", &p.node_name},
                             {"spec.schedulerName", &p.scheduler_name},
                             {"metadata.creationTimestamp", &p.created},
                             {"status.phase", &p.phase}}) {
    if (auto ok = str(path, *field); !ok) return ok.error();
  }
  if (p.name.empty() && name_rule == PodName::kRequired) return r.Fail("metadata.name", "missing");
  if (p.ns.empty()) p.ns = "default";
  if (const json::value* rc = r.Find(v, "spec.runtimeClassName")) {
    if (!rc->is_string()) return r.Fail("spec.runtimeClassName", "expected a string");
    p.runtime_class_name = std::string(rc->get_string());
  }
  p.terminating = r.Find(v, "metadata.deletionTimestamp") != nullptr;
  if (auto ok = ReadSchedulingState(r, v, p); !ok) return ok.error();
  auto labels = r.Map(v, "metadata.labels", "metadata.labels");
  if (!labels) return labels.error();
  p.labels = std::move(*labels);
  auto annotations = r.Map(v, "metadata.annotations", "metadata.annotations");
  if (!annotations) return annotations.error();
  p.annotations = std::move(*annotations);
  if (auto g = p.labels.find(keys::kPodGroupLabel); g != p.labels.end()) p.pod_group = g->second;
  if (p.pod_group.empty()) {
    auto g = r.String(v, "spec.schedulingGroup.podGroupName", "spec.schedulingGroup.podGroupName");
    if (!g) return g.error();
    p.pod_group = *g;
  }
  auto init = Containers(r, v, "initContainers");
  if (!init) return init.error();
  p.init_containers = std::move(*init);
  auto containers = Containers(r, v, "containers");
  if (!containers) return containers.error();
  p.containers = std::move(*containers);
  if (const json::value* volumes = r.Find(v, "spec.volumes")) {
    if (!volumes->is_array()) return r.Fail("spec.volumes", "expected a list");
    for (const auto& vol : volumes->get_array()) {
      auto name = r.String(vol, "name", "spec.volumes[].name");
      if (!name) return name.error();
      p.volumes.push_back(*name);
    }
  }
  if (const json::value* st = r.Find(v, "status.initContainerStatuses")) {
    if (!st->is_array()) return r.Fail("status.initContainerStatuses", "expected a list");
    for (const auto& s : st->get_array()) {
      ContainerStatusView cs;
      auto name = r.String(s, "name", "status.initContainerStatuses[].name");
      if (!name) return name.error();
      cs.name = *name;
      if (const json::value* t = r.Find(s, "state.terminated")) {
        cs.terminated = true;
        if (const json::value* code = r.Find(*t, "exitCode"); code && code->is_int64()) {
          cs.exit_code = static_cast<int>(code->get_int64());
        }
      }
      p.init_container_statuses.push_back(std::move(cs));
    }
  }
  return p;
}
}  // namespace

Result<PodView> PodFromJson(const json::value& v) { return ReadPod(v, PodName::kRequired); }
Result<PodView> PodBeingCreatedFromJson(const json::value& v) { return ReadPod(v, PodName::kOptional); }

Result<LeaseView> LeaseFromJson(const json::value& v) {
  Reader r(ObjectName(v, "Lease", true), v);
  if (!v.is_object()) return r.Fail("(object)", "expected a JSON object");
  LeaseView l;
  for (auto [path, field] :
       {std::pair<std::string_view, std::string*>{"metadata.name", &l.name}, {"metadata.namespace", &l.ns}}) {
    auto s = r.String(v, path, path);
    if (!s) return s.error();
    *field = std::move(*s);
  }
  if (l.name.empty()) return r.Fail("metadata.name", "missing");
  if (const json::value* h = r.Find(v, "spec.holderIdentity")) {
    if (!h->is_string()) return r.Fail("spec.holderIdentity", "expected a string");
    l.holder_identity = std::string(h->get_string());
  }
  // int32s in the API: larger values would overflow the time arithmetic. A duration of zero or less is an
  // expired record (client-go takes such a Lease over), not an unreadable one.
  for (auto [path, field] : {std::pair<std::string_view, std::int64_t*>{"spec.leaseDurationSeconds",
                                                                        &l.lease_duration_seconds},
                             {"spec.leaseTransitions", &l.lease_transitions}}) {
    const json::value* d = r.Find(v, path);
    if (d == nullptr || d->is_null()) continue;
    if (!d->is_int64() || d->get_int64() < std::numeric_limits<std::int32_t>::min() ||
        d->get_int64() > std::numeric_limits<std::int32_t>::max())
      return r.Fail(path, "expected an int32");
    *field = d->get_int64();
  }
  for (auto [path, field] : {std::pair<std::string_view, std::string*>{"spec.acquireTime", &l.acquire_time},
                             {"spec.renewTime", &l.renew_time}}) {
    const json::value* t = r.Find(v, path);
    if (t == nullptr || t->is_null()) continue;
    // Kept as written: only compared. Whatever it holds, the term is timed on our own clock.
    *field = t->is_string() ? std::string(t->get_string()) : json::serialize(*t);
  }
  return l;
}

Result<ResourceQuotaView> ResourceQuotaFromJson(const json::value& v) {
  Reader r(ObjectName(v, "ResourceQuota", true), v);
  if (!v.is_object()) return r.Fail("(object)", "expected a JSON object");
  ResourceQuotaView q;
  auto name = r.String(v, "metadata.name", "metadata.name");
  if (!name) return name.error();
  q.name = *name;
  auto ns = r.String(v, "metadata.namespace", "metadata.namespace");
  if (!ns) return ns.error();
  q.ns = ns->empty() ? "default" : *ns;
  auto hard = r.Map(v, "spec.hard", "spec.hard");
  if (!hard) return hard.error();
  q.hard = std::move(*hard);
  return q;
}

namespace {

Result<LabelSelector> SelectorFromJson(const Reader& r, const json::value& v, std::string_view at) {
  LabelSelector out;
  auto labels = r.Map(v, "matchLabels", fmt::format("{}.matchLabels", at));
  if (!labels) return labels.error();
  out.match_labels = std::move(*labels);
  const json::value* expressions = r.Find(v, "matchExpressions");
  if (expressions == nullptr) return out;
  const std::string where = fmt::format("{}.matchExpressions", at);
  if (!expressions->is_array()) return r.Fail(where, "expected a list");
  for (const json::value& e : expressions->get_array()) {
    using Op = LabelSelector::Requirement::Op;
    LabelSelector::Requirement req;
    auto key = r.String(e, "key", where + "[].key");
    if (!key) return key.error();
    if (key->empty()) return r.Fail(where + "[].key", "missing");
    req.key = std::move(*key);
    auto op = r.String(e, "operator", where + "[].operator");
    if (!op) return op.error();
    if (*op == "In") req.op = Op::kIn;
    else if (*op == "NotIn") req.op = Op::kNotIn;
    else if (*op == "Exists") req.op = Op::kExists;
    else if (*op == "DoesNotExist") req.op = Op::kDoesNotExist;
    else
      return r.Fail(where + "[].operator",
                    fmt::format("expected In, NotIn, Exists or DoesNotExist, got \"{}\"", EscapeControlChars(*op)));
    if (const json::value* values = r.Find(e, "values")) {
      if (!values->is_array()) return r.Fail(where + "[].values", "expected a list of strings");
      for (const json::value& value : values->get_array()) {
        if (!value.is_string()) return r.Fail(where + "[].values", "expected a list of strings");
        req.values.emplace_back(value.get_string());
      }
    }
    out.expressions.push_back(std::move(req));
  }
  return out;
}

}  // namespace

Result<DisruptionBudgetView> DisruptionBudgetFromJson(const json::value& v) {
  Reader r(ObjectName(v, "PodDisruptionBudget", true), v);
  if (!v.is_object()) return r.Fail("(object)", "expected a JSON object");
  DisruptionBudgetView b;
  auto name = r.String(v, "metadata.name", "metadata.name");
  if (!name) return name.error();
  b.name = *name;
  auto ns = r.String(v, "metadata.namespace", "metadata.namespace");
  if (!ns) return ns.error();
  b.ns = ns->empty() ? "default" : *ns;
  if (const json::value* selector = r.Find(v, "spec.selector")) {
    if (!selector->is_object()) return r.Fail("spec.selector", "expected an object");
    auto read = SelectorFromJson(r, *selector, "spec.selector");
    if (!read) return read.error();
    b.selector = std::move(*read);
  }
  if (const json::value* allowed = r.Find(v, "status.disruptionsAllowed")) {
    if (!allowed->is_int64() || allowed->get_int64() < std::numeric_limits<std::int32_t>::min() ||
        allowed->get_int64() > std::numeric_limits<std::int32_t>::max())
      return r.Fail("status.disruptionsAllowed", "expected a 32-bit integer");
    b.disruptions_allowed = static_cast<std::int32_t>(allowed->get_int64());
  }
  auto disrupted = r.Map(v, "status.disruptedPods", "status.disruptedPods");
  if (!disrupted) return disrupted.error();
  for (auto& [pod, since] : *disrupted) b.disrupted_pods.push_back(pod);  // a std::map: sorted
  return b;
}

Result<void> CollectObjects(const json::value& document, std::string_view source, ObjectSet& out) {
  if (!document.is_object()) return Error{fmt::format("{}: expected a Kubernetes object or List", source)};
  const auto& o = document.get_object();
  std::string kind;
  if (const auto* k = o.if_contains("kind"); k && k->is_string()) kind = k->get_string();
  if (const auto* items = o.if_contains("items");
      items != nullptr && (kind.empty() || kind.ends_with("List"))) {
    if (!items->is_array()) return Error{fmt::format("{}: {}.items: expected a list", source, kind)};
    std::string item_kind = kind.size() > 4 && kind != "List" ? kind.substr(0, kind.size() - 4) : "";
    std::size_t i = 0;
    for (const auto& item : items->get_array()) {
      json::value copy = item;
      if (copy.is_object() && !copy.get_object().contains("kind") && !item_kind.empty()) {
        copy.get_object()["kind"] = item_kind;
      }
      if (auto ok = CollectObjects(copy, fmt::format("{} items[{}]", source, i++), out); !ok) return ok;
    }
    return {};
  }
  if (kind == "Node") {
    auto n = NodeFromJson(document);
    if (!n) return Error{fmt::format("{}: {}", source, n.error().message)};
    out.nodes.push_back(std::move(*n));
  } else if (kind == "Pod") {
    auto p = PodFromJson(document);
    if (!p) return Error{fmt::format("{}: {}", source, p.error().message)};
    out.pods.push_back(std::move(*p));
  } else if (kind == "ResourceQuota") {
    auto q = ResourceQuotaFromJson(document);
    if (!q) return Error{fmt::format("{}: {}", source, q.error().message)};
    out.quotas.push_back(std::move(*q));
  } else if (kind == "PodDisruptionBudget") {
    auto b = DisruptionBudgetFromJson(document);
    if (!b) return Error{fmt::format("{}: {}", source, b.error().message)};
    out.budgets.push_back(std::move(*b));
  } else if (kind.empty()) {
    return Error{fmt::format(
        "{}: object has no \"kind\" (want Node, Pod, ResourceQuota, PodDisruptionBudget or a List of them)",
        source)};
  } else {
    out.skipped.push_back(ObjectName(document, kind, true));
  }
  return {};
}

Result<std::vector<json::value>> ParseDocuments(std::string_view text, std::string_view source) {
  std::size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && (text[first] == '{' || text[first] == '[')) {
    boost::system::error_code ec;
    json::stream_parser p;
    std::size_t used = 0;
    std::vector<json::value> out;
    // A stream of JSON values (kubectl prints one object per `get` with several resources only as a List,
    // but concatenated objects are accepted too).
    while (first != std::string_view::npos) {
      p.reset();
      used = p.write_some(text.substr(first), ec);
      if (ec) {
        return Error{fmt::format("{}: not valid JSON at byte {}: {}", source, first + used, ec.message())};
      }
      if (!p.done()) {
        p.finish(ec);
        if (ec) return Error{fmt::format("{}: JSON ends early (truncated?): {}", source, ec.message())};
      }
      out.push_back(p.release());
      first = text.find_first_not_of(" \t\r\n", first + used);
    }
    return out;
  }
  return YamlToJson(text, source);
}

}  // namespace hami::k8s
