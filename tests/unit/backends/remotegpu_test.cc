// Remote GPUs (lupine): the pool built from the servers' NVIDIA registrations, the whole-server fit, the
// endpoint annotation and the cluster-wide charge of the pool's cards. The cluster cases are HAMi's own test
// vectors (servers gpu-a and gpu-b at 10.0.0.5 and 10.0.0.6, clients cpu-1 and cpu-2, A100 cards of 40000
// MiB).
#include <gtest/gtest.h>

#include "backends/remotegpu/remotegpu.h"
#include "core/admission.h"
#include "core/codec/node_devices.h"
#include "core/codec/pod_devices.h"
#include "core/fit.h"
#include "core/preemption.h"
#include "core/scheduler.h"
#include "tests/unit/backends/builtin_helpers.h"

namespace hami::vendor_tests {
namespace {

using testing::Ctr;
using testing::Gpu;
using testing::Pod;

constexpr std::string_view kVendor = "RemoteGPU";
constexpr std::string_view kEndpointKey = "hami.io/lupine-server";
constexpr std::string_view kAllocatedKey = "hami.io/remote-gpu-devices-allocated";

DeviceInfo FleetGpu(std::string uuid, std::int64_t mem) {
  return Gpu(std::move(uuid), 0, mem, 10, "NVIDIA-A100-SXM4-40GB");
}

NodeView Server(std::string name, std::string ip, const std::vector<DeviceInfo>& gpus,
                std::string port = "") {
  NodeView n = testing::NvidiaNode(std::move(name), gpus);
  n.labels["hami.io/lupine-server"] = std::move(port);
  n.internal_ip = std::move(ip);
  return n;
}

NodeView Client(std::string name) {
  NodeView n;
  n.name = std::move(name);
  n.internal_ip = "10.0.1.1";
  return n;
}

PodView RemotePod(std::string name, int cards, std::int64_t mem) {
  std::map<std::string, std::string> limits{{"nvidia.com/remote-gpu", std::to_string(cards)}};
  if (mem > 0) limits["nvidia.com/remote-gpu-memory"] = std::to_string(mem);
  return Pod(std::move(name), {Ctr("app", std::move(limits))});
}

// The built-in backends with remote GPUs turned on, and a cluster over them.
struct Lupine {
  Lupine() : backends(testing::BuiltinBackends({{"remotegpu", VendorSettings{}}})), state(backends) {}
  FilterOutcome Run(const PodView& pod, std::vector<std::string> nodes) {
    Scheduler s(state, SchedulerOptions{"spread", "binpack"});
    return s.Filter(pod, nodes, kNow);
  }
  // Charges a pod as the ledger does once it is bound: from its annotations.
  void Bind(const FilterOutcome& out, PodView pod) {
    for (const auto& [k, v] : out.annotations) pod.annotations[k] = v;
    auto allocation = AllocationFromAnnotations(pod, backends);
    ASSERT_TRUE(allocation) << allocation.error().message;
    ASSERT_TRUE(allocation->has_value());
    state.AddPod(std::move(**allocation));
  }
  std::vector<std::string> Cards(const FilterOutcome& out) const {
    std::vector<std::string> ids;
    auto it = out.devices.find(std::string(kVendor));
    if (it == out.devices.end()) return ids;
    for (const auto& container : it->second) {
      for (const auto& d : container) ids.push_back(d.uuid);
    }
    return ids;
  }
  Backends backends;
  ClusterState state;
};

TEST(RemoteGpu, AGpuLessNodeFitsAndTheServerDoesNot) {
  Lupine c;
  c.state.UpsertNode(Server("gpu-a", "10.0.0.5", {FleetGpu("GPU-aaa", 40000), FleetGpu("GPU-bbb", 40000)}));
  c.state.UpsertNode(Client("cpu-1"));
  c.state.UpsertNode(Client("cpu-2"));
  // The server's cards are the pool's, not its own: it hosts no client.
  const FilterOutcome on_server = c.Run(RemotePod("client", 2, 2000), {"gpu-a"});
  EXPECT_EQ(on_server.kind, FilterOutcome::Kind::kUnschedulable);

  const FilterOutcome out = c.Run(RemotePod("client", 2, 2000), {"cpu-1", "cpu-2"});
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << testing::Failure(out, "cpu-1");
  EXPECT_TRUE(out.node == "cpu-1" || out.node == "cpu-2");
  const auto& devices = out.devices.at(std::string(kVendor));
  ASSERT_EQ(devices.size(), 1u);
  ASSERT_EQ(devices[0].size(), 2u);
  EXPECT_EQ(devices[0][0].uuid, "gpu-a/GPU-aaa");
  EXPECT_EQ(devices[0][0].mem, MiB(40000)) << "the whole card, not the 2000 MiB asked";
  EXPECT_EQ(devices[0][0].cores, Cores(100));
  EXPECT_EQ(out.annotations.at(std::string(kEndpointKey)), "10.0.0.5:14833");
  EXPECT_FALSE(out.annotations.at(std::string(kAllocatedKey)).empty());
  EXPECT_EQ(out.annotations.at(std::string(kAllocatedKey)),
            out.annotations.at("hami.io/remote-gpu-devices-to-allocate"));
}

TEST(RemoteGpu, EveryClientSeesTheWholePoolAndTheServerNone) {
  Lupine c;
  c.state.UpsertNode(Server("gpu-a", "10.0.0.5", {FleetGpu("GPU-aaa", 40000), FleetGpu("GPU-bbb", 40000)}));
  c.state.UpsertNode(Client("cpu-1"));
  ASSERT_NE(c.state.Pool(), nullptr);
  ASSERT_EQ(c.state.Pool()->devices.size(), 2u);
  EXPECT_EQ(c.state.Pool()->devices[0].id, "gpu-a/GPU-aaa");
  EXPECT_EQ(c.state.Pool()->devices[0].count, 1) << "whole cards, whatever the plugin's split count";
  EXPECT_EQ(c.state.FindNode("cpu-1")->pool, c.state.Pool());
  EXPECT_EQ(c.state.FindNode("gpu-a")->pool, nullptr);
  // The server keeps its cards as an NVIDIA node; none of them is its own remote GPU.
  const std::size_t b = testing::BackendIndex(c.backends, "remotegpu");
  const auto [begin, end] = c.state.FindNode("gpu-a")->vendor_range[b];
  EXPECT_EQ(begin, end);
}

TEST(RemoteGpu, AnAllocationNeverSpansTwoServers) {
  Lupine c;
  c.state.UpsertNode(Server("gpu-a", "10.0.0.5", {FleetGpu("GPU-aaa", 40000)}));
  c.state.UpsertNode(Server("gpu-b", "10.0.0.6", {FleetGpu("GPU-bbb", 40000)}));
  c.state.UpsertNode(Client("cpu-1"));
  ASSERT_EQ(c.state.Pool()->devices.size(), 2u) << "two free cards overall";
  const FilterOutcome out = c.Run(RemotePod("client", 2, 2000), {"cpu-1"});
  EXPECT_EQ(out.kind, FilterOutcome::Kind::kUnschedulable);
  EXPECT_NE(testing::Failure(out, "cpu-1"), "<fits>");
}

TEST(RemoteGpu, ACardHeldByAPodOnAnotherClientBlocksEveryClient) {
  Lupine c;
  c.state.UpsertNode(Server("gpu-a", "10.0.0.5", {FleetGpu("GPU-aaa", 40000)}));
  c.state.UpsertNode(Client("cpu-1"));
  c.state.UpsertNode(Client("cpu-2"));
  PodView first = RemotePod("first", 1, 2000);
  first.annotations["hami.io/vgpu-node"] = "cpu-1";
  first.annotations[std::string(kAllocatedKey)] = "gpu-a/GPU-aaa,RemoteGPU,40000,100:;";
  auto allocation = AllocationFromAnnotations(first, c.backends);
  ASSERT_TRUE(allocation && allocation->has_value());
  EXPECT_FALSE((*allocation)->in_flight) << "no device plugin on a client node answers for it";
  c.state.AddPod(std::move(**allocation));
  EXPECT_EQ(c.state.Pool()->usage[0].used, 1);
  EXPECT_EQ(c.state.FindNode("cpu-1")->unknown_device_charges, 0) << "the pool's card is not cpu-1's";

  const FilterOutcome out = c.Run(RemotePod("second", 1, 2000), {"cpu-1", "cpu-2"});
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kUnschedulable);
  EXPECT_NE(testing::Failure(out, "cpu-2"), "<fits>") << "the holder is on cpu-1, and cpu-2 is refused too";
  EXPECT_TRUE(Contains(testing::Failure(out, "cpu-2"), "ExclusiveDeviceAllocateConflict"))
      << testing::Failure(out, "cpu-2");

  // A released pod frees its server.
  c.state.RemovePod("uid-first");
  EXPECT_EQ(c.state.Pool()->usage[0].used, 0);
  EXPECT_EQ(c.Run(RemotePod("second", 1, 2000), {"cpu-2"}).kind, FilterOutcome::Kind::kScheduled);
}

TEST(RemoteGpu, AServerWithAnyCardInUseIsOut) {
  Lupine c;
  c.state.UpsertNode(Server("gpu-a", "10.0.0.5", {FleetGpu("GPU-a0", 40000), FleetGpu("GPU-a1", 40000)}));
  c.state.UpsertNode(Client("cpu-1"));
  testing::Hold(c.state, "holder", "cpu-1", std::string(kVendor), "gpu-a/GPU-a0", 1, 40000, 100);
  const FilterOutcome out = c.Run(RemotePod("client", 1, 0), {"cpu-1"});
  EXPECT_EQ(out.kind, FilterOutcome::Kind::kUnschedulable) << "GPU-a1 is free, but its server is not";
}

TEST(RemoteGpu, TheServerWithFewestCardsWinsAndTiesGoByName) {
  Lupine c;
  c.state.UpsertNode(Server("gpu-a", "10.0.0.5",
                            {FleetGpu("A0", 40000), FleetGpu("A1", 40000), FleetGpu("A2", 40000)}));
  c.state.UpsertNode(Server("gpu-c", "10.0.0.7", {FleetGpu("C0", 40000), FleetGpu("C1", 40000)}));
  c.state.UpsertNode(Server("gpu-b", "10.0.0.6", {FleetGpu("B0", 40000), FleetGpu("B1", 40000)}));
  c.state.UpsertNode(Client("cpu-1"));
  FilterOutcome out = c.Run(RemotePod("one", 1, 0), {"cpu-1"});
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled);
  EXPECT_EQ(c.Cards(out), (std::vector<std::string>{"gpu-b/B0", "gpu-b/B1"})) << "every card of the server";
  EXPECT_EQ(out.annotations.at(std::string(kEndpointKey)), "10.0.0.6:14833");
  c.Bind(out, RemotePod("one", 1, 0));
  out = c.Run(RemotePod("two", 1, 0), {"cpu-1"});
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled);
  EXPECT_EQ(c.Cards(out), (std::vector<std::string>{"gpu-c/C0", "gpu-c/C1"}));
  // Three cards asked: only gpu-a has them.
  out = c.Run(RemotePod("three", 3, 0), {"cpu-1"});
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled);
  EXPECT_EQ(c.Cards(out).size(), 3u);
  EXPECT_EQ(out.annotations.at(std::string(kEndpointKey)), "10.0.0.5:14833");
}

TEST(RemoteGpu, MemoryOnlyFiltersCards) {
  Lupine c;
  c.state.UpsertNode(Server("gpu-a", "10.0.0.5", {FleetGpu("GPU-small", 1000)}));
  c.state.UpsertNode(Client("cpu-1"));
  const FilterOutcome refused = c.Run(RemotePod("client", 1, 40000), {"cpu-1"});
  ASSERT_EQ(refused.kind, FilterOutcome::Kind::kUnschedulable);
  EXPECT_TRUE(Contains(testing::Failure(refused, "cpu-1"), "CardInsufficientMemory"))
      << testing::Failure(refused, "cpu-1");

  // A server whose one large card serves the request hands over its small card as well, whole.
  c.state.UpsertNode(Server("gpu-b", "10.0.0.6", {FleetGpu("B-big", 40000), FleetGpu("B-small", 1000)}));
  const FilterOutcome out = c.Run(RemotePod("client", 1, 20000), {"cpu-1"});
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << testing::Failure(out, "cpu-1");
  EXPECT_EQ(c.Cards(out), (std::vector<std::string>{"gpu-b/B-big", "gpu-b/B-small"}));
  EXPECT_EQ(out.devices.at(std::string(kVendor))[0][1].mem, MiB(1000));
}

TEST(RemoteGpu, AnUnhealthyCardIsNotHandedOut) {
  Lupine c;
  DeviceInfo sick = FleetGpu("GPU-sick", 40000);
  sick.health = false;
  c.state.UpsertNode(Server("gpu-a", "10.0.0.5", {FleetGpu("GPU-ok", 40000), sick}));
  c.state.UpsertNode(Client("cpu-1"));
  const FilterOutcome out = c.Run(RemotePod("client", 1, 0), {"cpu-1"});
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled);
  EXPECT_EQ(c.Cards(out), (std::vector<std::string>{"gpu-a/GPU-ok"}));
}

TEST(RemoteGpu, ThePortLabelNamesTheEndpoint) {
  EXPECT_EQ(backends::remotegpu::PortOf("", 14833), 14833);
  EXPECT_EQ(backends::remotegpu::PortOf("15000", 14833), 15000);
  EXPECT_EQ(backends::remotegpu::PortOf("abc", 14833), 14833);
  EXPECT_EQ(backends::remotegpu::PortOf("0", 14833), 14833);
  EXPECT_EQ(backends::remotegpu::PortOf("65536", 14833), 14833);
  EXPECT_EQ(backends::remotegpu::PortOf("-1", 14833), 14833);
  EXPECT_EQ(backends::remotegpu::PortOf("80x", 14833), 14833);
  EXPECT_EQ(backends::remotegpu::JoinHostPort("fd00::5", 14833), "[fd00::5]:14833");

  Lupine c;
  c.state.UpsertNode(Server("gpu-a", "10.0.0.5", {FleetGpu("GPU-aaa", 40000)}, "15000"));
  c.state.UpsertNode(Client("cpu-1"));
  const FilterOutcome out = c.Run(RemotePod("client", 1, 0), {"cpu-1"});
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled);
  EXPECT_EQ(out.annotations.at(std::string(kEndpointKey)), "10.0.0.5:15000");
}

TEST(RemoteGpu, TheDefaultPortAndTheEndpointKeyAreConfigurable) {
  VendorSettings s;
  s.Set("defaultPort", std::int64_t{16000});
  s.Set("annotations.endpoint", std::string("hami.io/lupine-endpoint"));
  const Backends backends = testing::BuiltinBackends({{"remotegpu", s}});
  ClusterState state(backends);
  state.UpsertNode(Server("gpu-a", "10.0.0.5", {FleetGpu("GPU-aaa", 40000)}, "not-a-port"));
  state.UpsertNode(Client("cpu-1"));
  Scheduler sched(state, SchedulerOptions{"spread", "binpack"});
  const FilterOutcome out = sched.Filter(RemotePod("client", 1, 0), {"cpu-1"}, kNow);
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled);
  EXPECT_EQ(out.annotations.at("hami.io/lupine-endpoint"), "10.0.0.5:16000");
}

TEST(RemoteGpu, AHostileServerIsAnErrorNamingIt) {
  const BackendPtr b = Make("remotegpu");
  NodeView bad = Server("gpu-a", "10.0.0.5", {FleetGpu("GPU-aaa", 40000)});
  bad.annotations["hami.io/node-nvidia-register"] = "{not json";
  auto r = b->Discover(bad);
  ASSERT_FALSE(r);
  EXPECT_TRUE(Contains(r.error().message, "gpu-a") &&
              Contains(r.error().message, "hami.io/node-nvidia-register"))
      << r.error().message;

  NodeView no_ip = Server("gpu-a", "", {FleetGpu("GPU-aaa", 40000)});
  r = b->Discover(no_ip);
  ASSERT_FALSE(r);
  EXPECT_TRUE(Contains(r.error().message, "InternalIP")) << r.error().message;

  NodeView unregistered = Server("gpu-a", "10.0.0.5", {});
  unregistered.annotations.clear();
  r = b->Discover(unregistered);
  ASSERT_FALSE(r);
  EXPECT_TRUE(Contains(r.error().message, "hami.io/node-nvidia-register")) << r.error().message;

  r = b->Discover(Server("gpu,a", "10.0.0.5", {FleetGpu("GPU-aaa", 40000)}));
  ASSERT_FALSE(r);
  EXPECT_TRUE(Contains(r.error().message, "node name")) << r.error().message;
  for (const char* uuid : {"GPU,a", "GPU:a", "GPU;a", "GPU/a", "GPU\na"}) {
    r = b->Discover(Server("gpu-a", "10.0.0.5", {FleetGpu(uuid, 40000)}));
    ASSERT_FALSE(r) << uuid;
    // The NVIDIA decoder refuses the codec's separators itself; the server's separator is ours to refuse.
    EXPECT_TRUE(Contains(r.error().message, "lupine server gpu-a") &&
                (Contains(r.error().message, "card UUID") || Contains(r.error().message, "may not contain")))
        << r.error().message;
  }
}

TEST(RemoteGpu, ABadRegistrationKeepsTheServersCardsAndRecordsTheError) {
  Lupine c;
  c.state.UpsertNode(Server("gpu-a", "10.0.0.5", {FleetGpu("GPU-aaa", 40000)}));
  NodeView bad = Server("gpu-a", "10.0.0.5", {FleetGpu("GPU-aaa", 40000)});
  bad.annotations["hami.io/node-nvidia-register"] = "{not json";
  c.state.UpsertNode(bad);
  const std::size_t b = testing::BackendIndex(c.backends, "remotegpu");
  EXPECT_TRUE(Contains(c.state.FindNode("gpu-a")->discovery_error[b], "gpu-a"));
  EXPECT_EQ(c.state.Pool()->devices.size(), 1u);
}

TEST(RemoteGpu, AServerLeavingOrUnlabelledLeavesThePool) {
  Lupine c;
  NodeView server = Server("gpu-a", "10.0.0.5", {FleetGpu("GPU-aaa", 40000)});
  c.state.UpsertNode(server);
  c.state.UpsertNode(Client("cpu-1"));
  server.labels.clear();  // a client now
  c.state.UpsertNode(server);
  EXPECT_TRUE(c.state.Pool()->devices.empty());
  EXPECT_EQ(c.state.FindNode("gpu-a")->pool, c.state.Pool());
  c.state.UpsertNode(Server("gpu-b", "10.0.0.6", {FleetGpu("GPU-bbb", 40000)}));
  EXPECT_EQ(c.state.Pool()->devices.size(), 1u);
  c.state.RemoveNode("gpu-b");
  EXPECT_TRUE(c.state.Pool()->devices.empty());
  EXPECT_EQ(c.Run(RemotePod("client", 1, 0), {"cpu-1"}).kind, FilterOutcome::Kind::kUnschedulable);
}

TEST(RemoteGpu, AChargeBeforeItsServerRegistersCountsOnceItDoes) {
  Lupine c;
  c.state.UpsertNode(Client("cpu-1"));
  testing::Hold(c.state, "early", "cpu-1", std::string(kVendor), "gpu-a/GPU-aaa", 1, 40000, 100);
  c.state.UpsertNode(Server("gpu-a", "10.0.0.5", {FleetGpu("GPU-aaa", 40000)}));
  EXPECT_EQ(c.state.Pool()->usage[0].used, 1);
  EXPECT_EQ(c.Run(RemotePod("client", 1, 0), {"cpu-1"}).kind, FilterOutcome::Kind::kUnschedulable);
}

TEST(RemoteGpu, WithoutItThereIsNoPool) {
  const Backends backends = testing::BuiltinBackends();
  ClusterState state(backends);
  state.UpsertNode(Server("gpu-a", "10.0.0.5", {FleetGpu("GPU-aaa", 40000)}));
  EXPECT_EQ(state.Pool(), nullptr);
  EXPECT_EQ(state.FindNode("gpu-a")->pool, nullptr);
  EXPECT_EQ(state.FindNode("gpu-a")->devices.size(), 1u) << "an NVIDIA node as any other";
}

TEST(RemoteGpu, TheOtherVendorsKeepTheirNodesOwnCards) {
  Lupine c;
  c.state.UpsertNode(Server("gpu-a", "10.0.0.5", {FleetGpu("GPU-aaa", 40000)}));
  NodeView client = testing::NvidiaNode("cpu-1", {Gpu("GPU-local", 0, 16000)});
  client.internal_ip = "10.0.1.1";
  c.state.UpsertNode(client);
  // An NVIDIA pod on a client uses the client's card, and charges it there.
  const PodView local = Pod("local", {testing::GpuCtr("app", 1, 4000, 30)});
  const FilterOutcome out = c.Run(local, {"cpu-1"});
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << testing::Failure(out, "cpu-1");
  EXPECT_EQ(out.devices.at("NVIDIA")[0][0].uuid, "GPU-local");
  c.Bind(out, local);
  EXPECT_EQ(c.state.FindNode("cpu-1")->usage[0].used, 1);
  EXPECT_EQ(c.state.Pool()->usage[0].used, 0);
  // A pod asking for both is fit against the node, which has no pool cards.
  PodView both = RemotePod("both", 1, 0);
  both.containers[0].limits["nvidia.com/gpu"] = "1";
  EXPECT_EQ(c.Run(both, {"cpu-1"}).kind, FilterOutcome::Kind::kUnschedulable);
}

TEST(RemoteGpu, AnUnreadableAllocationOnAnyClientClosesThePool) {
  Lupine c;
  c.state.UpsertNode(Server("gpu-a", "10.0.0.5", {FleetGpu("GPU-aaa", 40000)}));
  c.state.UpsertNode(Client("cpu-1"));
  c.state.UpsertNode(Client("cpu-2"));
  std::vector<std::string> reasons(c.backends.size());
  reasons[testing::BackendIndex(c.backends, "remotegpu")] = "pod default/broken: unreadable allocation";
  c.state.SetVendorBlocks("cpu-1", reasons);
  const FilterOutcome out = c.Run(RemotePod("client", 1, 0), {"cpu-2"});
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kUnschedulable) << "the broken pod's cards may be any server's";
  EXPECT_TRUE(Contains(testing::Failure(out, "cpu-2"), "default/broken")) << testing::Failure(out, "cpu-2");
  c.state.TakeGrown();
  c.state.SetVendorBlocks("cpu-1", {});
  EXPECT_TRUE(c.state.TakeGrown().changed.contains("cpu-2")) << "pods refused on every client may fit now";
  EXPECT_EQ(c.Run(RemotePod("client", 1, 0), {"cpu-2"}).kind, FilterOutcome::Kind::kScheduled);
}

TEST(RemoteGpu, PreemptionOnAClientFreesTheServerItsVictimsHold) {
  Lupine c;
  c.state.UpsertNode(Server("gpu-a", "10.0.0.5", {FleetGpu("GPU-aaa", 40000)}));
  c.state.UpsertNode(Client("cpu-1"));
  c.state.UpsertNode(Client("cpu-2"));
  PodView low = RemotePod("low", 1, 0);
  low.node_name = "cpu-1";
  const FilterOutcome placed = c.Run(low, {"cpu-1"});
  ASSERT_EQ(placed.kind, FilterOutcome::Kind::kScheduled);
  for (const auto& [k, v] : placed.annotations) low.annotations[k] = v;
  c.Bind(placed, low);
  PodView high = RemotePod("high", 1, 0);
  high.priority = 100;
  const auto requests = CollectRequests(high, c.backends).value();
  const auto ctx = MakePodContext(high, c.backends, c.state.quotas(), "spread").value();
  const auto find = [&](const std::string& key) { return key == "default/low" ? &low : nullptr; };
  VictimChooser chooser(c.state);
  const VictimChoice on_cpu1 =
      chooser.ChooseOn(high, ctx, requests, *c.state.FindNode("cpu-1"), {}, find, {});
  ASSERT_TRUE(on_cpu1.helps) << on_cpu1.reason;
  EXPECT_EQ(on_cpu1.victims, std::vector<const PodView*>{&low});
  EXPECT_EQ(on_cpu1.devices.at(std::string(kVendor))[0][0].uuid, "gpu-a/GPU-aaa");
  // kube-scheduler evicts only on the node it nominates: cpu-2 holds no pod to evict.
  EXPECT_FALSE(chooser.ChooseOn(high, ctx, requests, *c.state.FindNode("cpu-2"), {}, find, {}).helps);
}

TEST(RemoteGpu, RequestsReadCountAndMemory) {
  const BackendPtr b = Make("remotegpu");
  auto r = testing::Request(
      *b, Ctr("app", {{"nvidia.com/remote-gpu", "2"}, {"nvidia.com/remote-gpu-memory", "3000"}}));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->count, 2);
  EXPECT_EQ(r->memory, MiB(3000));
  EXPECT_EQ(r->cores, Cores(100));
  EXPECT_TRUE(Contains(RequestError(*b, Ctr("app", {{"nvidia.com/remote-gpu", "1"},
                                                    {"nvidia.com/remote-gpu-memory", "2Gi"}})),
                       "nvidia.com/remote-gpu-memory"));
}

TEST(RemoteGpu, OnePodReachesOneServer) {
  const BackendPtr b = Make("remotegpu");
  PodView pod =
      Pod("two", {Ctr("a", {{"nvidia.com/remote-gpu", "1"}}), Ctr("b", {{"nvidia.com/remote-gpu", "1"}})});
  auto r = b->Admit(pod.containers[0], pod);
  ASSERT_FALSE(r);
  EXPECT_TRUE(Contains(r.error().message, "a") && Contains(r.error().message, "nvidia.com/remote-gpu"))
      << r.error().message;
}

// --- the webhook ----------------------------------------------------------------------------------------

VendorSettings WithLibImage() {
  VendorSettings s;
  s.Set("libImage", std::string("projecthami/hami:v2.11"));
  return s;
}

const EnvVar* Env(const ContainerView& c, std::string_view name) {
  for (const EnvVar& e : c.env) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

TEST(RemoteGpuAdmission, TheEndpointAndTheWorkloadIdComeFromThePod) {
  const BackendPtr b = Make("remotegpu");
  PodView pod = RemotePod("client", 1, 2000);
  pod.containers[0].env.push_back(EnvVar{"LUPINE_SERVER", "10.9.9.9:1", "", false});  // replaced
  auto r = b->Admit(pod.containers[0], pod);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(*r);
  const ContainerView& c = pod.containers[0];
  ASSERT_NE(Env(c, "LUPINE_SERVER"), nullptr);
  EXPECT_EQ(Env(c, "LUPINE_SERVER")->field_path, "metadata.annotations['hami.io/lupine-server']");
  EXPECT_EQ(Env(c, "LUPINE_SERVER")->value, "");
  ASSERT_NE(Env(c, "LUPINE_WORKLOAD_ID"), nullptr);
  EXPECT_EQ(Env(c, "LUPINE_WORKLOAD_ID")->field_path, "metadata.uid");
  // Without a library image the memory asked is a placement filter only.
  EXPECT_EQ(Env(c, "LD_PRELOAD"), nullptr);
  EXPECT_TRUE(pod.added_init_containers.empty());
  EXPECT_TRUE(pod.added_empty_dirs.empty());
}

TEST(RemoteGpuAdmission, WithALibraryImageTheMemoryAskedIsEnforced) {
  const BackendPtr b = Make("remotegpu", WithLibImage());
  PodView pod = RemotePod("client", 1, 2000);
  pod.containers[0].env.push_back(EnvVar{"LD_PRELOAD", "/opt/own.so", "", false});
  auto r = b->Admit(pod.containers[0], pod);
  ASSERT_TRUE(r) << r.error().message;
  const ContainerView& c = pod.containers[0];
  ASSERT_NE(Env(c, "LD_PRELOAD"), nullptr);
  EXPECT_EQ(Env(c, "LD_PRELOAD")->value, "/hami-remote-gpu/libvgpu.so /opt/own.so");
  EXPECT_EQ(Env(c, "CUDA_DEVICE_MEMORY_LIMIT")->value, "2000m");
  EXPECT_EQ(Env(c, "CUDA_DEVICE_MEMORY_SHARED_CACHE")->value, "/hami-remote-gpu/vgpu.cache");
  EXPECT_EQ(c.added_mounts, (std::vector<VolumeMount>{{"hami-remote-gpu-lib", "/hami-remote-gpu"}}));
  EXPECT_EQ(pod.added_empty_dirs, (std::vector<std::string>{"hami-remote-gpu-lib"}));
  ASSERT_EQ(pod.added_init_containers.size(), 1u);
  const AddedContainer& init = pod.added_init_containers[0];
  EXPECT_EQ(init.name, "hami-remote-gpu-lib");
  EXPECT_EQ(init.image, "projecthami/hami:v2.11");
  const std::vector<std::string> copy{"sh", "-c",
                                      "cp /k8s-vgpu/lib/nvidia/libvgpu.so.* /hami-remote-gpu/libvgpu.so"};
  EXPECT_EQ(init.command, copy);
  EXPECT_EQ(init.mounts, (std::vector<VolumeMount>{{"hami-remote-gpu-lib", "/hami-remote-gpu"}}));

  // Admitted again (the same pod): nothing doubles.
  ASSERT_TRUE(b->Admit(pod.containers[0], pod));
  EXPECT_EQ(pod.containers[0].added_mounts.size(), 1u);
  EXPECT_EQ(pod.added_init_containers.size(), 1u);
  EXPECT_EQ(Env(pod.containers[0], "LD_PRELOAD")->value, "/hami-remote-gpu/libvgpu.so /opt/own.so");
}

TEST(RemoteGpuAdmission, NoMemoryAskedNoLibrary) {
  const BackendPtr b = Make("remotegpu", WithLibImage());
  PodView pod = RemotePod("client", 1, 0);
  ASSERT_TRUE(b->Admit(pod.containers[0], pod));
  EXPECT_EQ(Env(pod.containers[0], "LD_PRELOAD"), nullptr);
  EXPECT_TRUE(pod.added_init_containers.empty());
  EXPECT_NE(Env(pod.containers[0], "LUPINE_SERVER"), nullptr);
}

TEST(RemoteGpuAdmission, APreloadFromASourceIsRefusedNamingTheContainer) {
  const BackendPtr b = Make("remotegpu", WithLibImage());
  PodView pod = RemotePod("client", 1, 2000);
  pod.containers[0].env.push_back(EnvVar{"LD_PRELOAD", "", "metadata.labels['x']", false});
  auto r = b->Admit(pod.containers[0], pod);
  ASSERT_FALSE(r);
  EXPECT_TRUE(Contains(r.error().message, "app") && Contains(r.error().message, "LD_PRELOAD"))
      << r.error().message;
}

TEST(RemoteGpuAdmission, ThroughTheWebhookRules) {
  const Backends backends = testing::BuiltinBackends({{"remotegpu", WithLibImage()}});
  PodView pod = RemotePod("client", 1, 2000);
  const AdmissionVerdict v = AdmitPodRules(pod, backends, AdmissionOptions{"hami-scheduler", true});
  ASSERT_TRUE(v.allowed()) << v.message;
  EXPECT_TRUE(v.uses_devices);
  EXPECT_EQ(pod.scheduler_name, "hami-scheduler");
  EXPECT_EQ(pod.added_init_containers.size(), 1u);
  // An init container asking for remote GPUs gets the library too, and the pod one copy of it.
  PodView with_init = RemotePod("client", 1, 2000);
  with_init.init_containers.push_back(with_init.containers[0]);
  with_init.init_containers[0].name = "warmup";
  with_init.containers[0].limits.clear();
  ASSERT_TRUE(AdmitPodRules(with_init, backends, AdmissionOptions{"hami-scheduler", true}).allowed());
  EXPECT_EQ(with_init.init_containers[0].added_mounts.size(), 1u);
  EXPECT_EQ(with_init.added_init_containers.size(), 1u);
}

}  // namespace
}  // namespace hami::vendor_tests
