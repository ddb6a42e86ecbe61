// The metrics listener's /api/overview, /api/nodes, /api/pods and /api/quotas: the registry and the ledger
// as JSON.
#include "extender/cluster_view.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "tests/support/builders.h"
#include "tests/unit/extender/services_fixture.h"

namespace hami {
namespace {
namespace json = boost::json;

// Pod `ns`/`name` holding `mem` MiB and `cores` of card `uuid` on `node`.
PodAllocation Holding(std::string ns, std::string name, std::string node, std::string uuid, std::int64_t mem,
                      std::int64_t cores) {
  PodAllocation pod;
  pod.uid = pod.name = std::move(name);
  pod.ns = std::move(ns);
  pod.node = std::move(node);
  pod.devices["NVIDIA"] = {
      {ContainerDevice{0, std::move(uuid), "NVIDIA", MiB(mem), Cores(cores), std::nullopt}}};
  return pod;
}

TEST(ClusterView, OverviewAndNodesShowTheLedger) {
  Backends backends = testing::BuiltinBackends();
  ClusterState state(backends);
  DeviceInfo sick = testing::Gpu("GPU-s", 1, 16000);
  sick.health = false;
  state.UpsertNode(testing::NvidiaNode("gpu-1", {testing::Gpu("GPU-a", 0, 16000), sick}));
  state.AddPod(Holding("default", "p", "gpu-1", "GPU-a", 6000, 30));
  state.SetWaiting("w", {static_cast<std::size_t>(backends.IndexOf("NVIDIA"))});

  const json::value overview = json::parse(extender::OverviewJson(state, 3));
  EXPECT_EQ(overview.at("nodes"), 1);
  EXPECT_EQ(overview.at("pods"), 1);
  EXPECT_EQ(overview.at("podsRefused"), 3);
  const json::array& vendors = overview.at("vendors").as_array();
  ASSERT_EQ(vendors.size(), 1u);
  EXPECT_EQ(json::serialize(vendors[0]),
            R"({"vendor":"NVIDIA","nodes":1,"nodesBlocked":0,"devices":2,"devicesUnhealthy":1,)"
            R"("memoryMiB":{"used":6000,"total":32000},"cores":{"used":30,"total":200},)"
            R"("tasks":{"used":1,"total":20},"pods":1,"podsWaiting":1,"podsRefused":0})");

  const json::value nodes = json::parse(extender::NodesJson(state));
  const json::object& node = nodes.at("nodes").at(0).as_object();
  EXPECT_EQ(node.at("node"), "gpu-1");
  EXPECT_EQ(node.at("allocationsInFlight"), 1);
  EXPECT_EQ(json::serialize(node.at("largestFreeMiB")), R"({"NVIDIA":10000})");  // the sick card not counted
  const json::array& cards = node.at("cards").as_array();
  ASSERT_EQ(cards.size(), 2u);
  EXPECT_EQ(json::serialize(cards[0]),
            R"({"id":"GPU-a","vendor":"NVIDIA","type":"NVIDIA","numa":0,"health":true,)"
            R"("memoryMiB":{"used":6000,"total":16000},"cores":{"used":30,"total":100},)"
            R"("tasks":{"used":1,"total":10}})");
  EXPECT_EQ(cards[1].at("health"), false);
  EXPECT_EQ(node.at("locks").as_array().size(), 0u);
}

TEST(ClusterView, NodesShowWhoHoldsTheNodeLock) {
  Backends backends = testing::BuiltinBackends();
  ClusterState state(backends);
  NodeView held = testing::NvidiaNode("gpu-1", {testing::Gpu("GPU-a", 0, 16000)});
  held.annotations["hami.io/mutex.lock"] = "2026-12-05T10:00:00Z,team,trainer-0";
  NodeView odd = testing::NvidiaNode("gpu-2", {testing::Gpu("GPU-b", 0, 16000)});
  odd.annotations["hami.io/mutex.lock"] = "<b>not a lock</b>";
  state.UpsertNode(held);
  state.UpsertNode(odd);
  const json::value nodes = json::parse(extender::NodesJson(state));
  EXPECT_EQ(json::serialize(nodes.at("nodes").at(0).at("locks")),
            R"([{"annotation":"hami.io/mutex.lock","holder":"team/trainer-0",)"
            R"("since":"2026-12-05T10:00:00Z"}])");
  // What cannot be read is shown as written, as a string.
  EXPECT_EQ(json::serialize(nodes.at("nodes").at(1).at("locks")),
            R"([{"annotation":"hami.io/mutex.lock","holder":null,"value":"<b>not a lock</b>"}])");
}

using ClusterViewTest = testing::ServicesTest;

TEST_F(ClusterViewTest, PodsShowEachHolderWithItsDevicesAndAge) {
  ClusterState& state = feed_.state();
  state.UpsertNode(testing::NvidiaNode("gpu-1", {testing::Gpu("GPU-a", 0, 16000)}));
  state.AddPod(Holding("team", "b", "gpu-1", "GPU-a", 6000, 30));
  PodAllocation set_up = Holding("team", "a", "gpu-1", "GPU-a", 2000, 10);
  set_up.in_flight = false;
  state.AddPod(set_up);
  PodView a = testing::Pod("a", {});
  a.ns = "team";
  a.created = "2026-12-05T09:00:00Z";
  pods_.emplace("team/a", a);
  const json::value pods = json::parse(extender::PodsJson(state, pods_, requeue_));
  EXPECT_EQ(json::serialize(pods.at("holders")),
            R"([{"namespace":"team","name":"a","node":"gpu-1","phase":"allocated",)"
            R"("created":"2026-12-05T09:00:00Z","devices":[{"container":0,"vendor":"NVIDIA","id":"GPU-a",)"
            R"("memoryMiB":2000,"cores":10}]},)"
            R"({"namespace":"team","name":"b","node":"gpu-1","phase":"allocating","created":"",)"
            R"("devices":[{"container":0,"vendor":"NVIDIA","id":"GPU-a","memoryMiB":6000,"cores":30}]}])");
  EXPECT_EQ(pods.at("refused").as_array().size(), 0u);
}

TEST_F(ClusterViewTest, PodsShowTheLastRefusalOfAPodWaitingForRoomUntilItFits) {
  AddNode("gpu-a");
  AddNode("gpu-b");
  const SchedulerOptions policies;
  const extender::ClusterView view(feed_.state(), pods_, requeue_, policies, {});
  PodView big = testing::Pod("big", {testing::GpuCtr("main", 1, 20000, 30)});
  big.uid = "big-uid";
  pods_[big.Key()] = big;
  feed_.TrackWaiting(big, true);  // as the pod watch does
  const std::uint64_t before = view.Generation();
  const std::string unchanged = view.Pods();
  EXPECT_EQ(view.Generation(), before);  // reading changes nothing
  Filter(big, {"gpu-a", "gpu-b"});
  EXPECT_GT(view.Generation(), before);
  const json::value pods = json::parse(view.Pods());
  ASSERT_EQ(pods.at("refused").as_array().size(), 1u) << view.Pods();
  const json::object& refused = pods.at("refused").at(0).as_object();
  EXPECT_EQ(refused.at("namespace"), "default");
  EXPECT_EQ(refused.at("name"), "big");
  EXPECT_EQ(refused.at("at"), "2023-11-14T22:13:20Z");  // the fixture's clock
  EXPECT_EQ(refused.at("nodes"), 2);
  EXPECT_EQ(json::serialize(refused.at("reasons")),
            R"([{"node":"gpu-a","reason":"1/1 CardInsufficientMemory"},)"
            R"({"node":"gpu-b","reason":"1/1 CardInsufficientMemory"}])");
  EXPECT_EQ(json::parse(view.Overview()).at("podsRefused"), 1);
  EXPECT_EQ(json::parse(view.Overview()).at("vendors").at(0).at("podsRefused"), 1);  // NVIDIA's
  // Gone from the cache and the watch: forgotten, and the generation says so.
  const std::uint64_t refused_at = view.Generation();
  requeue_.Forget("big-uid");
  EXPECT_GT(view.Generation(), refused_at);
  EXPECT_EQ(json::parse(view.Pods()).at("refused").as_array().size(), 0u);
  EXPECT_EQ(view.Pods(), unchanged);
}

TEST(ClusterView, TheGenerationGrowsWithEveryChangeAndOnlyThen) {
  Backends backends = testing::BuiltinBackends();
  ClusterState state(backends);
  std::uint64_t seen = state.generation();
  const auto grew = [&] {
    const bool grown = state.generation() > seen;
    seen = state.generation();
    return grown;
  };
  NodeView node = testing::NvidiaNode("gpu-1", {testing::Gpu("GPU-a", 0, 16000)});
  state.UpsertNode(node);
  EXPECT_TRUE(grew());
  (void)extender::NodesJson(state);
  (void)extender::OverviewJson(state, 0);
  EXPECT_FALSE(grew());  // reading changes nothing
  // A device plugin's handshake rewrite changes nothing anyone reads; a lock taken does.
  node.annotations["hami.io/node-handshake"] = "Requesting_2026-12-05T10:00:00Z";
  node.resource_version = "2";
  state.UpsertNode(node);
  EXPECT_FALSE(grew());
  node.annotations["hami.io/mutex.lock"] = "2026-12-05T10:00:00Z,team,a";
  state.UpsertNode(node);
  EXPECT_TRUE(grew());
  state.ClearWaiting("nobody");
  state.RemovePod("nobody");
  state.SetVendorBlocks("gpu-1", {});
  EXPECT_FALSE(grew());  // nothing to clear, remove or open
  state.AddPod(Holding("team", "a", "gpu-1", "GPU-a", 2000, 10));
  EXPECT_TRUE(grew());
  ResourceQuotaView q;
  q.ns = "team";
  q.name = "gpu";
  q.hard = {{"limits.nvidia.com/gpumem", "20000"}};
  state.quotas().UpsertQuota(q);
  EXPECT_TRUE(grew());
  q.hard["requests.cpu"] = "4";  // not a limit of ours (and the controller's status.used is not read)
  state.quotas().UpsertQuota(q);
  EXPECT_FALSE(grew());
  state.SetVendorBlocks("gpu-1", {"draining"});
  EXPECT_TRUE(grew());
  state.RemovePod("a");
  EXPECT_TRUE(grew());
}

TEST(ClusterView, QuotasShowUseAgainstTheTightestLimit) {
  Backends backends = testing::BuiltinBackends();
  ClusterState state(backends);
  ResourceQuotaView q;
  q.ns = "team";
  q.name = "gpu";
  q.hard = {{"limits.nvidia.com/gpumem", "20000"}};
  state.quotas().UpsertQuota(q);
  state.UpsertNode(testing::NvidiaNode("gpu-1", {testing::Gpu("GPU-a", 0, 16000)}));
  state.AddPod(Holding("team", "p", "gpu-1", "GPU-a", 6000, 30));
  const std::string body = extender::QuotasJson(state);
  EXPECT_NE(body.find(R"({"namespace":"team","resource":"nvidia.com/gpumem","used":6000,"limit":20000})"),
            std::string::npos)
      << body;
}

TEST(ClusterView, WhatADevicePluginWritesStaysAString) {
  Backends backends = testing::BuiltinBackends();
  ClusterState state(backends);
  // Registration refuses quotes and control characters in a card's fields; what it lets through must still
  // come out as the same string.
  DeviceInfo odd = testing::Gpu("GPU-a", 0, 16000, 10, "T4 <img src=x onerror=alert(1)> \\ é");
  state.UpsertNode(testing::NvidiaNode("gpu-1", {odd}));
  const std::string body = extender::NodesJson(state);
  const json::value nodes = json::parse(body);  // throws if the escaping broke it
  ASSERT_EQ(nodes.at("nodes").at(0).at("cards").as_array().size(), 1u) << body;
  EXPECT_EQ(nodes.at("nodes").at(0).at("cards").at(0).at("type"), "T4 <img src=x onerror=alert(1)> \\ é");
}

}  // namespace
}  // namespace hami
