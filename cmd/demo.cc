// `hami-scheduler demo`: the whole system on one event loop, no cluster needed. The embedded API server, a
// few simulated nodes of every vendor with their device plugins, the real scheduler service over loopback
// HTTP (exactly what `serve` runs), the kube-scheduler stand-in, and a stream of sample pods; a live table of
// decisions, then a summary (or JSON with --json). --keep leaves it running for kubectl.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <charconv>
#include <cxxopts.hpp>
#include <deque>
#include <filesystem>
#include <map>
#include <ostream>
#include <utility>

#include "cmd/app.h"
#include "cmd/service.h"
#include "cmd/text_table.h"
#include "core/codec/stamps.h"
#include "core/free_capacity.h"
#include "core/keys.h"
#include "core/strings.h"
#include "k8s/objects.h"
#include "sim/apiserver/api_server.h"
#include "sim/device_plugins/device_plugin.h"
#include "sim/scheduler/kube_scheduler.h"

namespace hami::cmd {
namespace asio = boost::asio;
namespace json = boost::json;
using namespace std::chrono_literals;
using Clock_ = std::chrono::steady_clock;

namespace {

struct DemoNode {
  std::string name;
  std::string section;  // the vendor module's device-config section
  std::string vendor;   // the backend's vendor key; "" = the section's only backend
  std::vector<sim::SimDevice> devices;
};

// Every vendor's demo nodes, in registration order; the cards as its device plugin lists them.
std::vector<DemoNode> DemoNodes() {
  std::vector<DemoNode> nodes;
  for (const auto& section : Vendors().Sections()) {
    for (const auto& node : Vendors().Demo(section)->nodes) {
      DemoNode n{node.name, section, node.vendor, {}};
      for (const DeviceInfo& c : node.cards) {
        const auto cores = static_cast<std::int32_t>(c.devcore.value());
        n.devices.push_back(sim::SimDevice{c.id, c.count, c.devmem.value(), cores, c.type, c.numa, c.health});
      }
      nodes.push_back(std::move(n));
    }
  }
  return nodes;
}

json::value Container(const std::string& name, const json::value& limits) {
  return {{"name", name}, {"image", "registry.example/app:1"}, {"resources", {{"limits", limits}}}};
}

// Every vendor's sample pods, in registration order, each vendor's in its own order.
std::vector<json::value> DemoPods(const std::string& scheduler_name) {
  std::vector<json::value> pods;
  for (const auto& section : Vendors().Sections()) {
    const std::string& text = Vendors().Demo(section)->pods;
    if (text.empty()) continue;
    auto docs = k8s::ParseDocuments(text, "demo pods of " + section);
    for (const auto& item : docs.value().at(0).as_array()) {
      const auto& o = item.as_object();
      json::array containers{Container("app", o.at("limits"))};
      if (auto* second = o.if_contains("second")) containers.push_back(Container("sidecar", *second));
      json::object spec{{"schedulerName", scheduler_name}, {"containers", std::move(containers)}};
      if (auto* init = o.if_contains("init")) spec["initContainers"] = json::array{Container("warmup", *init)};
      pods.push_back({{"apiVersion", "v1"},
                      {"kind", "Pod"},
                      {"metadata", {{"name", o.at("name")}, {"namespace", "default"}}},
                      {"spec", std::move(spec)}});
    }
  }
  return pods;
}

std::string Annotation(const json::object& o, std::string_view key) {
  const auto* a = o.at("metadata").as_object().if_contains("annotations");
  if (a == nullptr || !a->is_object()) return "";
  const auto* v = a->as_object().if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : "";
}

struct DemoFlags {
  bool keep = false;
  bool json = false;
  bool verbose = false;
  std::string listen = "127.0.0.1:0";
  std::string ui_listen = "127.0.0.1:0";
  std::string kubeconfig_out;
  std::chrono::seconds timeout{60};
  FilterMode filter_mode = FilterMode::kOneNode;
};

Result<DemoFlags> ParseDemoFlags(const std::vector<std::string>& args, std::string& help) {
  cxxopts::Options o("hami-scheduler demo", "The whole system on an embedded in-memory cluster.");
  o.add_options()("keep", "keep running after the summary (Ctrl-C stops)")(
      "json", "print the summary as JSON on stdout (the live table goes to stderr)")(
      "verbose", "show the scheduler's own log lines")(
      "listen", "address of the embedded API server",
      cxxopts::value<std::string>()->default_value("127.0.0.1:0"))(
      "ui-listen", "address of the scheduler's metrics listener: the /ui/ page, /api/ and /metrics",
      cxxopts::value<std::string>()->default_value("127.0.0.1:0"))(
      "kubeconfig-out", "where to write the kubeconfig for kubectl (default: a temporary file)",
      cxxopts::value<std::string>())("timeout", "seconds to wait for every pod to settle",
                                     cxxopts::value<int>()->default_value("60"))(
      "filter-mode", "one-node or all-fitting, as serve's --filter-mode (the stand-in kube-scheduler then "
      "calls /prioritize)",
      cxxopts::value<std::string>()->default_value("one-node"))("h,help", "this help");
  std::vector<const char*> argv{"demo"};
  for (const auto& a : args) argv.push_back(a.c_str());
  try {
    auto r = o.parse(static_cast<int>(argv.size()), argv.data());
    if (!r.unmatched().empty()) return Error{fmt::format("unexpected argument '{}'", r.unmatched().front())};
    if (r.count("help")) help = o.help();
    DemoFlags f;
    f.keep = r.count("keep") > 0;
    f.json = r.count("json") > 0;
    f.verbose = r.count("verbose") > 0;
    f.listen = r["listen"].as<std::string>();
    f.ui_listen = r["ui-listen"].as<std::string>();
    if (r.count("kubeconfig-out")) f.kubeconfig_out = r["kubeconfig-out"].as<std::string>();
    const int t = r["timeout"].as<int>();
    if (t <= 0) return Error{fmt::format("--timeout {}: expected a positive number of seconds", t)};
    f.timeout = std::chrono::seconds(t);
    const std::string mode = r["filter-mode"].as<std::string>();
    auto parsed = ParseFilterMode(mode);
    if (!parsed) return Error{fmt::format("--filter-mode '{}': {}", mode, parsed.error().message)};
    f.filter_mode = *parsed;
    return f;
  } catch (const std::exception& e) {
    return Error{e.what()};
  }
}

class DemoRun {
 public:
  DemoRun(asio::io_context& ioc, DemoFlags flags, std::ostream& out, std::ostream& log)
      : ioc_(ioc), flags_(std::move(flags)), out_(out), log_(log) {}

  int Run();

 private:
  asio::awaitable<void> Script();
  void Line(std::string_view pod, std::string_view event, std::string_view node, std::string_view detail);
  std::string Summary();
  json::value SummaryJson();
  bool Settled();
  // Bound with cards of pool vendors only (remote GPUs): no device plugin on its node answers, so bound is
  // set up.
  bool BoundToPool(const json::object& pod) const;
  // The metrics listener as a browser reaches it ("http://127.0.0.1:<port>"): /ui/, /api/, /metrics.
  std::string PageUrl() const;

  asio::io_context& ioc_;
  DemoFlags flags_;
  std::ostream& out_;
  std::ostream& log_;
  Clock_::time_point start_ = Clock_::now();
  config::Config cfg_;
  Backends backends_;
  std::unique_ptr<sim::ApiServer> api_;
  std::unique_ptr<k8s::ApiClient> plugin_client_, scheduler_client_, user_client_;
  std::vector<std::unique_ptr<sim::DevicePlugin>> plugins_;
  std::unique_ptr<SchedulerService> service_;
  std::unique_ptr<sim::KubeSchedulerStandIn> stand_in_;
  std::vector<std::string> pod_names_;
  std::map<std::string, std::string> last_outcome_;  // pod -> the outcome last shown in the live table
  std::string kubeconfig_;
  bool done_ = false;
  int exit_code_ = kExitOk;
  std::deque<asio::cancellation_signal> stop_plugins_;  // one per plugin: a signal cancels one operation
  asio::cancellation_signal stop_stand_in_;
};

void DemoRun::Line(std::string_view pod, std::string_view event, std::string_view node,
                   std::string_view detail) {
  const double t = std::chrono::duration<double>(Clock_::now() - start_).count();
  log_ << fmt::format("{:>7.2f}s  {:<18} {:<14} {:<17} {}\n", t, pod, event, node.empty() ? "-" : node,
                      detail);
  log_.flush();
}

int DemoRun::Run() {
  cfg_.serving.http_bind = "127.0.0.1:0";
  cfg_.serving.metrics_bind_address = flags_.ui_listen;
  cfg_.kube.qps = 0;  // no client-side rate limit against the embedded server
  cfg_.extender.filter.policies.filter_mode = flags_.filter_mode;
  // Two shapes the page's "Free capacity" counts: a quarter of a 16 GiB card, and two whole ones.
  for (const char* shape : {"nvidia-4g=NVIDIA:1x4096:25", "nvidia-2x16g=NVIDIA:2x16384:100"})
    cfg_.extender.capacity_shapes.push_back(ParseCapacityShape(shape).value());
  // Every vendor runs in the demo, also those a deployment switches on with a flag.
  for (const auto& section : Vendors().Sections()) cfg_.vendors[section].enabled = true;
  auto backends = BuildBackends(cfg_);
  if (!backends) {
    log_ << "demo: " << backends.error().message << "\n";
    return kExitFailure;
  }
  backends_ = std::move(*backends);

  sim::ApiServerOptions so;
  const auto colon = flags_.listen.rfind(':');
  if (colon == std::string::npos) {
    log_ << "demo: --listen " << flags_.listen << ": expected HOST:PORT\n";
    return kExitUsage;
  }
  so.host = flags_.listen.substr(0, colon);
  const std::string port_text = flags_.listen.substr(colon + 1);
  unsigned port_value = 0;
  const auto parsed = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port_value);
  if (parsed.ec != std::errc() || parsed.ptr != port_text.data() + port_text.size() || port_value > 65535) {
    log_ << "demo: --listen " << flags_.listen << ": expected HOST:PORT with a port from 0 to 65535\n";
    return kExitUsage;
  }
  so.port = static_cast<std::uint16_t>(port_value);
  api_ = std::make_unique<sim::ApiServer>(ioc_, so);
  auto port = api_->Start();
  if (!port) {
    log_ << "demo: " << port.error().message << "\n";
    return kExitFailure;
  }
  kubeconfig_ =
      flags_.kubeconfig_out.empty()
          ? (std::filesystem::temp_directory_path() / fmt::format("hami-demo-{}.kubeconfig", *port)).string()
          : flags_.kubeconfig_out;
  if (auto w = api_->WriteKubeconfig(kubeconfig_); !w) {
    log_ << "demo: " << w.error().message << "\n";
    return kExitFailure;
  }
  k8s::RestConfig rest = k8s::LoopbackHttp(*port);
  if (so.host != "0.0.0.0") rest.host = so.host;
  k8s::ClientOptions co;
  co.qps = 0;
  plugin_client_ = k8s::ApiClient::Create(ioc_.get_executor(), rest, co).value();
  scheduler_client_ = k8s::ApiClient::Create(ioc_.get_executor(), rest, co).value();
  user_client_ = k8s::ApiClient::Create(ioc_.get_executor(), rest, co).value();

  static SystemClock clock;
  ServiceOptions svc;
  svc.health_interval = 2s;
  svc.hostname = "demo";
  auto service = SchedulerService::Create(ioc_, cfg_, backends_, rest, clock, svc);
  if (!service) {
    log_ << "demo: " << service.error().message << "\n";
    return kExitFailure;
  }
  service_ = std::move(*service);
  if (auto l = service_->Listen(); !l) {
    log_ << "demo: " << l.error().message << "\n";
    return kExitFailure;
  }
  asio::co_spawn(ioc_, Script(), [this](std::exception_ptr e) {
    if (e) {
      log_ << "demo: " << ExceptionMessage(e) << "\n";
      exit_code_ = kExitFailure;
    }
    done_ = true;
  });
  RunUntilDoneOrSignal(ioc_, done_);
  // Stop everything: the plugins and the stand-in at once, the service gracefully.
  stop_stand_in_.emit(asio::cancellation_type::terminal);
  for (auto& s : stop_plugins_) s.emit(asio::cancellation_type::terminal);
  service_->Shutdown(2s);
  const auto deadline = Clock_::now() + 5s;
  while (!service_->stopped() && Clock_::now() < deadline) ioc_.run_one_for(50ms);
  api_->Stop();
  // The kubeconfig points at a server that is gone now; one asked for with --kubeconfig-out stays.
  if (flags_.kubeconfig_out.empty()) {
    std::error_code ignored;
    std::filesystem::remove(kubeconfig_, ignored);
  }
  return exit_code_;
}

asio::awaitable<void> DemoRun::Script() {
  const auto executor = co_await asio::this_coro::executor;
  // Nodes as kubelet registers them; the device plugins publish the devices.
  std::size_t device_count = 0;
  std::size_t node_number = 0;
  for (const auto& n : DemoNodes()) {
    ++node_number;
    // An address as kubelet reports it: a lupine server's endpoint is its InternalIP.
    const std::string ip = fmt::format("10.0.{}.{}", node_number / 250, 1 + node_number % 250);
    const json::value node = {
        {"apiVersion", "v1"},
        {"kind", "Node"},
        {"metadata", {{"name", n.name}, {"labels", {{"kubernetes.io/hostname", n.name}}}}},
        {"status",
         json::object{{"addresses", json::array{json::object{{"type", "InternalIP"}, {"address", ip}}}}}}};
    const std::string nodes_path = "/api/v1/nodes";
    if (auto c = co_await user_client_->Create(nodes_path, node); !c)
      throw std::runtime_error(c.error().message);
    sim::DevicePluginOptions po;
    po.node = n.name;
    po.devices = n.devices;
    po.register_interval = 5s;
    po.handshake_interval = 1s;
    po.allocate_delay = 20ms;
    device_count += n.devices.size();
    const Backend* backend = nullptr;
    for (const auto& b : backends_) {
      if (b->Spec().config_section == n.section && (n.vendor.empty() || b->Vendor() == n.vendor))
        backend = b.get();
    }
    auto plugin = std::make_unique<sim::DevicePlugin>(*plugin_client_, *backend, po);
    plugin->on_log = [this, node = n.name](const std::string& line) {
      // "allocated <ns>/<pod> <devices>" and "failed <ns>/<pod> ...": the device plugin's side of the story.
      const auto first = line.find(' ');
      const auto second = line.find(' ', first + 1);
      const std::string what = line.substr(0, first);
      if ((what != "allocated" && what != "failed") || second == std::string::npos) return;
      const std::string key = line.substr(first + 1, second - first - 1);
      Line(key.substr(key.find('/') + 1), what, node, line.substr(second + 1));
    };
    asio::co_spawn(executor, plugin->Run(),
                   asio::bind_cancellation_slot(stop_plugins_.emplace_back().slot(), asio::detached));
    plugins_.push_back(std::move(plugin));
  }
  service_->Start();

  sim::StandInOptions sio;
  sio.scheduler_name = cfg_.extender.admission.scheduler_name;
  sio.extender_url = service_->url();
  sio.initial_backoff = 200ms;
  sio.max_backoff = 2s;
  sio.prioritize = cfg_.extender.filter.policies.filter_mode == FilterMode::kAllFitting;
  stand_in_ = std::make_unique<sim::KubeSchedulerStandIn>(*scheduler_client_, sio);
  stand_in_->on_outcome = [this](const sim::PodOutcome& o) {
    const std::string pod = o.key.substr(o.key.find('/') + 1);
    // Retries of an unschedulable pod repeat the same outcome: show each outcome once.
    std::string seen = fmt::format("{}|{}|{}", static_cast<int>(o.state), o.node, o.message);
    if (std::exchange(last_outcome_[o.key], seen) == seen) return;
    switch (o.state) {
      case sim::PodOutcome::State::kBound:
        Line(pod, "bound", o.node, "");
        break;
      case sim::PodOutcome::State::kUnschedulable:
        Line(pod, "unschedulable", "", o.message);
        break;
      case sim::PodOutcome::State::kError:
        Line(pod, "retrying", "", o.message);
        break;
      default:
        break;
    }
  };
  asio::co_spawn(executor, stand_in_->Run(),
                 asio::bind_cancellation_slot(stop_stand_in_.slot(), asio::detached));

  const std::function<bool()> ready = [this] { return service_->extender().ready(); };
  asio::steady_timer t(executor);
  while (!ready()) {
    t.expires_after(20ms);
    co_await t.async_wait(asio::use_awaitable);
  }
  std::vector<std::string> vendors;
  for (const auto& b : backends_) vendors.push_back(b->Spec().display_name);
  log_ << fmt::format(
      "hami-scheduler demo: embedded API server {}, {} nodes with {} devices ({}),\nscheduler extender {} "
      "(/filter, /bind, /metrics), kube-scheduler stand-in.\n\n",
      api_->url(), DemoNodes().size(), device_count, fmt::join(vendors, ", "), service_->url());
  log_ << fmt::format("{:>8}  {:<18} {:<14} {:<17} {}\n", "TIME", "POD", "EVENT", "NODE", "DETAIL");

  for (const auto& pod : DemoPods(cfg_.extender.admission.scheduler_name)) {
    pod_names_.push_back(std::string(pod.at("metadata").at("name").as_string()));
    const std::string path = "/api/v1/namespaces/default/pods";
    if (auto c = co_await user_client_->Create(path, pod); !c) throw std::runtime_error(c.error().message);
    Line(pod_names_.back(), "created", "", "");
    t.expires_after(100ms);
    co_await t.async_wait(asio::use_awaitable);
  }
  const auto deadline = Clock_::now() + flags_.timeout;
  while (!Settled() && Clock_::now() < deadline) {
    t.expires_after(50ms);
    co_await t.async_wait(asio::use_awaitable);
  }
  if (flags_.json) {
    out_ << json::serialize(SummaryJson()) << "\n";
  } else {
    out_ << Summary();
  }
  out_.flush();
  const json::value summary = SummaryJson();
  if (summary.at("failed").as_int64() > 0) exit_code_ = kExitFailure;
  if (flags_.keep) {
    log_ << fmt::format(
        "\nStill running (Ctrl-C stops). Try:\n  open {}/ui/ in a browser: the devices, the pods, why one waits\n"
        "  kubectl --kubeconfig {} get pods -o wide\n  kubectl --kubeconfig {} describe pod too-big\n"
        "  hami-scheduler explain default/too-big --server {}\n  curl {}/metrics\n",
        PageUrl(), kubeconfig_, kubeconfig_, PageUrl(), PageUrl());
    log_.flush();
    for (;;) {
      t.expires_after(1h);
      co_await t.async_wait(asio::use_awaitable);
    }
  }
}

std::string DemoRun::PageUrl() const {
  std::string host = flags_.ui_listen.substr(0, flags_.ui_listen.rfind(':'));
  if (host.empty() || host == "0.0.0.0" || host == "[::]") host = "127.0.0.1";
  return fmt::format("http://{}:{}", host, service_->metrics_port());
}

bool DemoRun::BoundToPool(const json::object& pod) const {
  const auto* spec = pod.at("spec").as_object().if_contains("nodeName");
  if (spec == nullptr || !spec->is_string() || spec->as_string().empty()) return false;
  bool any = false;
  for (const auto& b : backends_) {
    if (Annotation(pod, b->Spec().keys.allocated).empty()) continue;
    if (!b->Spec().pool.Active()) return false;
    any = true;
  }
  return any;
}

bool DemoRun::Settled() {
  if (pod_names_.empty()) return false;
  const auto& outcomes = stand_in_->outcomes();
  for (const auto& name : pod_names_) {
    auto pod = api_->store().Find("pods", "default", name);
    if (!pod) return false;
    const std::string phase = Annotation(*pod, keys::kBindPhase);
    if (phase == keys::kBindPhaseSuccess || phase == keys::kBindPhaseFailed || BoundToPool(*pod)) continue;
    auto o = outcomes.find("default/" + name);
    if (o != outcomes.end() && o->second.state == sim::PodOutcome::State::kUnschedulable) continue;
    return false;
  }
  return true;
}

json::value DemoRun::SummaryJson() {
  json::array outcomes;
  std::int64_t scheduled = 0, unschedulable = 0, failed = 0;
  for (const auto& name : pod_names_) {
    json::object o{{"pod", "default/" + name}};
    auto pod = api_->store().Find("pods", "default", name);
    const std::string phase = pod ? Annotation(*pod, keys::kBindPhase) : "";
    const auto* spec = pod ? pod->at("spec").as_object().if_contains("nodeName") : nullptr;
    const std::string node = spec != nullptr && spec->is_string() ? std::string(spec->as_string()) : "";
    auto so = stand_in_->outcomes().find("default/" + name);
    if (!node.empty() && (phase == keys::kBindPhaseSuccess || BoundToPool(*pod))) {
      ++scheduled;
      o["state"] = "scheduled";
      o["node"] = node;
      json::object devices;
      for (const auto& b : backends_) {
        const std::string v = Annotation(*pod, b->Spec().keys.allocated);
        if (!v.empty()) devices[b->Vendor()] = v;
      }
      o["devices"] = std::move(devices);
    } else if (so != stand_in_->outcomes().end() &&
               so->second.state == sim::PodOutcome::State::kUnschedulable) {
      ++unschedulable;
      o["state"] = "unschedulable";
      o["reason"] = so->second.message;
    } else {
      ++failed;
      o["state"] = "failed";
      o["reason"] =
          so != stand_in_->outcomes().end() ? so->second.message : std::string("never reached the scheduler");
      if (!phase.empty()) o["bindPhase"] = phase;
    }
    outcomes.push_back(std::move(o));
  }
  return {{"pods", static_cast<std::int64_t>(pod_names_.size())},
          {"scheduled", scheduled},
          {"unschedulable", unschedulable},
          {"failed", failed},
          {"outcomes", std::move(outcomes)}};
}

std::string DemoRun::Summary() {
  const json::value s = SummaryJson();
  std::string out = "\nPods\n";
  TextTable pods({"POD", "STATE", "NODE", "DEVICES / REASON"});
  for (const auto& v : s.at("outcomes").as_array()) {
    const auto& o = v.as_object();
    std::string detail;
    if (auto* d = o.if_contains("devices")) {
      for (const auto& [vendor, value] : d->as_object()) detail += std::string(value.as_string()) + " ";
    } else if (auto* r = o.if_contains("reason")) {
      detail = std::string(r->as_string());
    }
    const auto* node = o.if_contains("node");
    pods.Add({std::string(o.at("pod").as_string()).substr(8), std::string(o.at("state").as_string()),
              node ? std::string(node->as_string()) : "-", detail});
  }
  out += pods.Render("  ");
  out += "\nDevice usage (from the scheduler's ledger)\n";
  out += DeviceUsageTable(service_->extender().state()).Render("  ");
  out +=
      fmt::format("\n{} pods: {} scheduled, {} unschedulable, {} failed\n", s.at("pods").as_int64(),
                  s.at("scheduled").as_int64(), s.at("unschedulable").as_int64(), s.at("failed").as_int64());
  if (!flags_.keep)
    out += "Run `hami-scheduler demo --keep` to keep the cluster up and look at it with kubectl.\n";
  return out;
}

}  // namespace

int Demo(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string help;
  auto flags = ParseDemoFlags(args, help);
  if (!flags) {
    err << "hami-scheduler demo: " << flags.error().message << "\n";
    return kExitUsage;
  }
  if (!help.empty()) {
    out << help;
    return kExitOk;
  }
  if (!flags->verbose) spdlog::set_level(spdlog::level::err);
  asio::io_context ioc(1);
  DemoRun demo(ioc, *flags, out, flags->json ? err : out);
  return demo.Run();
}

}  // namespace hami::cmd
