// MetaX in isolation and through the scheduler: whole cards from capacity with the node's topology figures
// (`Metax-GPU`), and sGPUs of the cards in metax-tech.com/node-gpu-devices (`Metax-SGPU`): discovery and its
// errors, requests, the webhook, app classes and QoS policies kept per card by the ledger, the link-zone
// and online choices, the scores, and the plugin's pod annotations. Vectors S1-S11 and those of the
// whole-card backend of HAMi v2.10, with the departures of docs/DECISIONS.md "MetaX".
#include "backends/metax/metax.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <string>
#include <vector>

#include "backends/common.h"
#include "core/cluster_state.h"
#include "core/keys.h"
#include "core/scheduler.h"
#include "tests/support/builders.h"

namespace hami {
namespace {

namespace json = boost::json;
using namespace backends::metax;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::Ctr;
using testing::Failure;
using testing::FitCluster;
using testing::Hold;
using testing::Pod;
using testing::Req;
using testing::Request;

constexpr const char* kDevices = "metax-tech.com/node-gpu-devices";
constexpr const char* kSgpuAllocated = "hami.io/metax-sgpu-devices-allocated";
constexpr const char* kCount = "metax-tech.com/sgpu";
constexpr const char* kMem = "metax-tech.com/vmemory";
constexpr const char* kCore = "metax-tech.com/vcore";

BackendPtr Make(std::string_view vendor, const VendorSettings& settings = {}) {
  auto all = Module().create(settings).value();
  for (auto& b : all) {
    if (b->Vendor() == vendor) return std::move(b);
  }
  throw std::invalid_argument("no backend " + std::string(vendor));
}

NodeView GpuNode(const std::string& name, int cards, std::map<std::string, std::string> annotations = {}) {
  NodeView n;
  n.name = name;
  n.capacity["metax-tech.com/gpu"] = std::to_string(cards);
  n.allocatable = n.capacity;
  for (auto& [k, v] : annotations) n.annotations[k] = v;
  return n;
}

// A node whose sGPU plugin lists `cards` (JSON objects, as text).
NodeView SgpuNode(const std::string& name, const std::vector<std::string>& cards) {
  NodeView n;
  n.name = name;
  std::string list = "[";
  for (std::size_t i = 0; i < cards.size(); ++i) list += (i ? "," : "") + cards[i];
  n.annotations[kDevices] = list + "]";
  return n;
}
// S5's card: 100 sGPUs, 128 MiB, 100 % compute.
std::string Card(const std::string& uuid, const std::string& extra = "") {
  return R"({"uuid":")" + uuid +
         R"(","totalDevCount":100,"totalCompute":100,"totalVRam":128,"healthy":true)" + extra + "}";
}

ContainerView Sgpu(std::map<std::string, std::string> limits) { return Ctr("c", std::move(limits)); }
PodView SgpuPod(const std::string& name, std::map<std::string, std::string> limits,
                std::map<std::string, std::string> annotations = {}) {
  return Pod(name, {Sgpu(std::move(limits))}, {}, std::move(annotations));
}

std::string Error(const Backend& b, const NodeView& node) {
  auto devices = b.Discover(node);
  return devices ? "<no error>" : devices.error().message;
}

// Schedules `pod` and books it in the ledger as a bound pod is read back from its annotations (its class
// included).
void Place(FitCluster& c, PodView pod) {
  auto out = c.Run(pod);
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << Failure(out);
  pod.node_name = "n";
  pod.annotations.insert(out.annotations.begin(), out.annotations.end());
  auto read = AllocationFromAnnotations(pod, c.backends);
  ASSERT_TRUE(read && read->has_value()) << (read ? "no allocation" : read.error().message);
  c.state.AddPod(std::move(**read));
}

// ---- Metax-GPU: whole cards

TEST(MetaxGpu, CardsFromCapacity) {
  BackendPtr b = Make("Metax-GPU");
  auto one = b->Discover(GpuNode("test", 1)).value();
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].id, "test-metax-0");
  EXPECT_EQ(one[0].count, 1) << "upstream's test expects 100; its code sets 1";
  EXPECT_EQ(one[0].devmem, MiB(65536));
  EXPECT_EQ(one[0].devcore, Cores(100));
  EXPECT_EQ(one[0].type, "Metax-GPU");
  EXPECT_TRUE(b->Discover(GpuNode("test", 0)).value().empty());
  EXPECT_TRUE(b->Discover(NodeView{}).value().empty());
  NodeView bad = GpuNode("test", 1);
  bad.capacity["metax-tech.com/gpu"] = "two";
  EXPECT_THAT(Error(*b, bad), HasSubstr("metax-tech.com/gpu"));
  EXPECT_EQ(b->Publish(one).resources.at("metax-tech.com/gpu"), "1");
  EXPECT_EQ(b->Spec().keys.node_lock, "") << "no lock, as upstream";
}

TEST(MetaxGpu, WholeCardRequestsAndAdmission) {
  BackendPtr b = Make("Metax-GPU");
  EXPECT_EQ(Request(*b, Ctr("c", {{"metax-tech.com/gpu", "2"}})), Req("Metax-GPU", 2, 0, 100, 100));
  ContainerView requests = Ctr("c", {});
  requests.requests["metax-tech.com/gpu"] = "1";
  EXPECT_EQ(Request(*b, requests), Req("Metax-GPU", 1, 0, 100, 100));
  PodView pod;
  EXPECT_FALSE(b->Admit(requests, pod).value());
  ContainerView limited = Ctr("c", {{"metax-tech.com/gpu", "1"}});
  EXPECT_TRUE(b->Admit(limited, pod).value());
}

TEST(MetaxGpu, TopologyFigures) {
  const std::string eight =
      ParseTopology(R"({"1":0,"2":110,"3":270,"4":540,"5":580,"6":730,"7":930,"8":1240})").value();
  EXPECT_EQ(eight, "1:0,2:110,3:270,4:540,5:580,6:730,7:930,8:1240");
  const std::vector<std::int64_t> want = {0, 110, 270, 540, 580, 730, 930, 1240};
  for (std::int64_t k = 1; k <= 8; ++k) EXPECT_EQ(TopologyValue(eight, k), want[k - 1]) << k;
  EXPECT_EQ(TopologyValue(eight, 9), 0) << "a count the node gives no figure for reads as 0";
  EXPECT_THAT(ParseTopology("{nope").error().message, HasSubstr("JSON object of card count to integer"));
  EXPECT_THAT(ParseTopology(R"({"one":1})").error().message, HasSubstr("\"one\" is not a card count"));
  EXPECT_THAT(ParseTopology(R"({"1":1.5})").error().message, HasSubstr("not an integer"));
  // Discovery: the figures ride on each card; a malformed annotation is the node's discovery error.
  BackendPtr b = Make("Metax-GPU");
  auto cards = b->Discover(GpuNode("n", 2, {{kLossesAnnotation.data(), R"({"1":100,"2":200})"}})).value();
  EXPECT_EQ(*cards[1].CustomInfo("TopologyLosses"), "1:100,2:200");
  EXPECT_THAT(Error(*b, GpuNode("n", 2, {{kScoresAnnotation.data(), "[1,2]"}})),
              HasSubstr("annotation metax-tech.com/gpu.topology.scores"));
}

// Upstream's vectors: losses {1:100,2:200}, binpack, two cards -> 1800; scores {1:100,2:200}, spread, one
// card -> 1900. A node without figures scores 0 (quirk 2, copied: under spread it wins).
TEST(MetaxGpu, ScoreRanksNodesByTheirFigures) {
  const auto score = [](const std::string& annotation, const std::string& value, bool spread, int k) {
    BackendPtr b = Make("Metax-GPU");
    auto cards = b->Discover(GpuNode("n", 4, {{annotation, value}})).value();
    std::vector<std::vector<int>> containers(1);
    for (int i = 0; i < k; ++i) containers[0].push_back(i);
    std::vector<int> chosen = containers[0];
    std::vector<DeviceUsage> before(cards.size());
    AllocationView view{cards, cards, before, chosen, containers, {}, nullptr, spread, 0, {}};
    return b->AllocationScore(view);
  };
  EXPECT_EQ(score(kLossesAnnotation.data(), R"({"1":100,"2":200})", false, 2), 1800);
  EXPECT_EQ(score(kScoresAnnotation.data(), R"({"1":100,"2":200})", true, 1), 1900);
  EXPECT_EQ(score(kScoresAnnotation.data(), R"({"1":100,"2":200})", false, 1), 0) << "binpack reads losses";
  EXPECT_EQ(score(kLossesAnnotation.data(), R"({"1":100})", false, 2), 2000) << "no figure for 2: 0 lost";

  // Through the scheduler: binpack takes the node that loses least for two cards.
  FitCluster c;
  c.state.UpsertNode(GpuNode("a", 4, {{kLossesAnnotation.data(), R"({"2":300})"}}));
  c.state.UpsertNode(GpuNode("b", 4, {{kLossesAnnotation.data(), R"({"2":100})"}}));
  auto out = c.Run(Pod("p", {Ctr("c", {{"metax-tech.com/gpu", "2"}})}), {"a", "b"});
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << Failure(out, "a");
  EXPECT_EQ(out.node, "b");
}

// Quirk 1 fixed: two containers asking for whole cards each get one (upstream's same-device rule refused).
TEST(MetaxGpu, TwoContainersTakeACardEach) {
  FitCluster c;
  c.state.UpsertNode(GpuNode("n", 2));
  auto out =
      c.Run(Pod("p", {Ctr("a", {{"metax-tech.com/gpu", "1"}}), Ctr("b", {{"metax-tech.com/gpu", "1"}})}));
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << Failure(out);
  EXPECT_EQ(out.annotations.at("hami.io/metax-gpu-devices-allocated"),
            "n-metax-1,Metax-GPU,65536,100:;n-metax-0,Metax-GPU,65536,100:;");
  Hold(c.state, "x", "n", "Metax-GPU", "n-metax-0", 1, 65536, 100);
  EXPECT_EQ(Failure(c.Run(Pod("q", {Ctr("a", {{"metax-tech.com/gpu", "2"}})}))),
            "1/2 AllocatedCardsInsufficientRequest, 1/2 CardTimeSlicingExhausted");
}

// ---- Metax-SGPU

// S11, and the errors that name the annotation.
TEST(MetaxSgpu, S11Discovery) {
  BackendPtr b = Make("Metax-SGPU");
  auto cards = b->Discover(SgpuNode("n", {R"({"uuid":"GPU-123","model":"sgpu","totalDevCount":16,
      "totalCompute":100,"bdf":"0000:44:00.0","totalVRam":65536,"numa":1,"healthy":true,
      "qosPolicy":"fixed-share"})",
                                          R"({"UUID":"GPU-456","totalDevCount":8,"totalCompute":100,
      "totalVRam":32768,"numa":-1,"healthy":false,"qosPolicy":"burst-share","linkZone":2})"}))
                   .value();
  ASSERT_EQ(cards.size(), 2u);
  EXPECT_EQ(cards[0].id, "GPU-123");
  EXPECT_EQ(cards[0].index, 0);
  EXPECT_EQ(cards[1].index, 1);
  EXPECT_EQ(cards[0].count, 16);
  EXPECT_EQ(cards[1].count, 8);
  EXPECT_EQ(cards[0].devmem, MiB(65536));
  EXPECT_EQ(cards[1].devmem, MiB(32768));
  EXPECT_EQ(cards[0].devcore, Cores(100));
  EXPECT_EQ(cards[0].type, "Metax-SGPU");
  EXPECT_EQ(cards[0].numa, 1);
  EXPECT_EQ(cards[1].numa, -1);
  EXPECT_TRUE(cards[0].health);
  EXPECT_FALSE(cards[1].health);
  EXPECT_EQ(*cards[0].CustomInfo("QosPolicy"), "fixed-share");
  EXPECT_EQ(*cards[0].CustomInfo("Model"), "sgpu");
  EXPECT_EQ(cards[0].network, std::nullopt);
  EXPECT_EQ(cards[1].network, 2);
  // What the simulated plugin publishes reads back the same.
  NodeView again;
  again.annotations[kDevices] = b->Publish(cards).annotation.value();
  EXPECT_EQ(b->Discover(again).value(), cards);

  EXPECT_TRUE(b->Discover(NodeView{}).value().empty());
  EXPECT_TRUE(b->Discover(SgpuNode("n", {})).value().empty()) << "an empty list: no cards";
  for (const auto& [text, says] : std::vector<std::pair<std::string, std::string>>{
           {"{", "not valid JSON"},
           {R"({"uuid":"a"})", "want a JSON array"},
           {R"([{"totalDevCount":1}])", "card 0: missing the device id"},
           {R"([{"uuid":"a","totalVRam":1.5}])", "card 0 field \"totalVRam\""},
           {R"([{"uuid":"a","totalCompute":4294967296}])", "out of range"},
           {R"([{"uuid":"a","healthy":"yes"}])", "expected true or false"},
           {R"([{"uuid":"a,b:c"}])", "may not contain"},
           {R"([{"uuid":"a"},{"uuid":"a"}])", "listed twice"},
           {R"([{"uuid":"a","totalDevCount":-1}])", "negative"}}) {
    NodeView n;
    n.annotations[kDevices] = text;
    EXPECT_THAT(Error(*b, n), HasSubstr("annotation metax-tech.com/node-gpu-devices")) << text;
    EXPECT_THAT(Error(*b, n), HasSubstr(says)) << text;
  }
}

// S1, with errors where upstream asks nothing (docs/DECISIONS.md "MetaX").
TEST(MetaxSgpu, S1Requests) {
  BackendPtr b = Make("Metax-SGPU");
  const auto req = [&](std::map<std::string, std::string> limits) {
    return Request(*b, Sgpu(std::move(limits)));
  };
  EXPECT_EQ(req({{kCount, "1"}}), Req("Metax-SGPU", 1, 0, 100, 100));
  EXPECT_EQ(req({{kCount, "2"}}), Req("Metax-SGPU", 2, 0, 100, 100));
  EXPECT_EQ(req({{kCount, "1"}, {kCore, "30"}}), Req("Metax-SGPU", 1, 0, 100, 30));
  EXPECT_EQ(req({{kCount, "1"}, {kMem, "16"}}),
            Req("Metax-SGPU", 1, 16384, 0, 100));
  EXPECT_EQ(req({{kCount, "1"}, {kCore, "60"}, {kMem, "16"}}),
            Req("Metax-SGPU", 1, 16384, 0, 60));
  EXPECT_EQ(
      req({{kCount, "1"}, {kCore, "60"}, {kMem, "1024Mi"}}),
      Req("Metax-SGPU", 1, 1024, 0, 60));
  EXPECT_EQ(req({{kCount, "1"}, {kCore, "60"}, {kMem, "16Gi"}}),
            Req("Metax-SGPU", 1, 16384, 0, 60));
  // Quirk 3, copied: a unit or exponent means bytes, so 1k is less than a MiB: the whole card's memory.
  EXPECT_EQ(req({{kCount, "1"}, {kMem, "1k"}}), Req("Metax-SGPU", 1, 0, 100, 100));
  // Limits only: a count in the requests asks nothing.
  ContainerView requests = Ctr("c", {});
  requests.requests[kCount] = "1";
  EXPECT_FALSE(Request(*b, requests));
  for (const auto& [limits, says] : std::vector<std::pair<std::map<std::string, std::string>, std::string>>{
           {{{kCount, "1"}, {kMem, "2100001"}}, kMem},
           {{{kCount, "2200000000"}}, kCount},
           {{{kCount, "1"}, {kCore, "2200000000"}}, kCore},
           {{{kCount, "1"}, {kCore, "0.5"}}, kCore},
           {{{kCount, "1"}, {kMem, "1.5"}}, kMem}}) {
    auto r = b->RequestFor(Sgpu(limits));
    ASSERT_FALSE(r) << says;
    EXPECT_THAT(r.error().message, HasSubstr(says));
  }
}

// S2: the webhook's checks, in upstream's words, and its default QoS policy.
TEST(MetaxSgpu, S2Admission) {
  BackendPtr b = Make("Metax-SGPU");
  const auto admit = [&](std::map<std::string, std::string> limits, PodView& pod) {
    ContainerView c = Sgpu(std::move(limits));
    return b->Admit(c, pod);
  };
  PodView none;
  EXPECT_FALSE(admit({{kCore, "10"}}, none).value());
  EXPECT_TRUE(none.annotations.empty());
  PodView plain;
  EXPECT_TRUE(admit({{kCount, "1"}}, plain).value());
  EXPECT_EQ(plain.annotations.at(kQosAnnotation.data()), "best-effort");
  PodView burst = SgpuPod("p", {}, {{kQosAnnotation.data(), "burst-share"}});
  EXPECT_TRUE(admit({{kCount, "1"}}, burst).value());
  EXPECT_EQ(burst.annotations.at(kQosAnnotation.data()), "burst-share");
  const std::string qos_error =
      "metax-tech.com/sgpu-qos-policy must be set one of [best-effort, fixed-share, burst-share]";
  PodView wrong = SgpuPod("p", {}, {{kQosAnnotation.data(), "best-effortx"}});
  EXPECT_EQ(admit({{kCount, "1"}}, wrong).error().message, qos_error);
  PodView pair = SgpuPod("p", {}, {{kAppClassAnnotation.data(), "online"}});
  EXPECT_EQ(admit({{kCount, "2"}}, pair).error().message, "app-class pod must request single device");
  PodView cased = SgpuPod("p", {}, {{kAppClassAnnotation.data(), "oNLine"}});
  EXPECT_EQ(admit({{kCount, "1"}}, cased).error().message,
            "metax-tech.com/sgpu-app-class must be set one of [online, offline]");
  PodView offline =
      SgpuPod("p", {}, {{kAppClassAnnotation.data(), "offline"}, {kQosAnnotation.data(), "best-effortx"}});
  EXPECT_EQ(admit({{kCount, "1"}}, offline).error().message, qos_error);
  PodView online =
      SgpuPod("p", {}, {{kAppClassAnnotation.data(), "online"}, {kQosAnnotation.data(), "best-effortx"}});
  EXPECT_TRUE(admit({{kCount, "1"}}, online).value()) << "an online pod's QoS is not checked";
  PodView unreadable;
  EXPECT_THAT(admit({{kCount, "1"}, {kCore, "x"}}, unreadable).error().message,
              HasSubstr(kCore));
}

// S5: the reasons of the fit, one card of 100 sGPUs, 128 MiB and 100 % compute.
TEST(MetaxSgpuFit, S5Reasons) {
  const std::map<std::string, std::string> half = {{kCount, "1"}, {kMem, "64Mi"},
                                                   {kCore, "50"}};
  {
    FitCluster c;
    c.state.UpsertNode(SgpuNode("n", {Card("dev-0"), Card("dev-1")}));
    auto out = c.Run(SgpuPod("p", half));
    ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << Failure(out);
    EXPECT_EQ(out.annotations.at(kSgpuAllocated), "dev-1,Metax-SGPU,64,50:;");
  }
  const auto reason = [&](const std::string& card, std::map<std::string, std::string> limits,
                          std::map<std::string, std::string> annotations = {},
                          std::function<void(FitCluster&)> before = nullptr) {
    FitCluster c;
    c.state.UpsertNode(SgpuNode("n", {card}));
    if (before) before(c);
    return Failure(c.Run(SgpuPod("p", std::move(limits), std::move(annotations))));
  };
  const auto held = [](std::int32_t slots, std::int64_t mem, std::int64_t cores) {
    return [=](FitCluster& c) { Hold(c.state, "h", "n", "Metax-SGPU", "dev-0", slots, mem, cores); };
  };
  EXPECT_EQ(reason(Card("dev-0"), {{kCount, "1"}, {kMem, "129Mi"}}),
            "1/1 CardInsufficientMemory");
  EXPECT_EQ(reason(Card("dev-0"), half, {}, held(1, 0, 100)), "1/1 CardInsufficientCore");
  EXPECT_EQ(reason(R"({"uuid":"dev-0","totalDevCount":100,"totalCompute":100,"totalVRam":128})", half),
            "1/1 CardUnhealthy");
  EXPECT_EQ(reason(Card("dev-0", R"(,"totalDevCount":1)"), half, {}, held(1, 0, 0)),
            "1/1 CardTimeSlicingExhausted");
  EXPECT_EQ(reason(Card("dev-0"), {{kCount, "1"}, {kCore, "120"}}),
            "1/1 CardInsufficientCore")
      << "no clamp of cores above 100";
  EXPECT_EQ(reason(Card("dev-0"), {{kCount, "1"}, {kMem, "1Mi"}}, {},
                   held(1, 10, 0)),
            "1/1 ExclusiveDeviceAllocateConflict");
  EXPECT_EQ(reason(Card("dev-0"), half, {{"metax-tech.com/use-gpuuuid", "dev-9"}}), "1/1 CardUuidMismatch");
  EXPECT_EQ(reason(Card("dev-0"), half, {{"metax-tech.com/nouse-gpuuuid", "dev-0"}}), "1/1 CardUuidMismatch");
  EXPECT_EQ(reason(Card("dev-0"), {{kCount, "1"}, {kMem, "1Mi"},
                                   {kCore, "0"}},
                   {}, held(1, 0, 100)),
            "1/1 CardComputeUnitsExhausted");
  EXPECT_EQ(reason(Card("dev-0"), {{kCount, "2"}}), "NodeInsufficientDevice")
      << "more cards than the node has: refused before the cards are looked at, as upstream";
  EXPECT_EQ(reason(Card("dev-0") + "," + Card("dev-1"), {{kCount, "2"}}, {}, held(1, 0, 100)),
            "1/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientCore");
  EXPECT_EQ(reason(Card("dev-0"), half, {{std::string(keys::kGpuPolicy), "mutex"}}, held(1, 1, 1)),
            "1/1 ExclusiveDeviceAllocateConflict");
  // Health, app class and QoS come before the shared checks: an unhealthy card the UUIDs exclude too is
  // counted unhealthy, as upstream.
  EXPECT_EQ(reason(R"({"uuid":"dev-0","totalDevCount":100,"totalCompute":100,"totalVRam":128})", half,
                   {{"metax-tech.com/use-gpuuuid", "dev-9"}}),
            "1/1 CardUnhealthy");
}

// S9 and S3, then the same rules through the ledger: each card remembers its holders' classes.
TEST(MetaxSgpuFit, S9AppClasses) {
  const ClassHolders idle, online{1, 0}, offline{0, 1}, mixed{1, 1};
  EXPECT_TRUE(AppClassAllows(AppClass::kOnline, true, idle));
  EXPECT_FALSE(AppClassAllows(AppClass::kNone, false, online));
  EXPECT_FALSE(AppClassAllows(AppClass::kNone, false, offline));
  EXPECT_TRUE(AppClassAllows(AppClass::kNone, false, idle)) << "normal on normal";
  EXPECT_FALSE(AppClassAllows(AppClass::kOnline, false, idle)) << "online on normal";
  EXPECT_TRUE(AppClassAllows(AppClass::kOnline, false, mixed));
  EXPECT_FALSE(AppClassAllows(AppClass::kOffline, false, mixed));
  EXPECT_FALSE(AppClassAllows(AppClass::kOther, false, online)) << "an unknown class is no class";

  FitCluster c;
  c.state.UpsertNode(SgpuNode("n", {Card("dev-0")}));
  const std::map<std::string, std::string> small = {{kCount, "1"}, {kMem, "8Mi"},
                                                    {kCore, "10"}};
  Place(c, SgpuPod("on", small, {{kAppClassAnnotation.data(), "online"}}));
  EXPECT_EQ(Failure(c.Run(SgpuPod("normal", small))), "1/1 CardAppClassMismatch");
  EXPECT_EQ(Failure(c.Run(SgpuPod("off", small, {{kAppClassAnnotation.data(), "offline"}}))),
            "1/1 CardAppClassMismatch");
  EXPECT_EQ(c.Run(SgpuPod("on2", small, {{kAppClassAnnotation.data(), "online"}})).kind,
            FilterOutcome::Kind::kScheduled);
  c.state.RemovePod("uid-on");
  EXPECT_EQ(c.Run(SgpuPod("normal", small)).kind, FilterOutcome::Kind::kScheduled)
      << "the class left with its pod";
}

TEST(MetaxSgpuFit, S3QosPolicies) {
  CardClasses burst = {{EncodeClass(AppClass::kNone, Qos::kBurstShare), 1}};
  CardClasses best = {{EncodeClass(AppClass::kNone, Qos::kBestEffort), 2}};
  CardClasses online = {{EncodeClass(AppClass::kOnline, Qos::kNone), 1}};
  EXPECT_FALSE(QosAllows(Qos::kBestEffort, burst));
  EXPECT_TRUE(QosAllows(Qos::kBestEffort, best));
  EXPECT_TRUE(QosAllows(Qos::kBestEffort, online)) << "online holders set no policy";
  EXPECT_TRUE(QosAllows(Qos::kBestEffort, {}));

  // A card's policy is its holders', not a process-wide cache (quirk 4 fixed): it holds while they do,
  // then the idle card takes any.
  FitCluster c;
  c.state.UpsertNode(SgpuNode("n", {Card("dev-0", R"(,"qosPolicy":"burst-share")")}));
  const std::map<std::string, std::string> half = {{kCount, "1"}, {kMem, "8Mi"},
                                                   {kCore, "50"}};
  Place(c, SgpuPod("be", half, {{kQosAnnotation.data(), "best-effort"}}));
  EXPECT_EQ(Failure(c.Run(SgpuPod("bs", half, {{kQosAnnotation.data(), "burst-share"}}))),
            "1/1 CardQosPolicyMismatch");
  EXPECT_EQ(c.Run(SgpuPod("be2", half, {{kQosAnnotation.data(), "best-effort"}})).kind,
            FilterOutcome::Kind::kScheduled);
  c.state.RemovePod("uid-be");
  EXPECT_EQ(c.Run(SgpuPod("bs", half, {{kQosAnnotation.data(), "burst-share"}})).kind,
            FilterOutcome::Kind::kScheduled);
}

// S6: the MetaLink zones of an exclusive request.
TEST(MetaxSgpu, S6LinkZones) {
  const auto pick = [](std::vector<std::int32_t> zones, std::vector<std::string> ids, std::size_t want) {
    std::vector<std::string> out;
    for (std::size_t i : ChooseByLinkZone(zones, want)) out.push_back(ids[i]);
    return out;
  };
  EXPECT_THAT(pick({1, 1, 2}, {"1", "2", "5"}, 1), ElementsAre("5"));
  EXPECT_THAT(pick({1, 1, 2, 2, 2}, {"1", "2", "5", "6", "7"}, 2), ElementsAre("1", "2"));
  EXPECT_THAT(pick({1, 1, 2, 2, 2, 2}, {"1", "2", "5", "6", "7", "8"}, 4), ElementsAre("5", "6", "7", "8"));
  EXPECT_THAT(pick({1, 1, 2, 2, 2}, {"1", "2", "5", "6", "7"}, 4), ElementsAre("1", "2", "5", "6"));
  EXPECT_THAT(pick({0, 0, 0}, {"5", "6", "7"}, 2), ElementsAre("5", "6"));
  EXPECT_THAT(pick({0, 0, 1, 1}, {"3", "4", "7", "8"}, 2), ElementsAre("7", "8"));
  EXPECT_THAT(pick({0, 0, 1, 1, 1}, {"3", "4", "6", "7", "8"}, 4), ElementsAre("6", "7", "8", "3"));

  // Through the scheduler: an exclusive pair takes one zone's two idle cards.
  FitCluster c;
  c.state.UpsertNode(SgpuNode("n", {Card("GPU-1", R"(,"linkZone":1)"), Card("GPU-2", R"(,"linkZone":2)"),
                                    Card("GPU-3", R"(,"linkZone":1)"), Card("GPU-4", R"(,"linkZone":2)"),
                                    Card("GPU-5", R"(,"linkZone":2)")}));
  auto out = c.Run(SgpuPod("p", {{kCount, "2"}}));
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << Failure(out);
  const std::string& taken = out.annotations.at(kSgpuAllocated);
  EXPECT_THAT(taken, HasSubstr("GPU-1,"));
  EXPECT_THAT(taken, HasSubstr("GPU-3,"));
}

// S8 and S7: the exclusive score, and whether it is on.
TEST(MetaxSgpu, S8ExclusiveScore) {
  const auto cards = [](std::vector<std::pair<std::string, std::int32_t>> list) {
    static std::vector<std::string> ids;  // LinkCard holds views
    std::vector<LinkCard> out;
    ids.reserve(64);
    for (auto& [id, zone] : list) {
      ids.push_back(id);
      out.push_back(LinkCard{ids.back(), zone});
    }
    return out;
  };
  const auto z1 = [&](std::vector<std::string> ids) {
    std::vector<std::pair<std::string, std::int32_t>> l;
    for (auto& id : ids) l.emplace_back(id, 1);
    return cards(l);
  };
  EXPECT_EQ(ExclusiveScore(z1({"4"}), z1({"4"})), 0);
  EXPECT_EQ(ExclusiveScore(z1({"4"}), z1({"1", "2", "3", "4"})), -30);
  EXPECT_EQ(ExclusiveScore(z1({"3", "4"}), z1({"1", "2", "3", "4"})), 60);
  EXPECT_EQ(ExclusiveScore(cards({{"4", 1}, {"5", 2}}), cards({{"4", 1}, {"5", 2}})), 0);
  EXPECT_EQ(
      ExclusiveScore(z1({"1", "2", "3", "4"}), cards({{"1", 1}, {"2", 1}, {"3", 1}, {"4", 1}, {"5", 2}})),
      600);
}

TEST(MetaxSgpu, S7TopologyAwareness) {
  const auto score = [](bool setting, std::vector<std::int64_t> cores,
                        std::map<std::string, std::string> annotations) {
    VendorSettings settings;
    settings.Set("sgpuTopologyAware", setting);
    BackendPtr b = Make("Metax-SGPU", settings);
    const std::string zone = R"(,"linkZone":1)";
    auto cards = b->Discover(SgpuNode("n", {Card("GPU-1", zone), Card("GPU-2", zone), Card("GPU-3", zone)}))
                     .value();
    std::vector<DeviceUsage> before(cards.size());
    std::vector<std::vector<int>> containers;
    std::vector<DeviceRequest> requests;
    for (std::size_t c = 0; c < cores.size(); ++c) {
      containers.push_back({static_cast<int>(c)});
      requests.push_back(Req("Metax-SGPU", 1, 0, 100, cores[c]));
    }
    std::vector<const DeviceRequest*> per_container;
    for (const auto& r : requests) per_container.push_back(&r);
    std::vector<int> chosen;
    for (std::size_t c = 0; c < cores.size(); ++c) chosen.push_back(static_cast<int>(c));
    PodView pod = SgpuPod("p", {}, annotations);
    AllocationView view{cards, cards, before, chosen, containers, per_container, &pod, false, 0, {}};
    return b->AllocationScore(view);
  };
  // One exclusive card of three in one zone breaks two pairs: -20, weighed x10000.
  EXPECT_EQ(score(true, {100}, {}), -200000);
  EXPECT_EQ(score(false, {100}, {}), 0);
  EXPECT_EQ(score(true, {99}, {}), 0);
  EXPECT_NE(score(true, {99, 100}, {}), 0) << "a later container's exclusive card turns it on";
  EXPECT_NE(score(false, {100}, {{kTopologyAwareAnnotation.data(), "true"}}), 0) << "the pod overrides";
  EXPECT_EQ(score(true, {100}, {{kTopologyAwareAnnotation.data(), "F"}}), 0);
  EXPECT_EQ(score(true, {100}, {{kTopologyAwareAnnotation.data(), "maybe"}}), -200000)
      << "unreadable: the setting";
}

// S10 and the online choice: online pods prefer cards of few online pods and shun offline-only ones.
TEST(MetaxSgpu, S10OnlineScoreAndChoice) {
  EXPECT_EQ(OnlineScore({0, 0}), 0);
  EXPECT_EQ(OnlineScore({2, 0}), -40);
  EXPECT_EQ(OnlineScore({0, 2}), -200);
  EXPECT_EQ(OnlineScore({2, 2}), -44);
  const std::vector<ClassHolders> holders = {{0, 1}, {2, 0}, {1, 1}, {0, 3}, {1, 0}};
  EXPECT_THAT(ChooseForOnline(holders, 5), ElementsAre(4, 2, 1, 0, 3));
  EXPECT_THAT(ChooseForOnline(holders, 1), ElementsAre(4));
}

// Online pods take memory only: no compute is charged, checked or written; their class and the QoS of
// others do not meet.
TEST(MetaxSgpuFit, OnlinePodsTakeNoCompute) {
  FitCluster c;
  c.state.UpsertNode(SgpuNode("n", {Card("dev-0")}));
  Place(c, SgpuPod("off", {{kCount, "1"}, {kMem, "8Mi"}},
                   {{kAppClassAnnotation.data(), "offline"}}));  // all the compute (100 by default)
  auto out = c.Run(SgpuPod("on", {{kCount, "1"}, {kMem, "8Mi"},
                                  {kCore, "50"}},
                           {{kAppClassAnnotation.data(), "online"}}));
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << Failure(out);
  EXPECT_EQ(out.annotations.at(kSgpuAllocated), "dev-0,Metax-SGPU,8,0:;");
  EXPECT_EQ(out.annotations.at("metax-tech.com/gpu-devices-allocated"), R"([[{"uuid":"dev-0","vRam":8}]])");
}

TEST(MetaxSgpu, AnnotationsForThePlugin) {
  BackendPtr b = Make("Metax-SGPU");
  PodVendorDevices devices = {
      {},
      {ContainerDevice{0, "GPU-a0", "Metax-SGPU", MiB(10), Cores(50), std::nullopt},
       ContainerDevice{1, "GPU-a1", "Metax-SGPU", MiB(1024), Cores(30), std::nullopt}}};
  Annotations out;
  const TimePoint now = std::chrono::system_clock::from_time_t(1716199325) + std::chrono::nanoseconds(7);
  b->Annotate(PodView{}, devices, {}, now, out);
  EXPECT_EQ(out.at(kSgpuAllocated), ";GPU-a0,Metax-SGPU,10,50:GPU-a1,Metax-SGPU,1024,30:;");
  EXPECT_EQ(out.at("hami.io/metax-sgpu-devices-to-allocate"), out.at(kSgpuAllocated));
  EXPECT_EQ(out.at("metax-tech.com/gpu-devices-allocated"),
            R"([[],[{"uuid":"GPU-a0","compute":50,"vRam":10},{"uuid":"GPU-a1","compute":30,"vRam":1024}]])");
  EXPECT_EQ(out.at("metax-tech.com/predicate-time"), "1716199325000000007");
}

TEST(Metax, SettingsAndFlags) {
  VendorSettings renamed;
  renamed.Set("resourceCountName", std::string("example.com/gpu"))
      .Set("resourceVCountName", std::string("example.com/sgpu"))
      .Set("resourceVMemoryName", std::string("example.com/vmem"))
      .Set("resourceVCoreName", std::string("example.com/vcore"));
  EXPECT_EQ(Make("Metax-GPU", renamed)->Spec().resources.count, "example.com/gpu");
  const ResourceNames sgpu = Make("Metax-SGPU", renamed)->Spec().resources;
  EXPECT_EQ(sgpu.count, "example.com/sgpu");
  EXPECT_EQ(sgpu.memory, "example.com/vmem");
  EXPECT_EQ(sgpu.cores, "example.com/vcore");
  EXPECT_EQ(sgpu.memory_factor, 1024) << "quota counts vmemory in GiB";
  VendorSettings empty;
  empty.Set("resourceVCountName", std::string(""));
  EXPECT_THAT(Module().create(empty).error().message, HasSubstr("metax.resourceVCountName"));
  std::vector<std::string> flags;
  for (const VendorFlag& f : Module().flags) {
    EXPECT_EQ(f.effect, VendorFlag::Effect::kNoEffect) << f.name;
    flags.push_back(f.name);
  }
  EXPECT_THAT(flags, ElementsAre("metax-name", "metax-vcount", "metax-vcore", "metax-vmemory",
                                 "sgpu-topology-aware"));
  EXPECT_EQ(Make("Metax-SGPU")->Spec().keys.node_lock, "hami.io/mutex.lock");
}

}  // namespace
}  // namespace hami
