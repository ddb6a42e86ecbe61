#pragma once
// The typed configuration: defaults <- YAML file(s) <- command-line flags (flags win).
//
// One YAML file (--config) holds a `scheduler:` section and HAMi's device-config vendor sections
// (`nvidia:`, `cambricon:`, ... with HAMi's key names, each read by the schema its backend declares), so
// HAMi's device-config.yaml
// (--device-config-file) is accepted as it is. Every problem (unknown key, bad value) is reported at once,
// with file and line; HAMi vendor sections this scheduler does not implement are accepted with a warning.
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/result.h"
#include "core/scheduler.h"
#include "extender/options.h"

namespace hami::config {

// The listeners, which cmd builds the servers from (HAMi flag names in comments).
struct ServingOptions {
  std::string http_bind = "127.0.0.1:8080";  // --http_bind
  std::string cert_file;                     // --cert_file
  std::string key_file;                      // --key_file
  std::string client_ca_file;                // --client-ca-file (ours): mTLS for the extender
  // The admission webhook on a listener of its own (ours; "" = /webhook on --http_bind, as HAMi serves it),
  // so the extender can stay on the pod's loopback. Always TLS: the API server calls webhooks over HTTPS
  // only.
  std::string webhook_bind;                    // --webhook-bind
  std::string webhook_cert_file;               // --webhook-cert-file
  std::string webhook_key_file;                // --webhook-key-file
  int max_connections = 1024;                  // --max-connections (ours), per listener; 0 = no cap
  int request_body_budget_mib = 64;            // --request-body-budget (ours), per pool (reviews, rest)
  std::string metrics_bind_address = ":9395";  // --metrics-bind-address
  bool profiling = false;                      // --profiling
};

// The Kubernetes API clients, which cmd builds (k8s::ClientOptions).
struct KubeClientOptions {
  std::string kubeconfig;           // --kubeconfig
  double qps = 5;                   // --kube-qps
  int burst = 10;                   // --kube-burst
  std::chrono::seconds timeout{0};  // --kube-timeout (seconds, 0 = none)
};

// Made of the settings of the parts that use them: each flag and key is read (and an enum parsed) once,
// into the struct its component takes whole.
struct Config {
  ServingOptions serving;
  KubeClientOptions kube;
  extender::ExtenderOptions extender;  // scheduling, node locks, health, leader election
  std::string log_level = "info";      // --log-level, or klog's -v
  // Vendors, keyed by HAMi section name (nvidia, cambricon, hygon, mthreads...).
  std::map<std::string, VendorSettings, std::less<>> vendors;
  // Files read, in order (for messages and --print-config).
  std::vector<std::string> sources;
  // Non-fatal notes for the log (ignored HAMi sections and no-op flags).
  std::vector<std::string> warnings;
};

// Reads one YAML document into `cfg`, overriding what it sets. Problems are appended as
// "<file>:<line>: <what is wrong; what is expected>"; nothing is dropped silently.
// Vendor sections are read by the schemas `vendors` holds (each backend declares its own); config/ knows no
// vendor.
void ApplyYaml(const std::string& text, const std::string& source_name, const BackendRegistry& vendors,
               Config& cfg, std::vector<std::string>& problems);
// Same, from a file; a file that cannot be read is a problem too.
void ApplyYamlFile(const std::string& path, const BackendRegistry& vendors, Config& cfg,
                   std::vector<std::string>& problems);

// The effective configuration as YAML, in the same shape the file takes (round-trips through ApplyYaml).
std::string ToYaml(const Config& cfg, const BackendRegistry& vendors);

// Go duration ("300ms", "28s", "5m", "1h30m") or a bare number of seconds.
Result<std::chrono::milliseconds> ParseDuration(std::string_view text);
// Go's spelling: 300000ms -> "5m", 28000 -> "28s", 1500 -> "1s500ms".
std::string FormatDuration(std::chrono::milliseconds d);

// Value rules shared by the YAML reader and the flag parser: each returns "" when the value is fine, else
// what is wrong and what is expected.
std::string GpuPolicyProblem(std::string_view value);
std::string NodePolicyProblem(std::string_view value);
std::string LogLevelProblem(std::string_view value);
// --leader-elect-mode: "follow" or "acquire"; the error says what was given and what is expected.
Result<extender::LeaderElectMode> ParseLeaderElectMode(std::string_view value);
std::string_view LeaderElectModeName(extender::LeaderElectMode mode);
// Checks that only make sense on the whole configuration (e.g. cert_file without key_file).
void ValidateConfig(const Config& cfg, std::vector<std::string>& problems);

// Joins problems into one message: "N problem(s) in configuration:\n  - ...".
Error ProblemsError(const std::vector<std::string>& problems);

}  // namespace hami::config
