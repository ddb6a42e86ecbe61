#include "config/config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <span>
#include <sstream>
#include <string_view>
#include <system_error>

#include "core/names.h"
#include "core/policy.h"
#include "core/strings.h"

namespace hami::config {

// Value rules shared with flags.cc (declared there; kept out of config.h's public API). Each returns what is
// wrong with the value, or "" when it is fine.
namespace {

constexpr std::array<std::string_view, 5> kGpuPolicies = {kPolicyBinpack, kPolicySpread, kPolicyTopologyAware,
                                                          kPolicyMutex, kPolicyNuma};
constexpr std::array<std::string_view, 2> kNodePolicies = {kPolicyBinpack, kPolicySpread};
constexpr std::array<std::string_view, 7> kLogLevels = {"trace", "debug",    "info", "warn",
                                                        "error", "critical", "off"};

constexpr std::int64_t kInt32Min = std::numeric_limits<std::int32_t>::min();
constexpr std::int64_t kInt32Max = std::numeric_limits<std::int32_t>::max();

template <std::size_t N>
bool Contains(const std::array<std::string_view, N>& list, std::string_view value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

template <std::size_t N>
std::string JoinViews(const std::array<std::string_view, N>& list, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < N; ++i) {
    if (i) out += sep;
    out += list[i];
  }
  return out;
}

// --leader-elect-identity: the characters of a host name, and '_' (kube-scheduler's separator).
bool IsLeaderIdentity(std::string_view s) {
  return !s.empty() && s.size() <= 128 && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '-' || c == '_';
  });
}

// ---- Durations ----

constexpr std::string_view kDurationWant =
    "want a Go duration such as 300ms, 28s, 5m or 1h30m, or a whole number of seconds";

Error DurationError(std::string_view text, std::string_view why) {
  return Error{fmt::format("'{}' is not a duration: {} ({})", text, why, kDurationWant)};
}

// ---- YAML reading ----

std::string Describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar:
      return fmt::format("'{}'", n.Scalar());
    case YAML::NodeType::Null:
      return "nothing";
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

// One key/value pair being read, with its dotted path for messages ("scheduler.kubeBurst").
struct Item {
  YAML::Node key;  // where messages point (for list entries: the entry itself)
  YAML::Node value;
  std::string path;
};

class Reader {
 public:
  Reader(const std::string& source, std::vector<std::string>& problems, std::vector<std::string>& warnings)
      : source_(source), problems_(problems), warnings_(warnings) {}

  const std::string& source() const { return source_; }

  std::string Where(const YAML::Node& at) const {
    const YAML::Mark mark = at.Mark();
    if (mark.is_null()) return source_;
    return fmt::format("{}:{}", source_, mark.line + 1);
  }

  // Not an error: logged at start-up, the value ignored.
  void Warning(const YAML::Node& at, std::string_view what) {
    warnings_.push_back(fmt::format("{}: {}", Where(at), what));
  }

  void Problem(const YAML::Node& at, std::string_view path, std::string_view what) {
    if (path.empty()) {
      problems_.push_back(fmt::format("{}: {}", Where(at), what));
    } else {
      problems_.push_back(fmt::format("{}: {}: {}", Where(at), path, what));
    }
  }

  // The scalar text of the item; nullopt (and a problem unless it is null) when the value is not a scalar.
  // A null value (`key:` or `key: ~`) means "not set": the current value is kept.
  std::optional<std::string> Scalar(const Item& it, std::string_view want) {
    if (it.value.IsNull()) return std::nullopt;
    if (!it.value.IsScalar()) {
      Problem(it.key, it.path, fmt::format("expected {}, got {}", want, Describe(it.value)));
      return std::nullopt;
    }
    return it.value.Scalar();
  }

  void String(const Item& it, std::string& out) {
    if (auto s = Scalar(it, "a string")) out = *s;
  }
  void String(const Item& it, std::optional<std::string>& out) {
    if (auto s = Scalar(it, "a string")) out = *s;
  }

  std::optional<bool> Bool(const Item& it) {
    auto s = Scalar(it, "true or false");
    if (!s) return std::nullopt;
    bool v = false;
    if (!YAML::convert<bool>::decode(it.value, v)) {
      Problem(it.key, it.path, fmt::format("'{}' is not a boolean (want true or false)", *s));
      return std::nullopt;
    }
    return v;
  }
  void Bool(const Item& it, bool& out) {
    if (auto v = Bool(it)) out = *v;
  }
  void Bool(const Item& it, std::optional<bool>& out) {
    if (auto v = Bool(it)) out = *v;
  }

  std::optional<std::int64_t> Int(const Item& it, std::int64_t lo, std::int64_t hi, std::string_view want) {
    auto s = Scalar(it, want);
    if (!s) return std::nullopt;
    auto v = ParseInt64(Trim(*s), "value");
    if (!v) {
      Problem(it.key, it.path, fmt::format("'{}' is not an integer (want {})", *s, want));
      return std::nullopt;
    }
    if (*v < lo || *v > hi) {
      Problem(it.key, it.path, fmt::format("{} is out of range (want {})", *v, want));
      return std::nullopt;
    }
    return *v;
  }

  std::optional<double> PositiveNumber(const Item& it) { return Number(it, false); }
  std::optional<double> Number(const Item& it, bool zero_allowed) {
    const std::string_view kWant = zero_allowed ? "a number >= 0" : "a number > 0";
    auto s = Scalar(it, kWant);
    if (!s) return std::nullopt;
    const std::string_view text = Trim(*s);
    double v = 0;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(v)) {
      Problem(it.key, it.path, fmt::format("'{}' is not a number ({})", *s, kWant));
      return std::nullopt;
    }
    if (v < 0 || (v == 0 && !zero_allowed)) {
      Problem(it.key, it.path, fmt::format("{} is not {}", *s, kWant));
      return std::nullopt;
    }
    return v;
  }

  // A duration; `min` is the smallest accepted value, `whole_seconds` rejects fractions of a second.
  std::optional<std::chrono::milliseconds> Duration(const Item& it, std::chrono::milliseconds min,
                                                    bool whole_seconds) {
    auto s = Scalar(it, "a duration");
    if (!s) return std::nullopt;
    auto d = ParseDuration(Trim(*s));
    if (!d) {
      Problem(it.key, it.path, d.error().message);
      return std::nullopt;
    }
    if (*d < min) {
      Problem(it.key, it.path, fmt::format("'{}' is too short (want at least {})", *s, FormatDuration(min)));
      return std::nullopt;
    }
    if (whole_seconds && d->count() % 1000 != 0) {
      Problem(it.key, it.path, fmt::format("'{}' is not a whole number of seconds", *s));
      return std::nullopt;
    }
    return *d;
  }
  // A whole number of seconds, into a field of seconds or milliseconds.
  template <typename Field>
  void Seconds(const Item& it, std::chrono::seconds min, Field& out) {
    if (auto d = Duration(it, min, true)) out = std::chrono::duration_cast<Field>(*d);
  }

  std::optional<std::vector<std::string>> StringList(const Item& it) {
    if (it.value.IsNull()) return std::vector<std::string>{};
    if (!it.value.IsSequence()) {
      Problem(it.key, it.path, fmt::format("expected a list of strings, got {}", Describe(it.value)));
      return std::nullopt;
    }
    std::vector<std::string> out;
    bool ok = true;
    std::size_t i = 0;
    for (const auto& entry : it.value) {
      if (!entry.IsScalar()) {
        Problem(entry, fmt::format("{}[{}]", it.path, i),
                fmt::format("expected a string, got {}", Describe(entry)));
        ok = false;
      } else {
        out.push_back(entry.Scalar());
      }
      ++i;
    }
    if (!ok) return std::nullopt;
    return out;
  }

  std::optional<std::map<std::string, std::string>> StringMap(const Item& it) {
    if (it.value.IsNull()) return std::map<std::string, std::string>{};
    if (!it.value.IsMap()) {
      Problem(it.key, it.path,
              fmt::format("expected a map of strings (key: value), got {}", Describe(it.value)));
      return std::nullopt;
    }
    std::map<std::string, std::string> out;
    bool ok = true;
    for (const auto& kv : it.value) {
      if (!kv.first.IsScalar()) {
        Problem(kv.first, it.path, fmt::format("keys must be strings, got {}", Describe(kv.first)));
        ok = false;
        continue;
      }
      const std::string key = kv.first.Scalar();
      const std::string path = fmt::format("{}.{}", it.path, key);
      if (out.count(key)) {
        Problem(kv.first, path, "duplicate key");
        ok = false;
        continue;
      }
      if (kv.second.IsNull()) {
        out[key] = "";
      } else if (!kv.second.IsScalar()) {
        Problem(kv.first, path, fmt::format("expected a string, got {}", Describe(kv.second)));
        ok = false;
      } else {
        out[key] = kv.second.Scalar();
      }
    }
    if (!ok) return std::nullopt;
    return out;
  }

 private:
  const std::string& source_;
  std::vector<std::string>& problems_;
  std::vector<std::string>& warnings_;
};

template <class T>
struct Field {
  std::string_view key;
  void (*read)(Reader&, const Item&, T&);
};

// "did you mean 'httpBind'?" when a known key matches loosely, else the list of known keys.
std::string UnknownKeyHint(std::string_view key, std::span<const std::string_view> names) {
  for (const auto name : names)
    if (FoldName(name) == FoldName(key)) return fmt::format("did you mean '{}'?", name);
  for (const auto name : names)
    if (LooksLikeName(key, name)) return fmt::format("did you mean '{}'?", name);
  std::string known;
  for (const auto name : names) {
    if (!known.empty()) known += ", ";
    known += name;
  }
  return fmt::format("expected one of: {}", known);
}

// How a key no field knows is taken: our own `scheduler:` section refuses it (a typo must not pass
// silently); HAMi's vendor sections only warn, as HAMi ignores keys it does not know (a newer HAMi chart's
// device config must not stop the scheduler).
enum class UnknownKeys { kError, kWarning };

// Visits a map section: every key must be in `names` (or in `ignored`); `read(index into names, item)`
// reads each known key. Shape and duplicates are problems; unknown keys as `unknown` says.
template <class Read>
void ForEachKey(Reader& r, const Item& section, std::span<const std::string_view> names,
                std::span<const std::string_view> ignored, UnknownKeys unknown, Read&& read) {
  if (section.value.IsNull()) return;
  if (!section.value.IsMap()) {
    r.Problem(section.key, section.path,
              fmt::format("expected a map of settings, got {}", Describe(section.value)));
    return;
  }
  std::map<std::string, int> seen;  // key -> line
  for (const auto& kv : section.value) {
    if (!kv.first.IsScalar()) {
      r.Problem(kv.first, section.path, fmt::format("keys must be strings, got {}", Describe(kv.first)));
      continue;
    }
    const std::string key = kv.first.Scalar();
    const std::string path = section.path.empty() ? key : fmt::format("{}.{}", section.path, key);
    if (auto [it, fresh] = seen.emplace(key, kv.first.Mark().line + 1); !fresh) {
      r.Problem(kv.first, path, fmt::format("duplicate key (first set on line {})", it->second));
      continue;
    }
    if (std::find(ignored.begin(), ignored.end(), key) != ignored.end()) continue;
    const auto name = std::find(names.begin(), names.end(), key);
    if (name == names.end()) {
      if (unknown == UnknownKeys::kWarning) {
        r.Warning(kv.first, fmt::format("unknown key '{}' ignored ({}); HAMi ignores keys it does not know",
                                        path, UnknownKeyHint(key, names)));
      } else {
        r.Problem(kv.first, "", fmt::format("unknown key '{}'; {}", path, UnknownKeyHint(key, names)));
      }
      continue;
    }
    read(static_cast<std::size_t>(name - names.begin()), Item{kv.first, kv.second, path});
  }
}

// Reads a map section of fixed fields.
template <class T>
void ReadMap(Reader& r, const Item& section, std::span<const Field<T>> fields, T& target) {
  std::vector<std::string_view> names;
  for (const auto& f : fields) names.push_back(f.key);
  ForEachKey(r, section, names, {}, UnknownKeys::kError,
             [&](std::size_t i, const Item& item) { fields[i].read(r, item, target); });
}

// ---- The scheduler: section ----

void ReadGpuPolicy(Reader& r, const Item& it, Config& c) {
  auto s = r.Scalar(it, "a GPU scheduler policy");
  if (!s) return;
  if (auto p = GpuPolicyProblem(*s); !p.empty()) return r.Problem(it.key, it.path, p);
  c.extender.filter.policies.gpu_policy = *s;
}

void ReadNodePolicy(Reader& r, const Item& it, Config& c) {
  auto s = r.Scalar(it, "a node scheduler policy");
  if (!s) return;
  if (auto p = NodePolicyProblem(*s); !p.empty()) return r.Problem(it.key, it.path, p);
  c.extender.filter.policies.node_policy = *s;
}

void ReadLogLevel(Reader& r, const Item& it, Config& c) {
  auto s = r.Scalar(it, "a log level");
  if (!s) return;
  if (auto p = LogLevelProblem(*s); !p.empty()) return r.Problem(it.key, it.path, p);
  c.log_level = *s;
}

void ReadLeaderElectMode(Reader& r, const Item& it, Config& c) {
  auto s = r.Scalar(it, "follow or acquire");
  if (!s) return;
  auto mode = ParseLeaderElectMode(*s);
  if (!mode) return r.Problem(it.key, it.path, mode.error().message);
  c.extender.leadership.mode = *mode;
}

void ReadLabelSelector(Reader& r, const Item& it, Config& c) {
  if (auto m = r.StringMap(it)) c.extender.node_label_selector = std::move(*m);
}

// A list of shapes in their written form; a bad one is a problem at its own line (ValidateConfig checks
// how many there are and their names, cmd their vendors once the backends are built).
void ReadCapacityShapes(Reader& r, const Item& it, Config& c) {
  auto list = r.StringList(it);
  if (!list) return;
  std::vector<CapacityShape> shapes;
  for (std::size_t i = 0; i < list->size(); ++i) {
    auto shape = ParseCapacityShape((*list)[i]);
    if (!shape) {
      r.Problem(it.value[i], fmt::format("{}[{}]", it.path, i), shape.error().message);
      continue;
    }
    shapes.push_back(std::move(*shape));
  }
  if (shapes.size() == list->size()) c.extender.capacity_shapes = std::move(shapes);
}

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr Field<Config> kSchedulerFields[] = {
    {"httpBind", [](Reader& r, const Item& it, Config& c) { r.String(it, c.serving.http_bind); }},
    {"certFile", [](Reader& r, const Item& it, Config& c) { r.String(it, c.serving.cert_file); }},
    {"keyFile", [](Reader& r, const Item& it, Config& c) { r.String(it, c.serving.key_file); }},
    {"clientCaFile", [](Reader& r, const Item& it, Config& c) { r.String(it, c.serving.client_ca_file); }},
    {"webhookBind", [](Reader& r, const Item& it, Config& c) { r.String(it, c.serving.webhook_bind); }},
    {"webhookCertFile",
     [](Reader& r, const Item& it, Config& c) { r.String(it, c.serving.webhook_cert_file); }},
    {"webhookKeyFile",
     [](Reader& r, const Item& it, Config& c) { r.String(it, c.serving.webhook_key_file); }},
    {"maxConnections",
     [](Reader& r, const Item& it, Config& c) {
       if (auto v = r.Int(it, 0, 1048576, "a number of connections from 0 (no cap) to 1048576"))
         c.serving.max_connections = static_cast<int>(*v);
     }},
    {"requestBodyBudget",
     [](Reader& r, const Item& it, Config& c) {
       if (auto v = r.Int(it, 8, 65536, "MiB of request bodies in flight, from 8 to 65536"))
         c.serving.request_body_budget_mib = static_cast<int>(*v);
     }},
    {"schedulerName",
     [](Reader& r, const Item& it, Config& c) { r.String(it, c.extender.admission.scheduler_name); }},
    {"metricsBindAddress",
     [](Reader& r, const Item& it, Config& c) { r.String(it, c.serving.metrics_bind_address); }},
    {"profiling", [](Reader& r, const Item& it, Config& c) { r.Bool(it, c.serving.profiling); }},
    {"gpuSchedulerPolicy", &ReadGpuPolicy},
    {"nodeSchedulerPolicy", &ReadNodePolicy},
    {"nodeLabelSelector", &ReadLabelSelector},
    {"filterMode",
     [](Reader& r, const Item& it, Config& c) {
       auto s = r.Scalar(it, "a filter mode");
       if (!s) return;
       auto mode = ParseFilterMode(*s);
       if (!mode) return r.Problem(it.key, it.path, fmt::format("'{}': {}", *s, mode.error().message));
       c.extender.filter.policies.filter_mode = *mode;
     }},
    {"capacityShapes", &ReadCapacityShapes},
    {"refusalAnnotation",
     [](Reader& r, const Item& it, Config& c) { r.Bool(it, c.extender.filter.refusal_annotation); }},
    {"busyNodeThreshold",
     [](Reader& r, const Item& it, Config& c) {
       if (auto v = r.Int(it, 0, 1000000, "a number of allocations from 0 (off) to 1000000"))
         c.extender.filter.policies.busy_node_threshold = static_cast<int>(*v);
     }},
    {"nodeLockTimeout",
     [](Reader& r, const Item& it, Config& c) { r.Seconds(it, seconds(1), c.extender.node_lock_timeout); }},
    {"nodeLockRetryTimeout",
     [](Reader& r, const Item& it, Config& c) {
       if (auto d = r.Duration(it, milliseconds(0), false)) c.extender.bind.node_lock_retry_timeout = *d;
     }},
    {"forceOverwriteDefaultScheduler",
     [](Reader& r, const Item& it, Config& c) {
       r.Bool(it, c.extender.admission.force_overwrite_default_scheduler);
     }},
    {"healthCheckInterval",
     [](Reader& r, const Item& it, Config& c) { r.Seconds(it, seconds(1), c.extender.health_interval); }},
    {"handshakeTimeout",
     [](Reader& r, const Item& it, Config& c) { r.Seconds(it, seconds(1), c.extender.handshake_timeout); }},
    {"reservationTimeout", [](Reader& r, const Item& it,
                              Config& c) { r.Seconds(it, seconds(1), c.extender.bind.reservation_timeout); }},
    {"requeueQPS",
     [](Reader& r, const Item& it, Config& c) {
       if (auto v = r.Number(it, true)) c.extender.requeue_qps = *v;
     }},
    {"kubeconfig", [](Reader& r, const Item& it, Config& c) { r.String(it, c.kube.kubeconfig); }},
    {"kubeQPS",
     [](Reader& r, const Item& it, Config& c) {
       if (auto v = r.PositiveNumber(it)) c.kube.qps = *v;
     }},
    {"kubeBurst",
     [](Reader& r, const Item& it, Config& c) {
       if (auto v = r.Int(it, 1, kInt32Max, "an integer >= 1")) c.kube.burst = static_cast<int>(*v);
     }},
    {"kubeTimeout", [](Reader& r, const Item& it, Config& c) { r.Seconds(it, seconds(0), c.kube.timeout); }},
    {"leaderElect", [](Reader& r, const Item& it, Config& c) { r.Bool(it, c.extender.leadership.enabled); }},
    {"leaderElectResourceName",
     [](Reader& r, const Item& it, Config& c) { r.String(it, c.extender.leadership.name); }},
    {"leaderElectResourceNamespace",
     [](Reader& r, const Item& it, Config& c) { r.String(it, c.extender.leadership.ns); }},
    {"leaderElectMode", &ReadLeaderElectMode},
    {"leaderElectIdentity",
     [](Reader& r, const Item& it, Config& c) { r.String(it, c.extender.leadership.identity); }},
    {"leaderElectLeaseDuration",
     [](Reader& r, const Item& it, Config& c) {
       if (auto d = r.Duration(it, milliseconds(1), false)) c.extender.leadership.lease_duration = *d;
     }},
    {"leaderElectRenewDeadline",
     [](Reader& r, const Item& it, Config& c) {
       if (auto d = r.Duration(it, milliseconds(1), false)) c.extender.leadership.renew_deadline = *d;
     }},
    {"leaderElectRetryPeriod",
     [](Reader& r, const Item& it, Config& c) {
       if (auto d = r.Duration(it, milliseconds(1), false)) c.extender.leadership.retry_period = *d;
     }},
    {"legacyMetrics", [](Reader& r, const Item& it, Config& c) { r.Bool(it, c.extender.legacy_metrics); }},
    {"devicePluginNamespace",
     [](Reader& r, const Item& it, Config& c) { r.String(it, c.extender.refit.device_plugin_namespace); }},
    {"devicePluginServiceAccount",
     [](Reader& r, const Item& it, Config& c) {
       r.String(it, c.extender.refit.device_plugin_service_account);
     }},
    {"logLevel", &ReadLogLevel},
};

// ---- Vendor sections (read by the schema each backend declares) ----

// "models: [...], profiles: [...]": the shape of a record, for messages.
std::string RecordShape(const std::vector<SettingField>& fields) {
  std::string out;
  for (const auto& f : fields) {
    const bool list = f.kind == SettingKind::kStringList || f.kind == SettingKind::kRecordList;
    out += fmt::format("{}{}: {}", out.empty() ? "" : ", ", f.key,
                       list ? "[...]" : f.kind == SettingKind::kGroup ? "{...}" : "...");
  }
  return out;
}

// "models and profiles", "a, b and c".
std::string KeyNames(const std::vector<SettingField>& fields) {
  std::string out;
  for (std::size_t i = 0; i < fields.size(); ++i)
    out += (i == 0 ? "" : i + 1 == fields.size() ? " and " : ", ") + fields[i].key;
  return out;
}

void ReadSettings(Reader& r, const Item& section, const std::vector<SettingField>& fields,
                  std::span<const std::string_view> ignored, const std::string& prefix, Settings& v,
                  bool* enabled);

void ReadRecordList(Reader& r, const Item& it, const SettingField& field, const std::string& path,
                    Settings& v) {
  if (it.value.IsNull()) {
    v.values.erase(path);
    return;
  }
  if (!it.value.IsSequence()) {
    r.Problem(it.key, it.path,
              fmt::format("expected a list of {{{}}}, got {}", RecordShape(field.fields),
                          Describe(it.value)));
    return;
  }
  std::vector<SettingRecord> list;
  std::size_t i = 0;
  for (const auto& entry : it.value) {
    const Item item{entry, entry, fmt::format("{}[{}]", it.path, i++)};
    if (!entry.IsMap()) {
      r.Problem(entry, item.path,
                fmt::format("expected a map with {}, got {}", KeyNames(field.fields), Describe(entry)));
      continue;
    }
    SettingRecord record;
    ReadSettings(r, item, field.fields, {}, "", record, nullptr);
    list.push_back(std::move(record));
  }
  v.Set(path, std::move(list));
}

// `prefix` is the value path of the enclosing group inside the section or record ("" at the top,
// "annotations."); `enabled` is set for a vendor section's top level, which also has that key.
void ReadSettings(Reader& r, const Item& section, const std::vector<SettingField>& fields,
                  std::span<const std::string_view> ignored, const std::string& prefix, Settings& v,
                  bool* enabled) {
  std::vector<std::string_view> names;
  if (enabled != nullptr) names.push_back("enabled");
  for (const auto& f : fields) names.push_back(f.key);
  ForEachKey(r, section, names, ignored, UnknownKeys::kWarning, [&](std::size_t i, const Item& it) {
    if (enabled != nullptr && i == 0) return r.Bool(it, *enabled);
    const SettingField& field = fields[i - (enabled != nullptr ? 1 : 0)];
    const std::string path = prefix + field.key;
    switch (field.kind) {
      case SettingKind::kString:
        if (auto value = r.Scalar(it, "a string")) v.Set(path, *value);
        return;
      case SettingKind::kBool:
        if (auto value = r.Bool(it)) v.Set(path, *value);
        return;
      case SettingKind::kInt32:
        if (auto value = r.Int(it, kInt32Min, kInt32Max, "a 32-bit integer")) v.Set(path, *value);
        return;
      case SettingKind::kStringList:
        if (auto value = r.StringList(it)) v.Set(path, std::move(*value));
        return;
      case SettingKind::kGroup:
        return ReadSettings(r, it, field.fields, {}, path + ".", v, nullptr);
      case SettingKind::kRecordList:
        return ReadRecordList(r, it, field, path, v);
    }
  });
  if (!section.value.IsMap()) return;
  for (const auto& f : fields) {
    if (f.required && !section.value[f.key])
      r.Problem(section.value, section.path, fmt::format("'{}' is missing", f.key));
  }
}

void ReadVendor(Reader& r, const Item& it, const VendorSchema& schema, VendorSettings& v) {
  if (!schema.list_field.empty() && it.value.IsSequence()) {
    for (const SettingField& f : schema.fields) {
      if (f.key == schema.list_field) return ReadRecordList(r, it, f, f.key, v);
    }
  }
  const std::vector<std::string_view> ignored(schema.ignored.begin(), schema.ignored.end());
  ReadSettings(r, it, schema.fields, ignored, "", v, &v.enabled);
}

// ---- YAML writing ----

// True when a plain scalar with this text would read back as something other than this string in YAML
// (empty, null, a boolean such as "on", a number).
bool NeedsQuotes(const std::string& value) {
  if (value.empty() || YAML::IsNullString(value)) return true;
  bool b = false;
  if (YAML::convert<bool>::decode(YAML::Node(value), b)) return true;
  double d = 0;
  const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), d);
  return ec == std::errc() && ptr == value.data() + value.size();
}

void EmitString(YAML::Emitter& out, std::string_view key, const std::string& value) {
  out << YAML::Key << std::string(key) << YAML::Value;
  if (NeedsQuotes(value)) {
    out << YAML::DoubleQuoted << value;
  } else {
    out << value;
  }
}

bool AnySet(const std::vector<SettingField>& fields, const std::string& prefix, const Settings& v) {
  return std::any_of(fields.begin(), fields.end(), [&](const SettingField& f) {
    return f.kind == SettingKind::kGroup ? AnySet(f.fields, prefix + f.key + ".", v) : v.Has(prefix + f.key);
  });
}

// The set values, in schema order; a group only when something in it is set.
void EmitSettings(YAML::Emitter& out, const std::vector<SettingField>& fields, const std::string& prefix,
                  const Settings& v) {
  for (const auto& f : fields) {
    const std::string path = prefix + f.key;
    if (f.kind != SettingKind::kGroup && !v.Has(path)) continue;
    switch (f.kind) {
      case SettingKind::kString:
        if (auto value = v.String(path)) EmitString(out, f.key, *value);
        break;
      case SettingKind::kBool:
        if (auto value = v.Bool(path)) out << YAML::Key << f.key << YAML::Value << *value;
        break;
      case SettingKind::kInt32:
        if (auto value = v.Int(path)) out << YAML::Key << f.key << YAML::Value << *value;
        break;
      case SettingKind::kStringList:
        out << YAML::Key << f.key << YAML::Value << YAML::Flow << v.StringList(path);
        break;
      case SettingKind::kGroup:
        if (!AnySet(f.fields, path + ".", v)) break;
        out << YAML::Key << f.key << YAML::Value << YAML::BeginMap;
        EmitSettings(out, f.fields, path + ".", v);
        out << YAML::EndMap;
        break;
      case SettingKind::kRecordList: {
        const auto records = v.Records(path);
        if (records.empty()) break;
        out << YAML::Key << f.key << YAML::Value << YAML::BeginSeq;
        for (const auto& record : records) {
          out << YAML::BeginMap;
          EmitSettings(out, f.fields, "", record);
          out << YAML::EndMap;
        }
        out << YAML::EndSeq;
        break;
      }
    }
  }
}

void EmitVendor(YAML::Emitter& out, const VendorSchema& schema, const VendorSettings& v) {
  out << YAML::BeginMap;
  out << YAML::Key << "enabled" << YAML::Value << v.enabled;
  EmitSettings(out, schema.fields, "", v);
  out << YAML::EndMap;
}

}  // namespace

std::string FormatDuration(std::chrono::milliseconds d) {
  std::int64_t ms = d.count();
  if (ms == 0) return "0s";
  std::string out;
  if (ms < 0) {
    out += '-';
    ms = -ms;
  }
  const std::int64_t h = ms / 3'600'000;
  const std::int64_t m = ms / 60'000 % 60;
  const std::int64_t s = ms / 1000 % 60;
  const std::int64_t rest = ms % 1000;
  if (h) out += fmt::format("{}h", h);
  if (m) out += fmt::format("{}m", m);
  if (s) out += fmt::format("{}s", s);
  if (rest) out += fmt::format("{}ms", rest);
  return out;
}

std::string GpuPolicyProblem(std::string_view value) {
  std::vector<std::string> bad;
  for (std::string_view part : Split(value, ',')) {
    const std::string_view name = Trim(part);
    if (!Contains(kGpuPolicies, name)) bad.push_back(fmt::format("'{}'", name));
  }
  if (bad.empty()) return "";
  return fmt::format("'{}' has unknown policy {} (want one of {}, or a comma-separated list of them)", value,
                     Join(bad, ", "), JoinViews(kGpuPolicies, ", "));
}

std::string NodePolicyProblem(std::string_view value) {
  if (Contains(kNodePolicies, value)) return "";
  return fmt::format("'{}' is not a node policy (want {})", value, JoinViews(kNodePolicies, " or "));
}

std::string LogLevelProblem(std::string_view value) {
  if (Contains(kLogLevels, value)) return "";
  return fmt::format("'{}' is not a log level (want one of {})", value, JoinViews(kLogLevels, ", "));
}

Result<extender::LeaderElectMode> ParseLeaderElectMode(std::string_view value) {
  if (value == "follow") return extender::LeaderElectMode::kFollow;
  if (value == "acquire") return extender::LeaderElectMode::kAcquire;
  return Error{fmt::format("{} is not follow or acquire", Quoted(value))};
}

std::string_view LeaderElectModeName(extender::LeaderElectMode mode) {
  return mode == extender::LeaderElectMode::kAcquire ? "acquire" : "follow";
}

void ValidateConfig(const Config& cfg, std::vector<std::string>& problems) {
  const auto check = [&](std::string_view what, const std::string& problem) {
    if (!problem.empty()) problems.push_back(fmt::format("{}: {}", what, problem));
  };
  check("gpu scheduler policy (--gpu-scheduler-policy, scheduler.gpuSchedulerPolicy)",
        GpuPolicyProblem(cfg.extender.filter.policies.gpu_policy));
  check("node scheduler policy (--node-scheduler-policy, scheduler.nodeSchedulerPolicy)",
        NodePolicyProblem(cfg.extender.filter.policies.node_policy));
  check("log level (--log-level, scheduler.logLevel)", LogLevelProblem(cfg.log_level));
  if (!(cfg.kube.qps > 0) || !std::isfinite(cfg.kube.qps))
    problems.push_back(fmt::format("--kube-qps (scheduler.kubeQPS): {} is not a number > 0", cfg.kube.qps));
  if (cfg.kube.burst < 1)
    problems.push_back(
        fmt::format("--kube-burst (scheduler.kubeBurst): {} is not an integer >= 1", cfg.kube.burst));
  if (cfg.kube.timeout.count() < 0)
    problems.push_back("--kube-timeout (scheduler.kubeTimeout): must not be negative");
  if (cfg.extender.node_lock_timeout.count() <= 0)
    problems.push_back("--node-lock-timeout (scheduler.nodeLockTimeout): must be > 0");
  if (cfg.extender.bind.node_lock_retry_timeout.count() < 0)
    problems.push_back("--node-lock-retry-timeout (scheduler.nodeLockRetryTimeout): must not be negative");
  if (cfg.extender.health_interval.count() <= 0)
    problems.push_back("--health-check-interval (scheduler.healthCheckInterval): must be > 0");
  if (cfg.extender.handshake_timeout.count() <= 0)
    problems.push_back("--handshake-timeout (scheduler.handshakeTimeout): must be > 0");
  if (cfg.extender.bind.reservation_timeout.count() <= 0)
    problems.push_back("--reservation-timeout (scheduler.reservationTimeout): must be > 0");
  if (cfg.serving.cert_file.empty() != cfg.serving.key_file.empty()) {
    problems.push_back(
        fmt::format("TLS needs both a certificate and a key (--cert_file/scheduler.certFile and "
                    "--key_file/scheduler.keyFile); "
                    "only {} is set",
                    cfg.serving.cert_file.empty() ? "the key" : "the certificate"));
  }
  if (!cfg.serving.client_ca_file.empty() && cfg.serving.cert_file.empty()) {
    problems.push_back(
        "--client-ca-file (scheduler.clientCaFile) needs TLS: client certificates are verified only over "
        "HTTPS; set --cert_file and --key_file (scheduler.certFile, scheduler.keyFile) too");
  }
  if (!cfg.serving.webhook_bind.empty() &&
      (cfg.serving.webhook_cert_file.empty() || cfg.serving.webhook_key_file.empty())) {
    problems.push_back(
        "--webhook-bind (scheduler.webhookBind) needs --webhook-cert-file and --webhook-key-file "
        "(scheduler.webhookCertFile, scheduler.webhookKeyFile): the API server calls webhooks over HTTPS "
        "only");
  }
  if (cfg.serving.webhook_bind.empty() &&
      !(cfg.serving.webhook_cert_file.empty() && cfg.serving.webhook_key_file.empty())) {
    problems.push_back(
        "--webhook-cert-file and --webhook-key-file serve --webhook-bind, which is not set (without it the "
        "webhook is served on --http_bind with --cert_file and --key_file)");
  }
  if (!cfg.serving.webhook_bind.empty() && cfg.serving.webhook_bind == cfg.serving.http_bind)
    problems.push_back("--webhook-bind: must differ from --http_bind (leave it empty to serve both on one)");
  if (cfg.extender.leadership.enabled &&
      (cfg.extender.leadership.name.empty() || cfg.extender.leadership.ns.empty()))
    problems.push_back(
        "--leader-elect needs --leader-elect-resource-name and --leader-elect-resource-namespace (the "
        "co-located kube-scheduler's Lease, e.g. kube-system/hami-scheduler)");
  // It is written into the Lease and compared with kube-scheduler's "<host>_<uuid>": a host name's
  // characters.
  if (!cfg.extender.leadership.identity.empty() && !IsLeaderIdentity(cfg.extender.leadership.identity))
    problems.push_back(fmt::format(
        "--leader-elect-identity (scheduler.leaderElectIdentity): {} is not an identity (want 1 to 128 "
        "letters, digits, '.', '-' or '_')",
        Quoted(cfg.extender.leadership.identity)));
  // client-go's rules: another replica waits the lease duration, the leader stops at the renew deadline, and
  // a renewal (retried every retry period, jittered up to 1.2x) must fit in the deadline.
  if (cfg.extender.leadership.lease_duration < std::chrono::seconds(1) ||
      cfg.extender.leadership.lease_duration.count() % 1000 != 0)
    problems.push_back(fmt::format(
        "--leader-elect-lease-duration (scheduler.leaderElectLeaseDuration): {} is not a whole number of "
        "seconds of at least 1s (a Lease counts whole seconds)",
        FormatDuration(cfg.extender.leadership.lease_duration)));
  if (cfg.extender.leadership.lease_duration <= cfg.extender.leadership.renew_deadline)
    problems.push_back(fmt::format(
        "--leader-elect-lease-duration ({}) must be greater than --leader-elect-renew-deadline ({})",
        FormatDuration(cfg.extender.leadership.lease_duration),
        FormatDuration(cfg.extender.leadership.renew_deadline)));
  if (cfg.extender.leadership.renew_deadline.count() * 10 <=
      cfg.extender.leadership.retry_period.count() * 12)
    problems.push_back(fmt::format(
        "--leader-elect-renew-deadline ({}) must be greater than 1.2 x --leader-elect-retry-period ({})",
        FormatDuration(cfg.extender.leadership.renew_deadline),
        FormatDuration(cfg.extender.leadership.retry_period)));
  // They reach the Lease's URL path and field selector.
  if (!cfg.extender.leadership.ns.empty() && !IsDns1123Label(cfg.extender.leadership.ns))
    problems.push_back(
        fmt::format("--leader-elect-resource-namespace: {} is not a namespace name (a DNS label)",
                    Quoted(cfg.extender.leadership.ns)));
  if (!cfg.extender.leadership.name.empty() && !IsDns1123Subdomain(cfg.extender.leadership.name))
    problems.push_back(fmt::format("--leader-elect-resource-name: {} is not a Lease name (a DNS subdomain)",
                                   Quoted(cfg.extender.leadership.name)));
  // They make the one username /refit accepts; one without the other accepts nobody.
  const extender::RefitOptions& refit = cfg.extender.refit;
  if (!refit.device_plugin_namespace.empty() && !IsDns1123Label(refit.device_plugin_namespace))
    problems.push_back(fmt::format("--device-plugin-namespace: {} is not a namespace name (a DNS label)",
                                   Quoted(refit.device_plugin_namespace)));
  if (!refit.device_plugin_service_account.empty() &&
      !IsDns1123Subdomain(refit.device_plugin_service_account))
    problems.push_back(
        fmt::format("--device-plugin-service-account: {} is not a service account name (a DNS subdomain)",
                    Quoted(refit.device_plugin_service_account)));
  if (refit.device_plugin_namespace.empty() != refit.device_plugin_service_account.empty())
    problems.push_back(
        "--device-plugin-namespace and --device-plugin-service-account go together (the device plugin's "
        "service account, the one caller /refit accepts): set both or neither");
  // The node watch's labelSelector query: a key or value outside the label syntax (a ',', '!' or '=' in it)
  // would select other nodes than the ones named.
  for (const auto& [key, value] : cfg.extender.node_label_selector) {
    if (!IsLabelKey(key) || !IsLabelValue(value))
      problems.push_back(fmt::format(
          "--node-label-selector (scheduler.nodeLabelSelector): {}={} is not a label (want a label key, "
          "[prefix/]name, and a value of at most 63 of A-Z a-z 0-9 - _ . that start and end alphanumeric)",
          Quoted(key), Quoted(value)));
  }
  // spec.schedulerName of the pods the webhook takes, and the events' source: the API server would refuse
  // pods and events that carry anything but a DNS subdomain.
  if (const std::string& name = cfg.extender.admission.scheduler_name;
      !name.empty() && !IsDns1123Subdomain(name))
    problems.push_back(fmt::format(
        "--scheduler-name (scheduler.schedulerName): {} is not a scheduler name (a DNS subdomain, as "
        "spec.schedulerName)",
        Quoted(name)));
  // Each shape adds a series per node to /metrics, and its name is a label value: few, and each name once.
  const auto& shapes = cfg.extender.capacity_shapes;
  if (shapes.size() > kMaxCapacityShapes)
    problems.push_back(fmt::format("--capacity-shape (scheduler.capacityShapes): {} shapes given; at most {} "
                                   "(each adds a series per node)",
                                   shapes.size(), kMaxCapacityShapes));
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (shapes[j].name == shapes[i].name)
        problems.push_back(fmt::format("--capacity-shape (scheduler.capacityShapes): {} and {} share a name",
                                       Quoted(FormatCapacityShape(shapes[j])),
                                       Quoted(FormatCapacityShape(shapes[i]))));
    }
  }
  if (cfg.serving.max_connections < 0)
    problems.push_back("--max-connections (scheduler.maxConnections): must not be negative");
  if (cfg.serving.http_bind.empty())
    problems.push_back("--http_bind (scheduler.httpBind): must not be empty");
}

Result<std::chrono::milliseconds> ParseDuration(std::string_view text) {
  const std::string_view orig = text;
  if (text.empty()) return DurationError(orig, "it is empty");
  // A bare integer is a number of seconds (and "0" is zero in Go's syntax too).
  if (std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    std::int64_t secs = 0;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), secs);
    if (ec != std::errc() || ptr != text.data() + text.size() ||
        secs > std::numeric_limits<std::int64_t>::max() / 1000)
      return DurationError(orig, "it is too large");
    return std::chrono::milliseconds(secs * 1000);
  }
  if (text.front() == '-') return DurationError(orig, "it is negative");
  if (text.front() == '+') text.remove_prefix(1);
  if (text.empty()) return DurationError(orig, "it has no number");

  constexpr std::uint64_t kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  const auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  std::uint64_t total_ns = 0;
  while (!text.empty()) {
    if (!(text.front() == '.' || is_digit(text.front())))
      return DurationError(orig, fmt::format("expected a number at '{}'", text));
    // Integer part.
    std::uint64_t whole = 0;
    bool pre = false;
    while (!text.empty() && is_digit(text.front())) {
      const std::uint64_t digit = static_cast<std::uint64_t>(text.front() - '0');
      if (whole > (kMax - digit) / 10) return DurationError(orig, "it is too large");
      whole = whole * 10 + digit;
      pre = true;
      text.remove_prefix(1);
    }
    // Fraction.
    std::uint64_t frac = 0;
    double scale = 1;
    bool post = false;
    if (!text.empty() && text.front() == '.') {
      text.remove_prefix(1);
      bool overflow = false;
      while (!text.empty() && is_digit(text.front())) {
        post = true;
        if (!overflow) {
          const std::uint64_t digit = static_cast<std::uint64_t>(text.front() - '0');
          if (frac > (kMax - digit) / 10) {
            overflow = true;  // further digits cannot matter
          } else {
            frac = frac * 10 + digit;
            scale *= 10;
          }
        }
        text.remove_prefix(1);
      }
    }
    if (!pre && !post) return DurationError(orig, "a '.' needs digits");
    // Unit.
    std::size_t unit_len = 0;
    while (unit_len < text.size() && text[unit_len] != '.' && !is_digit(text[unit_len])) ++unit_len;
    const std::string_view unit = text.substr(0, unit_len);
    text.remove_prefix(unit_len);
    std::uint64_t unit_ns = 0;
    if (unit == "ns") {
      unit_ns = 1;
    } else if (unit == "us" || unit == "\xC2\xB5s" || unit == "\xCE\xBCs") {
      unit_ns = 1'000;
    } else if (unit == "ms") {
      unit_ns = 1'000'000;
    } else if (unit == "s") {
      unit_ns = 1'000'000'000;
    } else if (unit == "m") {
      unit_ns = 60'000'000'000;
    } else if (unit == "h") {
      unit_ns = 3'600'000'000'000;
    } else if (unit.empty()) {
      return DurationError(orig, "a number is missing its unit (ns, us, ms, s, m or h)");
    } else {
      return DurationError(orig, fmt::format("unknown unit '{}'", unit));
    }
    if (whole > kMax / unit_ns) return DurationError(orig, "it is too large");
    std::uint64_t v = whole * unit_ns;
    if (frac > 0) {
      v += static_cast<std::uint64_t>(static_cast<double>(frac) * (static_cast<double>(unit_ns) / scale));
      if (v > kMax) return DurationError(orig, "it is too large");
    }
    if (total_ns > kMax - v) return DurationError(orig, "it is too large");
    total_ns += v;
  }
  if (total_ns % 1'000'000 != 0)
    return Error{fmt::format("'{}' is finer than a millisecond, the resolution this setting takes", orig)};
  return std::chrono::milliseconds(static_cast<std::int64_t>(total_ns / 1'000'000));
}

void ApplyYaml(const std::string& text, const std::string& source_name, const BackendRegistry& vendors,
               Config& cfg, std::vector<std::string>& problems) {
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(text);
  } catch (const YAML::Exception& e) {
    if (e.mark.is_null()) {
      problems.push_back(fmt::format("{}: invalid YAML: {}", source_name, e.msg));
    } else {
      problems.push_back(fmt::format("{}:{}: invalid YAML: {}", source_name, e.mark.line + 1, e.msg));
    }
    return;
  }
  Reader r(source_name, problems, cfg.warnings);
  if (docs.empty()) return;
  for (std::size_t i = 1; i < docs.size(); ++i)
    r.Problem(docs[i], "", "a second YAML document; the configuration must be a single document");
  const YAML::Node& root = docs[0];
  if (root.IsNull()) return;
  if (!root.IsMap()) {
    r.Problem(root, "",
              fmt::format("expected a map of sections (scheduler, {}), got {}",
                          Join(vendors.Sections(), ", "), Describe(root)));
    return;
  }
  std::map<std::string, int> seen;
  for (const auto& kv : root) {
    if (!kv.first.IsScalar()) {
      r.Problem(kv.first, "", fmt::format("section names must be strings, got {}", Describe(kv.first)));
      continue;
    }
    const std::string key = kv.first.Scalar();
    if (auto [it, fresh] = seen.emplace(key, kv.first.Mark().line + 1); !fresh) {
      r.Problem(kv.first, key, fmt::format("duplicate section (first on line {})", it->second));
      continue;
    }
    const Item item{kv.first, kv.second, key};
    if (key == "scheduler") {
      ReadMap<Config>(r, item, kSchedulerFields, cfg);
    } else if (const VendorSchema* schema = vendors.Schema(key)) {
      auto [section, fresh] = cfg.vendors.try_emplace(key);
      if (fresh) section->second.enabled = vendors.EnabledByDefault(key);
      ReadVendor(r, item, *schema, section->second);
    } else if (vendors.Unimplemented(key) != nullptr) {
      cfg.warnings.push_back(
          fmt::format("{}: section '{}' is a HAMi vendor this scheduler does not implement; ignored",
                      r.Where(kv.first), key));
    } else {
      std::string hint;
      for (const std::string& known : vendors.Sections())
        if (LooksLikeName(key, known)) hint = fmt::format("; did you mean '{}'?", known);
      if (LooksLikeName(key, "scheduler")) hint = "; did you mean 'scheduler'?";
      if (hint.empty())
        hint = fmt::format("; expected scheduler, {} (or one of HAMi's other vendor sections)",
                           Join(vendors.Sections(), ", "));
      r.Problem(kv.first, "", fmt::format("unknown top-level key '{}'{}", key, hint));
    }
  }
}

void ApplyYamlFile(const std::string& path, const BackendRegistry& vendors, Config& cfg,
                   std::vector<std::string>& problems) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    problems.push_back(fmt::format("{}: cannot read the configuration file: it is a directory", path));
    return;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    problems.push_back(fmt::format("{}: cannot read the configuration file: {}", path, std::strerror(errno)));
    return;
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    problems.push_back(fmt::format("{}: cannot read the configuration file: {}", path, std::strerror(errno)));
    return;
  }
  cfg.sources.push_back(path);
  ApplyYaml(text.str(), path, vendors, cfg, problems);
}

std::string ToYaml(const Config& cfg, const BackendRegistry& vendors) {
  YAML::Emitter out;
  out.SetIndent(2);
  if (!cfg.sources.empty()) out << YAML::Comment("read from: " + Join(cfg.sources, ", "));
  out << YAML::BeginMap;
  out << YAML::Key << "scheduler" << YAML::Value << YAML::BeginMap;
  EmitString(out, "httpBind", cfg.serving.http_bind);
  EmitString(out, "certFile", cfg.serving.cert_file);
  EmitString(out, "keyFile", cfg.serving.key_file);
  EmitString(out, "clientCaFile", cfg.serving.client_ca_file);
  EmitString(out, "webhookBind", cfg.serving.webhook_bind);
  EmitString(out, "webhookCertFile", cfg.serving.webhook_cert_file);
  EmitString(out, "webhookKeyFile", cfg.serving.webhook_key_file);
  out << YAML::Key << "maxConnections" << YAML::Value << cfg.serving.max_connections;
  out << YAML::Key << "requestBodyBudget" << YAML::Value << cfg.serving.request_body_budget_mib;
  EmitString(out, "schedulerName", cfg.extender.admission.scheduler_name);
  EmitString(out, "metricsBindAddress", cfg.serving.metrics_bind_address);
  out << YAML::Key << "profiling" << YAML::Value << cfg.serving.profiling;
  EmitString(out, "gpuSchedulerPolicy", cfg.extender.filter.policies.gpu_policy);
  EmitString(out, "nodeSchedulerPolicy", cfg.extender.filter.policies.node_policy);
  out << YAML::Key << "nodeLabelSelector" << YAML::Value;
  if (cfg.extender.node_label_selector.empty()) out << YAML::Flow;
  out << YAML::BeginMap;
  for (const auto& [k, v] : cfg.extender.node_label_selector) EmitString(out, k, v);
  out << YAML::EndMap;
  EmitString(out, "filterMode", std::string(FilterModeName(cfg.extender.filter.policies.filter_mode)));
  std::vector<std::string> shapes;
  for (const auto& shape : cfg.extender.capacity_shapes) shapes.push_back(FormatCapacityShape(shape));
  out << YAML::Key << "capacityShapes" << YAML::Value << YAML::Flow << shapes;
  out << YAML::Key << "refusalAnnotation" << YAML::Value << cfg.extender.filter.refusal_annotation;
  out << YAML::Key << "busyNodeThreshold" << YAML::Value << cfg.extender.filter.policies.busy_node_threshold;
  out << YAML::Key << "nodeLockTimeout" << YAML::Value << FormatDuration(cfg.extender.node_lock_timeout);
  out << YAML::Key << "nodeLockRetryTimeout" << YAML::Value
      << FormatDuration(cfg.extender.bind.node_lock_retry_timeout);
  out << YAML::Key << "forceOverwriteDefaultScheduler" << YAML::Value
      << cfg.extender.admission.force_overwrite_default_scheduler;
  out << YAML::Key << "healthCheckInterval" << YAML::Value << FormatDuration(cfg.extender.health_interval);
  out << YAML::Key << "handshakeTimeout" << YAML::Value << FormatDuration(cfg.extender.handshake_timeout);
  out << YAML::Key << "reservationTimeout" << YAML::Value
      << FormatDuration(cfg.extender.bind.reservation_timeout);
  if (cfg.extender.requeue_qps)
    out << YAML::Key << "requeueQPS" << YAML::Value << fmt::format("{}", *cfg.extender.requeue_qps);
  EmitString(out, "kubeconfig", cfg.kube.kubeconfig);
  out << YAML::Key << "kubeQPS" << YAML::Value << fmt::format("{}", cfg.kube.qps);
  out << YAML::Key << "kubeBurst" << YAML::Value << cfg.kube.burst;
  out << YAML::Key << "kubeTimeout" << YAML::Value << FormatDuration(cfg.kube.timeout);
  out << YAML::Key << "leaderElect" << YAML::Value << cfg.extender.leadership.enabled;
  EmitString(out, "leaderElectResourceName", cfg.extender.leadership.name);
  EmitString(out, "leaderElectResourceNamespace", cfg.extender.leadership.ns);
  EmitString(out, "devicePluginNamespace", cfg.extender.refit.device_plugin_namespace);
  EmitString(out, "devicePluginServiceAccount", cfg.extender.refit.device_plugin_service_account);
  EmitString(out, "leaderElectMode", std::string(LeaderElectModeName(cfg.extender.leadership.mode)));
  if (!cfg.extender.leadership.identity.empty())
    EmitString(out, "leaderElectIdentity", cfg.extender.leadership.identity);
  out << YAML::Key << "leaderElectLeaseDuration" << YAML::Value
      << FormatDuration(cfg.extender.leadership.lease_duration);
  out << YAML::Key << "leaderElectRenewDeadline" << YAML::Value
      << FormatDuration(cfg.extender.leadership.renew_deadline);
  out << YAML::Key << "leaderElectRetryPeriod" << YAML::Value
      << FormatDuration(cfg.extender.leadership.retry_period);
  out << YAML::Key << "legacyMetrics" << YAML::Value << cfg.extender.legacy_metrics;
  EmitString(out, "logLevel", cfg.log_level);
  out << YAML::EndMap;
  for (const auto& [name, settings] : cfg.vendors) {
    static const VendorSchema kNoSchema;  // a section no backend declares: only `enabled`
    const VendorSchema* schema = vendors.Schema(name);
    out << YAML::Key << name << YAML::Value;
    EmitVendor(out, schema != nullptr ? *schema : kNoSchema, settings);
  }
  out << YAML::EndMap;
  std::string text = out.c_str();
  if (!text.empty() && text.back() != '\n') text += '\n';
  return text;
}

Error ProblemsError(const std::vector<std::string>& problems) {
  return Error{
      fmt::format("{} problem(s) in configuration:\n  - {}", problems.size(), Join(problems, "\n  - "))};
}

}  // namespace hami::config
