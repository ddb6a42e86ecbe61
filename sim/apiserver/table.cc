#include "sim/apiserver/table.h"

#include <fmt/format.h>

#include <boost/json.hpp>

#include "core/codec/stamps.h"
#include "core/strings.h"

namespace hami::sim {
namespace json = boost::json;
namespace {

struct Column {
  const char* name;
  const char* type;
  const char* format;
  int priority;
  const char* description;
};

const json::object* Obj(const json::object* o, std::string_view key) {
  if (!o) return nullptr;
  const json::value* v = o->if_contains(key);
  return v ? v->if_object() : nullptr;
}

const json::array* Arr(const json::object* o, std::string_view key) {
  if (!o) return nullptr;
  const json::value* v = o->if_contains(key);
  return v ? v->if_array() : nullptr;
}

std::string S(const json::object* o, std::string_view key) {
  if (!o) return "";
  const json::value* v = o->if_contains(key);
  return v && v->is_string() ? std::string(v->get_string()) : std::string();
}

std::string Age(const json::object& obj, TimePoint now) {
  const std::string created = S(Obj(&obj, "metadata"), "creationTimestamp");
  auto t = codec::ParseRfc3339(created);
  if (created.empty() || !t) return "<unknown>";
  return HumanDuration(std::chrono::duration_cast<std::chrono::seconds>(now - *t));
}

std::vector<Column> Columns(const ResourceType& type) {
  constexpr const char* kNameDoc = "Name must be unique within a namespace.";
  constexpr const char* kAgeDoc =
      "CreationTimestamp is a timestamp representing the server time when this object "
      "was created.";
  if (type.plural == "pods") {
    return {
        {"Name", "string", "name", 0, kNameDoc},
        {"Ready", "string", "", 0, "The aggregate readiness state of this pod for accepting traffic."},
        {"Status", "string", "", 0, "The aggregate status of the containers in this pod."},
        {"Restarts", "string", "", 0, "The number of times the containers in this pod have been restarted."},
        {"Age", "string", "", 0, kAgeDoc},
        {"IP", "string", "", 1, "IP address allocated to the pod."},
        {"Node", "string", "", 1, "Name of the Node this pod is assigned to."},
        {"Nominated Node", "string", "", 1, "Name of the node nominated for preemption."},
        {"Readiness Gates", "string", "", 1, "Pod readiness gates."}};
  }
  if (type.plural == "nodes") {
    return {{"Name", "string", "name", 0, kNameDoc},
            {"Status", "string", "", 0, "The status of the node"},
            {"Roles", "string", "", 0, "The roles of the node"},
            {"Age", "string", "", 0, kAgeDoc},
            {"Version", "string", "", 0, "Kubelet Version reported by the node."},
            {"Internal-IP", "string", "", 1, "List of internal IPs."},
            {"External-IP", "string", "", 1, "List of external IPs."},
            {"OS-Image", "string", "", 1, "OS Image reported by the node."},
            {"Kernel-Version", "string", "", 1, "Kernel Version reported by the node."},
            {"Container-Runtime", "string", "", 1, "Container Runtime Version reported by the node."}};
  }
  if (type.plural == "namespaces") {
    return {{"Name", "string", "name", 0, kNameDoc},
            {"Status", "string", "", 0, "The status of the namespace"},
            {"Age", "string", "", 0, kAgeDoc}};
  }
  if (type.plural == "events") {
    return {{"Last Seen", "string", "", 0, "Time since the last occurrence."},
            {"Type", "string", "", 0, "Type of this event (Normal, Warning)."},
            {"Reason", "string", "", 0, "Why the action was taken."},
            {"Object", "string", "", 0, "The object this Event is about."},
            {"Message", "string", "", 0, "A human-readable description of the status of this operation."},
            {"Name", "string", "name", 1, kNameDoc}};
  }
  if (type.plural == "resourcequotas") {
    return {{"Name", "string", "name", 0, kNameDoc},
            {"Age", "string", "", 0, kAgeDoc},
            {"Request", "string", "", 0,
             "Request represents a minimum amount of cpu/memory that a container may "
             "consume."},
            {"Limit", "string", "", 0,
             "Limits control the maximum amount of cpu/memory that a container may use "
             "independent of contention on the node."}};
  }
  if (type.plural == "leases") {
    return {{"Name", "string", "name", 0, kNameDoc},
            {"Holder", "string", "", 0, "The holder of the lease."},
            {"Age", "string", "", 0, kAgeDoc}};
  }
  return {{"Name", "string", "name", 0, kNameDoc}, {"Age", "string", "", 0, kAgeDoc}};
}

json::array PodCells(const json::object& pod, TimePoint now) {
  const json::object* spec = Obj(&pod, "spec");
  const json::object* status = Obj(&pod, "status");
  const json::array* containers = Arr(spec, "containers");
  const std::size_t total = containers ? containers->size() : 0;
  std::size_t ready = 0;
  std::int64_t restarts = 0;
  std::string reason = S(status, "reason");
  if (reason.empty()) reason = S(status, "phase");
  if (const json::array* statuses = Arr(status, "containerStatuses")) {
    for (const auto& cs : *statuses) {
      const json::object* c = cs.if_object();
      if (!c) continue;
      if (const json::value* r = c->if_contains("ready"); r && r->is_bool() && r->get_bool()) ++ready;
      if (const json::value* n = c->if_contains("restartCount"); n && n->is_int64())
        restarts += n->get_int64();
      const json::object* state = Obj(c, "state");
      if (const std::string w = S(Obj(state, "waiting"), "reason"); !w.empty()) reason = w;
      if (const std::string t = S(Obj(state, "terminated"), "reason"); !t.empty()) reason = t;
    }
  }
  if (Obj(&pod, "metadata")->contains("deletionTimestamp")) reason = "Terminating";
  std::string gates = "<none>";
  if (const json::array* g = Arr(spec, "readinessGates"); g && !g->empty())
    gates = fmt::format("0/{}", g->size());
  const std::string ip = S(status, "podIP");
  const std::string node = S(spec, "nodeName");
  const std::string nominated = S(status, "nominatedNodeName");
  return json::array{S(Obj(&pod, "metadata"), "name"),
                     fmt::format("{}/{}", ready, total),
                     reason,
                     std::to_string(restarts),
                     Age(pod, now),
                     ip.empty() ? "<none>" : ip,
                     node.empty() ? "<none>" : node,
                     nominated.empty() ? "<none>" : nominated,
                     gates};
}

json::array NodeCells(const json::object& node, TimePoint now) {
  const json::object* meta = Obj(&node, "metadata");
  const json::object* status = Obj(&node, "status");
  std::string state = "Unknown";
  if (const json::array* conds = Arr(status, "conditions")) {
    for (const auto& c : *conds) {
      if (c.is_object() && S(&c.as_object(), "type") == "Ready") {
        state = S(&c.as_object(), "status") == "True" ? "Ready" : "NotReady";
      }
    }
  }
  if (const json::object* spec = Obj(&node, "spec")) {
    if (const json::value* u = spec->if_contains("unschedulable"); u && u->is_bool() && u->get_bool()) {
      state += ",SchedulingDisabled";
    }
  }
  std::vector<std::string> roles;
  if (const json::object* labels = Obj(meta, "labels")) {
    for (const auto& kv : *labels) {
      const std::string_view key = kv.key();
      if (key.starts_with("node-role.kubernetes.io/")) roles.emplace_back(key.substr(24));
    }
  }
  std::string internal = "<none>";
  std::string external = "<none>";
  if (const json::array* addrs = Arr(status, "addresses")) {
    for (const auto& a : *addrs) {
      if (!a.is_object()) continue;
      if (S(&a.as_object(), "type") == "InternalIP") internal = S(&a.as_object(), "address");
      if (S(&a.as_object(), "type") == "ExternalIP") external = S(&a.as_object(), "address");
    }
  }
  const json::object* info = Obj(status, "nodeInfo");
  auto or_unknown = [](std::string s) { return s.empty() ? std::string("<unknown>") : s; };
  return json::array{S(meta, "name"),
                     state,
                     roles.empty() ? std::string("<none>") : Join(roles, ","),
                     Age(node, now),
                     or_unknown(S(info, "kubeletVersion")),
                     internal,
                     external,
                     or_unknown(S(info, "osImage")),
                     or_unknown(S(info, "kernelVersion")),
                     or_unknown(S(info, "containerRuntimeVersion"))};
}

json::array EventCells(const json::object& ev, TimePoint now) {
  std::string last = S(&ev, "lastTimestamp");
  if (last.empty()) last = S(&ev, "eventTime");
  std::string seen = "<unknown>";
  if (auto t = codec::ParseRfc3339(last); !last.empty() && t) {
    seen = HumanDuration(std::chrono::duration_cast<std::chrono::seconds>(now - *t));
  }
  const json::object* involved = Obj(&ev, "involvedObject");
  return json::array{seen,
                     S(&ev, "type"),
                     S(&ev, "reason"),
                     fmt::format("{}/{}", ToLower(S(involved, "kind")), S(involved, "name")),
                     S(&ev, "message"),
                     S(Obj(&ev, "metadata"), "name")};
}

std::string QuotaPairs(const json::object* hard, const json::object* used, bool limits) {
  std::vector<std::string> parts;
  if (!hard) return "";
  for (const auto& kv : *hard) {
    const std::string_view key = kv.key();
    if (key.starts_with("limits.") != limits) continue;
    std::string u = S(used, key);
    if (u.empty()) u = "0";
    const std::string h =
        kv.value().is_string() ? std::string(kv.value().get_string()) : json::serialize(kv.value());
    parts.push_back(fmt::format("{}: {}/{}", key, u, h));
  }
  return Join(parts, ", ");
}

json::array Cells(const ResourceType& type, const json::object& obj, TimePoint now) {
  const json::object* meta = Obj(&obj, "metadata");
  if (type.plural == "pods") return PodCells(obj, now);
  if (type.plural == "nodes") return NodeCells(obj, now);
  if (type.plural == "events") return EventCells(obj, now);
  if (type.plural == "namespaces")
    return json::array{S(meta, "name"), S(Obj(&obj, "status"), "phase"), Age(obj, now)};
  if (type.plural == "resourcequotas") {
    const json::object* status = Obj(&obj, "status");
    const json::object* hard = Obj(Obj(&obj, "spec"), "hard");
    const json::object* used = Obj(status, "used");
    return json::array{S(meta, "name"), Age(obj, now), QuotaPairs(hard, used, false),
                       QuotaPairs(hard, used, true)};
  }
  if (type.plural == "leases") {
    return json::array{S(meta, "name"), S(Obj(&obj, "spec"), "holderIdentity"), Age(obj, now)};
  }
  return json::array{S(meta, "name"), Age(obj, now)};
}

}  // namespace

bool WantsTable(std::string_view accept) { return accept.find("as=Table") != std::string_view::npos; }

json::object TableForList(const ResourceType& type, const ListResult& list, TimePoint now,
                          bool include_headers) {
  json::object meta{{"resourceVersion", std::to_string(list.resource_version)}};
  if (!list.continue_token.empty()) meta["continue"] = list.continue_token;
  if (list.remaining_items) meta["remainingItemCount"] = *list.remaining_items;
  json::object table{{"kind", "Table"}, {"apiVersion", "meta.k8s.io/v1"}, {"metadata", std::move(meta)}};
  if (include_headers) {
    json::array columns;
    for (const auto& c : Columns(type)) {
      columns.push_back(json::object{{"name", c.name},
                                     {"type", c.type},
                                     {"format", c.format},
                                     {"description", c.description},
                                     {"priority", c.priority}});
    }
    table["columnDefinitions"] = std::move(columns);
  }
  json::array rows;
  for (const auto& item : list.items) {
    rows.push_back(json::object{{"cells", Cells(type, *item, now)}, {"object", *item}});
  }
  table["rows"] = std::move(rows);
  return table;
}

std::string HumanDuration(std::chrono::seconds d) {
  const std::int64_t s = d.count();
  if (s < 0) return "0s";
  if (s < 120) return fmt::format("{}s", s);
  const std::int64_t m = s / 60;
  if (m < 10) return s % 60 == 0 ? fmt::format("{}m", m) : fmt::format("{}m{}s", m, s % 60);
  if (m < 180) return fmt::format("{}m", m);
  const std::int64_t h = m / 60;
  if (h < 8) return m % 60 == 0 ? fmt::format("{}h", h) : fmt::format("{}h{}m", h, m % 60);
  if (h < 48) return fmt::format("{}h", h);
  if (h < 24 * 8) return h % 24 == 0 ? fmt::format("{}d", h / 24) : fmt::format("{}d{}h", h / 24, h % 24);
  if (h < 24 * 365 * 2) return fmt::format("{}d", h / 24);
  if (h < 24 * 365 * 8) {
    const std::int64_t dy = (h / 24) % 365;
    return dy == 0 ? fmt::format("{}y", h / 24 / 365) : fmt::format("{}y{}d", h / 24 / 365, dy);
  }
  return fmt::format("{}y", h / 24 / 365);
}

}  // namespace hami::sim
