// `hami-scheduler sim-device-plugins`: runs sim::DevicePlugin for each --node against the API server of
// --kubeconfig, creating the Node objects that are missing, and prints what the plugins do on stdout.
#include "cmd/plugins.h"

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <charconv>
#include <deque>
#include <limits>
#include <memory>
#include <ostream>
#include <set>

#include "cmd/app.h"
#include "cmd/service.h"
#include "cmd/subcommand_flags.h"
#include "config/config.h"
#include "config/flags.h"
#include "core/strings.h"
#include "k8s/api_client.h"
#include "k8s/rest_config.h"

namespace hami::cmd {
namespace asio = boost::asio;
namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

constexpr std::int32_t kMaxCards = 256;
constexpr std::int32_t kMaxSplit = 1000;
// HAMi keeps a card's memory in an int32 of MiB.
constexpr std::int64_t kMaxMemoryMib = std::numeric_limits<std::int32_t>::max();

Error NodeError(std::string_view text, std::string_view problem) {
  return Error{fmt::format("--node '{}': {}; expected {} (e.g. gpu-1=nvidia:2x16384:10:NVIDIA-T4)", text,
                           problem, kSimNodeSyntax)};
}

// A whole-string integer in [low, high], or nullopt.
std::optional<std::int64_t> IntIn(std::string_view text, std::int64_t low, std::int64_t high) {
  std::int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || v < low || v > high)
    return std::nullopt;
  return v;
}

// RFC 1123 subdomain, what the API server accepts as a Node name.
bool IsNodeName(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  const auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(name.front()) || !alnum(name.back())) return false;
  return std::all_of(name.begin(), name.end(), [&](char c) { return alnum(c) || c == '-' || c == '.'; });
}

// Splits at the first `count` separators; the last part keeps the rest.
std::vector<std::string_view> SplitFirst(std::string_view text, char separator, std::size_t count) {
  std::vector<std::string_view> parts;
  while (parts.size() < count) {
    const auto at = text.find(separator);
    if (at == std::string_view::npos) break;
    parts.push_back(text.substr(0, at));
    text.remove_prefix(at + 1);
  }
  parts.push_back(text);
  return parts;
}

Result<std::chrono::milliseconds> DurationFlag(std::string_view flag, const std::string& value,
                                               bool zero_allowed) {
  auto d = config::ParseDuration(value);
  if (!d) return Error{fmt::format("{} {}: {}", flag, value, d.error().message)};
  if (!zero_allowed && d->count() == 0)
    return Error{fmt::format("{} {}: expected a positive duration such as 30s", flag, value)};
  return *d;
}

// What the flags of `args` say, with values checked one by one (the cross-checks come after).
Result<void> ApplyFlag(const std::string& name, const std::string& value, SimPluginsFlags& flags) {
  const std::string flag = "--" + name;
  if (name == "kubeconfig") {
    flags.kubeconfig = value;
  } else if (name == "node") {
    auto node = ParseSimNodeSpec(value);
    if (!node) return node.error();
    flags.nodes.push_back(std::move(*node));
  } else if (name == "allocate-delay") {
    auto d = DurationFlag(flag, value, true);
    if (!d) return d.error();
    flags.allocate_delay = *d;
  } else if (name == "register-interval") {
    auto d = DurationFlag(flag, value, false);
    if (!d) return d.error();
    flags.register_interval = *d;
  } else {  // device-config-file
    flags.device_config_file = value;
  }
  return {};
}

struct PlannedNode {
  SimNodeSpec spec;
  const Backend* backend;
};

bool HasAllocatablePods(const json::value& node) {
  const auto* status = node.is_object() ? node.as_object().if_contains("status") : nullptr;
  const auto* allocatable =
      status != nullptr && status->is_object() ? status->as_object().if_contains("allocatable") : nullptr;
  return allocatable != nullptr && allocatable->is_object() && allocatable->as_object().contains("pods");
}

// Creates the Node if it is missing. A Node that exists but carries no allocatable pods
// (created bare by someone else) gets the simulated kubelet status, so the real scheduler considers it.
asio::awaitable<Result<void>> EnsureNode(k8s::ApiClient& client, const std::string& name) {
  const std::string path = k8s::PathFor("v1", "nodes", "", name);
  auto node = co_await client.Get(path);
  if (!node && node.error().kind == k8s::ApiErrorKind::kNotFound) {
    const std::string nodes_path = "/api/v1/nodes";
    const json::value wanted = SimNodeObject(name);
    node = co_await client.Create(nodes_path, wanted);
    if (!node && node.error().kind == k8s::ApiErrorKind::kConflict) node = co_await client.Get(path);
  }
  if (!node) co_return Error{fmt::format("node {}: {}", name, node.error().message)};
  if (HasAllocatablePods(*node)) co_return Result<void>{};
  // Some API servers drop the status given on create: set it through the status subresource.
  const std::string status_path = path + "/status";
  const json::value status_patch = {{"status", SimNodeObject(name).at("status")}};
  auto patched = co_await client.MergePatch(status_path, status_patch);
  if (!patched) co_return Error{fmt::format("node {}: {}", name, patched.error().message)};
  co_return Result<void>{};
}

class PluginsRun {
 public:
  PluginsRun(asio::io_context& ioc, k8s::ApiClient& client, k8s::RestConfig rest, k8s::ClientOptions options,
             std::vector<PlannedNode> nodes, const SimPluginsFlags& flags, std::ostream& out,
             std::ostream& err)
      : ioc_(ioc),
        client_(client),
        rest_(std::move(rest)),
        options_(std::move(options)),
        nodes_(std::move(nodes)),
        flags_(flags),
        out_(out),
        err_(err) {}

  int Run();

 private:
  asio::awaitable<void> Setup();
  void StartPlugin(const PlannedNode& node);
  void Print(const std::string& node, const std::string& line);
  void Stop();

  asio::io_context& ioc_;
  k8s::ApiClient& client_;  // creates the nodes
  // Each node's plugin has a client (and so a rate limit) of its own, as on a real node: one shared budget
  // would make the plugins of a big simulated cluster the slowest part of every allocation.
  k8s::RestConfig rest_;
  k8s::ClientOptions options_;
  std::vector<std::unique_ptr<k8s::ApiClient>> plugin_clients_;
  std::vector<PlannedNode> nodes_;
  const SimPluginsFlags& flags_;
  std::ostream& out_;
  std::ostream& err_;
  std::vector<std::unique_ptr<sim::DevicePlugin>> plugins_;
  std::deque<asio::cancellation_signal> stops_;  // one per coroutine: a signal cancels one operation
  int running_ = 0;
  bool done_ = false;
  int exit_code_ = kExitOk;
};

void PluginsRun::Print(const std::string& node, const std::string& line) {
  const auto now = std::chrono::system_clock::now();
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  out_ << fmt::format("{:%Y-%m-%d %H:%M:%S}.{:03d} {} {}\n",
                      fmt::localtime(std::chrono::system_clock::to_time_t(now)), ms, node, line)
       << std::flush;
}

void PluginsRun::StartPlugin(const PlannedNode& node) {
  sim::DevicePluginOptions options;
  options.node = node.spec.name;
  options.devices = SimDevicesOf(node.spec, *node.backend);
  options.allocate_delay = flags_.allocate_delay;
  options.register_interval = flags_.register_interval;
  auto client = k8s::ApiClient::Create(ioc_.get_executor(), rest_, options_);
  if (!client) {
    err_ << "sim-device-plugins: node " << node.spec.name << ": " << client.error().message << "\n";
    exit_code_ = kExitFailure;
    done_ = true;
    return;
  }
  plugin_clients_.push_back(std::move(*client));
  auto plugin = std::make_unique<sim::DevicePlugin>(*plugin_clients_.back(), *node.backend, options);
  plugin->on_log = [this, name = node.spec.name](const std::string& line) { Print(name, line); };
  ++running_;
  asio::co_spawn(ioc_, plugin->Run(),
                 asio::bind_cancellation_slot(stops_.emplace_back().slot(), [this](std::exception_ptr e) {
                   --running_;
                   if (e && !done_) {
                     err_ << "sim-device-plugins: a device plugin stopped: " << ExceptionMessage(e) << "\n";
                     exit_code_ = kExitFailure;
                     done_ = true;
                   }
                 }));
  plugins_.push_back(std::move(plugin));
}

asio::awaitable<void> PluginsRun::Setup() {
  for (const PlannedNode& node : nodes_) {
    auto ensured = co_await EnsureNode(client_, node.spec.name);
    if (!ensured) {
      err_ << "sim-device-plugins: " << ensured.error().message << "\n";
      exit_code_ = kExitFailure;
      done_ = true;
      co_return;
    }
  }
  for (const PlannedNode& node : nodes_) {
    StartPlugin(node);
    if (done_) co_return;
  }
  out_ << fmt::format("sim-device-plugins: {} node(s) running against {} (SIGINT/SIGTERM stops)\n",
                      nodes_.size(), flags_.kubeconfig)
       << std::flush;
}

int PluginsRun::Run() {
  ++running_;
  asio::co_spawn(ioc_, Setup(),
                 asio::bind_cancellation_slot(stops_.emplace_back().slot(), [this](std::exception_ptr e) {
                   --running_;
                   if (e && !done_) {
                     err_ << "sim-device-plugins: " << ExceptionMessage(e) << "\n";
                     exit_code_ = kExitFailure;
                     done_ = true;
                   }
                 }));
  RunUntilDoneOrSignal(ioc_, done_);
  Stop();
  return exit_code_;
}

// Cancels every plugin where it stands and lets the cancellations run out before the objects go.
void PluginsRun::Stop() {
  for (auto& stop : stops_) stop.emit(asio::cancellation_type::terminal);
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (running_ > 0 && std::chrono::steady_clock::now() < deadline) ioc_.run_one_for(50ms);
  for (std::size_t i = 0; i < plugins_.size(); ++i) {
    const auto& s = plugins_[i]->stats();
    out_ << fmt::format(
        "sim-device-plugins: node {}: {} allocated, {} failed, {} registrations, {} handshakes, {} API "
        "errors\n",
        nodes_[i].spec.name, s.allocated, s.failed, s.registrations, s.handshakes, s.api_errors);
  }
  out_ << std::flush;
}

Result<std::vector<PlannedNode>> PlanNodes(const std::vector<SimNodeSpec>& specs, const Backends& backends) {
  std::vector<PlannedNode> planned;
  for (const SimNodeSpec& spec : specs) {
    auto backend = BackendForVendor(backends, spec.vendor);
    if (!backend) return Error{fmt::format("--node {}: {}", spec.name, backend.error().message)};
    planned.push_back(PlannedNode{spec, *backend});
  }
  return planned;
}

// The config out-parameter keeps GCC 12 at -O3 from a false -Wmaybe-uninitialized on a returned Result.
Result<void> LoadDeviceConfig(const std::string& file, config::Config& cfg) {
  if (file.empty()) return {};
  const std::vector<std::string> args = {"hami-scheduler sim-device-plugins", "--device-config-file", file};
  auto loaded = config::LoadConfig(args, Vendors());
  if (!loaded) return loaded.error();
  cfg = std::move(loaded->config);
  return {};
}

}  // namespace

Result<SimNodeSpec> ParseSimNodeSpec(std::string_view text) {
  const auto eq = text.find('=');
  if (eq == std::string_view::npos) return NodeError(text, "no '='");
  SimNodeSpec spec;
  spec.name = std::string(text.substr(0, eq));
  if (!IsNodeName(spec.name))
    return NodeError(
        text, fmt::format("node name '{}' is not a lowercase DNS name (a-z, 0-9, '-', '.')", spec.name));
  const auto fields = SplitFirst(text.substr(eq + 1), ':', 3);
  if (fields.size() < 2) return NodeError(text, "no ':' after the vendor");
  spec.vendor = std::string(fields[0]);
  if (spec.vendor.empty()) return NodeError(text, "the vendor is empty");
  const auto x = fields[1].find('x');
  if (x == std::string_view::npos)
    return NodeError(text, fmt::format("'{}' is not COUNTxMEMORY_MIB", fields[1]));
  const auto count = IntIn(fields[1].substr(0, x), 1, kMaxCards);
  if (!count)
    return NodeError(
        text, fmt::format("card count '{}' is not a number from 1 to {}", fields[1].substr(0, x), kMaxCards));
  const auto memory = IntIn(fields[1].substr(x + 1), 1, kMaxMemoryMib);
  if (!memory)
    return NodeError(text, fmt::format("memory '{}' is not a number of MiB from 1 to {}",
                                       fields[1].substr(x + 1), kMaxMemoryMib));
  spec.count = static_cast<std::int32_t>(*count);
  spec.memory_mib = *memory;
  if (fields.size() > 2 && !fields[2].empty()) {
    const auto split = IntIn(fields[2], 1, kMaxSplit);
    if (!split)
      return NodeError(text, fmt::format("split '{}' is not a number from 1 to {}", fields[2], kMaxSplit));
    spec.split = static_cast<std::int32_t>(*split);
  }
  if (fields.size() > 3) {
    // HAMi's annotations separate fields with ',' and devices with ':'.
    if (fields[3].find_first_of(",:") != std::string_view::npos)
      return NodeError(text, fmt::format("type '{}' contains ',' or ':'", fields[3]));
    spec.type = std::string(fields[3]);
  }
  return spec;
}

Result<SimPluginsFlags> ParseSimPluginsFlags(const std::vector<std::string>& args) {
  const SubcommandFlags declared(
      "hami-scheduler sim-device-plugins",
      {"kubeconfig", "node", "allocate-delay", "register-interval", "device-config-file"});
  auto given = declared.Parse(args);
  if (!given) return given.error();
  if (!given->undeclared.empty()) return declared.Unexpected(given->undeclared.front());
  SimPluginsFlags flags;
  flags.help = given->help;
  for (const auto& [name, value] : given->flags) {
    if (auto applied = ApplyFlag(name, value, flags); !applied) return applied.error();
  }
  if (flags.help) return flags;
  if (flags.kubeconfig.empty())
    return Error{"--kubeconfig FILE is required: the API server the device plugins talk to"};
  if (flags.nodes.empty()) return Error{fmt::format("at least one --node {} is required", kSimNodeSyntax)};
  std::set<std::string> names;
  for (const auto& node : flags.nodes) {
    if (!names.insert(node.name).second)
      return Error{
          fmt::format("--node {}: the node is given twice; expected one --node per node", node.name)};
  }
  return flags;
}

// "cambricon, hygon, ..., chips: ChipA ChipB": the sections, and the vendor keys of those that build
// several backends by default (a node names one of them).
std::string SimVendorList() {
  std::vector<std::string> out;
  for (const auto& section : Vendors().Names()) {
    auto built = Vendors().Create(section, VendorSettings{});
    if (!built || built->size() < 2) {
      out.push_back(section);
      continue;
    }
    std::vector<std::string> keys;
    for (const auto& b : *built) keys.push_back(b->Vendor());
    out.push_back(fmt::format("{}: {}", section, fmt::join(keys, " ")));
  }
  return fmt::format("{}", fmt::join(out, ", "));
}

std::string SimPluginsHelp() {
  return fmt::format(
      R"(Usage: hami-scheduler sim-device-plugins --kubeconfig FILE --node {} [--node ...]
                                           [--allocate-delay 20ms] [--register-interval 30s]
                                           [--device-config-file FILE]

Simulated device plugins for nodes of any API server: each node's cards are published the way the vendor's
device plugin does (register annotation or node capacity), handshakes are answered, and pods bound to the
node in bind-phase allocating get to-allocate ";" and bind-phase success after --allocate-delay. Missing
Nodes are created (label kubernetes.io/hostname; cpu 64, memory 256Gi, pods 110; Ready=True). Runs until
SIGINT or SIGTERM; every action is printed on stdout.

  --kubeconfig FILE          the API server (required)
  --node SPEC                a node and its cards (repeatable, at least one):
                               NAME=VENDOR:COUNTxMEMORY_MIB[:SPLIT[:TYPE]]
                               VENDOR: a vendor's device-config section, or the vendor key of
                               one of a section's backends ({})
                               SPLIT: tasks per card (default 10); TYPE: card model (default
                               <vendor key>-SIM)
                               e.g. --node gpu-1=nvidia:2x16384:10:NVIDIA-T4 --node dcu-1=hygon:2x65536
  --allocate-delay DURATION  time a plugin takes to set a pod's devices up (default 20ms)
  --register-interval DURATION  how often the devices are re-published if changed (default 30s)
  --device-config-file FILE  HAMi's device-config.yaml, for resource names and annotation keys (the same
                             file `serve` reads)
)",
      kSimNodeSyntax, SimVendorList());
}

Result<const Backend*> BackendForVendor(const Backends& backends, std::string_view vendor) {
  // A vendor key names one backend; a section names one when it builds only one (a list of chips does not).
  if (const Backend* b = backends.Find(vendor)) return b;
  std::map<std::string, std::vector<const Backend*>> by_section;
  for (const auto& backend : backends) by_section[backend->Spec().config_section].push_back(backend.get());
  std::vector<std::string> known;  // sections of one backend, vendor keys of the others
  for (const auto& [section, list] : by_section) {
    if (list.size() == 1) known.push_back(section);
    for (const Backend* b : list) {
      if (list.size() > 1) known.push_back(b->Vendor());
    }
  }
  std::sort(known.begin(), known.end());
  auto it = by_section.find(std::string(vendor));
  if (it != by_section.end() && it->second.size() == 1) return it->second.front();
  if (it != by_section.end()) {
    return Error{fmt::format("section '{}' builds several backends; name one by its vendor key: {}", vendor,
                             fmt::join(known, ", "))};
  }
  return Error{fmt::format("unknown vendor '{}'; expected one of the enabled backends: {}", vendor,
                           fmt::join(known, ", "))};
}

std::vector<sim::SimDevice> SimDevicesOf(const SimNodeSpec& spec, const Backend& backend) {
  const std::string& key = backend.Spec().vendor;
  const std::string type = spec.type.empty() ? key + "-SIM" : spec.type;
  std::vector<sim::SimDevice> devices;
  for (std::int32_t i = 0; i < spec.count; ++i) {
    devices.push_back(sim::SimDevice{fmt::format("{}-{}-{}", key, spec.name, i), spec.split, spec.memory_mib,
                                     100, type, i / 2, true});
  }
  return devices;
}

json::value SimNodeObject(const std::string& name) {
  const json::object resources = {{"cpu", "64"}, {"memory", "256Gi"}, {"pods", "110"}};
  const json::object ready = {{"type", "Ready"},
                              {"status", "True"},
                              {"reason", "KubeletReady"},
                              {"message", "simulated by hami-scheduler sim-device-plugins"}};
  return {
      {"apiVersion", "v1"},
      {"kind", "Node"},
      {"metadata", {{"name", name}, {"labels", {{"kubernetes.io/hostname", name}}}}},
      {"status", {{"capacity", resources}, {"allocatable", resources}, {"conditions", json::array{ready}}}}};
}

int SimDevicePlugins(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  auto flags = ParseSimPluginsFlags(args);
  if (!flags) {
    err << "hami-scheduler sim-device-plugins: " << flags.error().message << "\n";
    return kExitUsage;
  }
  if (flags->help) {
    out << SimPluginsHelp();
    return kExitOk;
  }
  config::Config cfg;
  if (auto loaded = LoadDeviceConfig(flags->device_config_file, cfg); !loaded) {
    err << "hami-scheduler sim-device-plugins: " << loaded.error().message << "\n";
    return kExitUsage;
  }
  // Every vendor's plugin can be simulated, also those `serve` needs a flag for (VendorFlag::kEnables).
  for (const auto& section : Vendors().Sections()) cfg.vendors[section].enabled = true;
  auto backends = BuildBackends(cfg);
  if (!backends) {
    err << "hami-scheduler sim-device-plugins: " << backends.error().message << "\n";
    return kExitUsage;
  }
  auto planned = PlanNodes(flags->nodes, *backends);
  if (!planned) {
    err << "hami-scheduler sim-device-plugins: " << planned.error().message << "\n";
    return kExitUsage;
  }
  auto rest = k8s::ResolveRestConfig(flags->kubeconfig, k8s::ConfigEnv::System());
  if (!rest) {
    err << "hami-scheduler sim-device-plugins: --kubeconfig " << flags->kubeconfig << ": "
        << rest.error().message << "\n";
    return kExitUsage;
  }
  // The plugins' own info lines would repeat what on_log prints on `out`; warnings (API errors) still show.
  spdlog::set_level(spdlog::level::warn);
  asio::io_context ioc(1);
  k8s::ClientOptions options;
  options.user_agent = "hami-sim-device-plugins";
  options.qps = 50;  // per node: each plugin has a client of its own
  options.burst = 100;
  auto client = k8s::ApiClient::Create(ioc.get_executor(), *rest, options);
  if (!client) {
    err << "hami-scheduler sim-device-plugins: " << client.error().message << "\n";
    return kExitFailure;
  }
  PluginsRun run(ioc, **client, *rest, options, std::move(*planned), *flags, out, err);
  return run.Run();
}

}  // namespace hami::cmd
