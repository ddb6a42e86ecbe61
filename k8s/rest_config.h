#pragma once
// Where the API server is and how to authenticate: from a kubeconfig (--kubeconfig, $KUBECONFIG,
// ~/.kube/config) or from inside a pod (KUBERNETES_SERVICE_HOST/PORT and the service-account token and CA).
// Certificate data stays in memory; nothing is written to temporary files.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "core/base64.h"  // Base64Decode, for the kubeconfig's *-data fields
#include "core/result.h"

namespace hami::k8s {

struct RestConfig {
  std::string scheme = "https";  // "https" or "http"
  std::string host;              // name or address (IPv6 without brackets)
  std::string port = "443";
  std::string tls_server_name;  // SNI and certificate name; defaults to host
  std::string ca_pem;           // trusted CA bundle (PEM); empty = system default paths
  bool insecure_skip_tls_verify = false;
  std::string client_cert_pem;
  std::string client_key_pem;
  std::string token;       // static bearer token
  std::string token_file;  // bearer token re-read when it changes (service-account tokens rotate)
  std::string ns = "default";
  std::string source;  // where this came from, for messages ("kubeconfig /root/.kube/config context kind")

  bool tls() const { return scheme == "https"; }
  std::string HostHeader() const;  // host:port with IPv6 brackets
};

// The environment and file system, injected so tests need neither.
struct ConfigEnv {
  std::function<std::optional<std::string>(const std::string&)> getenv;
  std::function<Result<std::string>(const std::string&)> read_file;
  static ConfigEnv System();
};

// Parses a kubeconfig document; `path` resolves relative file references and names the file in errors.
Result<RestConfig> ParseKubeconfig(std::string_view text, const std::string& path, const ConfigEnv& env,
                                   std::optional<std::string> context = std::nullopt);
// In-cluster configuration; an error says which variable or file is missing.
Result<RestConfig> InClusterConfig(const ConfigEnv& env);
// --kubeconfig if given, else the first existing file of $KUBECONFIG (a ':'-separated list), else
// ~/.kube/config, else in-cluster.
Result<RestConfig> ResolveRestConfig(const std::string& kubeconfig_flag, const ConfigEnv& env);

// Plain HTTP to 127.0.0.1:`port` without credentials: the embedded API server and the extender in the demo,
// tests and benchmarks.
RestConfig LoopbackHttp(std::uint16_t port);

// Parses "https://host:port" (IPv6 in brackets) into scheme/host/port of `cfg`.
Result<void> SetServer(std::string_view url, RestConfig& cfg);

}  // namespace hami::k8s
