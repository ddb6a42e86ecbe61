// List + watch of a large cluster from the embedded API server into the scheduler's caches, measured from
// the client's side: time until the node and pod informers are synced (and their objects applied to the node
// registry and usage ledger), and the client process's peak memory. The server runs as its own process
// (`hami-scheduler sim-apiserver`) so its memory is not counted.
//
//   build-release/bench/bench_informer build-release/hami-scheduler [nodes=5000] [pods=50000]
#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "backends/builtin.h"
#include "core/cluster_state.h"
#include "core/codec/node_devices.h"
#include "k8s/objects.h"
#include "k8s/reflector.h"

namespace asio = boost::asio;
namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

std::string ClusterFile(int nodes, int pods) {
  const std::string path = fmt::format("/tmp/hami-bench-cluster-{}-{}.json", nodes, pods);
  std::ofstream out(path);
  out << R"({"apiVersion":"v1","kind":"List","items":[)";
  for (int n = 0; n < nodes; ++n) {
    std::vector<hami::DeviceInfo> gpus;
    for (int g = 0; g < 8; ++g) {
      hami::DeviceInfo d;
      d.id = fmt::format("GPU-{:05}-{}", n, g);
      d.index = g;
      d.count = 10;
      d.devmem = hami::MiB(81920);
      d.devcore = hami::Cores(100);
      d.type = "NVIDIA-H100-80GB-HBM3";
      d.mode = "hami-core";
      d.health = true;
      gpus.push_back(d);
    }
    json::object node{
        {"apiVersion", "v1"},
        {"kind", "Node"},
        {"metadata", json::object{{"name", fmt::format("node-{:05}", n)},
                                  {"labels", json::object{{"gpu", "on"}}},
                                  {"annotations", json::object{{"hami.io/node-nvidia-register",
                                                                hami::codec::EncodeDeviceManifest(gpus)}}}}},
        {"status", json::object{{"allocatable", json::object{{"nvidia.com/gpu", "80"}}}}}};
    out << (n ? "," : "") << json::serialize(node);
  }
  for (int p = 0; p < pods; ++p) {
    const int n = p % nodes;
    const std::string node = fmt::format("node-{:05}", n);
    json::object pod{
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata", json::object{{"name", fmt::format("pod-{:06}", p)},
                                  {"namespace", fmt::format("team-{}", p % 20)},
                                  {"annotations",
                                   json::object{{"hami.io/vgpu-node", node},
                                                {"hami.io/vgpu-devices-allocated",
                                                 fmt::format("GPU-{:05}-{},NVIDIA,4000,10:;", n, p % 8)}}}}},
        {"spec",
         json::object{{"nodeName", node},
                      {"schedulerName", "hami-scheduler"},
                      {"containers",
                       json::array{json::object{{"name", "main"},
                                                {"image", "cuda"},
                                                {"resources", json::object{{"limits",
                                                                            json::object{
                                                                                {"nvidia.com/gpu", "1"},
                                                                                {"nvidia.com/gpumem", "4000"},
                                                                            }}}}}}}}},
        {"status", json::object{{"phase", "Running"}}}};
    out << "," << json::serialize(pod);
  }
  out << "]}";
  return path;
}

unsigned short FreePort() {
  asio::io_context ioc;
  asio::ip::tcp::acceptor a(ioc, {asio::ip::make_address("127.0.0.1"), 0});
  return a.local_endpoint().port();
}

long PeakRssMiB() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: bench_informer PATH/TO/hami-scheduler [nodes] [pods]\n";
    return 2;
  }
  const int nodes = argc > 2 ? std::stoi(argv[2]) : 5000;
  const int pods = argc > 3 ? std::stoi(argv[3]) : 50000;
  const std::string cluster = ClusterFile(nodes, pods);
  const unsigned short port = FreePort();
  const long rss_before = PeakRssMiB();
  const pid_t server = fork();
  if (server == 0) {
    const std::string listen = fmt::format("127.0.0.1:{}", port);
    std::freopen("/dev/null", "w", stdout);
    execl(argv[1], argv[1], "sim-apiserver", "--listen", listen.c_str(), "--cluster", cluster.c_str(),
          nullptr);
    _exit(127);
  }

  asio::io_context ioc(1);
  hami::k8s::RestConfig cfg = hami::k8s::LoopbackHttp(port);
  hami::k8s::ClientOptions co;
  co.qps = 0;
  co.timeout = 120s;
  auto client = hami::k8s::ApiClient::Create(ioc.get_executor(), cfg, co).value();

  hami::BackendRegistry registry;
  hami::backends::RegisterBuiltinBackends(registry).value();
  std::vector<hami::BackendPtr> list;
  for (const auto& name : registry.Names()) {
    for (auto& b : registry.Create(name, {}).value()) list.push_back(std::move(b));
  }
  hami::Backends backends(std::move(list));
  hami::ClusterState state(backends);

  hami::k8s::Reflector::Options node_opts;
  node_opts.path = "/api/v1/nodes";
  hami::k8s::Informer<hami::NodeView>::Handlers nh;
  nh.on_add = [&](const hami::NodeView& n) { state.UpsertNode(n); };
  hami::k8s::Informer<hami::NodeView> node_informer(*client, node_opts, &hami::k8s::NodeFromJson, nh);
  hami::k8s::Reflector::Options pod_opts;
  pod_opts.path = "/api/v1/pods";
  hami::k8s::Informer<hami::PodView>::Handlers ph;
  ph.on_add = [&](const hami::PodView& p) {
    if (auto a = hami::AllocationFromAnnotations(p, backends); a && *a) state.AddPod(std::move(**a));
  };
  hami::k8s::Informer<hami::PodView> pod_informer(*client, pod_opts, &hami::k8s::PodFromJson, ph);

  // Wait for the server to answer.
  bool up = false;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        for (int i = 0; i < 600 && !up; ++i) {
          const std::string v = "/version";
          up = static_cast<bool>(co_await client->Get(v));
          if (!up) {
            asio::steady_timer t(ioc, 100ms);
            co_await t.async_wait(asio::use_awaitable);
          }
        }
      },
      asio::detached);
  ioc.run();
  if (!up) {
    std::cerr << "sim-apiserver did not come up\n";
    kill(server, SIGTERM);
    return 1;
  }
  ioc.restart();
  const auto start = std::chrono::steady_clock::now();
  asio::co_spawn(ioc, node_informer.Run(), asio::detached);
  asio::co_spawn(ioc, pod_informer.Run(), asio::detached);
  while (!(node_informer.synced() && pod_informer.synced())) ioc.run_one_for(100ms);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const long rss = PeakRssMiB();
  fmt::print(
      "nodes={} pods={} synced_in={:.2f}s peak_rss={}MiB (before start {}MiB) registry_nodes={} "
      "ledger_pods={} "
      "conversion_errors={}\n",
      node_informer.views().size(), pod_informer.views().size(), seconds, rss, rss_before, state.NodeCount(),
      state.PodCount(), node_informer.conversion_errors() + pod_informer.conversion_errors());
  kill(server, SIGTERM);
  waitpid(server, nullptr, 0);
  return node_informer.views().size() == static_cast<std::size_t>(nodes) &&
                 pod_informer.views().size() == static_cast<std::size_t>(pods)
             ? 0
             : 1;
}
