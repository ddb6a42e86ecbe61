// The metrics listener's /api/overview and /api/nodes: the registry and the ledger as JSON.
#include "extender/cluster_view.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "tests/support/builders.h"

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

  const json::value overview = json::parse(extender::OverviewJson(state));
  EXPECT_EQ(overview.at("nodes"), 1);
  EXPECT_EQ(overview.at("pods"), 1);
  const json::array& vendors = overview.at("vendors").as_array();
  ASSERT_EQ(vendors.size(), 1u);
  EXPECT_EQ(json::serialize(vendors[0]),
            R"({"vendor":"NVIDIA","nodes":1,"nodesBlocked":0,"devices":2,"devicesUnhealthy":1,)"
            R"("memoryMiB":{"used":6000,"total":32000},"cores":{"used":30,"total":200},)"
            R"("tasks":{"used":1,"total":20},"pods":1,"podsWaiting":1})");

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
