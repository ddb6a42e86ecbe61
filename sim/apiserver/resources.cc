#include "sim/apiserver/resources.h"

#include <algorithm>
#include <boost/json.hpp>

#include "core/strings.h"

namespace hami::sim {
namespace json = boost::json;
namespace {

const json::array kVerbs{"create", "delete", "get", "list", "patch", "update", "watch"};

json::array ToArray(const std::vector<std::string>& v) {
  json::array a;
  for (const auto& s : v) a.emplace_back(s);
  return a;
}

json::object GroupVersion(std::string_view group, std::string_view version) {
  return json::object{{"groupVersion", std::string(group) + "/" + std::string(version)},
                      {"version", version}};
}

}  // namespace

const std::vector<ResourceType>& Resources() {
  static const std::vector<ResourceType> types{
      {"", "v1", "namespaces", "namespace", "Namespace", false, true, {"ns"}, {}},
      {"", "v1", "nodes", "node", "Node", false, true, {"no"}, {}},
      {"", "v1", "pods", "pod", "Pod", true, true, {"po"}, {"all"}},
      {"", "v1", "events", "event", "Event", true, false, {"ev"}, {}},
      {"", "v1", "resourcequotas", "resourcequota", "ResourceQuota", true, true, {"quota"}, {}},
      {"coordination.k8s.io", "v1", "leases", "lease", "Lease", true, false, {}, {}},
      {"policy", "v1", "poddisruptionbudgets", "poddisruptionbudget", "PodDisruptionBudget", true, true,
       {"pdb"}, {}},
  };
  return types;
}

std::size_t IndexOf(const ResourceType& type) { return static_cast<std::size_t>(&type - Resources().data()); }

const ResourceType* FindResource(std::string_view group, std::string_view version, std::string_view plural) {
  for (const auto& t : Resources()) {
    if (t.group == group && t.version == version && t.plural == plural) return &t;
  }
  return nullptr;
}

const ResourceType* FindResourceByKind(std::string_view api_version, std::string_view kind) {
  for (const auto& t : Resources()) {
    if (t.ApiVersion() == api_version && t.kind == kind) return &t;
  }
  return nullptr;
}

const ResourceType* FindResourceByName(std::string_view name) {
  for (const auto& t : Resources()) {
    if (EqualsIgnoreCase(t.plural, name) || EqualsIgnoreCase(t.singular, name) ||
        EqualsIgnoreCase(t.kind, name)) {
      return &t;
    }
    for (const auto& s : t.short_names) {
      if (EqualsIgnoreCase(s, name)) return &t;
    }
  }
  return nullptr;
}

std::vector<std::string> ApiGroups() {
  std::vector<std::string> groups;
  for (const auto& t : Resources()) {
    if (!t.group.empty() && std::find(groups.begin(), groups.end(), t.group) == groups.end()) {
      groups.push_back(t.group);
    }
  }
  return groups;
}

json::object ApiVersionsDocument(std::string_view server_address) {
  return json::object{
      {"kind", "APIVersions"},
      {"versions", json::array{"v1"}},
      {"serverAddressByClientCIDRs",
       json::array{json::object{{"clientCIDR", "0.0.0.0/0"}, {"serverAddress", server_address}}}}};
}

json::object ApiGroupDocument(std::string_view group) {
  json::array versions;
  for (const auto& t : Resources()) {
    if (t.group != group) continue;
    json::object gv = GroupVersion(group, t.version);
    if (std::find(versions.begin(), versions.end(), json::value(gv)) == versions.end())
      versions.push_back(gv);
  }
  if (versions.empty()) return {};
  json::value preferred = versions.front();
  return json::object{{"kind", "APIGroup"},
                      {"apiVersion", "v1"},
                      {"name", group},
                      {"versions", std::move(versions)},
                      {"preferredVersion", std::move(preferred)}};
}

json::object ApiGroupListDocument() {
  json::array groups;
  for (const auto& g : ApiGroups()) {
    json::object doc = ApiGroupDocument(g);
    doc.erase("kind");
    doc.erase("apiVersion");
    groups.push_back(std::move(doc));
  }
  return json::object{{"kind", "APIGroupList"}, {"apiVersion", "v1"}, {"groups", std::move(groups)}};
}

json::object ApiResourceListDocument(std::string_view group, std::string_view version) {
  json::array resources;
  for (const auto& t : Resources()) {
    if (t.group != group || t.version != version) continue;
    json::object r{{"name", t.plural},
                   {"singularName", t.singular},
                   {"namespaced", t.namespaced},
                   {"kind", t.kind},
                   {"verbs", kVerbs}};
    if (!t.short_names.empty()) r["shortNames"] = ToArray(t.short_names);
    if (!t.categories.empty()) r["categories"] = ToArray(t.categories);
    resources.push_back(std::move(r));
    if (t.has_status) {
      resources.push_back(json::object{{"name", t.plural + "/status"},
                                       {"singularName", ""},
                                       {"namespaced", t.namespaced},
                                       {"kind", t.kind},
                                       {"verbs", json::array{"get", "patch", "update"}}});
    }
    if (t.plural == "pods") {
      resources.push_back(json::object{{"name", "pods/binding"},
                                       {"singularName", ""},
                                       {"namespaced", true},
                                       {"kind", "Binding"},
                                       {"verbs", json::array{"create"}}});
    }
  }
  if (resources.empty()) return {};
  if (group.empty()) {
    resources.push_back(json::object{{"name", "bindings"},
                                     {"singularName", "binding"},
                                     {"namespaced", true},
                                     {"kind", "Binding"},
                                     {"verbs", json::array{"create"}}});
  }
  const std::string gv =
      group.empty() ? std::string(version) : std::string(group) + "/" + std::string(version);
  return json::object{{"kind", "APIResourceList"},
                      {"apiVersion", "v1"},
                      {"groupVersion", gv},
                      {"resources", std::move(resources)}};
}

json::object VersionDocument() {
  // kubectl's version dispatcher picks the client matching major.minor, so report a 1.32 server.
  return json::object{{"major", "1"},
                      {"minor", "32"},
                      {"gitVersion", "v1.32.0-hami-sim"},
                      {"gitCommit", "0000000000000000000000000000000000000000"},
                      {"gitTreeState", "clean"},
                      {"buildDate", "2026-01-01T00:00:00Z"},
                      {"goVersion", "go1.23.0"},
                      {"compiler", "gc"},
                      {"platform", "linux/amd64"}};
}

json::object OpenApiV3Index() {
  json::object paths;
  std::vector<std::string> seen;
  for (const auto& t : Resources()) {
    const std::string gv = t.group.empty() ? "api/" + t.version : "apis/" + t.group + "/" + t.version;
    if (std::find(seen.begin(), seen.end(), gv) != seen.end()) continue;
    seen.push_back(gv);
    paths[gv] = json::object{{"serverRelativeURL", "/openapi/v3/" + gv + "?hash=hami-sim-1"}};
  }
  return json::object{{"paths", std::move(paths)}};
}

json::object OpenApiV3Document(std::string_view group, std::string_view version) {
  auto query = [](std::string_view name) {
    return json::object{{"name", name}, {"in", "query"}, {"schema", json::object{{"type", "string"}}}};
  };
  json::object paths;
  for (const auto& t : Resources()) {
    if (t.group != group || t.version != version) continue;
    const std::string base = t.group.empty() ? "/api/" + t.version : "/apis/" + t.group + "/" + t.version;
    const std::string item = t.namespaced ? base + "/namespaces/{namespace}/" + t.plural + "/{name}"
                                          : base + "/" + t.plural + "/{name}";
    const json::object gvk{{"group", t.group}, {"version", t.version}, {"kind", t.kind}};
    const json::object ok{{"200", json::object{{"description", "OK"}}}};
    json::object patch{{"operationId", "patch" + t.kind},
                       {"parameters", json::array{query("dryRun"), query("fieldManager"),
                                                  query("fieldValidation"), query("force")}},
                       {"responses", ok},
                       {"x-kubernetes-action", "patch"},
                       {"x-kubernetes-group-version-kind", gvk}};
    json::object get{{"operationId", "read" + t.kind},
                     {"responses", ok},
                     {"x-kubernetes-action", "get"},
                     {"x-kubernetes-group-version-kind", gvk}};
    paths[item] = json::object{{"get", std::move(get)}, {"patch", std::move(patch)}};
  }
  if (paths.empty()) return {};
  return json::object{
      {"openapi", "3.0.0"},
      {"info", json::object{{"title", "Kubernetes (hami-scheduler sim-apiserver)"}, {"version", "v1.32.0"}}},
      {"paths", std::move(paths)},
      {"components", json::object{{"schemas", json::object{}}}}};
}

}  // namespace hami::sim
