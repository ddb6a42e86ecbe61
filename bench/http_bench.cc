// /filter and /bind over loopback HTTP, as kube-scheduler calls them, against the real scheduler service
// (cmd::SchedulerService, what `serve` runs) and the embedded API server.
//
//   bench_http filter [--nodes 1000] [--requests 5000] [--pods-per-node 10] [--no-patch] [--one-thread]
//   bench_http bind [--nodes 100] [--pairs 5000] [--clients 8] [--node-policy binpack] [--one-thread]
//   bench_http webhook [--nodes 100] [--requests 5000] [--one-thread]
//
// filter: one keep-alive connection sends /filter requests one after the other, each with a pod that fits
// and every node name; each answer is a decision plus one patch of that pod on the API server. --no-patch
// sends a pod without device requests (pass-through): the HTTP and JSON floor.
// bind: `clients` connections each run filter-then-bind for pod after pod; the simulated device plugins
// (one per node, allocate_delay 0) set the devices up and release the node locks, as on a real node.
//
// Threads: the API server, the scheduler service and the device plugins share one io_context thread (in
// production they are separate processes); the client (kube-scheduler's side) runs on a second thread with
// its own io_context and HttpClient. --one-thread runs the client on the server's loop as well. Both modes
// also print the server thread's CPU time per call (the machine is shared: wall time includes waiting for a
// core) and the server's counters; filter also times the pod patch alone and the JSON work in-process.
// webhook: one keep-alive connection sends AdmissionReviews of a typical GPU pod (a Deployment's pod: labels,
// owner, env, volume mounts, a memory + cores request; its namespace has a ResourceQuota) to /webhook, one
// after the other; every answer must be a patch. Also times the decision in-process (no HTTP, no JSON).
// --latencies-out FILE writes every measured latency in order.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <cmath>
#include <ctime>
#include <cxxopts.hpp>
#include <deque>
#include <exception>
#include <fstream>
#include <future>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cmd/app.h"
#include "cmd/service.h"
#include "core/codec/node_devices.h"
#include "extender/admission_wire.h"
#include "k8s/admission.h"
#include "k8s/extender.h"
#include "k8s/http_client.h"
#include "k8s/objects.h"
#include "sim/apiserver/api_server.h"
#include "sim/device_plugins/device_plugin.h"

namespace asio = boost::asio;
namespace json = boost::json;
namespace http = boost::beast::http;
using namespace std::chrono_literals;
using Clock_ = std::chrono::steady_clock;

namespace {

constexpr int kGpusPerNode = 4;
constexpr std::int64_t kGpuMemoryMiB = 40960;

struct Flags {
  std::string mode;
  int nodes = 0;
  int requests = 5000;  // filter
  int pods_per_node = 10;
  bool no_patch = false;
  int pairs = 5000;  // bind
  int clients = 8;
  std::string node_policy = "binpack";
  bool one_thread = false;
  std::string latencies_out;  // "" = none
};

std::optional<Flags> ParseFlags(int argc, char** argv) {
  cxxopts::Options o("bench_http", "/filter and /bind over HTTP against the embedded API server.");
  o.add_options()("mode", "filter or bind", cxxopts::value<std::string>())(
      "nodes", "nodes (4 GPUs each); default 1000 for filter, 100 for bind", cxxopts::value<int>())(
      "requests", "measured /filter requests (filter)", cxxopts::value<int>()->default_value("5000"))(
      "pods-per-node", "running pods per node, carrying allocations (filter)",
      cxxopts::value<int>()->default_value("10"))("no-patch", "pods without device requests (filter)")(
      "pairs", "measured filter+bind pairs (bind)", cxxopts::value<int>()->default_value("5000"))(
      "clients", "concurrent client connections (bind)", cxxopts::value<int>()->default_value("8"))(
      "node-policy", "binpack or spread", cxxopts::value<std::string>()->default_value("binpack"))(
      "one-thread", "run the client on the server's io_context thread")(
      "latencies-out", "write every measured latency (filter; bind: pairs) to this file, in order",
      cxxopts::value<std::string>())("h,help", "this help");
  o.parse_positional({"mode"});
  o.positional_help("filter|bind|webhook");
  try {
    auto r = o.parse(argc, argv);
    if (r.count("help") || !r.count("mode")) {
      std::cerr << o.help();
      return std::nullopt;
    }
    Flags f;
    f.mode = r["mode"].as<std::string>();
    if (f.mode != "filter" && f.mode != "bind" && f.mode != "webhook") {
      std::cerr << "bench_http: mode '" << f.mode << "': expected filter, bind or webhook\n";
      return std::nullopt;
    }
    f.nodes = r.count("nodes") ? r["nodes"].as<int>() : (f.mode == "filter" ? 1000 : 100);
    f.requests = r["requests"].as<int>();
    f.pods_per_node = r["pods-per-node"].as<int>();
    f.no_patch = r.count("no-patch") > 0;
    f.pairs = r["pairs"].as<int>();
    f.clients = r["clients"].as<int>();
    f.node_policy = r["node-policy"].as<std::string>();
    f.one_thread = r.count("one-thread") > 0;
    if (f.node_policy != "binpack" && f.node_policy != "spread") {
      std::cerr << "bench_http: --node-policy " << f.node_policy << ": expected binpack or spread\n";
      return std::nullopt;
    }
    if (r.count("latencies-out")) f.latencies_out = r["latencies-out"].as<std::string>();
    if (f.nodes <= 0 || f.requests <= 0 || f.pods_per_node < 0 || f.pairs <= 0 || f.clients <= 0) {
      std::cerr << "bench_http: --nodes, --requests, --pairs and --clients must be positive, --pods-per-node "
                   "not negative\n";
      return std::nullopt;
    }
    return f;
  } catch (const std::exception& e) {
    std::cerr << "bench_http: " << e.what() << "\n";
    return std::nullopt;
  }
}

// ---------------------------------------------------------------------------------------------------------
// The cluster

std::string NodeName(int n) { return fmt::format("node-{:05}", n); }

std::vector<hami::sim::SimDevice> NodeGpus(int n, std::int32_t split) {
  std::vector<hami::sim::SimDevice> gpus;
  for (int g = 0; g < kGpusPerNode; ++g)
    gpus.push_back(hami::sim::SimDevice{fmt::format("GPU-{:05}-{}", n, g), split, kGpuMemoryMiB, 100,
                                        "NVIDIA-A100-SXM4-40GB", g / 2, true});
  return gpus;
}

// As the device plugin publishes it, so the plugin finds nothing to change at startup.
json::value NodeObject(int n, const std::vector<hami::sim::SimDevice>& gpus) {
  std::int64_t slots = 0;
  for (const auto& g : gpus) slots += g.split;
  const std::string count = std::to_string(slots);
  return {
      {"apiVersion", "v1"},
      {"kind", "Node"},
      {"metadata",
       {{"name", NodeName(n)},
        {"labels", {{"kubernetes.io/hostname", NodeName(n)}}},
        {"annotations",
         {{"hami.io/node-nvidia-register",
           hami::codec::EncodeDeviceManifest(hami::sim::ManifestOf(gpus))}}}}},
      {"status", {{"capacity", {{"nvidia.com/gpu", count}}}, {"allocatable", {{"nvidia.com/gpu", count}}}}}};
}

json::value Container(const json::value& limits) {
  return {{"name", "main"}, {"image", "cuda"}, {"resources", {{"limits", limits}}}};
}

// A running pod whose allocation the controller reads back from its annotations.
json::value RunningPod(int index, int node) {
  const std::string node_name = NodeName(node);
  const std::string gpu = fmt::format("GPU-{:05}-{}", node, index % kGpusPerNode);
  const json::value limits = {
      {"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "4000"}, {"nvidia.com/gpucores", "10"}};
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", fmt::format("running-{:06}", index)},
            {"namespace", "running"},
            {"annotations",
             {{"hami.io/vgpu-node", node_name},
              {"hami.io/vgpu-devices-allocated", fmt::format("{},NVIDIA,4000,10:;", gpu)}}}}},
          {"spec",
           {{"nodeName", node_name},
            {"schedulerName", "hami-scheduler"},
            {"containers", json::array{Container(limits)}}}},
          {"status", {{"phase", "Running"}}}};
}

// A pending pod: one GPU slice, or (devices = false) only CPU, which the extender passes through.
json::value PendingPod(int index, bool devices, std::int64_t memory_mib) {
  const json::value limits = devices ? json::value{{"nvidia.com/gpu", "1"},
                                                   {"nvidia.com/gpumem", std::to_string(memory_mib)},
                                                   {"nvidia.com/gpucores", "5"}}
                                     : json::value{{"cpu", "1"}, {"memory", "1Gi"}};
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", fmt::format("bench-{:06}", index)}, {"namespace", "bench"}}},
          {"spec", {{"schedulerName", "hami-scheduler"}, {"containers", json::array{Container(limits)}}}},
          {"status", {{"phase", "Pending"}}}};
}

// What the client needs of a pending pod: its JSON as stored (uid, resourceVersion...) and its bind args.
struct PendingPodArgs {
  std::string json;
  std::string name;
  std::string uid;
};

std::string NodeNamesJson(int nodes) {
  json::array names;
  for (int n = 0; n < nodes; ++n) names.emplace_back(NodeName(n));
  return json::serialize(names);
}

// ---------------------------------------------------------------------------------------------------------
// Measurements

class Latencies {
 public:
  void Add(Clock_::duration d) { ms_.push_back(std::chrono::duration<double, std::milli>(d).count()); }
  std::size_t size() const { return ms_.size(); }
  double Quantile(double q) {
    if (ms_.empty()) return NAN;
    if (sorted_.size() != ms_.size()) {
      sorted_ = ms_;
      std::sort(sorted_.begin(), sorted_.end());
    }
    const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(sorted_.size())));
    return sorted_[std::clamp<std::size_t>(rank, 1, sorted_.size()) - 1];
  }
  double Mean() const {
    double sum = 0;
    for (double v : ms_) sum += v;
    return ms_.empty() ? NAN : sum / static_cast<double>(ms_.size());
  }
  std::string Summary() {
    return fmt::format("p50 {:.3f} ms  p90 {:.3f} ms  p99 {:.3f} ms  max {:.3f} ms  mean {:.3f} ms",
                       Quantile(0.5), Quantile(0.9), Quantile(0.99), Quantile(1.0), Mean());
  }
  // One line per call in the order sent: "<index> <milliseconds>" (to see whether slow calls cluster).
  bool Write(const std::string& path) const {
    std::ofstream out(path);
    for (std::size_t i = 0; i < ms_.size(); ++i) out << i << ' ' << ms_[i] << '\n';
    return static_cast<bool>(out);
  }

 private:
  std::vector<double> ms_;      // in the order recorded
  std::vector<double> sorted_;  // for quantiles
};

// CPU time of the calling thread: unlike wall time, it does not count the time the thread waited for a core
// (the machine is shared).
double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The value of an unlabelled sample ("name 1.5") in Prometheus text; 0 when absent.
double Sample(const std::string& text, std::string_view name) {
  const std::string prefix = fmt::format("\n{} ", name);
  const auto at = text.find(prefix);
  if (at == std::string::npos) return 0;
  return std::strtod(text.c_str() + at + prefix.size(), nullptr);
}

// Server-side counters, read on the server's thread.
struct Counters {
  std::uint64_t api_requests = 0;      // served by the embedded API server
  std::size_t scheduler_requests = 0;  // sent by the scheduler service's API client
  std::size_t scheduler_connections = 0;
  std::size_t plugin_requests = 0;
  std::size_t lock_waits = 0;
  std::size_t events_created = 0, events_aggregated = 0, events_dropped = 0, events_failed = 0;
  double filter_seconds = 0, filter_count = 0, bind_seconds = 0, bind_count = 0;
  std::size_t allocated = 0, lock_releases = 0, plugin_errors = 0;
  double cpu_seconds = 0;  // the server thread's CPU time

  Counters operator-(const Counters& b) const {
    Counters d = *this;
    d.api_requests -= b.api_requests;
    d.scheduler_requests -= b.scheduler_requests;
    d.scheduler_connections -= b.scheduler_connections;
    d.plugin_requests -= b.plugin_requests;
    d.lock_waits -= b.lock_waits;
    d.events_created -= b.events_created;
    d.events_aggregated -= b.events_aggregated;
    d.events_dropped -= b.events_dropped;
    d.events_failed -= b.events_failed;
    d.filter_seconds -= b.filter_seconds;
    d.filter_count -= b.filter_count;
    d.bind_seconds -= b.bind_seconds;
    d.bind_count -= b.bind_count;
    d.allocated -= b.allocated;
    d.lock_releases -= b.lock_releases;
    d.plugin_errors -= b.plugin_errors;
    d.cpu_seconds -= b.cpu_seconds;
    return d;
  }
};

// ---------------------------------------------------------------------------------------------------------
// The server side: embedded API server, scheduler service, device plugins, on one io_context

class Harness {
 public:
  explicit Harness(const Flags& flags) : flags_(flags) {}
  ~Harness() { Stop(); }

  asio::io_context& ioc() { return ioc_; }
  hami::sim::Store& store() { return api_->store(); }  // before Start() only
  hami::cmd::SchedulerService& service() { return *service_; }
  std::uint16_t extender_port() const { return service_->port(); }
  const hami::k8s::RestConfig& api_server() const { return rest_; }

  // The API server, listening, with an empty store (the caller bulk-loads it).
  bool Open() {
    api_ = std::make_unique<hami::sim::ApiServer>(ioc_);
    auto port = api_->Start();
    if (!port) return Fail(port.error().message);
    rest_ = hami::k8s::LoopbackHttp(*port);
    return true;
  }

  // The scheduler service (and the plugins), run until ready and quiet. Then, unless --one-thread, the
  // loop moves to a thread of its own.
  bool Start(const std::vector<std::vector<hami::sim::SimDevice>>* plugin_devices) {
    cfg_.serving.http_bind = "127.0.0.1:0";
    cfg_.serving.metrics_bind_address = "";
    cfg_.kube.qps = 0;
    cfg_.extender.filter.policies.node_policy = flags_.node_policy;
    auto backends = hami::cmd::BuildBackends(cfg_);
    if (!backends) return Fail(backends.error().message);
    backends_ = std::move(*backends);
    hami::cmd::ServiceOptions so;
    so.hostname = "bench";
    auto service = hami::cmd::SchedulerService::Create(ioc_, cfg_, backends_, rest_, clock_, so);
    if (!service) return Fail(service.error().message);
    service_ = std::move(*service);
    if (auto l = service_->Listen(); !l) return Fail(l.error().message);
    if (plugin_devices != nullptr && !StartPlugins(*plugin_devices)) return false;
    service_->Start();
    if (!RunUntilQuiet()) return false;
    if (!flags_.one_thread) {
      ioc_.restart();
      guard_.emplace(ioc_.get_executor());
      thread_ = std::thread([this] { ioc_.run(); });
    }
    return true;
  }

  // Runs `f` on the server's thread and returns its result.
  template <class F>
  auto OnServer(F f) -> decltype(f()) {
    if (!thread_.joinable()) return f();
    std::promise<decltype(f())> p;
    asio::post(ioc_, [&] { p.set_value(f()); });
    return p.get_future().get();
  }

  Counters Read() {
    return OnServer([this] {
      Counters c;
      c.api_requests = api_->requests_served();
      c.scheduler_requests = service_->client().requests_sent();
      c.scheduler_connections = service_->client().http().connections_opened();
      const auto& s = service_->extender().stats();
      c.lock_waits = s.lock_waits;
      const auto& e = service_->extender().events().stats();
      c.events_created = e.created;
      c.events_aggregated = e.aggregated;
      c.events_dropped = e.dropped;
      c.events_failed = e.failed;
      const std::string metrics = "\n" + service_->extender().Metrics();
      c.filter_seconds = Sample(metrics, "hami_scheduler_filter_duration_seconds_sum");
      c.filter_count = Sample(metrics, "hami_scheduler_filter_duration_seconds_count");
      c.bind_seconds = Sample(metrics, "hami_scheduler_bind_duration_seconds_sum");
      c.bind_count = Sample(metrics, "hami_scheduler_bind_duration_seconds_count");
      for (const auto& client : plugin_clients_) c.plugin_requests += client->requests_sent();
      for (const auto& plugin : plugins_) {
        c.allocated += plugin->stats().allocated;
        c.lock_releases += plugin->stats().lock_releases;
        c.plugin_errors += plugin->stats().api_errors;
      }
      c.cpu_seconds = ThreadCpuSeconds();
      return c;
    });
  }

  // Everything stopped, the server's thread joined. Idempotent.
  void Stop() {
    if (stopped_ || !api_) return;
    stopped_ = true;
    OnServer([this] {
      for (auto& s : plugin_stops_) s.emit(asio::cancellation_type::terminal);
      if (service_) service_->Kill();
      return 0;
    });
    const auto deadline = Clock_::now() + 5s;
    while (service_ && !OnServer([this] { return service_->stopped(); }) && Clock_::now() < deadline) {
      if (thread_.joinable()) {
        std::this_thread::sleep_for(10ms);
      } else {
        ioc_.run_one_for(10ms);
      }
    }
    OnServer([this] {
      api_->Stop();
      return 0;
    });
    if (thread_.joinable()) {
      guard_.reset();
      ioc_.stop();
      thread_.join();
    }
  }

 private:
  bool Fail(const std::string& message) {
    std::cerr << "bench_http: " << message << "\n";
    return false;
  }

  bool StartPlugins(const std::vector<std::vector<hami::sim::SimDevice>>& devices) {
    const hami::Backend* nvidia = nullptr;
    for (const auto& b : backends_) {
      if (b->Spec().config_section == "nvidia") nvidia = b.get();
    }
    if (nvidia == nullptr) return Fail("the nvidia backend is not enabled");
    hami::k8s::ClientOptions co;
    co.qps = 0;
    for (std::size_t n = 0; n < devices.size(); ++n) {
      // One client per plugin: on a real cluster every node's plugin is its own process.
      auto client = hami::k8s::ApiClient::Create(ioc_.get_executor(), rest_, co);
      if (!client) return Fail(client.error().message);
      hami::sim::DevicePluginOptions po;
      po.node = NodeName(static_cast<int>(n));
      po.devices = devices[n];
      po.allocate_delay = 0ms;
      auto plugin = std::make_unique<hami::sim::DevicePlugin>(**client, *nvidia, po);
      asio::co_spawn(ioc_, plugin->Run(),
                     asio::bind_cancellation_slot(plugin_stops_.emplace_back().slot(), asio::detached));
      plugin_clients_.push_back(std::move(*client));
      plugins_.push_back(std::move(plugin));
    }
    return true;
  }

  // Ready, every plugin registered, and no API request for 300 ms (the first health pass writes a handshake
  // to every node; plugins list and watch).
  bool RunUntilQuiet() {
    const auto deadline = Clock_::now() + 120s;
    std::uint64_t last_count = api_->requests_served();
    auto last_change = Clock_::now();
    for (;;) {
      ioc_.run_one_for(20ms);
      const auto now = Clock_::now();
      if (api_->requests_served() != last_count) {
        last_count = api_->requests_served();
        last_change = now;
      }
      const bool plugins_registered =
          std::all_of(plugins_.begin(), plugins_.end(), [](const auto& p) { return p->stats().checks > 0; });
      if (service_->extender().ready() && plugins_registered && now - last_change > 300ms) return true;
      if (now > deadline) return Fail("the scheduler service did not become ready within 120 s");
      if (service_->failure()) return Fail("the scheduler service failed while starting");
    }
  }

  Flags flags_;
  asio::io_context ioc_{1};
  std::unique_ptr<hami::sim::ApiServer> api_;
  hami::k8s::RestConfig rest_;
  hami::config::Config cfg_;
  hami::Backends backends_;
  hami::SystemClock clock_;
  std::unique_ptr<hami::cmd::SchedulerService> service_;
  std::vector<std::unique_ptr<hami::k8s::ApiClient>> plugin_clients_;
  std::vector<std::unique_ptr<hami::sim::DevicePlugin>> plugins_;
  std::deque<asio::cancellation_signal> plugin_stops_;  // one per plugin
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard_;
  std::thread thread_;
  bool stopped_ = false;
};

// ---------------------------------------------------------------------------------------------------------
// The client side (kube-scheduler's): its own io_context and HttpClient, or the server's in --one-thread

class Client {
 public:
  Client(Harness& harness, const Flags& flags) : harness_(&harness), one_thread_(flags.one_thread) {}

  bool Connect(std::uint16_t port, std::size_t connections) {
    hami::k8s::RestConfig ext = hami::k8s::LoopbackHttp(port);
    auto http = hami::k8s::HttpClient::Create(loop().get_executor(), ext, connections);
    if (!http) {
      std::cerr << "bench_http: " << http.error().message << "\n";
      return false;
    }
    http_ = std::move(*http);
    return true;
  }

  hami::k8s::HttpClient& http() { return *http_; }
  asio::any_io_executor executor() { return loop().get_executor(); }
  // CPU time of the client's thread during the last Run() (the server's too with --one-thread).
  double cpu_seconds() const { return cpu_seconds_; }

  // Runs the tasks concurrently on the client's loop until all have finished.
  void Run(std::vector<asio::awaitable<void>> tasks) {
    std::size_t running = tasks.size();
    std::exception_ptr error;
    for (auto& t : tasks) {
      asio::co_spawn(loop(), std::move(t), [&](std::exception_ptr e) {
        if (e && !error) error = e;
        --running;
      });
    }
    loop().restart();
    const double cpu_before = ThreadCpuSeconds();
    if (one_thread_) {
      while (running > 0) loop().run_one_for(100ms);
    } else {
      loop().run();
    }
    cpu_seconds_ = ThreadCpuSeconds() - cpu_before;
    if (error) std::rethrow_exception(error);
  }

 private:
  asio::io_context& loop() { return one_thread_ ? harness_->ioc() : ioc_; }

  Harness* harness_;
  bool one_thread_;
  double cpu_seconds_ = 0;
  asio::io_context ioc_{1};
  std::unique_ptr<hami::k8s::HttpClient> http_;  // after ioc_: its idle connections close first
};

hami::k8s::HttpRequest Post(const char* target, std::string body) {
  hami::k8s::HttpRequest r;
  r.verb = http::verb::post;
  r.target = target;
  r.body = std::move(body);
  r.content_type = "application/json";
  r.user_agent = "bench_http";
  return r;
}

std::string FilterBody(const std::string& pod_json, const std::string& node_names_json) {
  return R"({"Pod":)" + pod_json + R"(,"NodeNames":)" + node_names_json + "}";
}

// The answer's Error, or a description of what went wrong on the way.
std::string ErrorOf(const hami::k8s::TransportResult<hami::k8s::HttpResponse>& r) {
  if (!r) return "transport: " + r.error().message;
  if (r->status != 200) return fmt::format("HTTP {}: {}", r->status, r->body.substr(0, 200));
  // The extender writes Error last: a success is recognised without parsing a 64 KB answer, which would
  // take a core from the server on this two-core machine.
  if (r->body.ends_with(R"(,"Error":""})") || r->body == R"({"Error":""})") return "";
  boost::system::error_code ec;
  const json::value v = json::parse(r->body, ec);
  if (ec || !v.is_object()) return "unreadable answer: " + r->body.substr(0, 200);
  const auto* e = v.as_object().if_contains("Error");
  return e != nullptr && e->is_string() ? std::string(e->as_string()) : std::string();
}

struct Errors {
  std::size_t count = 0;
  std::string first;
  void Add(const std::string& e) {
    if (count++ == 0) first = e;
  }
};

// ---------------------------------------------------------------------------------------------------------
// bench_http filter

class FilterRun {
 public:
  FilterRun(hami::k8s::HttpClient& http, std::vector<PendingPodArgs> pods, std::string node_names,
            bool expect_decision)
      : http_(&http),
        pods_(std::move(pods)),
        node_names_(std::move(node_names)),
        expect_decision_(expect_decision) {}

  // Sends the pods [begin, end) one after the other; `measured` says whether their latencies count.
  asio::awaitable<void> Run(std::size_t begin, std::size_t end, bool measured) {
    start_ = Clock_::now();
    for (std::size_t i = begin; i < end; ++i) {
      const hami::k8s::HttpRequest req = Post("/filter", FilterBody(pods_[i].json, node_names_));
      const auto t0 = Clock_::now();
      auto r = co_await http_->Send(req, 30s);
      const auto t1 = Clock_::now();
      if (measured) latencies_.Add(t1 - t0);
      // Checked after the clock stopped: parsing the answer is the client's cost, not the server's.
      std::string error = ErrorOf(r);
      if (error.empty() && expect_decision_ && r->body.find(R"("NodeNames":["node-)") == std::string::npos)
        error = "no node chosen: " + r->body.substr(0, 200);
      if (!error.empty()) errors_.Add(error);
    }
    end_ = Clock_::now();
  }

  double seconds() const { return std::chrono::duration<double>(end_ - start_).count(); }
  const std::vector<PendingPodArgs>& pods() const { return pods_; }
  Latencies& latencies() { return latencies_; }
  const Errors& errors() const { return errors_; }

 private:
  hami::k8s::HttpClient* http_;
  std::vector<PendingPodArgs> pods_;
  std::string node_names_;
  bool expect_decision_;
  Clock_::time_point start_, end_;
  Latencies latencies_;
  Errors errors_;
};

std::vector<PendingPodArgs> CreatePendingPods(hami::sim::Store& store, int count, bool devices,
                                              std::int64_t memory_mib) {
  std::vector<PendingPodArgs> out;
  out.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    auto created = store.Create(PendingPod(i, devices, memory_mib));
    if (!created) {
      std::cerr << "bench_http: creating pod " << i << ": " << created.error().message << "\n";
      return {};
    }
    const auto& meta = (*created)->at("metadata").as_object();
    out.push_back(PendingPodArgs{json::serialize(**created), std::string(meta.at("name").as_string()),
                                 std::string(meta.at("uid").as_string())});
  }
  return out;
}

void PrintServerSide(const Counters& d, std::size_t measured) {
  const double per = static_cast<double>(measured);
  fmt::print(
      "  server: API server requests {} ({:.2f} per measured call; scheduler {} on {} new connections, "
      "device plugins {}), events created {} aggregated {} dropped {} failed {}, lock waits "
      "{}\n",
      d.api_requests, static_cast<double>(d.api_requests) / per, d.scheduler_requests,
      d.scheduler_connections, d.plugin_requests, d.events_created, d.events_aggregated, d.events_dropped,
      d.events_failed, d.lock_waits);
  fmt::print("  server thread CPU: {:.3f} ms per measured call\n", d.cpu_seconds * 1000 / per);
  if (d.filter_count > 0)
    fmt::print(
        "  server: /filter handler mean {:.3f} ms over {} calls (hami_scheduler_filter_duration_seconds)\n",
        d.filter_seconds * 1000 / d.filter_count, d.filter_count);
  if (d.bind_count > 0)
    fmt::print(
        "  server: /bind handler mean {:.3f} ms over {} calls (hami_scheduler_bind_duration_seconds)\n",
        d.bind_seconds * 1000 / d.bind_count, d.bind_count);
}

// The pod patch alone, as the filter writes it, sent by the client straight to the API server: what the
// patch costs the server's thread (the API server, its watch fan-out, the controller's pod informer).
class PatchProbe {
 public:
  PatchProbe(hami::k8s::ApiClient& api, std::vector<std::string> pod_names)
      : api_(&api), pod_names_(std::move(pod_names)) {}

  asio::awaitable<void> Run() {
    for (std::size_t i = 0; i < pod_names_.size(); ++i) {
      const std::string path = hami::k8s::PathFor("v1", "pods", "bench", pod_names_[i]);
      const json::value patch = {{"metadata", {{"annotations", {{"bench/probe", std::to_string(i)}}}}}};
      const auto t0 = Clock_::now();
      auto r = co_await api_->MergePatch(path, patch);
      latencies_.Add(Clock_::now() - t0);
      if (!r) errors_.Add(r.error().message);
    }
  }

  Latencies& latencies() { return latencies_; }
  const Errors& errors() const { return errors_; }

 private:
  hami::k8s::ApiClient* api_;
  std::vector<std::string> pod_names_;
  Latencies latencies_;
  Errors errors_;
};

// Mean microseconds of `f` over `n` calls.
template <class F>
double MeanMicros(int n, F f) {
  const auto t0 = Clock_::now();
  for (int i = 0; i < n; ++i) f();
  return std::chrono::duration<double, std::micro>(Clock_::now() - t0).count() / n;
}

// The JSON work of one /filter without HTTP or the API server: parsing the request, and building and
// serializing the answer (a scheduled pod: the chosen node, every other candidate in FailedNodes).
void PrintJsonParts(const std::string& pod_json, const std::string& node_names, bool scheduled) {
  const std::string body = FilterBody(pod_json, node_names);
  constexpr int kRounds = 300;
  const double parse = MeanMicros(kRounds, [&] { (void)hami::k8s::ParseExtenderArgs(body); });
  auto args = hami::k8s::ParseExtenderArgs(body);
  if (!args) return;
  hami::FilterOutcome outcome;
  outcome.kind = scheduled ? hami::FilterOutcome::Kind::kScheduled : hami::FilterOutcome::Kind::kPassThrough;
  outcome.node = NodeName(0);
  const double build = MeanMicros(kRounds, [&] { (void)hami::k8s::ToFilterResult(outcome, *args); });
  const hami::k8s::ExtenderFilterResult result = hami::k8s::ToFilterResult(outcome, *args);
  std::size_t answer_bytes = 0;
  const double serialize = MeanMicros(kRounds, [&] { answer_bytes = hami::k8s::ToJson(result).size(); });
  const double pod = MeanMicros(kRounds, [&] { (void)hami::k8s::PodFromJson(json::parse(pod_json)); });
  fmt::print(
      "  JSON work in-process, per request: parse the {}-byte request {:.1f} us; build the answer "
      "(ToFilterResult, {} FailedNodes) {:.1f} us; serialize it ({} bytes) {:.1f} us; parse one pod "
      "{:.1f} us\n",
      body.size(), parse, result.failed_nodes.size(), build, answer_bytes, serialize, pod);
}

// `count` nodes of 4 GPUs split 10 ways.
bool CreateNodes(hami::sim::Store& store, int count) {
  for (int n = 0; n < count; ++n) {
    if (auto c = store.Create(NodeObject(n, NodeGpus(n, 10))); !c) {
      std::cerr << "bench_http: creating node " << n << ": " << c.error().message << "\n";
      return false;
    }
  }
  return true;
}

int FilterMode(const Flags& f) {
  Harness harness(f);
  if (!harness.Open()) return 1;
  auto& store = harness.store();
  if (!CreateNodes(store, f.nodes)) return 1;
  for (int p = 0; p < f.nodes * f.pods_per_node; ++p) {
    if (auto c = store.Create(RunningPod(p, p % f.nodes)); !c) {
      std::cerr << "bench_http: creating running pod " << p << ": " << c.error().message << "\n";
      return 1;
    }
  }
  const std::size_t warmup = static_cast<std::size_t>(std::min(200, std::max(10, f.requests / 10)));
  // Every measured pod must fit: split 10 per GPU, each running pod holds one slot.
  const std::int64_t free_slots = std::int64_t{f.nodes} * (kGpusPerNode * 10 - f.pods_per_node);
  if (!f.no_patch && free_slots < f.requests + static_cast<std::int64_t>(warmup)) {
    std::cerr << fmt::format(
        "bench_http: {} nodes have {} free GPU slots, fewer than the {} requests and {} warm-ups: add "
        "nodes\n",
        f.nodes, free_slots, f.requests, warmup);
    return 2;
  }
  auto pods = CreatePendingPods(store, f.requests + static_cast<int>(warmup), !f.no_patch, 1000);
  if (pods.empty()) return 1;
  if (!harness.Start(nullptr)) return 1;

  Client client(harness, f);
  if (!client.Connect(harness.extender_port(), 1)) return 1;
  FilterRun run(client.http(), std::move(pods), NodeNamesJson(f.nodes), !f.no_patch);
  {
    std::vector<asio::awaitable<void>> warm;
    warm.push_back(run.Run(0, warmup, false));
    client.Run(std::move(warm));
  }
  const Counters before = harness.Read();
  std::vector<asio::awaitable<void>> tasks;
  tasks.push_back(run.Run(warmup, warmup + static_cast<std::size_t>(f.requests), true));
  client.Run(std::move(tasks));
  const Counters delta = harness.Read() - before;
  const double client_cpu = client.cpu_seconds();

  // The pod patch alone, on pods the measured filters patched.
  std::optional<PatchProbe> probe;
  Counters probe_delta;
  if (!f.no_patch) {
    hami::k8s::ClientOptions co;
    co.qps = 0;
    auto api = hami::k8s::ApiClient::Create(client.executor(), harness.api_server(), co);
    if (!api) {
      std::cerr << "bench_http: " << api.error().message << "\n";
      return 1;
    }
    std::vector<std::string> names;
    for (std::size_t i = 0; i < 1000 && warmup + i < run.pods().size(); ++i)
      names.push_back(run.pods()[warmup + i].name);
    probe.emplace(**api, std::move(names));
    const Counters probe_before = harness.Read();
    std::vector<asio::awaitable<void>> patches;
    patches.push_back(probe->Run());
    client.Run(std::move(patches));
    probe_delta = harness.Read() - probe_before;
  }
  harness.Stop();

  fmt::print(
      "bench_http filter: {} nodes x {} GPUs, {} running pods, {} {} /filter requests ({} warm-up), {}\n",
      f.nodes, kGpusPerNode, f.nodes * f.pods_per_node, f.requests,
      f.no_patch ? "pass-through (no device request)" : "scheduled (decision + pod patch)", warmup,
      f.one_thread ? "client on the server's thread" : "client on its own thread");
  fmt::print("  latency: {}\n", run.latencies().Summary());
  if (!f.latencies_out.empty() && !run.latencies().Write(f.latencies_out))
    std::cerr << "bench_http: could not write " << f.latencies_out << "\n";
  fmt::print("  throughput: {:.0f} requests/s over one keep-alive connection ({} connection(s) opened)\n",
             static_cast<double>(f.requests) / run.seconds(), client.http().connections_opened());
  PrintServerSide(delta, static_cast<std::size_t>(f.requests));
  fmt::print("  client thread CPU: {:.3f} ms per request{}\n", client_cpu * 1000 / f.requests,
             f.one_thread ? " (the same thread as the server's)" : "");
  if (probe) {
    fmt::print("  pod patch alone (client -> API server, {} patches): {}\n", probe->latencies().size(),
               probe->latencies().Summary());
    fmt::print("    server thread CPU {:.3f} ms per patch\n",
               probe_delta.cpu_seconds * 1000 / static_cast<double>(probe->latencies().size()));
  }
  PrintJsonParts(run.pods().front().json, NodeNamesJson(f.nodes), !f.no_patch);
  if (run.errors().count > 0) {
    fmt::print("  errors: {} (first: {})\n", run.errors().count, run.errors().first);
    return 1;
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------------------
// bench_http bind

class PairRun {
 public:
  PairRun(hami::k8s::HttpClient& http, std::vector<PendingPodArgs> pods, std::string node_names)
      : http_(&http), pods_(std::move(pods)), node_names_(std::move(node_names)) {}

  // Takes pods in order until `limit`; `measured` says whether their latencies count.
  asio::awaitable<void> Worker(std::size_t limit, bool measured) {
    while (next_ < limit) {
      const PendingPodArgs& pod = pods_[next_++];
      const hami::k8s::HttpRequest filter = Post("/filter", FilterBody(pod.json, node_names_));
      const auto t0 = Clock_::now();
      auto fr = co_await http_->Send(filter, 60s);
      const auto t1 = Clock_::now();
      std::string error = ErrorOf(fr);
      std::string node;
      if (error.empty()) {
        const json::value v = json::parse(fr->body);
        const auto& names = v.at("NodeNames");
        if (names.is_array() && names.as_array().size() == 1) {
          node = std::string(names.as_array()[0].as_string());
        } else {
          error = "no node chosen: " + fr->body.substr(0, 200);
        }
      }
      if (!error.empty()) {
        errors_.Add("filter " + pod.name + ": " + error);
        continue;
      }
      const json::value args = {
          {"PodName", pod.name}, {"PodNamespace", "bench"}, {"PodUID", pod.uid}, {"Node", node}};
      const hami::k8s::HttpRequest bind = Post("/bind", json::serialize(args));
      const auto t2 = Clock_::now();
      auto br = co_await http_->Send(bind, 60s);
      const auto t3 = Clock_::now();
      if (const std::string e = ErrorOf(br); !e.empty()) {
        errors_.Add("bind " + pod.name + ": " + e);
        continue;
      }
      if (measured) {
        filters_.Add(t1 - t0);
        binds_.Add(t3 - t2);
        pairs_.Add(t3 - t0);
      }
    }
  }

  Latencies& filters() { return filters_; }
  Latencies& binds() { return binds_; }
  Latencies& pairs() { return pairs_; }
  const Errors& errors() const { return errors_; }

 private:
  hami::k8s::HttpClient* http_;
  std::vector<PendingPodArgs> pods_;
  std::string node_names_;
  std::size_t next_ = 0;
  Latencies filters_, binds_, pairs_;
  Errors errors_;
};

int BindMode(const Flags& f) {
  Harness harness(f);
  if (!harness.Open()) return 1;
  auto& store = harness.store();
  // Split 100: every measured pod stays on its node, and binpack puts them all on as few nodes as it can.
  std::vector<std::vector<hami::sim::SimDevice>> devices;
  for (int n = 0; n < f.nodes; ++n) {
    devices.push_back(NodeGpus(n, 100));
    if (auto c = store.Create(NodeObject(n, devices.back())); !c) {
      std::cerr << "bench_http: creating node " << n << ": " << c.error().message << "\n";
      return 1;
    }
  }
  const std::size_t warmup = static_cast<std::size_t>(std::min(100, std::max(10, f.pairs / 20)));
  auto pods = CreatePendingPods(store, f.pairs + static_cast<int>(warmup), true, 100);
  if (pods.empty()) return 1;
  if (!harness.Start(&devices)) return 1;

  Client client(harness, f);
  if (!client.Connect(harness.extender_port(), static_cast<std::size_t>(f.clients))) return 1;
  PairRun run(client.http(), std::move(pods), NodeNamesJson(f.nodes));
  {
    std::vector<asio::awaitable<void>> warm;
    warm.push_back(run.Worker(warmup, false));
    client.Run(std::move(warm));
  }
  // The warm-up's allocations finish before the measured phase starts.
  const auto settle_deadline = Clock_::now() + 30s;
  while (harness.Read().allocated < warmup && Clock_::now() < settle_deadline) {
    if (f.one_thread) {
      harness.ioc().run_one_for(10ms);
    } else {
      std::this_thread::sleep_for(10ms);
    }
  }
  const Counters before = harness.Read();
  std::vector<asio::awaitable<void>> tasks;
  for (int c = 0; c < f.clients; ++c)
    tasks.push_back(run.Worker(warmup + static_cast<std::size_t>(f.pairs), true));
  const auto start = Clock_::now();
  client.Run(std::move(tasks));
  const double seconds = std::chrono::duration<double>(Clock_::now() - start).count();
  const Counters at_end = harness.Read();
  // Until every measured pod's devices are set up and its node lock released.
  const auto allocated_deadline = Clock_::now() + 60s;
  Counters settled = at_end;
  while (settled.allocated < warmup + static_cast<std::size_t>(f.pairs) &&
         Clock_::now() < allocated_deadline) {
    if (f.one_thread) {
      harness.ioc().run_one_for(10ms);
    } else {
      std::this_thread::sleep_for(10ms);
    }
    settled = harness.Read();
  }
  const double settled_seconds = std::chrono::duration<double>(Clock_::now() - start).count();
  harness.Stop();

  const Counters delta = at_end - before;
  const Counters plugins = settled - before;
  fmt::print(
      "bench_http bind: {} nodes x {} GPUs (split 100), node policy {}, {} filter+bind pairs over {} "
      "connections ({} warm-up), {}\n",
      f.nodes, kGpusPerNode, f.node_policy, f.pairs, f.clients, warmup,
      f.one_thread ? "client on the server's thread" : "client on its own thread");
  fmt::print("  rate: {:.0f} pairs/s ({:.2f} s); every pod allocated by its device plugin after {:.2f} s\n",
             static_cast<double>(run.pairs().size()) / seconds, seconds, settled_seconds);
  fmt::print("  pair   latency: {}\n", run.pairs().Summary());
  if (!f.latencies_out.empty() && !run.pairs().Write(f.latencies_out))
    std::cerr << "bench_http: could not write " << f.latencies_out << "\n";
  fmt::print("  filter latency: {}\n", run.filters().Summary());
  fmt::print("  bind   latency: {}\n", run.binds().Summary());
  fmt::print("  client connections opened: {}\n", client.http().connections_opened());
  PrintServerSide(delta, static_cast<std::size_t>(f.pairs));
  fmt::print("  device plugins: {} pods allocated, {} locks released, {} API errors (measured phase)\n",
             plugins.allocated, plugins.lock_releases, plugins.plugin_errors);
  if (run.errors().count > 0) {
    fmt::print("  errors: {} (first: {})\n", run.errors().count, run.errors().first);
    return 1;
  }
  return 0;
}

// An AdmissionReview of a pod as a Deployment creates it (generateName, owner, labels, env, mounts), asking
// for 3000 MiB and 30% of one card; `i` makes each one distinct.
std::string TypicalGpuPodReview(int i) {
  const json::value pod = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata",
       {{"generateName", "trainer-7d9f8c6b5-"},
        {"namespace", "team-a"},
        {"labels", {{"app", "trainer"}, {"pod-template-hash", "7d9f8c6b5"}, {"team", "vision"}}},
        {"annotations", {{"kubectl.kubernetes.io/restartedAt", "2026-11-30T10:00:00Z"}}},
        {"ownerReferences", json::array{json::object{{"apiVersion", "apps/v1"},
                                                     {"kind", "ReplicaSet"},
                                                     {"name", "trainer-7d9f8c6b5"},
                                                     {"uid", "3f0c7c9e-1111-4222-8333-944455556666"},
                                                     {"controller", true},
                                                     {"blockOwnerDeletion", true}}}}}},
      {"spec",
       {{"containers",
         json::array{json::object{
             {"name", "trainer"},
             {"image", "nvcr.io/nvidia/pytorch:24.10-py3"},
             {"command", json::array{"python", "train.py", "--epochs", "10"}},
             {"env",
              json::array{json::object{{"name", "RUN_ID"}, {"value", std::to_string(i)}},
                          json::object{{"name", "NCCL_DEBUG"}, {"value", "WARN"}},
                          json::object{{"name", "POD_NAME"},
                                       {"valueFrom", {{"fieldRef", {{"fieldPath", "metadata.name"}}}}}}}},
             {"resources",
              {{"limits", {{"nvidia.com/gpumem", "3000"}, {"nvidia.com/gpucores", "30"}, {"memory", "8Gi"}}},
               {"requests", {{"cpu", "2"}, {"memory", "8Gi"}}}}},
             {"volumeMounts",
              json::array{json::object{{"name", "data"}, {"mountPath", "/data"}},
                          json::object{{"name", "kube-api-access-x1"},
                                       {"mountPath", "/var/run/secrets/kubernetes.io/serviceaccount"},
                                       {"readOnly", true}}}}}}},
        {"volumes",
         json::array{json::object{{"name", "data"}, {"persistentVolumeClaim", {{"claimName", "data"}}}},
                     json::object{{"name", "kube-api-access-x1"}, {"projected", {{"defaultMode", 420}}}}}},
        {"restartPolicy", "Always"},
        {"tolerations", json::array{json::object{{"key", "nvidia.com/gpu"}, {"operator", "Exists"}}}}}}};
  const json::value review = {
      {"apiVersion", "admission.k8s.io/v1beta1"},
      {"kind", "AdmissionReview"},
      {"request",
       {{"uid", fmt::format("review-{}", i)},
        {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
        {"resource", {{"group", ""}, {"version", "v1"}, {"resource", "pods"}}},
        {"namespace", "team-a"},
        {"operation", "CREATE"},
        {"userInfo", {{"username", "system:serviceaccount:kube-system:replicaset-controller"}}},
        {"object", pod},
        {"dryRun", false}}}};
  return json::serialize(review);
}

int WebhookMode(const Flags& f) {
  Harness harness(f);
  if (!harness.Open()) return 1;
  auto& store = harness.store();
  if (!CreateNodes(store, f.nodes)) return 1;
  const json::value quota = {{"apiVersion", "v1"},
                             {"kind", "ResourceQuota"},
                             {"metadata", {{"name", "gpu"}, {"namespace", "team-a"}}},
                             {"spec", {{"hard", {{"limits.nvidia.com/gpumem", "100000000"}}}}}};
  if (auto c = store.Create(quota); !c) {
    std::cerr << "bench_http: creating the quota: " << c.error().message << "\n";
    return 1;
  }
  if (!harness.Start(nullptr)) return 1;
  const int warmup = std::min(200, std::max(10, f.requests / 10));
  std::vector<std::string> reviews;
  reviews.reserve(static_cast<std::size_t>(f.requests + warmup));
  for (int i = 0; i < f.requests + warmup; ++i) reviews.push_back(TypicalGpuPodReview(i));

  Client client(harness, f);
  if (!client.Connect(harness.extender_port(), 1)) return 1;
  Latencies latencies;
  Errors errors;
  Clock_::time_point start, end;
  const auto run = [&](int begin, int stop, bool measured) -> asio::awaitable<void> {
    if (measured) start = Clock_::now();
    for (int i = begin; i < stop; ++i) {
      const hami::k8s::HttpRequest req = Post("/webhook", reviews[static_cast<std::size_t>(i)]);
      const auto t0 = Clock_::now();
      auto r = co_await client.http().Send(req, 30s);
      const auto t1 = Clock_::now();
      if (measured) latencies.Add(t1 - t0);
      if (!r) {
        errors.Add(r.error().message);
      } else if (r->body.find(R"("patchType":"JSONPatch")") == std::string::npos) {
        errors.Add("not a patch: " + r->body.substr(0, 200));
      }
    }
    if (measured) end = Clock_::now();
  };
  {
    std::vector<asio::awaitable<void>> warm;
    warm.push_back(run(0, warmup, false));
    client.Run(std::move(warm));
  }
  const Counters before = harness.Read();
  std::vector<asio::awaitable<void>> tasks;
  tasks.push_back(run(warmup, warmup + f.requests, true));
  client.Run(std::move(tasks));
  const Counters delta = harness.Read() - before;

  // The decision alone: parse the pod, admit it, write the changes back, diff (what ReviewAdmission does).
  const double in_process_us = harness.OnServer([&] {
    auto parsed = hami::k8s::ParseAdmissionReview(reviews[0]).value();
    auto& admission = harness.service().extender().admission();
    const int n = 20000;
    const auto t0 = Clock_::now();
    std::size_t patched = 0;
    for (int i = 0; i < n; ++i)
      patched += hami::extender::ReviewAdmission(admission, parsed).patch.empty() ? 0 : 1;
    const double us = std::chrono::duration<double, std::micro>(Clock_::now() - t0).count() / n;
    return patched == static_cast<std::size_t>(n) ? us : NAN;
  });
  harness.Stop();

  fmt::print(
      "bench_http webhook: {} nodes, {} AdmissionReviews of a typical GPU pod ({} bytes) ({} warm-up), {}\n",
      f.nodes, f.requests, reviews[0].size(), warmup,
      f.one_thread ? "client on the server's thread" : "client on its own thread");
  fmt::print("  latency: {}\n", latencies.Summary());
  if (!f.latencies_out.empty() && !latencies.Write(f.latencies_out))
    std::cerr << "bench_http: could not write " << f.latencies_out << "\n";
  fmt::print("  throughput: {:.0f} reviews/s over one keep-alive connection\n",
             static_cast<double>(f.requests) / std::chrono::duration<double>(end - start).count());
  fmt::print("  server thread CPU: {:.3f} ms per review; in-process Review(): {:.1f} us\n",
             delta.cpu_seconds * 1000 / f.requests, in_process_us);
  fmt::print("  API requests made by the scheduler during the run: {}\n", delta.scheduler_requests);
  if (errors.count > 0) {
    fmt::print("  ERRORS: {} (first: {})\n", errors.count, errors.first);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  auto flags = ParseFlags(argc, argv);
  if (!flags) return 2;
  spdlog::set_level(spdlog::level::warn);  // the plugins log every allocation at info
  try {
    if (flags->mode == "webhook") return WebhookMode(*flags);
    return flags->mode == "filter" ? FilterMode(*flags) : BindMode(*flags);
  } catch (const std::exception& e) {
    std::cerr << "bench_http: " << e.what() << "\n";
    return 1;
  }
}
