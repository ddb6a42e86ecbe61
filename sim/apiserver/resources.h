#pragma once
// The resource kinds the in-memory API server serves, and the discovery documents that describe them
// (/api, /api/v1, /apis, /apis/<group>, /apis/<group>/<version>, /version). Pure data.
#include <boost/json/object.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace hami::sim {

struct ResourceType {
  std::string group;    // "" for the core group
  std::string version;  // "v1"
  std::string plural;   // "pods" (the URL segment)
  std::string singular;
  std::string kind;  // "Pod"
  bool namespaced = true;
  bool has_status = false;  // a /status subresource: the main resource ignores status changes
  std::vector<std::string> short_names;
  std::vector<std::string> categories;

  std::string ApiVersion() const { return group.empty() ? version : group + "/" + version; }
  std::string ListKind() const { return kind + "List"; }
};

// Every served resource, in a fixed order; index() of a type is its position here.
const std::vector<ResourceType>& Resources();
std::size_t IndexOf(const ResourceType& type);

// By URL coordinates; nullptr if not served.
const ResourceType* FindResource(std::string_view group, std::string_view version, std::string_view plural);
// By apiVersion ("v1", "coordination.k8s.io/v1") and kind ("Pod"); nullptr if not served.
const ResourceType* FindResourceByKind(std::string_view api_version, std::string_view kind);
// By plural, singular, short name or kind, case-insensitively ("pods", "po", "Pod"); nullptr if unknown.
const ResourceType* FindResourceByName(std::string_view name);

// The API groups other than core, with their served versions.
std::vector<std::string> ApiGroups();

// Discovery documents. `server_address` is host:port for serverAddressByClientCIDRs.
boost::json::object ApiVersionsDocument(std::string_view server_address);  // GET /api
boost::json::object ApiGroupListDocument();                                // GET /apis
boost::json::object ApiGroupDocument(std::string_view group);              // GET /apis/<group>; {} if unknown
// GET /api/v1 or /apis/<group>/<version>; {} if unknown.
boost::json::object ApiResourceListDocument(std::string_view group, std::string_view version);
boost::json::object VersionDocument();  // GET /version

// A minimal OpenAPI v3: the index (GET /openapi/v3) and one document per group-version with the paths of each
// resource, their PATCH operations tagged x-kubernetes-group-version-kind and declaring `fieldValidation`.
// That is what kubectl (1.27+) needs to validate server-side instead of downloading the protobuf OpenAPI v2
// schema for client-side validation; there are no component schemas (`kubectl explain` does not work).
boost::json::object OpenApiV3Index();
boost::json::object OpenApiV3Document(std::string_view group, std::string_view version);  // {} if unknown

}  // namespace hami::sim
