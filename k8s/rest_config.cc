#include "k8s/rest_config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>

#include "core/base64.h"
#include "core/strings.h"
#include "k8s/files.h"

namespace hami::k8s {

std::string RestConfig::HostHeader() const {
  const bool ipv6 = host.find(':') != std::string::npos;
  return fmt::format("{}{}{}:{}", ipv6 ? "[" : "", host, ipv6 ? "]" : "", port);
}

ConfigEnv ConfigEnv::System() {
  ConfigEnv e;
  e.getenv = [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
  e.read_file = [](const std::string& path) -> Result<std::string> {
    auto text = ReadWholeFile(path);
    if (!text) return text.error();
    return Ok(std::move(*text));
  };
  return e;
}

Result<void> SetServer(std::string_view url, RestConfig& cfg) {
  const auto scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) {
    return Error{fmt::format("server '{}': want a URL such as https://host:6443", url)};
  }
  cfg.scheme = ToLower(url.substr(0, scheme_end));
  if (cfg.scheme != "https" && cfg.scheme != "http") {
    return Error{fmt::format("server '{}': scheme must be https or http", url)};
  }
  std::string_view rest = url.substr(scheme_end + 3);
  if (auto slash = rest.find('/'); slash != std::string_view::npos) rest = rest.substr(0, slash);
  std::string_view port;
  if (!rest.empty() && rest.front() == '[') {
    const auto close = rest.find(']');
    if (close == std::string_view::npos) return Error{fmt::format("server '{}': unclosed '['", url)};
    cfg.host = std::string(rest.substr(1, close - 1));
    if (close + 1 < rest.size() && rest[close + 1] == ':') port = rest.substr(close + 2);
  } else if (auto colon = rest.rfind(':'); colon != std::string_view::npos) {
    cfg.host = std::string(rest.substr(0, colon));
    port = rest.substr(colon + 1);
  } else {
    cfg.host = std::string(rest);
  }
  if (cfg.host.empty()) return Error{fmt::format("server '{}': no host", url)};
  cfg.port = port.empty() ? (cfg.scheme == "https" ? "443" : "80") : std::string(port);
  return {};
}

namespace {

std::string Resolve(const std::string& base_file, const std::string& path) {
  if (path.empty() || path.front() == '/') return path;
  const auto slash = base_file.rfind('/');
  return slash == std::string::npos ? path : base_file.substr(0, slash + 1) + path;
}

// The entry's value (`context`, `cluster` or `user`) of the list item called `name`.
std::optional<YAML::Node> FindNamed(const YAML::Node& list, const std::string& name, const char* value_key) {
  if (!list || !list.IsSequence()) return std::nullopt;
  for (const auto& item : list) {
    if (item["name"] && item["name"].as<std::string>() == name && item[value_key] &&
        item[value_key].IsMap()) {
      return item[value_key];
    }
  }
  return std::nullopt;
}

std::string Str(const YAML::Node& n, const char* key) {
  const YAML::Node v = n[key];
  return v && v.IsScalar() ? v.as<std::string>() : std::string();
}

// "<key>-data" (base64) or "<key>" (a file): the PEM text, or "" when neither is set.
Result<std::string> Pem(const YAML::Node& n, const std::string& key, const std::string& file,
                        const ConfigEnv& env, const std::string& where) {
  if (const std::string data = Str(n, (key + "-data").c_str()); !data.empty()) {
    auto decoded = Base64Decode(data);
    if (!decoded) return Error{fmt::format("{}: {}-data: {}", where, key, decoded.error().message)};
    return decoded;
  }
  if (const std::string path = Str(n, key.c_str()); !path.empty()) {
    auto text = env.read_file(Resolve(file, path));
    if (!text) return Error{fmt::format("{}: {}: {}", where, key, text.error().message)};
    return text;
  }
  return Ok(std::string());
}

}  // namespace

Result<RestConfig> ParseKubeconfig(std::string_view text, const std::string& path, const ConfigEnv& env,
                                   std::optional<std::string> context) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return Error{fmt::format("kubeconfig {}:{}: invalid YAML: {}", path, e.mark.line + 1, e.msg)};
  }
  try {
    const std::string ctx_name = context.value_or(Str(root, "current-context"));
    if (ctx_name.empty()) return Error{fmt::format("kubeconfig {}: no current-context", path)};
    const auto ctx = FindNamed(root["contexts"], ctx_name, "context");
    if (!ctx) return Error{fmt::format("kubeconfig {}: context '{}' not found", path, ctx_name)};
    const YAML::Node c = *ctx;
    const std::string cluster_name = Str(c, "cluster");
    const std::string user_name = Str(c, "user");
    const auto found_cluster = FindNamed(root["clusters"], cluster_name, "cluster");
    if (!found_cluster)
      return Error{fmt::format("kubeconfig {}: cluster '{}' not found", path, cluster_name)};
    const YAML::Node cluster = *found_cluster;
    RestConfig cfg;
    cfg.source = fmt::format("kubeconfig {} context {}", path, ctx_name);
    const std::string where = fmt::format("kubeconfig {} cluster {}", path, cluster_name);
    if (auto ok = SetServer(Str(cluster, "server"), cfg); !ok)
      return Error{where + ": " + ok.error().message};
    cfg.tls_server_name = Str(cluster, "tls-server-name");
    cfg.insecure_skip_tls_verify = Str(cluster, "insecure-skip-tls-verify") == "true";
    auto ca = Pem(cluster, "certificate-authority", path, env, where);
    if (!ca) return ca.error();
    cfg.ca_pem = *ca;
    if (const std::string ns = Str(c, "namespace"); !ns.empty()) cfg.ns = ns;
    if (!user_name.empty()) {
      const auto found_user = FindNamed(root["users"], user_name, "user");
      if (!found_user) return Error{fmt::format("kubeconfig {}: user '{}' not found", path, user_name)};
      const YAML::Node user = *found_user;
      const std::string uwhere = fmt::format("kubeconfig {} user {}", path, user_name);
      auto cert = Pem(user, "client-certificate", path, env, uwhere);
      if (!cert) return cert.error();
      auto key = Pem(user, "client-key", path, env, uwhere);
      if (!key) return key.error();
      cfg.client_cert_pem = *cert;
      cfg.client_key_pem = *key;
      if (cfg.client_cert_pem.empty() != cfg.client_key_pem.empty()) {
        return Error{uwhere + ": client certificate and client key must be given together"};
      }
      cfg.token = Str(user, "token");
      if (const std::string tf = Str(user, "tokenFile"); !tf.empty()) cfg.token_file = Resolve(path, tf);
      if (user["exec"] || user["auth-provider"]) {
        return Error{uwhere +
                     ": exec and auth-provider credentials are not supported; use a token, a token "
                     "file or a client certificate"};
      }
    }
    return cfg;
  } catch (const YAML::Exception& e) {
    return Error{fmt::format("kubeconfig {}:{}: unexpected shape: {}", path, e.mark.line + 1, e.msg)};
  }
}

Result<RestConfig> InClusterConfig(const ConfigEnv& env) {
  constexpr std::string_view kDir = "/var/run/secrets/kubernetes.io/serviceaccount/";
  const auto host = env.getenv("KUBERNETES_SERVICE_HOST");
  const auto port = env.getenv("KUBERNETES_SERVICE_PORT");
  if (!host || !port || host->empty() || port->empty()) {
    return Error{"not running in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set"};
  }
  RestConfig cfg;
  cfg.scheme = "https";
  cfg.host = *host;
  cfg.port = *port;
  cfg.source = "in-cluster service account";
  cfg.token_file = std::string(kDir) + "token";
  auto token = env.read_file(cfg.token_file);
  if (!token) return Error{fmt::format("in-cluster: service-account token: {}", token.error().message)};
  auto ca = env.read_file(std::string(kDir) + "ca.crt");
  if (!ca) return Error{fmt::format("in-cluster: service-account CA: {}", ca.error().message)};
  cfg.ca_pem = *ca;
  if (auto ns = env.read_file(std::string(kDir) + "namespace"); ns) {
    cfg.ns = std::string(Trim(*ns));
  } else if (auto pod_ns = env.getenv("POD_NAMESPACE"); pod_ns && !pod_ns->empty()) {
    cfg.ns = *pod_ns;
  }
  return cfg;
}

Result<RestConfig> ResolveRestConfig(const std::string& kubeconfig_flag, const ConfigEnv& env) {
  const auto from_file = [&](const std::string& path) -> Result<RestConfig> {
    auto text = env.read_file(path);
    if (!text) return Error{fmt::format("kubeconfig: {}", text.error().message)};
    return ParseKubeconfig(*text, path, env);
  };
  if (!kubeconfig_flag.empty()) return from_file(kubeconfig_flag);
  if (auto list = env.getenv("KUBECONFIG"); list && !list->empty()) {
    for (std::string_view p : Split(*list, ':')) {
      if (p.empty()) continue;
      if (env.read_file(std::string(p))) return from_file(std::string(p));
    }
  }
  if (auto home = env.getenv("HOME"); home && !home->empty()) {
    const std::string path = *home + "/.kube/config";
    if (env.read_file(path)) return from_file(path);
  }
  auto in_cluster = InClusterConfig(env);
  if (!in_cluster) {
    return Error{"no Kubernetes configuration: no --kubeconfig, $KUBECONFIG or ~/.kube/config, and " +
                 in_cluster.error().message};
  }
  return in_cluster;
}

RestConfig LoopbackHttp(std::uint16_t port) {
  RestConfig cfg;
  cfg.scheme = "http";
  cfg.host = "127.0.0.1";
  cfg.port = std::to_string(port);
  cfg.source = "loopback";
  return cfg;
}

}  // namespace hami::k8s
