// Decision-path benchmarks: one /filter decision against N nodes of 8 GPUs with 10 running pods per node
// (and with every vendor's cards beside them), /preempt's victim choice on N such nodes, the free capacity
// a /metrics scrape computes, and the cost of one ledger update. Run a Release build:
//   BUILD_DIR=build-release BUILD_TYPE=Release scripts/build.sh && build-release/bench/bench_filter
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "backends/builtin.h"
#include "core/codec/node_devices.h"
#include "core/free_capacity.h"
#include "core/preemption.h"
#include "core/scheduler.h"
#include "extender/cluster_view.h"
#include "tests/unit/extender/fake_writer.h"

namespace hami {
namespace {

Backends MakeBackends() {
  BackendRegistry registry;
  backends::RegisterBuiltinBackends(registry).value();
  std::vector<BackendPtr> list;
  for (const auto& name : registry.Names()) {
    for (auto& b : registry.Create(name, VendorSettings{}).value()) list.push_back(std::move(b));
  }
  return Backends(std::move(list));
}

NodeView GpuNode(int n) {
  std::vector<DeviceInfo> gpus;
  for (int g = 0; g < 8; ++g) {
    DeviceInfo d;
    d.id = fmt::format("GPU-{:05}-{}", n, g);
    d.index = g;
    d.count = 10;
    d.devmem = MiB(81920);
    d.devcore = Cores(100);
    d.type = "NVIDIA-H100-80GB-HBM3";
    d.numa = g / 4;
    d.mode = "hami-core";
    d.health = true;
    gpus.push_back(std::move(d));
  }
  NodeView node;
  node.name = fmt::format("node-{:05}", n);
  node.annotations["hami.io/node-nvidia-register"] = codec::EncodeDeviceManifest(gpus);
  node.allocatable["nvidia.com/gpu"] = "80";
  return node;
}

PodAllocation Running(int node, int k) {
  PodAllocation a;
  a.uid = fmt::format("run-{}-{}", node, k);
  a.ns = "default";
  a.name = a.uid;
  a.node = fmt::format("node-{:05}", node);
  const int gpu = (node + k) % 8;
  a.devices["NVIDIA"] = {{ContainerDevice{gpu, fmt::format("GPU-{:05}-{}", node, gpu), "NVIDIA",
                                          MiB(4000 + 1000 * (k % 3)), Cores(2 + (node % 7)), std::nullopt}}};
  return a;
}

PodView RequestPod() {
  PodView p;
  p.ns = "default";
  p.name = "new";
  p.uid = "uid-new";
  ContainerView c;
  c.name = "main";
  c.limits = {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "10"}, {"nvidia.com/gpucores", "30"}};
  p.containers.push_back(std::move(c));
  return p;
}

// Node n's cards of one other vendor besides its GPUs (every vendor in turn), as that vendor's device plugin
// publishes eight of them.
void AddOtherVendor(const Backends& backends, int n, NodeView& node) {
  const int nvidia = backends.IndexOf("NVIDIA");
  const auto others = static_cast<int>(backends.size()) - 1;
  int b = n % others;
  if (b >= nvidia) ++b;
  const Backend& backend = backends.at(static_cast<std::size_t>(b));
  std::vector<DeviceInfo> cards;
  for (int g = 0; g < 8; ++g) {
    DeviceInfo d;
    d.id = fmt::format("{}-{:05}-{}", backend.Vendor(), n, g);
    d.index = g;
    d.count = 4;
    d.devmem = MiB(65536);
    d.devcore = Cores(100);
    d.type = backend.Vendor();
    d.numa = g / 4;
    d.health = true;
    cards.push_back(std::move(d));
  }
  backend.AddPluginFacts(cards);
  const NodePublication published = backend.Publish(cards);
  if (published.annotation) node.annotations[backend.Spec().keys.register_annotation] = *published.annotation;
  for (const auto& [name, value] : published.resources) {
    node.capacity[name] = value;
    node.allocatable[name] = value;
  }
}

struct Cluster {
  // mixed: each node also has the cards of one other vendor, every vendor on some nodes.
  Cluster(int nodes, int pods_per_node, bool mixed = false) : backends(MakeBackends()), state(backends) {
    for (int n = 0; n < nodes; ++n) {
      NodeView node = GpuNode(n);
      if (mixed) AddOtherVendor(backends, n, node);
      state.UpsertNode(node);
      names.push_back(fmt::format("node-{:05}", n));
      for (int k = 0; k < pods_per_node; ++k) state.AddPod(Running(n, k));
    }
  }
  Backends backends;
  ClusterState state;
  std::vector<std::string> names;
};

// nodes = range(0), and the time per node.
void PerNode(benchmark::State& st) {
  st.counters["nodes"] = static_cast<double>(st.range(0));
  st.counters["per_node_ns"] =
      benchmark::Counter(static_cast<double>(st.range(0)),
                         benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void Decide(benchmark::State& st, bool mixed) {
  Cluster cluster(static_cast<int>(st.range(0)), static_cast<int>(st.range(1)), mixed);
  Scheduler scheduler(cluster.state, SchedulerOptions{});
  const PodView pod = RequestPod();
  const TimePoint now = std::chrono::system_clock::now();
  for (auto _ : st) {
    auto out = scheduler.Filter(pod, cluster.names, now);
    if (out.kind != FilterOutcome::Kind::kScheduled) st.SkipWithError("pod did not fit");
    benchmark::DoNotOptimize(out);
  }
  st.counters["backends"] = static_cast<double>(cluster.backends.size());
  PerNode(st);
}
void BM_FilterDecision(benchmark::State& st) { Decide(st, false); }
// The same decision on a cluster where every vendor is present: each node carries the GPUs and the cards of
// one other vendor. The figure per candidate node is compared with BM_FilterDecision's.
void BM_FilterDecisionMixed(benchmark::State& st) { Decide(st, true); }
BENCHMARK(BM_FilterDecisionMixed)->Args({1000, 10})->Args({10000, 10})->Unit(benchmark::kMicrosecond);

// The floors the decision is compared with in the same run. BM_FloorPass: one plain pass over the bytes it
// reads for every candidate, where the registry keeps them (the name lookup, the node's packed per-device
// capacity and usage, its totals), summing them. BM_FloorFlat: the same per-device and per-node bytes copied
// into flat arrays first, then one sequential pass (what memory bandwidth alone allows).
void BM_FloorPass(benchmark::State& st) {
  Cluster cluster(static_cast<int>(st.range(0)), static_cast<int>(st.range(1)));
  for (auto _ : st) {
    std::int64_t sum = 0;
    for (const auto& name : cluster.names) {
      const NodeEntry* e = cluster.state.FindNode(name);
      sum += e->totals.used + e->allocations_in_flight;
      for (std::size_t d = 0; d < e->caps.size(); ++d)
        sum += e->caps[d].devmem - e->usage[d].mem.value() + e->caps[d].count - e->usage[d].used;
    }
    benchmark::DoNotOptimize(sum);
  }
  PerNode(st);
}
BENCHMARK(BM_FloorPass)->Args({1000, 10})->Args({10000, 10})->Unit(benchmark::kMicrosecond);

void BM_FloorFlat(benchmark::State& st) {
  Cluster cluster(static_cast<int>(st.range(0)), static_cast<int>(st.range(1)));
  std::vector<DeviceCaps> caps;
  std::vector<DeviceUsage> usage;
  std::vector<NodeTotals> totals;
  for (const auto& name : cluster.names) {
    const NodeEntry* e = cluster.state.FindNode(name);
    caps.insert(caps.end(), e->caps.begin(), e->caps.end());
    usage.insert(usage.end(), e->usage.begin(), e->usage.end());
    totals.push_back(e->totals);
  }
  for (auto _ : st) {
    std::int64_t sum = 0;
    for (const auto& t : totals) sum += t.used;
    for (std::size_t d = 0; d < caps.size(); ++d)
      sum += caps[d].devmem - usage[d].mem.value() + caps[d].count - usage[d].used;
    benchmark::DoNotOptimize(sum);
  }
  PerNode(st);
}
BENCHMARK(BM_FloorFlat)->Args({1000, 10})->Args({10000, 10})->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_FilterDecision)
    ->Args({100, 10})
    ->Args({1000, 10})
    ->Args({10000, 10})
    ->Args({1000, 0})
    ->Args({1000, 40})
    ->Unit(benchmark::kMicrosecond);

// All-fitting mode (--filter-mode=all-fitting): the /filter that lets every fitting node through with a
// reason for each other, and the /prioritize that follows it over the fitting nodes, with 10 pods filtered
// before and expected on some of them. Each is compared with BM_FilterDecision's one-node answer.
void BM_FilterAllFitting(benchmark::State& st) {
  Cluster cluster(static_cast<int>(st.range(0)), static_cast<int>(st.range(1)));
  SchedulerOptions options;
  options.filter_mode = FilterMode::kAllFitting;
  Scheduler scheduler(cluster.state, options);
  const PodView pod = RequestPod();
  const TimePoint now = std::chrono::system_clock::now();
  for (auto _ : st) {
    auto out = scheduler.Filter(pod, cluster.names, now);
    if (out.kind != FilterOutcome::Kind::kFitting) st.SkipWithError("pod did not fit");
    benchmark::DoNotOptimize(out);
  }
  PerNode(st);
}
BENCHMARK(BM_FilterAllFitting)->Args({1000, 10})->Args({10000, 10})->Unit(benchmark::kMicrosecond);

void BM_Prioritize(benchmark::State& st) {
  Cluster cluster(static_cast<int>(st.range(0)), static_cast<int>(st.range(1)));
  Scheduler scheduler(cluster.state, SchedulerOptions{});
  const PodView pod = RequestPod();
  const auto requests = CollectRequests(pod, cluster.backends);
  std::vector<PodAllocation> expected;
  for (int k = 0; k < 10; ++k) expected.push_back(Running(k * 7 % static_cast<int>(st.range(0)), 100 + k));
  PendingFits pending;
  for (const PodAllocation& a : expected) pending[a.node].push_back(&a);
  for (auto _ : st) {
    auto out = scheduler.Prioritize(pod, requests, cluster.names, pending);
    if (out.best.empty()) st.SkipWithError("pod did not fit");
    benchmark::DoNotOptimize(out);
  }
  PerNode(st);
}
BENCHMARK(BM_Prioritize)->Args({1000, 10})->Args({10000, 10})->Unit(benchmark::kMicrosecond);

// The metrics listener's GET /api/nodes and /api/overview: the JSON of every node and card (and per vendor)
// of a cluster of `nodes` x 8 GPUs with `pods` per node charged (5,000 x 10: 50,000 pods).
void BM_ApiNodesJson(benchmark::State& st) {
  Cluster cluster(static_cast<int>(st.range(0)), static_cast<int>(st.range(1)));
  std::size_t bytes = 0;
  for (auto _ : st) {
    std::string body = extender::NodesJson(cluster.state);
    bytes = body.size();
    benchmark::DoNotOptimize(body);
  }
  st.counters["bytes"] = static_cast<double>(bytes);
  PerNode(st);
}
BENCHMARK(BM_ApiNodesJson)->Args({1000, 10})->Args({5000, 10})->Unit(benchmark::kMillisecond);

void BM_ApiOverviewJson(benchmark::State& st) {
  Cluster cluster(static_cast<int>(st.range(0)), static_cast<int>(st.range(1)));
  for (auto _ : st) {
    std::string body = extender::OverviewJson(cluster.state, 0);
    benchmark::DoNotOptimize(body);
  }
  PerNode(st);
}
BENCHMARK(BM_ApiOverviewJson)->Args({5000, 10})->Unit(benchmark::kMillisecond);

// GET /api/pods: every holder with its devices and creation time (the pod cache has them all), and 1,000
// pods refused on 32 nodes each.
void BM_ApiPodsJson(benchmark::State& st) {
  Cluster cluster(static_cast<int>(st.range(0)), static_cast<int>(st.range(1)));
  std::map<std::string, PodView> cache;
  cluster.state.ForEachPod([&](const PodAllocation& a, const auto&) {
    PodView p;
    p.ns = a.ns;
    p.name = a.name;
    p.created = "2026-12-05T09:00:00Z";
    cache.emplace(p.Key(), std::move(p));
  });
  testing::FakeWriter writer;
  const FixedClock clock(std::chrono::system_clock::now());
  extender::Requeue requeue(cluster.state, cache, writer, clock, extender::RequeueOptions{});
  FilterOutcome refusal;
  refusal.kind = FilterOutcome::Kind::kUnschedulable;
  for (int n = 0; n < 32; ++n) refusal.failed_nodes[cluster.names[n]] = "8/8 CardInsufficientMemory";
  for (int k = 0; k < 1000; ++k) {
    PodView p = RequestPod();
    p.name = fmt::format("waiting-{}", k);
    p.uid = p.name;
    requeue.Refused(p, refusal);
  }
  std::size_t bytes = 0;
  for (auto _ : st) {
    std::string body = extender::PodsJson(cluster.state, cache, requeue);
    bytes = body.size();
    benchmark::DoNotOptimize(body);
  }
  st.counters["bytes"] = static_cast<double>(bytes);
  PerNode(st);
}
BENCHMARK(BM_ApiPodsJson)->Args({5000, 10})->Unit(benchmark::kMillisecond);

// The free capacity a /metrics scrape computes: every node's largest slice and how many pods of 3 shapes
// still fit there (`nodes` x 8 H100 80 GiB, `pods` per node charged), through the fit engine.
void BM_FreeCapacity(benchmark::State& st) {
  Cluster cluster(static_cast<int>(st.range(0)), static_cast<int>(st.range(1)));
  const std::vector<CapacityShape> shapes{ParseCapacityShape("quarter=NVIDIA:1x20000:25").value(),
                                          ParseCapacityShape("half=NVIDIA:1x40000:50").value(),
                                          ParseCapacityShape("pair=NVIDIA:2x40000").value()};
  std::int64_t fits = 0;
  for (auto _ : st) {
    FreeCapacity counter(cluster.state, shapes, kPolicySpread);
    fits = 0;
    for (const std::string& name : cluster.names) {
      for (const VendorCapacity& v : counter.Of(*cluster.state.FindNode(name))) {
        for (const auto& [shape, n] : v.fits) fits += n;
      }
    }
    benchmark::DoNotOptimize(fits);
  }
  st.counters["fits"] = static_cast<double>(fits);
  PerNode(st);
}
BENCHMARK(BM_FreeCapacity)->Args({5000, 10})->Unit(benchmark::kMillisecond);

// /preempt's work per candidate node (kube-scheduler sends at most max(100, 10% of the nodes)): the pods
// holding devices there looked up, and the victims chosen for a pod that needs a whole 80 GiB GPU, which
// every node's 10 pods of lower priority share. The figure per node is compared with BM_FilterDecision's.
void BM_PreemptVictims(benchmark::State& st) {
  const int nodes = static_cast<int>(st.range(0));
  Cluster cluster(nodes, 10);
  std::map<std::string, PodView> pods;
  for (int n = 0; n < nodes; ++n) {
    for (int k = 0; k < 10; ++k) {
      const PodAllocation a = Running(n, k);
      PodView p;
      p.ns = a.ns;
      p.name = a.name;
      p.uid = a.uid;
      p.node_name = a.node;
      p.priority = k % 3;
      pods.emplace(p.Key(), std::move(p));
    }
  }
  PodView preemptor = RequestPod();
  preemptor.priority = 1000;
  preemptor.containers[0].limits = {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "81920"}};
  const PodRequests requests = CollectRequests(preemptor, cluster.backends).value();
  const PodContext ctx = DecisionContext(preemptor, cluster.state, SchedulerOptions{}).value();
  VictimChooser chooser(cluster.state);
  const auto find = [&pods](const std::string& key) -> const PodView* {
    auto it = pods.find(key);
    return it == pods.end() ? nullptr : &it->second;
  };
  for (auto _ : st) {
    std::size_t victims = 0;
    for (const std::string& name : cluster.names) {
      const NodeEntry* node = cluster.state.FindNode(name);
      const VictimChoice choice = chooser.ChooseOn(preemptor, ctx, requests, *node, {}, find, {});
      if (!choice.helps) st.SkipWithError("no victims found");
      victims += choice.victims.size();
    }
    benchmark::DoNotOptimize(victims);
  }
  PerNode(st);
}
BENCHMARK(BM_PreemptVictims)->Arg(100)->Arg(1000)->Unit(benchmark::kMicrosecond);

// One pod added to and removed from the ledger on a 10,000-node cluster (the watch-event path).
void BM_LedgerUpdate(benchmark::State& st) {
  Cluster cluster(10000, 10);
  PodAllocation a = Running(4242, 99);
  a.uid = "bench-pod";
  for (auto _ : st) {
    cluster.state.AddPod(a);
    cluster.state.RemovePod("bench-pod");
  }
  st.SetItemsProcessed(st.iterations() * 2);
}
BENCHMARK(BM_LedgerUpdate)->Unit(benchmark::kNanosecond);

}  // namespace
}  // namespace hami

BENCHMARK_MAIN();
