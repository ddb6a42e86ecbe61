#include "sim/apiserver/api_server.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/json.hpp>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <stdexcept>
#include <utility>
#include <variant>

#include "core/base64.h"
#include "core/strings.h"
#include "k8s/files.h"
#include "k8s/http_server.h"
#include "k8s/request_parser.h"
#include "k8s/yaml_json.h"
#include "sim/apiserver/protobuf.h"
#include "sim/apiserver/resources.h"
#include "sim/apiserver/table.h"
#include "sim/tls/tls.h"

namespace hami::sim {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;

namespace {

constexpr std::string_view kPatchTypes =
    "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json";

// ---------------------------------------------------------------------------------------------------------
// Request decoding

std::string PercentDecode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '%' && i + 2 < s.size()) {
      auto hex = [](char h) -> int {
        if (h >= '0' && h <= '9') return h - '0';
        if (h >= 'a' && h <= 'f') return h - 'a' + 10;
        if (h >= 'A' && h <= 'F') return h - 'A' + 10;
        return -1;
      };
      const int hi = hex(s[i + 1]);
      const int lo = hex(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    out += (plus_is_space && c == '+') ? ' ' : c;
  }
  return out;
}

// The media type without parameters, lower case ("application/json; charset=utf-8" -> "application/json").
std::string MediaType(std::string_view header) {
  const std::size_t semi = header.find(';');
  return ToLower(Trim(header.substr(0, semi)));
}

struct Call {
  http::verb method = http::verb::get;
  std::string method_name;
  std::string path;
  std::vector<std::string> segments;
  std::map<std::string, std::string, std::less<>> query;
  std::string content_type;  // media type only
  std::string accept;
  std::string host;
  std::string authorization;
  const std::string* body = nullptr;

  std::optional<std::string> Query(std::string_view key) const {
    auto it = query.find(key);
    if (it == query.end()) return std::nullopt;
    return it->second;
  }
  bool Flag(std::string_view key) const {
    auto v = Query(key);
    return v && (*v == "true" || *v == "1" || *v == "True");
  }
};

Call Decode(const k8s::ServerRequest& req) {
  Call c;
  c.method = req.method;
  c.method_name = req.method_string;
  const std::string_view target = req.target;
  const std::size_t q = target.find('?');
  c.path = PercentDecode(target.substr(0, q), false);
  for (auto part : Split(c.path, '/')) {
    if (!part.empty()) c.segments.emplace_back(part);
  }
  if (q != std::string_view::npos) {
    for (auto pair : Split(target.substr(q + 1), '&')) {
      if (pair.empty()) continue;
      const std::size_t eq = pair.find('=');
      c.query[PercentDecode(pair.substr(0, eq), true)] =
          eq == std::string_view::npos ? std::string() : PercentDecode(pair.substr(eq + 1), true);
    }
  }
  c.content_type = MediaType(req.content_type);
  c.accept = std::string(req.headers[http::field::accept]);
  c.host = std::string(req.headers[http::field::host]);
  c.authorization = std::string(req.headers[http::field::authorization]);
  c.body = &req.body;
  return c;
}

// ---------------------------------------------------------------------------------------------------------
// Handler results

struct Reply {
  http::status status = http::status::ok;
  std::string body;
  std::string content_type = "application/json";
  int retry_after = 0;
};

struct WatchStart {
  std::shared_ptr<Watcher> watcher;  // null when `error` is set
  std::optional<ApiError> error;     // sent as one ERROR event, then the stream ends
  std::chrono::seconds timeout{0};
};

using Outcome = std::variant<Reply, WatchStart>;

Reply JsonReply(http::status status, const json::object& body) {
  return Reply{status, json::serialize(body), "application/json", 0};
}

Reply ErrorReply(const ApiError& e) {
  Reply r{static_cast<http::status>(e.code), json::serialize(StatusJson(e)), "application/json",
          e.retry_after_seconds};
  return r;
}

// What kube-apiserver answers a request it cannot authenticate.
ApiError Unauthorized() { return ApiError{401, "Unauthorized", "Unauthorized", {}}; }

ApiError PathNotFound() {
  ApiError e{404, "NotFound", "the server could not find the requested resource", {}};
  return e;
}

ApiError FaultError(const FaultRule& rule) {
  switch (rule.status) {
    case 429:
      return TooManyRequests(rule.retry_after_seconds);
    case 500:
      return InternalError("injected fault");
    case 503: {
      ApiError e{503,
                 "ServiceUnavailable",
                 "the server is currently unable to handle the request (injected fault)",
                 {}};
      e.details["retryAfterSeconds"] = rule.retry_after_seconds;
      e.retry_after_seconds = rule.retry_after_seconds;
      return e;
    }
    case 504:
      return ApiError{504,
                      "Timeout",
                      "the server was unable to return a response in the time allotted (injected "
                      "fault)",
                      {}};
    default:
      return ApiError{rule.status, "InternalError", fmt::format("injected fault ({})", rule.status), {}};
  }
}

ApiResult<json::value> ParseBody(const Call& c) {
  const std::string& body = *c.body;
  if (c.content_type == "application/yaml" || c.content_type == "application/x-yaml" ||
      c.content_type == "text/yaml") {
    auto docs = k8s::YamlToJson(body, "request body");
    if (!docs) return BadRequest(docs.error().message);
    if (docs->empty()) return BadRequest("request body: empty YAML document");
    return std::move(docs->front());
  }
  if (c.content_type == "application/vnd.kubernetes.protobuf") {
    auto decoded = DecodeKubernetesProtobuf(body);
    if (!decoded) {
      return UnsupportedMediaType(
          c.content_type, fmt::format("application/json, application/yaml ({})", decoded.error().message));
    }
    return json::value(std::move(*decoded));
  }
  if (!c.content_type.empty() && c.content_type != "application/json" && !c.content_type.ends_with("+json")) {
    return UnsupportedMediaType(c.content_type, "application/json, application/yaml");
  }
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec) return BadRequest(fmt::format("the request body is not valid JSON: {}", ec.message()));
  return v;
}

ApiResult<json::object> ParseObjectBody(const Call& c) {
  auto v = ParseBody(c);
  if (!v) return v.error();
  if (!v->is_object()) return BadRequest("the request body must be a JSON object");
  return std::move(v->as_object());
}

ApiResult<std::int64_t> IntParam(const Call& c, std::string_view key) {
  auto v = c.Query(key);
  if (!v || v->empty()) return ApiResult<std::int64_t>(boost::system::in_place_value, 0);
  auto n = ParseInt64(*v, key);
  if (!n) return BadRequest(n.error().message);
  return ApiResult<std::int64_t>(boost::system::in_place_value, *n);
}

bool DryRun(const Call& c) { return c.Query("dryRun").has_value() && !c.Query("dryRun")->empty(); }

// Where a resource URL points.
struct Target {
  const ResourceType* type = nullptr;
  std::string ns;
  std::string name;         // empty: the collection
  std::string subresource;  // "status", "binding", ...
  bool watch_path = false;  // the legacy /watch/ prefix
  bool bindings = false;    // POST /api/v1/namespaces/<ns>/bindings
};

// /api/v1/... or /apis/<group>/<version>/...; nullopt when the path is not a resource path at all.
std::optional<ApiResult<Target>> Resolve(const Call& c) {
  const auto& s = c.segments;
  std::string group;
  std::string version;
  std::size_t i = 0;
  if (s.size() >= 3 && s[0] == "api") {
    version = s[1];
    i = 2;
  } else if (s.size() >= 4 && s[0] == "apis") {
    group = s[1];
    version = s[2];
    i = 3;
  } else {
    return std::nullopt;
  }
  Target t;
  std::vector<std::string> rest(s.begin() + static_cast<std::ptrdiff_t>(i), s.end());
  if (!rest.empty() && rest[0] == "watch") {
    t.watch_path = true;
    rest.erase(rest.begin());
  }
  if (rest.empty()) return ApiResult<Target>(PathNotFound());
  auto find = [&](const std::string& plural) { return FindResource(group, version, plural); };
  // namespaces/<ns>/<plural>[/<name>[/<sub>]] for namespaced kinds.
  if (rest.size() >= 3 && rest[0] == "namespaces") {
    const ResourceType* type = find(rest[2]);
    if ((type && type->namespaced) || (group.empty() && rest[2] == "bindings")) {
      t.ns = rest[1];
      if (!type) {
        if (rest.size() != 3) return ApiResult<Target>(PathNotFound());
        t.type = find("pods");
        t.bindings = true;
        return ApiResult<Target>(t);
      }
      t.type = type;
      if (rest.size() >= 4) t.name = rest[3];
      if (rest.size() >= 5) t.subresource = rest[4];
      if (rest.size() > 5) return ApiResult<Target>(PathNotFound());
      return ApiResult<Target>(t);
    }
  }
  const ResourceType* type = find(rest[0]);
  if (!type) return ApiResult<Target>(PathNotFound());
  t.type = type;
  if (rest.size() >= 2) {
    if (type->namespaced) return ApiResult<Target>(PathNotFound());  // /api/v1/pods/<name>
    t.name = rest[1];
  }
  if (rest.size() >= 3) t.subresource = rest[2];
  if (rest.size() > 3) return ApiResult<Target>(PathNotFound());
  return ApiResult<Target>(t);
}

std::string Kubeconfig(std::string_view url, const ApiServerOptions& o, bool tls) {
  std::string cluster;
  if (tls) {
    const std::string& ca = o.ca_pem.empty() ? o.tls_cert_pem : o.ca_pem;
    cluster = fmt::format("\n    certificate-authority-data: {}", Base64Encode(ca));
  }
  std::string user;
  if (!o.kubeconfig_token.empty()) {
    // A JSON string is a valid YAML double-quoted scalar: any token survives.
    user += fmt::format("\n    token: {}", json::serialize(json::string(o.kubeconfig_token)));
  }
  if (!o.kubeconfig_client_cert_pem.empty()) {
    user +=
        fmt::format("\n    client-certificate-data: {}\n    client-key-data: {}",
                    Base64Encode(o.kubeconfig_client_cert_pem), Base64Encode(o.kubeconfig_client_key_pem));
  }
  return fmt::format(R"(apiVersion: v1
kind: Config
clusters:
- name: hami-sim
  cluster:
    server: {}{}
contexts:
- name: hami-sim
  context:
    cluster: hami-sim
    user: hami-sim
    namespace: default
current-context: hami-sim
preferences: {{}}
users:
- name: hami-sim
  user:{}
)",
                     url, cluster, user.empty() ? std::string(" {}") : user);
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// Server state shared by the HTTP server's handler and every request it handles.

struct ApiServer::Impl {
  Impl(asio::io_context& io, ApiServerOptions o, const Clock* clock)
      : ioc(io), options(std::move(o)), store(options.store, clock) {}

  Outcome Handle(const Call& c);
  Outcome HandleResource(const Call& c, const Target& t);
  Outcome Collection(const Call& c, const Target& t);
  Outcome Item(const Call& c, const Target& t);
  Outcome Watch(const Call& c, const Target& t);
  // The 401 to answer when authentication is required and the request has no valid credentials (a token,
  // or the verified client certificate of its connection).
  std::optional<ApiError> Unauthenticated(const Call& c, const k8s::PeerCertificate* peer) const;
  bool ValidToken(std::string_view authorization) const;
  std::chrono::milliseconds LatencyFor(std::string_view path) const {
    return latency.count() > 0 && path.starts_with(latency_prefix) ? latency : std::chrono::milliseconds(0);
  }
  std::string ServerUrl() const {
    const std::string host = options.host == "0.0.0.0" || options.host.empty() ? "127.0.0.1"
                             : options.host.find(':') != std::string::npos     ? "[" + options.host + "]"
                                                                               : options.host;
    return fmt::format("{}://{}:{}", options.tls_cert_pem.empty() ? "http" : "https", host, port);
  }
  asio::io_context& ioc;
  ApiServerOptions options;
  Store store;
  std::unique_ptr<k8s::HttpServer> http;  // made by Listen()
  std::uint16_t port = 0;
  std::exception_ptr failure;
  std::size_t watches = 0;
  std::uint64_t requests = 0;
  std::deque<FaultRule> faults;
  RandomFaults random_faults;
  std::mt19937_64 fault_rng;
  ApiServer::FaultStats fault_stats;
  // Whether this answer is to be lost (drawn once per request that was not refused by a random fault).
  bool drop_pending = false;  // set by a drop_answer FaultRule for the request being handled
  bool DropAnswer(const Call& c) {
    if (std::exchange(drop_pending, false)) return true;
    if (random_faults.drop_rate <= 0 || c.segments.size() < 2) return false;
    if (std::uniform_real_distribution<double>(0, 1)(fault_rng) >= random_faults.drop_rate) return false;
    ++fault_stats.drops;
    return true;
  }
  std::chrono::milliseconds latency{0};
  std::string latency_prefix;
  int expire_watches = 0;
  int expire_lists = 0;
};

namespace {

template <class F>
struct ScopeExit {
  explicit ScopeExit(F f) : fn(std::move(f)) {}
  ~ScopeExit() { fn(); }
  ScopeExit(const ScopeExit&) = delete;
  ScopeExit& operator=(const ScopeExit&) = delete;
  F fn;
};

}  // namespace

bool ApiServer::Impl::ValidToken(std::string_view authorization) const {
  authorization = Trim(authorization);
  constexpr std::string_view kBearer = "bearer ";
  if (authorization.size() <= kBearer.size() ||
      !EqualsIgnoreCase(authorization.substr(0, kBearer.size()), kBearer)) {
    return false;
  }
  const std::string_view token = Trim(authorization.substr(kBearer.size()));
  bool found = false;
  for (const auto& t : options.tokens) {
    // Compare every token in constant time, so timing tells nothing about which prefix matched.
    if (!t.empty() && t.size() == token.size() && CRYPTO_memcmp(t.data(), token.data(), t.size()) == 0) {
      found = true;
    }
  }
  return found;
}

std::optional<ApiError> ApiServer::Impl::Unauthenticated(const Call& c,
                                                         const k8s::PeerCertificate* peer) const {
  if (!options.require_auth) return std::nullopt;
  if ((peer && peer->verified) || ValidToken(c.authorization)) return std::nullopt;
  const auto& s = c.segments;
  if (s.size() == 1 && (s[0] == "version" || s[0] == "healthz" || s[0] == "livez" || s[0] == "readyz")) {
    return std::nullopt;
  }
  return Unauthorized();
}

Outcome ApiServer::Impl::Handle(const Call& c) {
  for (auto it = faults.begin(); it != faults.end(); ++it) {
    if (it->count <= 0) continue;
    if (!it->method.empty() && !EqualsIgnoreCase(it->method, c.method_name)) continue;
    if (!c.path.starts_with(it->path_prefix)) continue;
    const ApiError e = FaultError(*it);
    const bool drop = it->drop_answer;
    if (--it->count <= 0) faults.erase(it);
    if (!drop) return ErrorReply(e);
    drop_pending = true;
    break;
  }
  if ((random_faults.error_rate > 0 || random_faults.conflict_rate > 0) && c.segments.size() >= 2) {
    const double r = std::uniform_real_distribution<double>(0, 1)(fault_rng);
    if (r < random_faults.error_rate) {
      ++fault_stats.errors;
      return ErrorReply(InternalError("injected fault (random)"));
    }
    const bool write = c.method == http::verb::patch || c.method == http::verb::put;
    if (write && r < random_faults.error_rate + random_faults.conflict_rate) {
      ++fault_stats.conflicts;
      const std::string resource = c.segments.size() > 3 ? c.segments[c.segments.size() - 2] : "";
      return ErrorReply(StaleConflict("", resource, c.segments.back()));
    }
  }
  const auto& s = c.segments;
  const bool get = c.method == http::verb::get || c.method == http::verb::head;
  if (s.empty()) {
    if (!get) return ErrorReply(MethodNotAllowed(c.method_name, c.path));
    json::array paths{"/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version"};
    for (const auto& g : ApiGroups()) paths.emplace_back("/apis/" + g);
    return JsonReply(http::status::ok, json::object{{"paths", std::move(paths)}});
  }
  if (s.size() == 1 && (s[0] == "healthz" || s[0] == "livez" || s[0] == "readyz")) {
    return Reply{http::status::ok, "ok", "text/plain; charset=utf-8", 0};
  }
  if (s.size() == 1 && s[0] == "version") {
    if (!get) return ErrorReply(MethodNotAllowed(c.method_name, c.path));
    return JsonReply(http::status::ok, VersionDocument());
  }
  if (s[0] == "api" && s.size() <= 2) {
    if (!get) return ErrorReply(MethodNotAllowed(c.method_name, c.path));
    if (s.size() == 1) {
      const std::string address = c.host.empty() ? fmt::format("127.0.0.1:{}", port) : c.host;
      return JsonReply(http::status::ok, ApiVersionsDocument(address));
    }
    json::object doc = ApiResourceListDocument("", s[1]);
    if (doc.empty()) return ErrorReply(PathNotFound());
    return JsonReply(http::status::ok, doc);
  }
  if (s[0] == "apis" && s.size() <= 3) {
    if (!get) return ErrorReply(MethodNotAllowed(c.method_name, c.path));
    json::object doc = s.size() == 1   ? ApiGroupListDocument()
                       : s.size() == 2 ? ApiGroupDocument(s[1])
                                       : ApiResourceListDocument(s[1], s[2]);
    if (doc.empty()) return ErrorReply(PathNotFound());
    return JsonReply(http::status::ok, doc);
  }
  if (s[0] == "openapi") {
    if (!get) return ErrorReply(MethodNotAllowed(c.method_name, c.path));
    // v2 is protobuf-only for kubectl; 404 makes it rely on v3, which declares server-side field validation.
    if (s.size() == 2 && s[1] == "v3") return JsonReply(http::status::ok, OpenApiV3Index());
    if (s.size() >= 4 && s[1] == "v3") {
      json::object doc = s[2] == "api" && s.size() == 4    ? OpenApiV3Document("", s[3])
                         : s[2] == "apis" && s.size() == 5 ? OpenApiV3Document(s[3], s[4])
                                                           : json::object{};
      if (!doc.empty()) return JsonReply(http::status::ok, doc);
    }
    return ErrorReply(PathNotFound());
  }
  auto target = Resolve(c);
  if (!target) return ErrorReply(PathNotFound());
  if (!*target) return ErrorReply(target->error());
  return HandleResource(c, **target);
}

Outcome ApiServer::Impl::HandleResource(const Call& c, const Target& t) {
  if (t.bindings) {
    if (c.method != http::verb::post) return ErrorReply(MethodNotAllowed(c.method_name, c.path));
    auto body = ParseObjectBody(c);
    if (!body) return ErrorReply(body.error());
    const json::value* meta = body->if_contains("metadata");
    const json::value* name = meta && meta->is_object() ? meta->as_object().if_contains("name") : nullptr;
    if (!name || !name->is_string()) {
      return ErrorReply(Invalid("", "Binding", "", "metadata.name", "\"\": Required value"));
    }
    auto bound = store.Bind(t.ns, name->get_string(), *body);
    if (!bound) return ErrorReply(bound.error());
    return JsonReply(http::status::created, SuccessStatus(201));
  }
  if (t.name.empty()) return Collection(c, t);
  return Item(c, t);
}

Outcome ApiServer::Impl::Collection(const Call& c, const Target& t) {
  const ResourceType& type = *t.type;
  if (c.method == http::verb::get || c.method == http::verb::head) {
    if (t.watch_path || c.Flag("watch")) return Watch(c, t);
    if (expire_lists > 0) {
      --expire_lists;
      return ErrorReply(
          Expired(fmt::format("too old resource version: {} ({})", c.Query("resourceVersion").value_or(""),
                              store.resource_version())));
    }
    ListOptions o;
    o.label_selector = c.Query("labelSelector").value_or("");
    o.field_selector = c.Query("fieldSelector").value_or("");
    auto limit = IntParam(c, "limit");
    if (!limit) return ErrorReply(limit.error());
    o.limit = *limit;
    o.continue_token = c.Query("continue").value_or("");
    o.resource_version = c.Query("resourceVersion");
    o.resource_version_match = c.Query("resourceVersionMatch").value_or("");
    auto listed = store.List(type, t.ns, o);
    if (!listed) return ErrorReply(listed.error());
    if (WantsTable(c.accept)) return JsonReply(http::status::ok, TableForList(type, *listed, store.Now()));
    return JsonReply(http::status::ok, ListDocument(type, *listed));
  }
  if (c.method == http::verb::post) {
    if (type.namespaced && t.ns.empty()) return ErrorReply(MethodNotAllowed(c.method_name, c.path));
    auto body = ParseObjectBody(c);
    if (!body) return ErrorReply(body.error());
    auto created = store.Create(type, t.ns, std::move(*body), WriteOptions{DryRun(c)});
    if (!created) return ErrorReply(created.error());
    return JsonReply(http::status::created, **created);
  }
  return ErrorReply(MethodNotAllowed(c.method_name, c.path));
}

Outcome ApiServer::Impl::Item(const Call& c, const Target& t) {
  const ResourceType& type = *t.type;
  Subresource sub = Subresource::kMain;
  if (t.subresource == "binding" && type.plural == "pods") {
    if (c.method != http::verb::post) return ErrorReply(MethodNotAllowed(c.method_name, c.path));
    auto body = ParseObjectBody(c);
    if (!body) return ErrorReply(body.error());
    const json::value* meta = body->if_contains("metadata");
    const json::value* name = meta && meta->is_object() ? meta->as_object().if_contains("name") : nullptr;
    if (name && name->is_string() && !name->get_string().empty() && name->get_string() != t.name) {
      return ErrorReply(
          BadRequest(fmt::format("the name of the object ({}) does not match the name on the URL ({})",
                                 std::string_view(name->get_string()), t.name)));
    }
    auto bound = store.Bind(t.ns, t.name, *body);
    if (!bound) return ErrorReply(bound.error());
    return JsonReply(http::status::created, SuccessStatus(201));
  }
  if (t.subresource == "status" && type.has_status) {
    sub = Subresource::kStatus;
    if (c.method != http::verb::get && c.method != http::verb::put && c.method != http::verb::patch) {
      return ErrorReply(MethodNotAllowed(c.method_name, c.path));
    }
  } else if (!t.subresource.empty()) {
    return ErrorReply(PathNotFound());
  }
  switch (c.method) {
    case http::verb::get:
    case http::verb::head: {
      if (t.watch_path || c.Flag("watch")) return ErrorReply(MethodNotAllowed(c.method_name, c.path));
      auto got = store.Get(type, t.ns, t.name, c.Query("resourceVersion"));
      if (!got) return ErrorReply(got.error());
      if (WantsTable(c.accept)) {
        ListResult one;
        one.items.push_back(*got);
        one.resource_version = store.resource_version();
        return JsonReply(http::status::ok, TableForList(type, one, store.Now()));
      }
      return JsonReply(http::status::ok, **got);
    }
    case http::verb::put: {
      auto body = ParseObjectBody(c);
      if (!body) return ErrorReply(body.error());
      auto updated = store.Update(type, t.ns, t.name, std::move(*body), sub, WriteOptions{DryRun(c)});
      if (!updated) return ErrorReply(updated.error());
      return JsonReply(http::status::ok, **updated);
    }
    case http::verb::patch: {
      PatchType patch_type;
      if (c.content_type == "application/json-patch+json") {
        patch_type = PatchType::kJson;
      } else if (c.content_type == "application/merge-patch+json") {
        patch_type = PatchType::kMerge;
      } else if (c.content_type == "application/strategic-merge-patch+json") {
        patch_type = PatchType::kStrategicMerge;
      } else {
        return ErrorReply(UnsupportedMediaType(c.content_type, kPatchTypes));
      }
      boost::system::error_code ec;
      json::value patch = json::parse(*c.body, ec);
      if (ec) return ErrorReply(BadRequest(fmt::format("the patch is not valid JSON: {}", ec.message())));
      auto patched = store.Patch(type, t.ns, t.name, patch_type, patch, sub, WriteOptions{DryRun(c)});
      if (!patched) return ErrorReply(patched.error());
      return JsonReply(http::status::ok, **patched);
    }
    case http::verb::delete_: {
      DeleteOptions d;
      d.dry_run = DryRun(c);
      if (!c.body->empty()) {
        auto body = ParseObjectBody(c);
        if (!body) return ErrorReply(body.error());
        if (const json::value* pre = body->if_contains("preconditions"); pre && pre->is_object()) {
          if (const json::value* uid = pre->as_object().if_contains("uid"); uid && uid->is_string()) {
            d.uid = std::string(uid->get_string());
          }
          if (const json::value* rv = pre->as_object().if_contains("resourceVersion");
              rv && rv->is_string()) {
            d.resource_version = std::string(rv->get_string());
          }
        }
        if (const json::value* dry = body->if_contains("dryRun");
            dry && dry->is_array() && !dry->as_array().empty()) {
          d.dry_run = true;
        }
      }
      auto deleted = store.Delete(type, t.ns, t.name, d);
      if (!deleted) return ErrorReply(deleted.error());
      if (!deleted->deleted) return JsonReply(http::status::ok, *deleted->object);
      json::object details{{"name", t.name}, {"kind", type.plural}};
      if (!type.group.empty()) details["group"] = type.group;
      if (const json::value* meta = deleted->object->if_contains("metadata")) {
        if (const json::value* uid = meta->as_object().if_contains("uid")) details["uid"] = *uid;
      }
      return JsonReply(http::status::ok, SuccessStatus(200, std::move(details)));
    }
    default:
      return ErrorReply(MethodNotAllowed(c.method_name, c.path));
  }
}

Outcome ApiServer::Impl::Watch(const Call& c, const Target& t) {
  auto timeout = IntParam(c, "timeoutSeconds");
  if (!timeout) return ErrorReply(timeout.error());
  WatchStart start;
  // At most a year: a client's number added to the clock must not overflow it.
  constexpr std::int64_t kLongestWatchSeconds = 365LL * 24 * 3600;
  start.timeout = *timeout > 0 ? std::chrono::seconds(std::min(*timeout, kLongestWatchSeconds))
                               : options.default_watch_timeout;
  const auto expired = [&](ApiError e) -> Outcome {
    if (options.expired_watch_mode == ExpiredWatchMode::kHttpStatus) return ErrorReply(e);
    start.error = std::move(e);
    return start;
  };
  if (expire_watches > 0) {
    --expire_watches;
    return expired(Expired(fmt::format("too old resource version: {} ({})",
                                       c.Query("resourceVersion").value_or(""), store.resource_version())));
  }
  WatchOptions o;
  o.label_selector = c.Query("labelSelector").value_or("");
  o.field_selector = c.Query("fieldSelector").value_or("");
  o.resource_version = c.Query("resourceVersion");
  o.resource_version_match = c.Query("resourceVersionMatch").value_or("");
  o.send_initial_events = c.Flag("sendInitialEvents");
  o.allow_bookmarks = c.Flag("allowWatchBookmarks");
  auto watcher = store.Watch(*t.type, t.ns, o);
  if (!watcher) {
    if (watcher.error().code == 410) return expired(watcher.error());
    return ErrorReply(watcher.error());
  }
  start.watcher = std::move(*watcher);
  return start;
}

// ---------------------------------------------------------------------------------------------------------
// Answers

namespace {

std::string EventChunk(const WatchEvent& e, bool table, const ResourceType& type, TimePoint now) {
  std::string out = fmt::format("{{\"type\":\"{}\",\"object\":", ToString(e.type));
  if (table &&
      (e.type == EventType::kAdded || e.type == EventType::kModified || e.type == EventType::kDeleted)) {
    ListResult one;
    one.items.push_back(e.object);
    out += json::serialize(TableForList(type, one, now, /*include_headers=*/false));
  } else {
    out += json::serialize(*e.object);
  }
  out += "}\n";
  return out;
}

// Built field by field: GCC 12 destroys members of a braced aggregate twice when the braces hold a co_await.
k8s::ServerResponse ResponseOf(const Reply& r) {
  k8s::ServerResponse res;
  res.status = static_cast<unsigned>(r.status);
  res.content_type = r.content_type;
  res.body = r.body;
  res.headers.emplace_back("Cache-Control", "no-cache, private");
  if (r.retry_after > 0) res.headers.emplace_back("Retry-After", std::to_string(r.retry_after));
  return res;
}

k8s::ServerResponse Unanswered() {
  k8s::ServerResponse res;
  res.close_without_answer = true;
  return res;
}

// A request the server could not read: a head or trailer too large is answered 413 with a Status; a
// malformed one closes the connection unanswered.
std::optional<k8s::ServerResponse> AnswerBadRequest(k8s::BadRequest bad) {
  if (bad == k8s::BadRequest::kMalformed) return std::nullopt;
  return ResponseOf(ErrorReply(RequestEntityTooLarge(fmt::format(
      "the request head or trailer is larger than the server accepts ({} bytes)", k8s::kMaxHeaderLimit))));
}

// Streams one watch: chunked JSON events as they happen, bookmarks, until its timeout, an overflow, the
// watch dropped (the connection closed abruptly) or the client gone.
asio::awaitable<void> StreamWatch(std::shared_ptr<ApiServer::Impl> self, k8s::ResponseStream& out,
                                  WatchStart start, bool table) {
  k8s::ServerResponse head;
  head.content_type = "application/json";
  head.headers.emplace_back("Cache-Control", "no-cache, private");
  if (!co_await out.WriteHead(head)) co_return;
  if (start.error) {
    const WatchEvent e{EventType::kError, std::make_shared<const json::object>(StatusJson(*start.error))};
    co_await out.WriteChunk(EventChunk(e, false, *FindResource("", "v1", "pods"), {}));
    co_return;
  }
  Watcher& w = *start.watcher;
  ++self->watches;
  ScopeExit unregister([&] {
    w.SetNotify(nullptr);
    --self->watches;
  });
  w.SetNotify([&out] { out.Notify(); });
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + start.timeout;
  auto next_bookmark = Clock::now() + self->options.bookmark_interval;
  for (;;) {
    while (w.HasEvents()) {
      const WatchEvent e = w.Pop();
      if (!co_await out.WriteChunk(EventChunk(e, table, w.type(), self->store.Now()))) co_return;
    }
    if (out.closed()) co_return;
    if (w.end() == Watcher::End::kDropped) {
      out.Abort();  // abrupt: no final chunk
      co_return;
    }
    if (w.end() == Watcher::End::kOverflow) co_return;
    const auto now = Clock::now();
    if (now >= deadline) co_return;
    if (w.bookmarks_allowed() && (w.TakeBookmarkRequest() || now >= next_bookmark)) {
      next_bookmark = now + self->options.bookmark_interval;
      const WatchEvent mark = w.Bookmark(self->store.resource_version());
      if (!co_await out.WriteChunk(EventChunk(mark, false, w.type(), {}))) co_return;
      continue;
    }
    const auto woke =
        co_await out.WaitUntil(w.bookmarks_allowed() ? std::min(deadline, next_bookmark) : deadline);
    if (woke == k8s::ResponseStream::Woke::kPeerGone) {
      out.Abort();  // the client is gone
      co_return;
    }
    if (woke == k8s::ResponseStream::Woke::kStopping) co_return;  // the server shuts down: the watch ends
  }
}

// One request, as the HTTP server hands it over: authenticated, delayed, fault-injected, handled, answered
// whole or streamed.
asio::awaitable<k8s::ServerResponse> Answer(std::shared_ptr<ApiServer::Impl> self,
                                            const k8s::ServerRequest& r) {
  if (r.body_too_large) {
    co_return ResponseOf(ErrorReply(RequestEntityTooLarge(fmt::format(
        "the request is larger than the server accepts ({} bytes of body)", self->options.body_limit))));
  }
  ++self->requests;
  const Call call = Decode(r);
  if (auto delay = self->LatencyFor(call.path); delay.count() > 0) {
    const auto until = std::chrono::steady_clock::now() + delay;
    while (!r.stream->closed() && std::chrono::steady_clock::now() < until) {
      if (co_await r.stream->WaitUntil(until) == k8s::ResponseStream::Woke::kStopping) break;
    }
    if (r.stream->closed()) co_return Unanswered();
  }
  Outcome outcome = Reply{};
  if (auto refused = self->Unauthenticated(call, r.peer_certificate)) {
    outcome = ErrorReply(*refused);
  } else {
    outcome = self->Handle(call);
  }
  if (auto* reply = std::get_if<Reply>(&outcome)) {
    if (self->DropAnswer(call)) co_return Unanswered();  // done, but the client never hears of it
    co_return ResponseOf(*reply);
  }
  co_await StreamWatch(self, *r.stream, std::move(std::get<WatchStart>(outcome)), WantsTable(call.accept));
  co_return k8s::ServerResponse{};  // not sent: the answer was streamed
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// ApiServer

ApiServer::ApiServer(asio::io_context& ioc, ApiServerOptions options, const Clock* clock)
    : impl_(std::make_shared<Impl>(ioc, std::move(options), clock)) {}

ApiServer::~ApiServer() { Stop(); }

Result<std::uint16_t> ApiServer::Listen() {
  Impl& s = *impl_;
  if (!s.http) {
    const ApiServerOptions& o = s.options;
    if (o.tls_cert_pem.empty() != o.tls_key_pem.empty()) {
      return Error{"sim-apiserver: TLS needs both a certificate and its private key"};
    }
    if (!o.client_ca_pem.empty() && o.tls_cert_pem.empty()) {
      return Error{"sim-apiserver: client certificates need TLS (a serving certificate and key)"};
    }
    k8s::HttpServerOptions http;
    if (!o.tls_cert_pem.empty()) {
      auto ctx = MakeServerTlsContext(o.tls_cert_pem, o.tls_key_pem, o.client_ca_pem);
      if (!ctx) return Error{"sim-apiserver: " + ctx.error().message};
      http.tls_context = std::move(*ctx);
      // A client certificate that does not verify is answered 401, as kube-apiserver does.
      http.unverified_client_certificates_complete_handshake = true;
    }
    boost::system::error_code ec;
    const std::string host = o.host == "localhost" ? "127.0.0.1" : o.host;
    const auto address = asio::ip::make_address(host, ec);
    if (ec) return Error{fmt::format("sim-apiserver: '{}' is not an IP address", o.host)};
    http.address =
        address.is_v6() ? fmt::format("[{}]:{}", host, o.port) : fmt::format("{}:{}", host, o.port);
    http.address_flag = "sim-apiserver";
    http.body_limit = o.body_limit;
    // One deadline for the wait for a request and the request itself; no connection cap.
    http.header_timeout = http.read_timeout = http.idle_timeout = o.read_timeout;
    http.read_timeout_counts_idle_wait = true;
    http.write_timeout = o.write_timeout;
    http.handshake_timeout = o.tls_handshake_timeout;
    http.linger_timeout = o.tls_shutdown_timeout;
    http.max_connections = 0;
    http.bad_request_answer = AnswerBadRequest;
    s.http = std::make_unique<k8s::HttpServer>(s.ioc.get_executor(), std::move(http));
    // Weak: the server's routes must not keep the state that owns the server alive.
    s.http->Fallback([weak = std::weak_ptr<Impl>(impl_)](
                         const k8s::ServerRequest& r) -> asio::awaitable<k8s::ServerResponse> {
      auto self = weak.lock();
      if (!self) co_return Unanswered();
      co_return co_await Answer(std::move(self), r);
    });
  }
  auto port = s.http->Listen();
  if (!port) return Error{"sim-apiserver: " + port.error().message};
  s.port = *port;
  return s.port;
}

asio::awaitable<void> ApiServer::Serve() {
  const std::shared_ptr<Impl> self = impl_;
  if (!self->http) throw std::logic_error("sim-apiserver: Serve() without a successful Listen()");
  // However the accept loop ends, every connection ends with it.
  ScopeExit close_all([&] { self->http->Close(); });
  co_await self->http->Serve();
}

Result<std::uint16_t> ApiServer::Start() {
  auto port = Listen();
  if (!port) return port;
  std::weak_ptr<Impl> weak = impl_;
  asio::co_spawn(impl_->ioc, Serve(), [weak](std::exception_ptr e) {
    if (auto self = weak.lock(); self && e) self->failure = e;
  });
  return port;
}

void ApiServer::Stop() {
  if (impl_->http) impl_->http->Close();
}

std::exception_ptr ApiServer::failure() const { return impl_->failure; }
std::uint16_t ApiServer::port() const { return impl_->port; }
std::string ApiServer::url() const { return impl_->ServerUrl(); }
bool ApiServer::tls() const { return !impl_->options.tls_cert_pem.empty(); }
Store& ApiServer::store() { return impl_->store; }
const Store& ApiServer::store() const { return impl_->store; }

std::string ApiServer::Kubeconfig() const {
  return sim::Kubeconfig(impl_->ServerUrl(), impl_->options, tls());
}

Result<void> ApiServer::WriteKubeconfig(const std::string& path) const {
  // Owner-only, like kubectl's own: it may hold a token or a private key.
  return k8s::ReplaceFile(path, Kubeconfig(), 0600, "kubeconfig");
}

void ApiServer::FailNext(FaultRule rule) {
  if (rule.count > 0) impl_->faults.push_back(std::move(rule));
}
void ApiServer::ClearFaults() { impl_->faults.clear(); }
void ApiServer::SetRandomFaults(RandomFaults faults) {
  impl_->fault_rng.seed(faults.seed);
  impl_->random_faults = faults;
}
ApiServer::FaultStats ApiServer::random_fault_stats() const { return impl_->fault_stats; }
void ApiServer::SetLatency(std::chrono::milliseconds delay, std::string path_prefix) {
  impl_->latency = delay;
  impl_->latency_prefix = std::move(path_prefix);
}
void ApiServer::DropWatches() { impl_->store.DropWatchers(); }
void ApiServer::CompactHistory() { impl_->store.Compact(); }
void ApiServer::ExpireNextWatches(int n) { impl_->expire_watches = std::max(0, n); }
void ApiServer::ExpireNextLists(int n) { impl_->expire_lists = std::max(0, n); }
void ApiServer::ExpireContinueTokens() { impl_->store.ExpireContinueTokens(); }
void ApiServer::set_expired_watch_mode(ExpiredWatchMode mode) { impl_->options.expired_watch_mode = mode; }
void ApiServer::SendBookmarks() { impl_->store.RequestBookmarks(); }
std::size_t ApiServer::open_watches() const { return impl_->watches; }
std::size_t ApiServer::open_connections() const { return impl_->http ? impl_->http->open_connections() : 0; }
std::uint64_t ApiServer::requests_served() const { return impl_->requests; }
std::uint64_t ApiServer::connection_failures() const {
  return impl_->http ? impl_->http->connection_failures() : 0;
}

}  // namespace hami::sim
