// Kunlunxin in isolation and through the scheduler: whole XPUs from capacity (`kunlun`), vXPUs from the
// register annotation (`XPU`), the interconnect's wing selection, the packing score, vXPU size rounding and
// same-size sharing, requests, admission and pod annotations. Vectors K1-K8 of HAMi v2.10's Kunlunxin
// backend, with the departures of docs/DECISIONS.md "Kunlunxin" (wings by card index, unreadable quantities
// are errors, each card's own refusal reason).
#include "backends/kunlun/kunlun.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "backends/common.h"
#include "core/codec/node_devices.h"
#include "core/scheduler.h"
#include "tests/support/builders.h"

namespace hami {
namespace {

using ::testing::HasSubstr;
using testing::Ctr;
using testing::Failure;
using testing::Hold;
using testing::Pod;
using testing::Req;
using testing::Request;
using Indexes = std::vector<std::int32_t>;

const TimePoint kNow = std::chrono::system_clock::from_time_t(1716199325);

BackendPtr Make(std::string_view vendor, const VendorSettings& settings = {}) {
  auto all = backends::kunlun::Module().create(settings).value();
  for (auto& b : all) {
    if (b->Vendor() == vendor) return std::move(b);
  }
  throw std::invalid_argument("no backend " + std::string(vendor));
}

Indexes AllBut(const Indexes& taken) {
  Indexes out;
  for (std::int32_t i = 0; i < 8; ++i) {
    if (std::find(taken.begin(), taken.end(), i) == taken.end()) out.push_back(i);
  }
  return out;
}

Indexes Wings(const Indexes& usable, std::int32_t want) {
  return backends::kunlun::SelectByWings(usable, want);
}

TEST(Kunlun, K1WholeCardsTakeTheWingTheyFillBest) {
  EXPECT_EQ(Wings(AllBut({}), 8), (Indexes{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(Wings(AllBut({0, 1, 2, 3, 5}), 8), Indexes{});
  EXPECT_EQ(Wings(AllBut({0, 1, 2, 3, 5}), 2), (Indexes{4, 6}));
  EXPECT_EQ(Wings(AllBut({0, 1, 2, 3, 5}), 1), (Indexes{4}));
  EXPECT_EQ(Wings(AllBut({6, 7}), 1), (Indexes{4}));
  EXPECT_EQ(Wings({3, 7}, 2), (Indexes{3, 7}));
  EXPECT_EQ(Wings({0, 1, 4, 5, 6}, 4), (Indexes{0, 1, 4, 5}));
  EXPECT_EQ(Wings({0, 1, 2, 4, 5, 7}, 4), (Indexes{0, 1, 4, 5}));
  EXPECT_EQ(Wings({0, 1, 3, 4, 5, 7}, 4), (Indexes{0, 1, 4, 5}));
  EXPECT_EQ(Wings(AllBut({}), 1), (Indexes{0}));
  EXPECT_EQ(Wings(AllBut({4, 5, 6, 7}), 4), (Indexes{0, 1, 2, 3}));
  EXPECT_EQ(Wings(AllBut({}), 3), Indexes{});
  for (std::int32_t odd : {0, 5, 6, 7, 9}) EXPECT_EQ(Wings(AllBut({}), odd), Indexes{}) << odd;
}

TEST(Kunlun, K2AcrossTheWingsTwinsAndLinkedGroups) {
  EXPECT_EQ(Wings({0, 4}, 2), (Indexes{0, 4}));
  EXPECT_EQ(Wings({1, 6}, 2), Indexes{}) << "no twins";
  EXPECT_EQ(Wings({0, 1, 4, 5}, 4), (Indexes{0, 1, 4, 5}));
  EXPECT_EQ(Wings({1, 2, 5, 6}, 4), (Indexes{1, 2, 5, 6}));
  EXPECT_EQ(Wings({0, 1, 2, 5, 6}, 4), (Indexes{1, 2, 5, 6}));
  // Six usable: the group whose two leftover cards are linked, else the last group that fits.
  EXPECT_EQ(Wings({0, 2, 3, 4, 6, 7}, 4), (Indexes{2, 3, 6, 7})) << "0-4 are twins";
  EXPECT_EQ(Wings({0, 1, 3, 4, 5, 6}, 4), (Indexes{0, 1, 4, 5})) << "3-6 are not linked: the last that fits";
  EXPECT_EQ(Wings({0, 1, 2, 5, 6, 7}, 4), (Indexes{1, 2, 5, 6})) << "0-7 are not linked";
}

TEST(Kunlun, K3VxpusShareCardsOfTheirOwnSize) {
  // The usable cards for a 24576 MiB vXPU in each of the reference's layouts.
  EXPECT_EQ(Wings(AllBut({5}), 4), (Indexes{0, 1, 2, 3}));
  EXPECT_EQ(Wings(AllBut({3}), 4), (Indexes{4, 5, 6, 7}));
  EXPECT_EQ(Wings(AllBut({2}), 1), (Indexes{0}));
  EXPECT_EQ(Wings(AllBut({3}), 2), (Indexes{0, 1}));
}

TEST(Kunlun, K2K8TheWingScore) {
  using backends::kunlun::WingScore;
  EXPECT_EQ(WingScore({{0}}, {{0, 1}}), 3000);
  EXPECT_EQ(WingScore({{0}}, {{4}}), 2000);
  EXPECT_EQ(WingScore({{0, 1}}, {{0}}), 1000);
  EXPECT_EQ(WingScore({{0, 1, 2, 3}}, {{0}}), 0);
  EXPECT_EQ(WingScore({{0, 1, 2, 3}}, {{0, 1, 2, 3, 4, 5, 6, 7}}), 3000);
  EXPECT_EQ(WingScore({}, {{0}}), 0);
  EXPECT_EQ(WingScore({{3, 4, 5, 6, 7}}, {{0}}), 1000);
}

TEST(Kunlun, K6VxpuSizes) {
  using backends::kunlun::RoundToSize;
  for (auto [in, out] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {0, 24576}, {24576, 24576}, {24577, 49152}, {49152, 49152}, {49153, 98304}, {200000, 98304}}) {
    EXPECT_EQ(RoundToSize(in), out) << in;
  }
}

TEST(Kunlun, WholeCardsFromCapacity) {
  BackendPtr b = Make("kunlun");
  NodeView n;
  n.name = "n1";
  n.capacity["kunlunxin.com/xpu"] = "8";
  auto devices = b->Discover(n).value();
  ASSERT_EQ(devices.size(), 8u);
  EXPECT_EQ(devices[0].id, "n1-kunlun-0");
  EXPECT_EQ(devices[7].id, "n1-kunlun-7");
  EXPECT_EQ(devices[3].numa, 0);
  EXPECT_EQ(devices[4].numa, 1);
  EXPECT_EQ(devices[0].devmem, MiB(98304));
  EXPECT_EQ(devices[0].type, "kunlun");
  EXPECT_TRUE(devices[0].health);
  EXPECT_EQ(b->Publish(devices).resources.at("kunlunxin.com/xpu"), "8");

  n.capacity["kunlunxin.com/xpu"] = "0";
  EXPECT_TRUE(b->Discover(n).value().empty()) << "no cards left: none are kept";
  n.capacity["kunlunxin.com/xpu"] = "lots";
  EXPECT_THAT(b->Discover(n).error().message, HasSubstr("kunlunxin.com/xpu"));
  n.capacity["kunlunxin.com/xpu"] = "2Gi";
  EXPECT_THAT(b->Discover(n).error().message, HasSubstr("more than the 1024 a node can have"));
}

TEST(Kunlun, VxpusFromTheRegisterAnnotation) {
  BackendPtr b = Make("XPU");
  NodeView n;
  n.name = "n1";
  EXPECT_TRUE(b->Discover(n).value().empty());
  n.annotations["hami.io/node-register-xpu"] =
      R"([{"id":"xpu-0","index":0,"count":1,"devmem":98304,"devcore":100,"type":"XPU","health":true}])";
  auto devices = b->Discover(n).value();
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0].id, "xpu-0");
  n.annotations["hami.io/node-register-xpu"] = "not-json";
  EXPECT_THAT(b->Discover(n).error().message, HasSubstr("hami.io/node-register-xpu"));
  EXPECT_EQ(b->Spec().keys.handshake, "hami.io/node-handshake-xpu");
  EXPECT_EQ(b->Spec().keys.node_lock, "hami.io/mutex.lock");
  EXPECT_EQ(b->Spec().resources.count, "kunlunxin.com/vxpu");
  EXPECT_EQ(b->Spec().resources.memory, "kunlunxin.com/vxpu-memory");
  EXPECT_TRUE(b->Spec().resources.cores.empty());
}

TEST(Kunlun, K6Requests) {
  BackendPtr xpu = Make("XPU");
  EXPECT_FALSE(Request(*xpu, Ctr("c", {})));
  EXPECT_EQ(Request(*xpu, Ctr("c", {{"kunlunxin.com/vxpu", "1"}})), Req("XPU", 1, 98304, 100, 100));
  ContainerView two = Ctr("c", {{"kunlunxin.com/vxpu", "2"}});
  two.requests["kunlunxin.com/vxpu-memory"] = "24576";
  EXPECT_EQ(Request(*xpu, two), Req("XPU", 2, 24576, 0, 25));
  EXPECT_EQ(Request(*xpu, Ctr("c", {{"kunlunxin.com/vxpu", "1"}, {"kunlunxin.com/vxpu-memory", "30000"}})),
            Req("XPU", 1, 49152, 0, 50));
  EXPECT_EQ(Request(*xpu, Ctr("c", {{"kunlunxin.com/vxpu", "1"}, {"kunlunxin.com/vxpu-memory", "0"}})),
            Req("XPU", 1, 24576, 0, 25))
      << "0 MiB is a quarter card, as upstream";
  auto bad = xpu->RequestFor(Ctr("c", {{"kunlunxin.com/vxpu", "1"}, {"kunlunxin.com/vxpu-memory", "1.5"}}));
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().message, HasSubstr("kunlunxin.com/vxpu-memory"));

  BackendPtr whole = Make("kunlun");
  EXPECT_EQ(Request(*whole, Ctr("c", {{"kunlunxin.com/xpu", "2"}})), Req("kunlun", 2, 0, 100, 100));
}

TEST(Kunlun, K6AdmissionWritesTheVxpuSize) {
  BackendPtr xpu = Make("XPU");
  PodView pod;
  ContainerView none = Ctr("c", {{"kunlunxin.com/vxpu-memory", "30000"}});
  EXPECT_FALSE(xpu->Admit(none, pod).value());
  ContainerView count_only = Ctr("c", {{"kunlunxin.com/vxpu", "1"}});
  EXPECT_TRUE(xpu->Admit(count_only, pod).value());
  EXPECT_FALSE(count_only.limits.contains("kunlunxin.com/vxpu-memory"));
  ContainerView sized = Ctr("c", {{"kunlunxin.com/vxpu", "1"}, {"kunlunxin.com/vxpu-memory", "30000"}});
  EXPECT_TRUE(xpu->Admit(sized, pod).value());
  EXPECT_EQ(sized.limits.at("kunlunxin.com/vxpu-memory"), "49152");
  EXPECT_EQ(sized.requests.at("kunlunxin.com/vxpu-memory"), "49152");
  ContainerView bad = Ctr("c", {{"kunlunxin.com/vxpu", "1"}, {"kunlunxin.com/vxpu-memory", "-1"}});
  EXPECT_THAT(xpu->Admit(bad, pod).error().message, HasSubstr("kunlunxin.com/vxpu-memory"));

  BackendPtr whole = Make("kunlun");
  ContainerView cards = Ctr("c", {{"kunlunxin.com/xpu", "2"}});
  EXPECT_TRUE(whole->Admit(cards, pod).value());
}

TEST(Kunlun, AnnotationsNameTheCardIndexes) {
  BackendPtr whole = Make("kunlun");
  PodVendorDevices devices{
      {ContainerDevice{0, "n1-kunlun-0", "kunlun", MiB(98304), Cores(100), std::nullopt}},
      {ContainerDevice{4, "n1-kunlun-4", "kunlun", MiB(98304), Cores(100), std::nullopt},
       ContainerDevice{5, "n1-kunlun-5", "kunlun", MiB(98304), Cores(100), std::nullopt}}};
  Annotations out;
  whole->Annotate(PodView{}, devices, {}, kNow, out);
  EXPECT_EQ(out.at("hami.io/kunlun-allocated"),
            "n1-kunlun-0,kunlun,98304,100:;n1-kunlun-4,kunlun,98304,100:n1-kunlun-5,kunlun,98304,100:;");
  EXPECT_EQ(out.at("BAIDU_COM_DEVICE_IDX"), "4,5") << "the last container with cards";
  EXPECT_EQ(out.size(), 2u);

  BackendPtr xpu = Make("XPU");
  Annotations shared;
  xpu->Annotate(PodView{}, {{ContainerDevice{0, "xpu-0", "XPU", MiB(24576), Cores(25), std::nullopt}}}, {},
                kNow, shared);
  EXPECT_EQ(shared.at("hami.io/xpu-devices-allocated"), "xpu-0,XPU,24576,25:;");
  EXPECT_EQ(shared.at("hami.io/xpu-devices-to-allocate"), "xpu-0,XPU,24576,25:;");
}

TEST(Kunlun, TheSectionNamesTheResources) {
  VendorSettings s;
  s.Set("resourceCountName", "example.com/xpu")
      .Set("resourceVCountName", "example.com/vxpu")
      .Set("resourceVMemoryName", "example.com/vxpu-mem");
  EXPECT_EQ(Make("kunlun", s)->Spec().resources.count, "example.com/xpu");
  EXPECT_EQ(Make("XPU", s)->Spec().resources.count, "example.com/vxpu");
  EXPECT_EQ(Make("XPU", s)->Spec().resources.memory, "example.com/vxpu-mem");
  VendorSettings empty;
  empty.Set("resourceVCountName", "");
  auto err = backends::kunlun::Module().create(empty);
  ASSERT_FALSE(err);
  EXPECT_EQ(err.error().message, "kunlun.resourceVCountName: must not be empty");
}

TEST(Kunlun, AWholeXpuPodWaitsOnNoPlugin) {
  // No to-allocate list is handed to the kunlun plugin: `allocating` is not a pod in flight, as it is for
  // a vXPU pod (whose plugin answers).
  const Backends backends = testing::BuiltinBackends();
  for (const auto& [key, in_flight] : std::vector<std::pair<std::string, bool>>{
           {"hami.io/kunlun-allocated", false}, {"hami.io/xpu-devices-allocated", true}}) {
    PodView pod = Pod("p", {Ctr("c", {})});
    pod.annotations = {{"hami.io/vgpu-node", "n1"}, {"hami.io/bind-phase", "allocating"},
                       {key, "n1-kunlun-0,kunlun,98304,100:;"}};
    auto a = AllocationFromAnnotations(pod, backends).value();
    ASSERT_TRUE(a) << key;
    EXPECT_EQ(a->in_flight, in_flight) << key;
  }
}

// --- through the scheduler ------------------------------------------------------------------------------

struct Cluster : testing::FitCluster {
  void WholeNode(const std::string& name, int cards = 8) {
    NodeView n;
    n.name = name;
    n.capacity["kunlunxin.com/xpu"] = std::to_string(cards);
    state.UpsertNode(n);
  }
  void VxpuNode(const std::string& name, int cards = 8, bool healthy = true) {
    NodeView n;
    n.name = name;
    std::vector<DeviceInfo> devices;
    for (int i = 0; i < cards; ++i) {
      DeviceInfo d = testing::Gpu("xpu-" + std::to_string(i), i, 98304, 1, "XPU");
      d.health = healthy;
      devices.push_back(d);
    }
    n.annotations["hami.io/node-register-xpu"] = codec::EncodeDeviceManifest(devices);
    n.allocatable["kunlunxin.com/vxpu"] = std::to_string(cards);
    state.UpsertNode(n);
  }
};

PodView XpuPod(int count, std::int64_t memory = 0, std::map<std::string, std::string> annotations = {}) {
  std::map<std::string, std::string> limits{{"kunlunxin.com/vxpu", std::to_string(count)}};
  if (memory > 0) limits["kunlunxin.com/vxpu-memory"] = std::to_string(memory);
  return Pod("p", {Ctr("xpu", std::move(limits))}, {}, std::move(annotations));
}

PodView WholePod(int count, std::map<std::string, std::string> annotations = {}) {
  return Pod("p", {Ctr("xpu", {{"kunlunxin.com/xpu", std::to_string(count)}})}, {}, std::move(annotations));
}

std::vector<std::string> Chosen(const FilterOutcome& out, const std::string& vendor) {
  std::vector<std::string> ids;
  for (const auto& d : out.devices.at(vendor).at(0)) ids.push_back(d.uuid);
  return ids;
}


TEST(KunlunFit, K5VxpusOfOneSizeShareACardAndMutexRefusesThem) {
  Cluster c;
  c.VxpuNode("n");
  for (int i = 0; i < 8; ++i) {
    const std::string id = "xpu-" + std::to_string(i);
    Hold(c.state, "h" + std::to_string(i), "n", "XPU", id, 1, 24576, 25);
  }
  auto out = c.Run(XpuPod(1, 24576));
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << Failure(out);
  EXPECT_EQ(Failure(c.Run(XpuPod(1, 24576, {{"hami.io/gpu-scheduler-policy", "mutex"}}))),
            "8/8 ExclusiveDeviceAllocateConflict");
  EXPECT_EQ(Failure(c.Run(XpuPod(1, 49152))), "8/8 CardSizeMismatch") << "a half beside quarters";
}

TEST(KunlunFit, K3SameSizeCardsOnTheBestWing) {
  Cluster c;
  c.VxpuNode("n");
  Hold(c.state, "a", "n", "XPU", "xpu-1", 2, 49152, 50);  // two quarters (the first container holds both)
  Hold(c.state, "b", "n", "XPU", "xpu-2", 1, 24576, 25);
  Hold(c.state, "c", "n", "XPU", "xpu-3", 1, 49152, 50);  // a half
  Hold(c.state, "d", "n", "XPU", "xpu-6", 1, 24576, 25);
  auto out = c.Run(XpuPod(2, 24576));
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << Failure(out);
  EXPECT_EQ(Chosen(out, "XPU"), (std::vector<std::string>{"xpu-0", "xpu-1"}));
}

TEST(KunlunFit, K5UuidsFromEitherPairOfKeys) {
  Cluster c;
  c.VxpuNode("n");
  auto legacy = c.Run(XpuPod(1, 0, {{"baidu.com/use-gpuuuid", "xpu-5"}}));
  ASSERT_EQ(legacy.kind, FilterOutcome::Kind::kScheduled) << Failure(legacy);
  EXPECT_EQ(Chosen(legacy, "XPU"), std::vector<std::string>{"xpu-5"});
  auto ours = c.Run(XpuPod(1, 0, {{"hami.io/use-xpu-uuid", "xpu-3"}}));
  ASSERT_EQ(ours.kind, FilterOutcome::Kind::kScheduled) << Failure(ours);
  EXPECT_EQ(Chosen(ours, "XPU"), std::vector<std::string>{"xpu-3"});
  EXPECT_THAT(Failure(c.Run(XpuPod(1, 0, {{"hami.io/use-xpu-uuid", "xpu-99"}}))),
              HasSubstr("CardUuidMismatch"));
  const std::map<std::string, std::string> both{{"hami.io/use-xpu-uuid", "xpu-3"},
                                                {"baidu.com/use-gpuuuid", "xpu-4"}};
  EXPECT_THAT(Failure(c.Run(XpuPod(1, 0, both))), HasSubstr("8/8 CardUuidMismatch"))
      << "a card must pass both pairs";
}

TEST(KunlunFit, WholeCardsOnTheWingsAndCountsTheInterconnectCannotTake) {
  Cluster c;
  c.WholeNode("n");
  for (int i : {0, 1, 2, 3, 5}) {
    const std::string id = "n-kunlun-" + std::to_string(i);
    Hold(c.state, "h" + std::to_string(i), "n", "kunlun", id, 1, 98304, 100);
  }
  auto two = c.Run(WholePod(2));
  ASSERT_EQ(two.kind, FilterOutcome::Kind::kScheduled) << Failure(two);
  EXPECT_EQ(Chosen(two, "kunlun"), (std::vector<std::string>{"n-kunlun-4", "n-kunlun-6"}));
  EXPECT_EQ(Failure(c.Run(WholePod(3))), "1/8 NumaNotFit, 5/8 CardInsufficientMemory")
      << "three cards are usable, but the interconnect takes no three";
  EXPECT_EQ(Failure(c.Run(WholePod(4))),
            "3/8 AllocatedCardsInsufficientRequest, 5/8 CardInsufficientMemory");
}

TEST(KunlunFit, K7TheNodeThatClosesAGapWinsUnderBinpack) {
  for (const char* policy : {"binpack", "spread"}) {
    Cluster c;
    c.WholeNode("idle");
    c.WholeNode("busy");
    for (int i = 3; i < 8; ++i) {
      const std::string id = "busy-kunlun-" + std::to_string(i);
      Hold(c.state, "h" + std::to_string(i), "busy", "kunlun", id, 1, 98304, 100);
    }
    auto out = c.Run(WholePod(1), {"idle", "busy"}, policy);
    ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << policy;
    // Binpack: the busy node, on card 0 (1000 over the idle node's 0); spread: the idle node.
    EXPECT_EQ(out.node, std::string(policy) == "binpack" ? "busy" : "idle") << policy;
  }
}

}  // namespace
}  // namespace hami
