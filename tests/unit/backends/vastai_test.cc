// Vastai in isolation and through the scheduler: discovery (cores scored as 100), the handshake, requests
// by count, the fit's checks, die mode (a mutex pod's card kept whole, dies grouped by card, the node score
// of dies kept together) and pod annotations. The test vectors of HAMi v2.10's Vastai backend, with the
// departures of docs/DECISIONS.md "Vastai" (a die-mode request is never given fewer dies, equal cards in
// the policy's order, the score ranks together-kept dies first under spread too).
#include "backends/vastai/vastai.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "core/health.h"
#include "tests/support/builders.h"

namespace hami {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using testing::Ctr;
using testing::Failure;
using testing::Hold;
using testing::Pod;
using testing::Req;
using testing::Request;
using Positions = std::vector<std::size_t>;

const TimePoint kNow = std::chrono::system_clock::from_time_t(1767225600);  // 2026-01-01 00:00:00 UTC
constexpr const char* kRegister = "hami.io/node-va-register";

BackendPtr Make() { return std::move(backends::vastai::Module().create({}).value().at(0)); }

DeviceInfo Device(std::string id, std::int32_t index, std::int32_t count = 4) {
  return testing::Gpu(std::move(id), index, 32768, count, "Vastai");
}

DeviceInfo Die(std::string id, std::int32_t index, std::string card, std::int32_t count = 4) {
  DeviceInfo d = Device(std::move(id), index, count);
  d.custom_info = {{"AIC", std::move(card)}, {"DeviceStrategy", "die"}};
  return d;
}

NodeView VastaiNode(const std::string& name, const std::vector<DeviceInfo>& devices) {
  return testing::ManifestNode(name, kRegister, devices, "vastaitech.com/va");
}

PodView VaPod(int count, std::map<std::string, std::string> annotations = {}) {
  return Pod("p", {Ctr("va", {{"vastaitech.com/va", std::to_string(count)}})}, {}, std::move(annotations));
}

TEST(Vastai, TheSpecNamesHamisCapitalisedKeys) {
  const BackendPtr b = Make();
  const BackendSpec& s = b->Spec();
  EXPECT_EQ(s.vendor, "Vastai");
  EXPECT_EQ(s.keys.register_annotation, kRegister);
  EXPECT_EQ(s.keys.handshake, "hami.io/node-handshake-va");
  EXPECT_EQ(s.keys.allocated, "hami.io/Vastai-devices-allocated");
  EXPECT_EQ(s.keys.to_allocate, "hami.io/Vastai-devices-to-allocate");
  EXPECT_EQ(s.keys.node_lock, "hami.io/mutex.lock");
  EXPECT_EQ(s.keys.use_uuid, "vastaitech.com/use-gpuuuid");
  EXPECT_EQ(s.keys.nouse_uuid, "vastaitech.com/nouse-gpuuuid");
  EXPECT_EQ(s.resources.count, "vastaitech.com/va");
  EXPECT_TRUE(s.resources.memory.empty()) << "no quota";
  EXPECT_TRUE(s.resources.cores.empty());
  EXPECT_EQ(s.health, HealthRule::kHandshake);
  for (const auto& f : backends::vastai::Module().schema.fields) {
    EXPECT_NE(f.key, "resourceMemoryName");
    EXPECT_NE(f.key, "resourceCoreName");
  }
}

TEST(Vastai, Discovery) {
  BackendPtr b = Make();
  NodeView n;
  n.name = "n1";
  EXPECT_TRUE(b->Discover(n).value().empty()) << "no annotation: no plugin (upstream: an error)";
  n.annotations[kRegister] =
      R"([{"id":"7-0","count":1,"devmem":32768,"type":"Vastai","health":true,"devicepairscore":{}}])";
  auto devices = b->Discover(n).value();
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0].id, "7-0");
  EXPECT_EQ(devices[0].count, 1);
  EXPECT_EQ(devices[0].devmem, MiB(32768));
  EXPECT_EQ(devices[0].devcore, Cores(100)) << "scored as 100 cores";
  EXPECT_EQ(devices[0].type, "Vastai");
  EXPECT_EQ(devices[0].index, 0);
  EXPECT_TRUE(devices[0].health);
  for (const char* bad : {":", ""}) {
    n.annotations[kRegister] = bad;
    EXPECT_THAT(b->Discover(n).error().message, HasSubstr(kRegister)) << "'" << bad << "'";
  }
  n.annotations[kRegister] =
      R"([{"id":"d0","count":1,"devmem":8192,"devcore":25,"health":true,
           "custominfo":{"DeviceStrategy":"die","AIC":"1","Slots":4}}])";
  devices = b->Discover(n).value();
  ASSERT_EQ(devices.size(), 1u);
  ASSERT_NE(devices[0].CustomInfo("AIC"), nullptr);
  EXPECT_EQ(*devices[0].CustomInfo("AIC"), "1");
  EXPECT_EQ(*devices[0].CustomInfo("DeviceStrategy"), "die");
  EXPECT_EQ(devices[0].CustomInfo("Slots"), nullptr) << "only string entries are kept";
  EXPECT_EQ(devices[0].devcore, Cores(100));
  EXPECT_EQ(b->Discover(VastaiNode("n1", devices)).value(), devices) << "the plugin's publication reads back";
}

TEST(Vastai, TheHandshakeGatedOnTheCount) {
  const BackendSpec spec = backends::vastai::DefaultSpec();
  setenv("TZ", "UTC", 1);
  tzset();
  NodeView n;
  n.name = "n";
  n.annotations["hami.io/node-handshake-va"] = "Requesting_2025-01-07 00:00:00";
  EXPECT_FALSE(EvaluateHealth(spec, n, {}, kNow, 60s).healthy) << "an old request unanswered";
  n.allocatable["vastaitech.com/va"] = "4";
  EXPECT_TRUE(EvaluateHealth(spec, n, {}, kNow, 60s).healthy) << "the plugin still advertises devices";
  n.annotations["hami.io/node-handshake-va"] = "Unknown";
  auto v = EvaluateHealth(spec, n, {}, kNow, 60s);
  EXPECT_TRUE(v.healthy);
  EXPECT_EQ(v.handshake_patch, "Requesting_2026-01-01 00:00:00");
}

TEST(Vastai, RequestsByCount) {
  BackendPtr b = Make();
  EXPECT_FALSE(Request(*b, Ctr("c", {})));
  const DeviceRequest one = Req("Vastai", 1, 0, kPercentUnset, 0);
  ContainerView both = Ctr("c", {{"vastaitech.com/va", "1"}});
  both.requests["vastaitech.com/va"] = "1";
  EXPECT_EQ(Request(*b, both), one);
  EXPECT_EQ(Request(*b, Ctr("c", {{"vastaitech.com/va", "1"}})), one);
  ContainerView requests_only = Ctr("c", {});
  requests_only.requests["vastaitech.com/va"] = "1";
  EXPECT_EQ(Request(*b, requests_only), one);
  for (const char* bad : {"1.5", "-1", "lots"}) {
    auto r = b->RequestFor(Ctr("c", {{"vastaitech.com/va", bad}}));
    ASSERT_FALSE(r) << bad;
    EXPECT_THAT(r.error().message, HasSubstr("vastaitech.com/va"));
  }
  PodView pod;
  ContainerView asking = Ctr("c", {{"vastaitech.com/va", "1"}});
  EXPECT_TRUE(b->Admit(asking, pod).value());
  EXPECT_EQ(asking.limits.size(), 1u) << "no mutation";
  EXPECT_FALSE(b->Admit(requests_only, pod).value()) << "limits only";
}

TEST(Vastai, DiesByCard) {
  const auto choose = [](const std::vector<DeviceInfo>& devices, std::int32_t want) {
    std::vector<const DeviceInfo*> candidates;
    for (const auto& d : devices) candidates.push_back(&d);
    return backends::vastai::ChooseDies(candidates, want);
  };
  const std::vector<DeviceInfo> one_card = {Die("a", 0, "1"), Die("b", 1, "1"), Die("c", 2, "1")};
  EXPECT_EQ(choose(one_card, 2), (Positions{0, 1}));
  const std::vector<DeviceInfo> three = {Die("x", 0, "3"), Die("a", 1, "1"), Die("d", 2, "2"),
                                         Die("b", 3, "1"), Die("e", 4, "2"), Die("c", 5, "1")};
  EXPECT_EQ(choose(three, 3), (Positions{1, 3, 5})) << "the card with most candidates";
  EXPECT_EQ(choose(three, 4), (Positions{1, 3, 5, 2})) << "then the next card's first";
  EXPECT_EQ(choose(three, 6), (Positions{0, 1, 2, 3, 4, 5})) << "exactly the candidates";
  EXPECT_EQ(choose(three, 7), Positions{}) << "never fewer than asked (upstream: all there are)";
  EXPECT_EQ(choose(three, 1), (Positions{0})) << "one die: the policy's first";
  // Equal cards go in the order of their first candidate (upstream: map order).
  const std::vector<DeviceInfo> ties = {Die("p", 0, "9"), Die("q", 1, "2"), Die("r", 2, "2"),
                                        Die("s", 3, "9")};
  EXPECT_EQ(choose(ties, 3), (Positions{0, 3, 1}));
  // Dies whose card the plugin does not name come last, one by one (upstream drops them, and may give
  // the pod fewer dies than it asked for).
  std::vector<DeviceInfo> loose = {Die("u", 0, "1"), Device("v", 1), Die("w", 2, "1"), Die("x", 3, "2"),
                                   Device("y", 4)};
  loose[1].custom_info = loose[4].custom_info = {{"DeviceStrategy", "die"}};
  EXPECT_EQ(choose(loose, 3), (Positions{0, 2, 3}));
  EXPECT_EQ(choose(loose, 4), (Positions{0, 2, 3, 1}));
  const std::vector<DeviceInfo> cards = {Device("a", 0), Device("b", 1), Device("c", 2)};
  EXPECT_EQ(choose(cards, 2), (Positions{0, 1})) << "whole cards: the policy's first";
}

// --- through the scheduler ------------------------------------------------------------------------------

struct Cluster : testing::FitCluster {
  void Node(const std::string& name, const std::vector<DeviceInfo>& devices) {
    state.UpsertNode(VastaiNode(name, devices));
  }
};

std::vector<std::string> Chosen(const FilterOutcome& out) {
  std::vector<std::string> ids;
  for (const auto& d : out.devices.at("Vastai").at(0)) ids.push_back(d.uuid);
  std::sort(ids.begin(), ids.end());
  return ids;
}

const std::map<std::string, std::string> kMutex{{"hami.io/gpu-scheduler-policy", "mutex"}};

TEST(VastaiFit, Checks) {
  {
    Cluster c;
    c.Node("n", {Device("dev-0", 0), Device("dev-1", 1)});
    auto out = c.Run(VaPod(1));
    ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << Failure(out);
    EXPECT_EQ(out.annotations.at("hami.io/Vastai-devices-allocated"), Chosen(out)[0] + ",Vastai,0,0:;");
    EXPECT_EQ(out.annotations.at("hami.io/Vastai-devices-to-allocate"), Chosen(out)[0] + ",Vastai,0,0:;");
    EXPECT_EQ(Chosen(c.Run(VaPod(2))), (std::vector<std::string>{"dev-0", "dev-1"}));
    EXPECT_EQ(Failure(c.Run(VaPod(3))), "NodeInsufficientDevice");
  }
  {
    Cluster c;
    c.Node("n", {Device("dev-0", 0)});
    EXPECT_EQ(Failure(c.Run(VaPod(1, {{"vastaitech.com/use-gpuuuid", "dev-9"}}))), "1/1 CardUuidMismatch");
    EXPECT_EQ(Failure(c.Run(VaPod(1, {{"vastaitech.com/nouse-gpuuuid", "dev-0"}}))), "1/1 CardUuidMismatch");
    Hold(c.state, "h", "n", "Vastai", "dev-0", 1, 0, 0);
    EXPECT_EQ(Failure(c.Run(VaPod(1))), "<fits>") << "a slot of four is taken: three are left";
    EXPECT_EQ(Failure(c.Run(VaPod(1, kMutex))), "1/1 ExclusiveDeviceAllocateConflict");
    Hold(c.state, "h2", "n", "Vastai", "dev-0", 3, 0, 0);
    EXPECT_EQ(Failure(c.Run(VaPod(1))), "1/1 CardTimeSlicingExhausted") << "each pod takes a slot";
  }
  {
    Cluster c;
    c.Node("n", {Device("dev-0", 0, 1), Device("dev-1", 1, 1)});
    Hold(c.state, "h", "n", "Vastai", "dev-0", 1, 0, 0);
    EXPECT_EQ(Failure(c.Run(VaPod(2))),
              "1/2 AllocatedCardsInsufficientRequest, 1/2 CardTimeSlicingExhausted");
  }
  {
    Cluster c;
    DeviceInfo sick = Device("dev-0", 0);
    sick.health = false;
    c.Node("n", {sick});
    EXPECT_EQ(Failure(c.Run(VaPod(1))), "1/1 CardNotHealth");
  }
}

TEST(VastaiFit, AMutexPodKeepsAWholeCard) {
  Cluster c;
  c.Node("n", {Die("dev-0", 0, "1"), Die("dev-1", 1, "1"), Die("dev-2", 2, "2")});
  Hold(c.state, "h", "n", "Vastai", "dev-0", 1, 0, 0);
  auto out = c.Run(VaPod(1, kMutex));
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << Failure(out);
  EXPECT_EQ(Chosen(out), std::vector<std::string>{"dev-2"}) << "dev-1 is idle, but its card is in use";
  EXPECT_EQ(Failure(c.Run(VaPod(2, kMutex))),
            "1/3 AllocatedCardsInsufficientRequest, 2/3 ExclusiveDeviceAllocateConflict");
  EXPECT_EQ(Chosen(c.Run(VaPod(2))), (std::vector<std::string>{"dev-0", "dev-1"}))
      << "without mutex: both dies of the card in use";

  Cluster one;
  one.Node("n", {Die("dev-0", 0, "1"), Die("dev-1", 1, "1")});
  Hold(one.state, "h", "n", "Vastai", "dev-0", 1, 0, 0);
  EXPECT_EQ(Failure(one.Run(VaPod(1, kMutex))), "2/2 ExclusiveDeviceAllocateConflict");
}

TEST(VastaiFit, APodsDiesComeFromOneCard) {
  Cluster c;
  c.Node("n", {Die("a0", 0, "A"), Die("b0", 1, "B"), Die("b1", 2, "B"), Die("c0", 3, "C")});
  auto out = c.Run(VaPod(2));
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << Failure(out);
  EXPECT_EQ(Chosen(out), (std::vector<std::string>{"b0", "b1"}));
}

TEST(VastaiFit, NodesThatKeepAContainersDiesOnOneCardRankFirst) {
  for (const char* policy : {"binpack", "spread"}) {
    Cluster c;
    c.Node("apart", {Die("p0", 0, "1"), Die("p1", 1, "2")});
    c.Node("together", {Die("t0", 0, "1"), Die("t1", 1, "1")});
    auto out = c.Run(VaPod(2), {"apart", "together"}, policy);
    ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << policy;
    // 1 for the dies on one card against 0.5 (upstream adds it raw: spread would take "apart").
    EXPECT_EQ(out.node, "together") << policy;
  }
  // Whole cards (no die mode) score nothing.
  Cluster c;
  c.Node("a", {Device("a0", 0), Device("a1", 1)});
  c.Node("b", {Device("b0", 0), Device("b1", 1)});
  auto out = c.Run(VaPod(2), {"b", "a"});
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled);
  EXPECT_EQ(out.node, "a") << "equal scores: the smaller name";
}

// One die is together on any node: it ranks no node first, so spread takes the idle node of whole cards
// rather than the busier die-mode node, and binpack the busier one.
TEST(VastaiFit, AOneDieContainerScoresNothingTogether) {
  Cluster c;
  c.Node("dies", {Die("d0", 0, "1"), Die("d1", 1, "1")});
  c.Node("whole", {Device("w0", 0), Device("w1", 1)});
  Hold(c.state, "h", "dies", "Vastai", "d0", 1, 0, 0);
  auto spread = c.Run(VaPod(1), {"dies", "whole"}, "spread");
  ASSERT_EQ(spread.kind, FilterOutcome::Kind::kScheduled) << Failure(spread, "dies");
  EXPECT_EQ(spread.node, "whole") << "the less busy node";
  auto binpack = c.Run(VaPod(1), {"dies", "whole"}, "binpack");
  ASSERT_EQ(binpack.kind, FilterOutcome::Kind::kScheduled);
  EXPECT_EQ(binpack.node, "dies") << "the busier node";
}

}  // namespace
}  // namespace hami
