#include "config/flags.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cxxopts.hpp>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <system_error>

#include "core/strings.h"

namespace hami::config {

// Defined in config.cc: the value rules shared by the YAML reader and these flags.
namespace {

using Problems = std::vector<std::string>;

// What one flag does to the configuration. `flag` is "--name" (for messages), `value` the text given.
using ApplyFn = void (*)(const std::string& flag, const std::string& value, LoadedConfig& out,
                         Problems& problems);
using ShowDefaultFn = std::string (*)(const Config& defaults);

enum class Group { kServer, kScheduling, kKube, kLeader, kFiles, kLogging, kHami, kHelp };

struct FlagDef {
  std::string_view name;  // long name; "v" and "h" are single-letter (klog's -v, -h)
  Group group;
  bool boolean;                // true: `--flag` alone means true, a value goes after '='
  std::string_view arg;        // placeholder in the help ("ADDR"); "" for booleans
  std::string_view help;       // one line
  ApplyFn apply;               // nullptr: handled by LoadConfig itself (files, help, print-config)
  ShowDefaultFn show_default;  // nullptr: no default worth showing
  const VendorFlagOwner* vendor = nullptr;  // a vendor's flag (from its module or the registration list)
};

// ---- Value parsers; each reports "<flag>: <what is wrong>" ----

std::optional<bool> Bool(const std::string& flag, const std::string& value, Problems& problems) {
  auto v = ParseGoBool(value, flag + ":");
  if (!v) {
    problems.push_back(v.error().message);
    return std::nullopt;
  }
  return *v;
}

std::optional<std::int64_t> Int(const std::string& flag, const std::string& value, std::int64_t lo,
                                std::int64_t hi, std::string_view want, Problems& problems) {
  auto v = ParseInt64(Trim(value), flag + ":");
  if (!v) {
    problems.push_back(fmt::format("{}: '{}' is not an integer ({})", flag, value, want));
    return std::nullopt;
  }
  if (*v < lo || *v > hi) {
    problems.push_back(fmt::format("{}: {} is out of range ({})", flag, *v, want));
    return std::nullopt;
  }
  return *v;
}

std::optional<std::chrono::milliseconds> Duration(const std::string& flag, const std::string& value,
                                                  std::chrono::milliseconds min, bool whole_seconds,
                                                  Problems& problems) {
  auto d = ParseDuration(Trim(value));
  if (!d) {
    problems.push_back(fmt::format("{}: {}", flag, d.error().message));
    return std::nullopt;
  }
  if (*d < min) {
    problems.push_back(
        fmt::format("{}: '{}' is too short (want at least {})", flag, value, FormatDuration(min)));
    return std::nullopt;
  }
  if (whole_seconds && d->count() % 1000 != 0) {
    problems.push_back(fmt::format("{}: '{}' is not a whole number of seconds", flag, value));
    return std::nullopt;
  }
  return *d;
}

// A whole number of seconds, into a field of seconds or milliseconds.
template <typename Field>
void Seconds(const std::string& flag, const std::string& value, std::chrono::seconds min, Field& out,
             Problems& problems) {
  if (auto d = Duration(flag, value, min, true, problems)) out = std::chrono::duration_cast<Field>(*d);
}

void Checked(const std::string& flag, const std::string& value, std::string (*check)(std::string_view),
             std::string& out, Problems& problems) {
  if (auto p = check(value); !p.empty()) {
    problems.push_back(fmt::format("{}: {}", flag, p));
    return;
  }
  out = value;
}

// "k=v,k2=v2" (pflag's StringToString); "" clears the selector.
void LabelSelector(const std::string& flag, const std::string& value, Config& cfg, Problems& problems) {
  std::map<std::string, std::string> selector;
  bool ok = true;
  if (!Trim(value).empty()) {
    for (std::string_view pair : Split(value, ',')) {
      const std::string_view item = Trim(pair);
      const auto eq = item.find('=');
      if (eq == std::string_view::npos || Trim(item.substr(0, eq)).empty()) {
        problems.push_back(fmt::format("{}: '{}' is not a key=value pair (want k=v,k2=v2)", flag, item));
        ok = false;
        continue;
      }
      selector[std::string(Trim(item.substr(0, eq)))] = std::string(Trim(item.substr(eq + 1)));
    }
  }
  if (ok) cfg.extender.node_label_selector = std::move(selector);
}

std::string Quote(const std::string& s) { return s.empty() ? "none" : s; }
std::string ShowBool(bool b) { return b ? "true" : "false"; }

// A flag HAMi registers but whose value never reaches the scheduler (vendor resource names come from the
// device config). Accepted so the chart's command line works; a warning says where the setting lives.
void NoOpVendorFlag(const std::string& flag, const std::string& value, LoadedConfig& out, Problems&) {
  out.config.warnings.push_back(
      fmt::format("{}={} has no effect: HAMi takes vendor resource names from the device config "
                  "(--device-config-file), and so does this scheduler",
                  flag, value));
}

void IgnoredFlag(const std::string&, const std::string&, LoadedConfig&, Problems&) {}

// A field of the configuration, named by the path of members to it: Field<kServing,
// &ServingOptions::http_bind>.
template <auto... Path>
auto& Field(Config& c) {
  return (c.*....*Path);
}
template <auto... Path>
const auto& Field(const Config& c) {
  return (c.*....*Path);
}
constexpr auto kServing = &Config::serving;
constexpr auto kKube = &Config::kube;
constexpr auto kExtender = &Config::extender;
constexpr auto kAdmission = &extender::ExtenderOptions::admission;
constexpr auto kBind = &extender::ExtenderOptions::bind;
constexpr auto kFilter = &extender::ExtenderOptions::filter;
constexpr auto kLeadership = &extender::ExtenderOptions::leadership;
constexpr auto kRefit = &extender::ExtenderOptions::refit;
using extender::ExtenderOptions;
using extender::LeadershipOptions;

template <auto... Path>
void SetString(const std::string&, const std::string& value, LoadedConfig& out, Problems&) {
  Field<Path...>(out.config) = value;
}

template <auto... Path>
void SetBool(const std::string& flag, const std::string& value, LoadedConfig& out, Problems& problems) {
  if (auto v = Bool(flag, value, problems)) Field<Path...>(out.config) = *v;
}

// A duration in whole seconds of at least `Min` seconds.
template <int Min, auto... Path>
void SetSeconds(const std::string& flag, const std::string& value, LoadedConfig& out, Problems& problems) {
  Seconds(flag, value, std::chrono::seconds(Min), Field<Path...>(out.config), problems);
}

void SetGpuPolicy(const std::string& flag, const std::string& value, LoadedConfig& out, Problems& problems) {
  Checked(flag, value, &GpuPolicyProblem, out.config.extender.filter.policies.gpu_policy, problems);
}
void SetNodePolicy(const std::string& flag, const std::string& value, LoadedConfig& out, Problems& problems) {
  Checked(flag, value, &NodePolicyProblem, out.config.extender.filter.policies.node_policy, problems);
}
void SetLogLevel(const std::string& flag, const std::string& value, LoadedConfig& out, Problems& problems) {
  Checked(flag, value, &LogLevelProblem, out.config.log_level, problems);
}
void SetLabelSelector(const std::string& flag, const std::string& value, LoadedConfig& out,
                      Problems& problems) {
  LabelSelector(flag, value, out.config, problems);
}
void SetRetryTimeout(const std::string& flag, const std::string& value, LoadedConfig& out,
                     Problems& problems) {
  if (auto v = Duration(flag, value, std::chrono::milliseconds(0), false, problems))
    out.config.extender.bind.node_lock_retry_timeout = *v;
}
void SetKubeQps(const std::string& flag, const std::string& value, LoadedConfig& out, Problems& problems) {
  const std::string_view text = Trim(value);
  double v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(v)) {
    problems.push_back(fmt::format("{}: '{}' is not a number (want a number > 0)", flag, value));
  } else if (v <= 0) {
    problems.push_back(fmt::format("{}: {} is not a number > 0", flag, value));
  } else {
    out.config.kube.qps = v;
  }
}
void SetRequeueQps(const std::string& flag, const std::string& value, LoadedConfig& out, Problems& problems) {
  const std::string_view text = Trim(value);
  double v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(v) || v < 0) {
    problems.push_back(fmt::format("{}: '{}' is not a number >= 0", flag, value));
  } else {
    out.config.extender.requeue_qps = v;
  }
}
void SetMaxConnections(const std::string& flag, const std::string& value, LoadedConfig& out,
                       Problems& problems) {
  if (auto v =
          Int(flag, value, 0, 1048576, "want a number of connections from 0 (no cap) to 1048576", problems))
    out.config.serving.max_connections = static_cast<int>(*v);
}
void SetRequestBodyBudget(const std::string& flag, const std::string& value, LoadedConfig& out,
                          Problems& problems) {
  if (auto v = Int(flag, value, 8, 65536, "want MiB of request bodies in flight, from 8 to 65536", problems))
    out.config.serving.request_body_budget_mib = static_cast<int>(*v);
}
void SetBusyNodeThreshold(const std::string& flag, const std::string& value, LoadedConfig& out,
                          Problems& problems) {
  if (auto v = Int(flag, value, 0, 1000000, "want a number of allocations from 0 (off) to 1000000", problems))
    out.config.extender.filter.policies.busy_node_threshold = static_cast<int>(*v);
}
void SetFilterMode(const std::string& flag, const std::string& value, LoadedConfig& out, Problems& problems) {
  auto mode = ParseFilterMode(Trim(value));
  if (!mode) return problems.push_back(fmt::format("{} '{}': {}", flag, value, mode.error().message));
  out.config.extender.filter.policies.filter_mode = *mode;
}
// "SHAPE,SHAPE,..." (a shape has no ','); "" clears the list. ValidateConfig checks the list as a whole.
void SetCapacityShapes(const std::string& flag, const std::string& value, LoadedConfig& out,
                       Problems& problems) {
  std::vector<CapacityShape> shapes;
  bool ok = true;
  if (!Trim(value).empty()) {
    for (std::string_view text : Split(value, ',')) {
      auto shape = ParseCapacityShape(text);
      if (!shape) {
        problems.push_back(fmt::format("{}: {}", flag, shape.error().message));
        ok = false;
        continue;
      }
      shapes.push_back(std::move(*shape));
    }
  }
  if (ok) out.config.extender.capacity_shapes = std::move(shapes);
}
std::string ShowFilterMode(const Config& d) {
  return std::string(FilterModeName(d.extender.filter.policies.filter_mode));
}
std::string ShowBusyNodeThreshold(const Config& d) {
  return std::to_string(d.extender.filter.policies.busy_node_threshold);
}
void SetKubeBurst(const std::string& flag, const std::string& value, LoadedConfig& out, Problems& problems) {
  if (auto v = Int(flag, value, 1, 2147483647, "want an integer >= 1", problems))
    out.config.kube.burst = static_cast<int>(*v);
}
void SetLeaderElectMode(const std::string& flag, const std::string& value, LoadedConfig& out,
                        Problems& problems) {
  auto mode = ParseLeaderElectMode(value);
  if (!mode)
    return problems.push_back(fmt::format("{} (scheduler.leaderElectMode): {}", flag, mode.error().message));
  out.config.extender.leadership.mode = *mode;
}
std::string ShowLeaderElectMode(const Config& d) {
  return std::string(LeaderElectModeName(d.extender.leadership.mode));
}
// klog's -v: 0-1 info, 2-3 debug, 4 and up trace.
void SetVerbosity(const std::string& flag, const std::string& value, LoadedConfig& out, Problems& problems) {
  if (auto v = Int(flag, value, 0, 2147483647, "want a verbosity >= 0", problems))
    out.config.log_level = *v >= 4 ? "trace" : *v >= 2 ? "debug" : "info";
}
// HAMi parses --debug and never reads it; only its value is checked.
void CheckBoolOnly(const std::string& flag, const std::string& value, LoadedConfig&, Problems& problems) {
  (void)Bool(flag, value, problems);
}
// klog's --log_file_max_size (MB): a value is checked, then ignored.
void CheckMegabytesOnly(const std::string& flag, const std::string& value, LoadedConfig&,
                        Problems& problems) {
  (void)Int(flag, value, 0, std::numeric_limits<std::int64_t>::max(), "megabytes, 0 or more", problems);
}

// A duration of at least a millisecond (fractions of a second allowed).
template <auto... Path>
void SetMillis(const std::string& flag, const std::string& value, LoadedConfig& out, Problems& problems) {
  if (auto v = Duration(flag, value, std::chrono::milliseconds(1), false, problems))
    Field<Path...>(out.config) = *v;
}
template <auto... Path>
std::string ShowMillis(const Config& d) {
  return FormatDuration(Field<Path...>(d));
}

template <auto... Path>
std::string ShowString(const Config& d) {
  return Quote(Field<Path...>(d));
}
template <auto... Path>
std::string ShowBoolMember(const Config& d) {
  return ShowBool(Field<Path...>(d));
}
template <auto... Path>
std::string ShowSecondsMember(const Config& d) {
  return FormatDuration(Field<Path...>(d));
}
std::string ShowNone(const Config&) { return "none"; }
std::string ShowZero(const Config&) { return "0"; }
std::string ShowGpuPolicy(const Config& d) { return d.extender.filter.policies.gpu_policy; }
std::string ShowNodePolicy(const Config& d) { return d.extender.filter.policies.node_policy; }
std::string ShowRetryTimeout(const Config& d) {
  return FormatDuration(d.extender.bind.node_lock_retry_timeout);
}
std::string ShowMaxConnections(const Config& d) { return std::to_string(d.serving.max_connections); }
std::string ShowRequestBodyBudget(const Config& d) {
  return std::to_string(d.serving.request_body_budget_mib);
}
std::string ShowKubeQps(const Config& d) { return fmt::format("{}", d.kube.qps); }
std::string ShowRequeueQps(const Config& d) {
  return d.extender.requeue_qps ? fmt::format("{}", *d.extender.requeue_qps) : "half of --kube-qps";
}
std::string ShowKubeBurst(const Config& d) { return fmt::format("{}", d.kube.burst); }
std::string ShowKubeTimeout(const Config& d) { return fmt::format("{}", d.kube.timeout.count()); }

// The single table behind parsing, applying and the help text. Order within a group is the help order, and
// flags are applied in table order (so --log-level, after -v, wins over it).
const FlagDef kOwnFlags[] = {
    // Extender server.
    {"http_bind", Group::kServer, false, "ADDR",
     "listen address of the extender (filter, bind, webhook, healthz, readyz, metrics)",
     &SetString<kServing, &ServingOptions::http_bind>, &ShowString<kServing, &ServingOptions::http_bind>},
    {"cert_file", Group::kServer, false, "FILE", "TLS certificate; TLS is on when both cert and key are set",
     &SetString<kServing, &ServingOptions::cert_file>, &ShowString<kServing, &ServingOptions::cert_file>},
    {"key_file", Group::kServer, false, "FILE", "TLS private key",
     &SetString<kServing, &ServingOptions::key_file>, &ShowString<kServing, &ServingOptions::key_file>},
    {"client-ca-file", Group::kServer, false, "FILE",
     "with TLS: the extender requires client certificates signed by these PEM CAs (mTLS)",
     &SetString<kServing, &ServingOptions::client_ca_file>,
     &ShowString<kServing, &ServingOptions::client_ca_file>},
    {"webhook-bind", Group::kServer, false, "ADDR",
     "serve the admission webhook (/webhook, /healthz, /readyz) on this address of its own, always TLS, so "
     "that the extender can stay on loopback (empty: /webhook is served on --http_bind, as HAMi does)",
     &SetString<kServing, &ServingOptions::webhook_bind>,
     &ShowString<kServing, &ServingOptions::webhook_bind>},
    {"webhook-cert-file", Group::kServer, false, "FILE", "TLS certificate of --webhook-bind",
     &SetString<kServing, &ServingOptions::webhook_cert_file>,
     &ShowString<kServing, &ServingOptions::webhook_cert_file>},
    {"webhook-key-file", Group::kServer, false, "FILE", "TLS private key of --webhook-bind",
     &SetString<kServing, &ServingOptions::webhook_key_file>,
     &ShowString<kServing, &ServingOptions::webhook_key_file>},
    {"max-connections", Group::kServer, false, "N",
     "open connections per listener at most (0 = no cap); idle ones are closed first", &SetMaxConnections,
     &ShowMaxConnections},
    {"request-body-budget", Group::kServer, false, "MiB",
     "request bodies held at once at most, in each of two pools every listener shares: webhook reviews (up "
     "to 7 MiB each) and the rest (/filter, /bind: 1 MiB); a request that does not fit waits, unread",
     &SetRequestBodyBudget, &ShowRequestBodyBudget},
    {"scheduler-name", Group::kServer, false, "NAME",
     "written by the webhook as spec.schedulerName of pods using devices (\"\" = left as it is); the "
     "source of pod events",
     &SetString<kExtender, kAdmission, &AdmissionOptions::scheduler_name>,
     &ShowString<kExtender, kAdmission, &AdmissionOptions::scheduler_name>},
    {"metrics-bind-address", Group::kServer, false, "ADDR",
     "listen address of the Prometheus /metrics server",
     &SetString<kServing, &ServingOptions::metrics_bind_address>,
     &ShowString<kServing, &ServingOptions::metrics_bind_address>},
    {"legacy-metrics", Group::kServer, true, "", "also export HAMi's legacy metric names",
     &SetBool<kExtender, &ExtenderOptions::legacy_metrics>,
     &ShowBoolMember<kExtender, &ExtenderOptions::legacy_metrics>},
    {"profiling", Group::kServer, true, "",
     "accepted for HAMi compatibility; no effect (HAMi's are Go pprof endpoints; none are served here)",
     &SetBool<kServing, &ServingOptions::profiling>, &ShowBoolMember<kServing, &ServingOptions::profiling>},
    // Scheduling.
    {"gpu-scheduler-policy", Group::kScheduling, false, "POLICY",
     "default device policy: binpack, spread, topology-aware, mutex, numa, or a comma list", &SetGpuPolicy,
     &ShowGpuPolicy},
    {"node-scheduler-policy", Group::kScheduling, false, "POLICY", "default node policy: binpack or spread",
     &SetNodePolicy, &ShowNodePolicy},
    {"filter-mode", Group::kScheduling, false, "MODE",
     "one-node: /filter answers the node the device policy chose and reserves its devices (HAMi's answer); "
     "all-fitting: every node where the pod fits, and /prioritize scores them, so kube-scheduler weighs its "
     "soft constraints too (register prioritizeVerb; /bind then fits the pod on the node it chose)",
     &SetFilterMode, &ShowFilterMode},
    {"capacity-shape", Group::kScheduling, false, "SHAPE,...",
     "pod shapes NAME=VENDOR:COUNTxMEMORY[:CORES] (e.g. a10-quarter=NVIDIA:1x6000:25; at most 16): /metrics "
     "says per node how many pods of each still fit, and each vendor's largest free slice",
     &SetCapacityShapes, &ShowNone},
    {"refusal-annotation", Group::kScheduling, true, "",
     "a pod our filter refuses carries the reason in annotation hami.io/filter-refusal (patched only when "
     "the reason changes; each patch makes kube-scheduler try the pod once more), removed once it fits",
     &SetBool<kExtender, kFilter, &extender::FilterOptions::refusal_annotation>,
     &ShowBoolMember<kExtender, kFilter, &extender::FilterOptions::refusal_annotation>},
    {"busy-node-threshold", Group::kScheduling, false, "N",
     "allocations in flight (reserved or bound, not yet set up by the device plugin) that make a node busy: "
     "binpack then sends the pod to the next node in its order that is not busy, among the nodes it fills "
     "with the pods waiting for a decision; spread ranks busy nodes last (0 = the node policy alone)",
     &SetBusyNodeThreshold, &ShowBusyNodeThreshold},
    {"node-label-selector", Group::kScheduling, false, "K=V,...",
     "only nodes with all these labels are considered", &SetLabelSelector, &ShowNone},
    {"node-lock-timeout", Group::kScheduling, false, "DURATION", "a node lock older than this is stale",
     &SetSeconds<1, kExtender, &ExtenderOptions::node_lock_timeout>,
     &ShowSecondsMember<kExtender, &ExtenderOptions::node_lock_timeout>},
    {"node-lock-retry-timeout", Group::kScheduling, false, "DURATION",
     "how long bind retries a busy node lock (0 = no retry; keep below the extender httpTimeout)",
     &SetRetryTimeout, &ShowRetryTimeout},
    {"force-overwrite-default-scheduler", Group::kScheduling, true, "",
     "the webhook also takes pods naming default-scheduler (false: only pods naming no scheduler or ours)",
     &SetBool<kExtender, kAdmission, &AdmissionOptions::force_overwrite_default_scheduler>,
     &ShowBoolMember<kExtender, kAdmission, &AdmissionOptions::force_overwrite_default_scheduler>},
    {"health-check-interval", Group::kScheduling, false, "DURATION", "how often node handshakes are checked",
     &SetSeconds<1, kExtender, &ExtenderOptions::health_interval>,
     &ShowSecondsMember<kExtender, &ExtenderOptions::health_interval>},
    {"handshake-timeout", Group::kScheduling, false, "DURATION",
     "a node whose device plugin has not answered the handshake for this long is unhealthy",
     &SetSeconds<1, kExtender, &ExtenderOptions::handshake_timeout>,
     &ShowSecondsMember<kExtender, &ExtenderOptions::handshake_timeout>},
    {"reservation-timeout", Group::kScheduling, false, "DURATION",
     "devices reserved for a pod that is not bound this long after its filter (or bind) are freed and its "
     "allocation annotations removed (keep above the extender httpTimeout and --node-lock-retry-timeout)",
     &SetSeconds<1, kExtender, kBind, &extender::BindOptions::reservation_timeout>,
     &ShowSecondsMember<kExtender, kBind, &extender::BindOptions::reservation_timeout>},
    {"requeue-qps", Group::kScheduling, false, "QPS",
     "pods our filter refused are nudged (an annotation patched) for kube-scheduler to try again once the "
     "devices they need are free, at most this many a second (0 = never)",
     &SetRequeueQps, &ShowRequeueQps},
    // Kubernetes client.
    {"kubeconfig", Group::kKube, false, "FILE",
     "kubeconfig file (none: $KUBECONFIG, else ~/.kube/config, else the in-cluster service account)",
     &SetString<kKube, &KubeClientOptions::kubeconfig>, nullptr},
    {"kube-qps", Group::kKube, false, "QPS", "API requests per second", &SetKubeQps, &ShowKubeQps},
    {"kube-burst", Group::kKube, false, "N", "API request burst", &SetKubeBurst, &ShowKubeBurst},
    {"kube-timeout", Group::kKube, false, "SECONDS",
     "API request timeout in seconds (or a duration); 0 = none",
     &SetSeconds<0, kKube, &KubeClientOptions::timeout>, &ShowKubeTimeout},
    {"device-plugin-namespace", Group::kScheduling, false, "NAMESPACE",
     "namespace of the device plugin's service account, the one caller /refit accepts",
     &SetString<kExtender, kRefit, &extender::RefitOptions::device_plugin_namespace>,
     &ShowString<kExtender, kRefit, &extender::RefitOptions::device_plugin_namespace>},
    {"device-plugin-service-account", Group::kScheduling, false, "NAME",
     "name of the device plugin's service account, the one caller /refit accepts",
     &SetString<kExtender, kRefit, &extender::RefitOptions::device_plugin_service_account>,
     &ShowString<kExtender, kRefit, &extender::RefitOptions::device_plugin_service_account>},
    // Leader election.
    {"leader-elect", Group::kLeader, true, "",
     "follow the co-located kube-scheduler's Lease (HAMi's way): lead while its holder identity starts with "
     "this host's name; only the leader runs the health pass, answers /filter and /bind and exports the "
     "device gauges",
     &SetBool<kExtender, kLeadership, &LeadershipOptions::enabled>,
     &ShowBoolMember<kExtender, kLeadership, &LeadershipOptions::enabled>},
    {"leader-elect-resource-name", Group::kLeader, false, "NAME", "name of the Lease",
     &SetString<kExtender, kLeadership, &LeadershipOptions::name>,
     &ShowString<kExtender, kLeadership, &LeadershipOptions::name>},
    {"leader-elect-resource-namespace", Group::kLeader, false, "NAMESPACE", "namespace of the Lease",
     &SetString<kExtender, kLeadership, &LeadershipOptions::ns>,
     &ShowString<kExtender, kLeadership, &LeadershipOptions::ns>},
    {"leader-elect-mode", Group::kLeader, false, "MODE",
     "follow: the co-located kube-scheduler's Lease decides (HAMi's way); acquire: take and renew the Lease "
     "ourselves (client-go's rules; for an extender without a co-located kube-scheduler)",
     &SetLeaderElectMode, &ShowLeaderElectMode},
    {"leader-elect-identity", Group::kLeader, false, "NAME",
     "our holder identity's prefix (\"<identity>_...\"); default: the host name",
     &SetString<kExtender, kLeadership, &LeadershipOptions::identity>, &ShowNone},
    {"leader-elect-lease-duration", Group::kLeader, false, "DURATION",
     "acquire: how long a Lease not renewed keeps others waiting (kube-scheduler's flag)",
     &SetMillis<kExtender, kLeadership, &LeadershipOptions::lease_duration>,
     &ShowMillis<kExtender, kLeadership, &LeadershipOptions::lease_duration>},
    {"leader-elect-renew-deadline", Group::kLeader, false, "DURATION",
     "acquire: the leader stops leading when it could not renew for this long",
     &SetMillis<kExtender, kLeadership, &LeadershipOptions::renew_deadline>,
     &ShowMillis<kExtender, kLeadership, &LeadershipOptions::renew_deadline>},
    {"leader-elect-retry-period", Group::kLeader, false, "DURATION",
     "acquire: how often the Lease is renewed or tried",
     &SetMillis<kExtender, kLeadership, &LeadershipOptions::retry_period>,
     &ShowMillis<kExtender, kLeadership, &LeadershipOptions::retry_period>},
    // Files.
    {"config", Group::kFiles, false, "FILE",
     "YAML configuration: a scheduler: section and HAMi vendor sections", nullptr, &ShowNone},
    {"device-config-file", Group::kFiles, false, "FILE",
     "HAMi's device-config.yaml (same format as --config; read after it)", nullptr, &ShowNone},
    {"print-config", Group::kFiles, true, "", "print the effective configuration as YAML and exit", nullptr,
     nullptr},
    // Logging.
    {"v", Group::kLogging, false, "N", "klog verbosity: 0-1 info, 2-3 debug, 4 and up trace", &SetVerbosity,
     &ShowZero},
    {"log-level", Group::kLogging, false, "LEVEL",
     "trace, debug, info, warn, error, critical or off (wins over -v)", &SetLogLevel,
     &ShowString<&Config::log_level>},
    {"logtostderr", Group::kLogging, true, "", "klog flag, accepted and ignored (logs always go to stderr)",
     &IgnoredFlag, nullptr},
    {"alsologtostderr", Group::kLogging, true, "", "klog flag, accepted and ignored", &IgnoredFlag, nullptr},
    {"log_dir", Group::kLogging, false, "DIR", "klog flag, accepted and ignored", &IgnoredFlag, nullptr},
    {"log_file", Group::kLogging, false, "FILE", "klog flag, accepted and ignored", &IgnoredFlag, nullptr},
    {"vmodule", Group::kLogging, false, "SPEC", "klog flag, accepted and ignored", &IgnoredFlag, nullptr},
    {"stderrthreshold", Group::kLogging, false, "LEVEL", "klog flag, accepted and ignored", &IgnoredFlag,
     nullptr},
    {"skip_headers", Group::kLogging, true, "", "klog flag, accepted and ignored", &IgnoredFlag, nullptr},
    {"add_dir_header", Group::kLogging, true, "", "klog flag, accepted and ignored", &IgnoredFlag, nullptr},
    {"one_output", Group::kLogging, true, "", "klog flag, accepted and ignored", &IgnoredFlag, nullptr},
    {"skip_log_headers", Group::kLogging, true, "", "klog flag, accepted and ignored", &IgnoredFlag, nullptr},
    {"legacy_stderr_threshold_behavior", Group::kLogging, true, "", "klog flag, accepted and ignored",
     &IgnoredFlag, nullptr},
    {"alsologtostderrthreshold", Group::kLogging, false, "LEVEL", "klog flag, accepted and ignored",
     &IgnoredFlag, nullptr},
    {"log_file_max_size", Group::kLogging, false, "MB", "klog flag, accepted and ignored",
     &CheckMegabytesOnly, nullptr},
    {"log_backtrace_at", Group::kLogging, false, "FILE:N", "klog flag, accepted and ignored", &IgnoredFlag,
     nullptr},
    // HAMi compatibility.
    {"debug", Group::kHami, true, "", "accepted and ignored (HAMi's scheduler does not use it either)",
     &CheckBoolOnly, nullptr},
    // Help.
    {"help", Group::kHelp, true, "", "show this help", nullptr, nullptr},
};

// Our flags, then every vendor's (declared by its module or the registration list, in the HAMi group).
struct FlagTable {
  explicit FlagTable(const BackendRegistry& vendors) : owners(vendors.Flags()) {
    defs.assign(std::begin(kOwnFlags), std::end(kOwnFlags));
    // Before the help flag, which closes the list.
    const auto help = defs.end() - 1;
    std::vector<FlagDef> vendor_defs;
    for (const VendorFlagOwner& o : owners) {
      // A vendor flag our own table already has would never be reached: a programming error every test meets.
      if (Find(o.flag->name) != nullptr) throw std::logic_error("vendor flag --" + o.flag->name + " is ours");
      const std::string_view arg = o.flag->boolean ? "" : "NAME";
      vendor_defs.push_back(FlagDef{o.flag->name, Group::kHami, o.flag->boolean, arg, o.flag->help, nullptr,
                                    nullptr, &o});
    }
    defs.insert(help, vendor_defs.begin(), vendor_defs.end());
  }
  FlagTable(const FlagTable&) = delete;
  FlagTable& operator=(const FlagTable&) = delete;

  const FlagDef* Find(std::string_view name) const {
    if (name == "h") name = "help";
    for (const auto& f : defs)
      if (f.name == name) return &f;
    return nullptr;
  }

  std::vector<VendorFlagOwner> owners;  // FlagDef::vendor points in here
  std::vector<FlagDef> defs;
};

// A vendor's flag: a switch that enables its section, or one accepted with no effect.
void ApplyVendorFlag(const VendorFlagOwner& owner, const std::string& flag, const std::string& value,
                     LoadedConfig& out, Problems& problems) {
  if (owner.flag->effect == VendorFlag::Effect::kNoEffect) return NoOpVendorFlag(flag, value, out, problems);
  auto on = Bool(flag, value, problems);
  if (!on) return;
  if (owner.section.empty()) {
    if (*on)
      out.config.warnings.push_back(
          fmt::format("{}: this scheduler does not implement that vendor ({}); the flag is ignored", flag,
                      owner.vendor));
    return;
  }
  out.config.vendors[owner.section].enabled = *on;
}

// How the flag is written: "--name", or "-v" for the single-letter klog flag.
std::string Spelled(const FlagDef& f) {
  return f.name.size() == 1 ? fmt::format("-{}", f.name) : fmt::format("--{}", f.name);
}

// "--http-bind" -> "; did you mean --http_bind?", "--kube-brust" -> "; did you mean --kube-burst?"
std::string Suggest(const FlagTable& table, std::string_view name) {
  const std::string folded = FoldName(name);
  for (const auto& f : table.defs)
    if (FoldName(f.name) == folded) return fmt::format("; did you mean {}?", Spelled(f));
  for (const auto& f : table.defs) {
    if (LooksLikeName(name, f.name)) return fmt::format("; did you mean {}?", Spelled(f));
  }
  return "";
}

bool LooksBool(std::string_view s) { return static_cast<bool>(ParseGoBool(s, "")); }

// Go-style arguments to what cxxopts understands, and the problems cxxopts would stop at (unknown flags, a
// missing value) collected instead:
//   -http_bind=x -> --http_bind=x     -v=4, --v=4, --v 4, -v4 -> -v 4     -help -> --help
std::vector<std::string> Normalize(const FlagTable& table, const std::vector<std::string>& args,
                                   Problems& problems) {
  std::vector<std::string> out;
  out.push_back(args.empty() ? std::string("hami-scheduler") : args[0]);
  bool rest = false;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (rest || a.size() < 2 || a[0] != '-') {
      out.push_back(a);  // positional: cxxopts reports it as unmatched
      continue;
    }
    if (a == "--") {
      rest = true;
      out.push_back(a);
      continue;
    }
    const bool dashdash = a[1] == '-';
    const std::string body = a.substr(dashdash ? 2 : 1);
    const auto eq = body.find('=');
    const std::string name = body.substr(0, eq);
    const bool has_value = eq != std::string::npos;
    const std::string value = has_value ? body.substr(eq + 1) : std::string();
    const bool has_next = i + 1 < args.size();

    // klog's -v in every spelling.
    const bool v_digits =
        !dashdash && name.size() > 1 && name[0] == 'v' &&
        std::all_of(name.begin() + 1, name.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (name == "v" || v_digits) {
      out.push_back("-v");
      if (v_digits) {
        out.push_back(name.substr(1));
      } else if (has_value) {
        out.push_back(value);
      } else if (has_next) {
        out.push_back(args[++i]);
      } else {
        out.pop_back();
        problems.push_back("-v: needs a value (e.g. -v=4)");
      }
      continue;
    }
    if (name == "h" && !dashdash && !has_value) {
      out.push_back("--help");
      continue;
    }
    const FlagDef* def = table.Find(name);
    if (def == nullptr || def->name.size() == 1) {
      problems.push_back(
          fmt::format("unknown flag '{}{}'{}", dashdash ? "--" : "-", name, Suggest(table, name)));
      // `--unknown value`: the value belongs to it, not to the positional arguments.
      if (!has_value && has_next && (args[i + 1].empty() || args[i + 1][0] != '-')) ++i;
      continue;
    }
    const std::string flag = "--" + std::string(def->name);
    if (def->boolean) {
      if (!has_value && has_next && LooksBool(args[i + 1])) {
        problems.push_back(
            fmt::format("{}: a boolean flag takes its value after '=' ({}={})", flag, flag, args[i + 1]));
        ++i;
        continue;
      }
      out.push_back(has_value ? flag + "=" + value : flag);
      continue;
    }
    if (has_value) {
      out.push_back(flag + "=" + value);
    } else if (has_next) {
      out.push_back(flag + "=" + args[++i]);
    } else {
      problems.push_back(fmt::format("{}: needs a value", flag));
    }
  }
  return out;
}

// The flags given, in table order, each with its last value.
std::vector<std::pair<const FlagDef*, std::string>> ParseFlags(const FlagTable& table,
                                                               const std::vector<std::string>& args,
                                                               Problems& problems) {
  const std::vector<std::string> normalized = Normalize(table, args, problems);
  cxxopts::Options options(normalized[0]);
  options.allow_unrecognised_options();
  auto add = options.add_options();
  for (const auto& f : table.defs) {
    const std::string spec = f.name == "help" ? std::string("h,help") : std::string(f.name);
    if (f.boolean) {
      add(spec, std::string(f.help), cxxopts::value<std::string>()->implicit_value("true"));
    } else {
      add(spec, std::string(f.help), cxxopts::value<std::string>());
    }
  }
  std::vector<const char*> argv;
  argv.reserve(normalized.size());
  for (const auto& a : normalized) argv.push_back(a.c_str());
  std::vector<std::pair<const FlagDef*, std::string>> given;
  try {
    const auto result = options.parse(static_cast<int>(argv.size()), argv.data());
    for (const auto& f : table.defs) {
      const std::string key(f.name);
      if (result.count(key) > 0) given.emplace_back(&f, result[key].as<std::string>());
    }
    for (const auto& extra : result.unmatched()) {
      if (extra == "--") continue;
      if (!extra.empty() && extra[0] == '-') {
        problems.push_back(fmt::format("unknown flag '{}'", extra));
      } else {
        problems.push_back(fmt::format("unexpected argument '{}' (only flags are accepted here)", extra));
      }
    }
  } catch (const cxxopts::exceptions::exception& e) {
    problems.push_back(fmt::format("flags: {}", e.what()));
  }
  return given;
}

std::string_view GroupTitle(Group g) {
  switch (g) {
    case Group::kServer:
      return "Extender server";
    case Group::kScheduling:
      return "Scheduling";
    case Group::kKube:
      return "Kubernetes client";
    case Group::kLeader:
      return "Leader election";
    case Group::kFiles:
      return "Files";
    case Group::kLogging:
      return "Logging";
    case Group::kHami:
      return "HAMi compatibility (accepted so HAMi's command line works unchanged)";
    case Group::kHelp:
      return "Help";
  }
  return "";
}

}  // namespace

Result<LoadedConfig> LoadConfig(const std::vector<std::string>& args, const BackendRegistry& vendors) {
  LoadedConfig loaded;
  Problems problems;
  const FlagTable table(vendors);
  const auto given = ParseFlags(table, args, problems);
  const auto value_of = [&](std::string_view name) -> const std::string* {
    for (const auto& [def, value] : given)
      if (def->name == name) return &value;
    return nullptr;
  };
  const auto bool_flag = [&](std::string_view name) {
    const std::string* v = value_of(name);
    if (v == nullptr) return false;
    auto b = Bool(fmt::format("--{}", name), *v, problems);
    return b.value_or(false);
  };

  if (bool_flag("help")) {
    loaded.help = true;
    loaded.help_text = FlagsHelp(args.empty() ? std::string("hami-scheduler") : args[0], vendors);
    return loaded;
  }
  loaded.print_config = bool_flag("print-config");

  // Defaults, then the files, then the flags given on the command line.
  for (std::string_view file_flag : {"config", "device-config-file"}) {
    const std::string* path = value_of(file_flag);
    if (path == nullptr) continue;
    if (path->empty()) {
      problems.push_back(fmt::format("--{}: needs a file path", file_flag));
      continue;
    }
    ApplyYamlFile(*path, vendors, loaded.config, problems);
  }
  for (const auto& [def, value] : given) {
    if (def->vendor != nullptr) {
      ApplyVendorFlag(*def->vendor, Spelled(*def), value, loaded, problems);
    } else if (def->apply != nullptr) {
      def->apply(Spelled(*def), value, loaded, problems);
    }
  }

  // Values given in a file or a flag were checked as they were read (a bad one is not applied), so this adds
  // only what no single setting shows: the rules across settings.
  ValidateConfig(loaded.config, problems);
  if (!problems.empty()) return ProblemsError(problems);
  // Set by HAMi's chart (flag or YAML key): accepted so that works, but said once that nothing is served.
  if (loaded.config.serving.profiling)
    loaded.config.warnings.push_back(
        "profiling: accepted for HAMi compatibility and has no effect: HAMi's profiling endpoints are Go's "
        "pprof, which this scheduler does not have");
  return loaded;
}

std::string FlagsHelp(const std::string& program, const BackendRegistry& vendors) {
  const Config defaults;
  const FlagTable table(vendors);
  const auto left = [](const FlagDef& f) {
    std::string s = f.name == "help" ? std::string("-h, --help") : Spelled(f);
    if (!f.boolean) {
      s += f.name.size() == 1 ? ' ' : '=';
      s += f.arg;
    }
    return s;
  };
  constexpr std::size_t kWidth = 36;  // flag column; longer flags get a line of their own
  constexpr std::size_t kLine = 110;

  std::string out = fmt::format("Usage: {} [flags]\n\n", program);
  out +=
      "HAMi's scheduler flag names are accepted as they are (also Go's -flag=value and klog's -v=4).\n"
      "Settings come from the built-in defaults, then --config, then --device-config-file, then the flags\n"
      "given here: a flag overrides the files. Durations are Go durations (300ms, 28s, 5m, 1h30m) or a "
      "whole\n"
      "number of seconds. In the files, an unknown key of our `scheduler:` section is an error; an unknown "
      "key\n"
      "of HAMi's vendor sections (nvidia:, hygon:, ...) is a warning and ignored, as HAMi ignores it.\n";
  for (Group g : {Group::kServer, Group::kScheduling, Group::kKube, Group::kLeader, Group::kFiles,
                  Group::kLogging, Group::kHami, Group::kHelp}) {
    out += fmt::format("\n{}:\n", GroupTitle(g));
    for (const auto& f : table.defs) {
      if (f.group != g) continue;
      // Words of the description; the default stays in one piece.
      std::vector<std::string> words;
      for (std::string_view w : Split(f.help, ' ')) words.emplace_back(w);
      if (f.show_default != nullptr) {
        words.push_back(fmt::format("(default: {})", f.show_default(defaults)));
      } else if (f.boolean && (f.vendor != nullptr || f.apply != &IgnoredFlag) && f.name != "help") {
        words.emplace_back("(default: false)");
      }
      const std::string l = left(f);
      const std::string indent(kWidth + 4, ' ');
      if (l.size() > kWidth) {
        out += fmt::format("  {}\n{}", l, indent);
      } else {
        out += fmt::format("  {:<{}}  ", l, kWidth);
      }
      std::size_t col = 0;
      for (const auto& word : words) {
        if (col > 0 && col + 1 + word.size() > kLine - kWidth - 4) {
          out += "\n" + indent;
          col = 0;
        }
        if (col > 0) {
          out += ' ';
          ++col;
        }
        out += word;
        col += word.size();
      }
      out += '\n';
    }
  }
  return out;
}

}  // namespace hami::config
