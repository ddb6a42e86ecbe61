// AMD in isolation and through the scheduler: discovery behind the capacity gate, requests and admission
// from the limits, the share of a card's compute units, type and UUID selectors, the quota in percent, and
// pod annotations. The test vectors of HAMi v2.10's AMD backend, with the departures of docs/DECISIONS.md
// "AMD" (every container keeps its place in the allocation, unreadable values are errors, the quota counts
// percent on both sides).
#include "backends/amd/amd.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/admission.h"
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

constexpr const char* kRegister = "hami.io/node-amd-register";
constexpr const char* kAllocated = "hami.io/amd-devices-allocated";

BackendPtr Make(const VendorSettings& settings = {}) {
  auto all = backends::amd::Module().create(settings).value();
  return std::move(all.at(0));
}

DeviceInfo Card(std::string id, std::int32_t index, std::int64_t mem, std::int32_t units,
                std::int32_t count = 4, std::string type = "AMD-Instinct-MI300X") {
  DeviceInfo d = testing::Gpu(std::move(id), index, mem, count, std::move(type));
  d.devcore = Cores(units);
  return d;
}

ContainerView AmdCtr(int count, std::int64_t mem = 0, int cores = 0) {
  std::map<std::string, std::string> limits{{"amd.com/gpu", std::to_string(count)}};
  if (mem > 0) limits["amd.com/gpumem"] = std::to_string(mem);
  if (cores > 0) limits["amd.com/gpucores"] = std::to_string(cores);
  return Ctr("amd", std::move(limits));
}

PodView AmdPod(int count, std::int64_t mem = 0, int cores = 0,
               std::map<std::string, std::string> annotations = {}) {
  return Pod("p", {AmdCtr(count, mem, cores)}, {}, std::move(annotations));
}

TEST(Amd, TheSpecNamesHamisKeysAndResources) {
  const BackendPtr b = Make();
  const BackendSpec& s = b->Spec();
  EXPECT_EQ(s.vendor, "AMD");
  EXPECT_EQ(s.keys.register_annotation, kRegister);
  EXPECT_TRUE(s.keys.handshake.empty());
  EXPECT_EQ(s.keys.allocated, kAllocated);
  EXPECT_EQ(s.keys.to_allocate, "hami.io/amd-devices-to-allocate");
  EXPECT_EQ(s.keys.node_lock, "hami.io/mutex.lock");
  EXPECT_EQ(s.keys.use_uuid, "amd.com/use-gpu-uuid");
  EXPECT_EQ(s.keys.nouse_uuid, "amd.com/nouse-gpu-uuid");
  EXPECT_EQ(s.keys.use_type, "amd.com/use-gputype");
  EXPECT_EQ(s.keys.nouse_type, "amd.com/nouse-gputype");
  EXPECT_EQ(s.resources.count, "amd.com/gpu");
  EXPECT_EQ(s.resources.memory, "amd.com/gpumem");
  EXPECT_EQ(s.resources.cores, "amd.com/gpucores");
  EXPECT_TRUE(s.resources.cores_share_of_units);
  EXPECT_EQ(s.health, HealthRule::kAlwaysHealthy);

  VendorSettings names;
  names.Set("resourceCountName", "example.com/gpu").Set("resourceCoreName", "example.com/cu");
  EXPECT_EQ(Make(names)->Spec().resources.count, "example.com/gpu");
  EXPECT_EQ(Make(names)->Spec().resources.cores, "example.com/cu");
  VendorSettings factor;
  factor.Set("memoryFactor", std::int64_t{2});
  EXPECT_FALSE(backends::amd::Module().create(factor)) << "HAMi's AMD memory is MiB, no factor";
}

TEST(Amd, AdmissionFromTheLimits) {
  BackendPtr b = Make();
  PodView pod;
  const auto admit = [&](ContainerView c) { return b->Admit(c, pod); };
  EXPECT_TRUE(admit(Ctr("c", {{"amd.com/gpu", "2"}})).value());
  EXPECT_TRUE(admit(Ctr("c", {{"amd.com/gpumem", "4096"}})).value()) << "memory alone routes the pod to us";
  EXPECT_TRUE(admit(Ctr("c", {{"amd.com/gpucores", "30"}})).value()) << "cores alone too";
  ContainerView requests_only = Ctr("c", {});
  requests_only.requests["amd.com/gpu"] = "1";
  EXPECT_FALSE(admit(requests_only).value()) << "limits only";
  for (const char* bad : {"0", "101", "1.5", "lots"}) {
    auto r = admit(Ctr("c", {{"amd.com/gpu", "1"}, {"amd.com/gpucores", bad}}));
    ASSERT_FALSE(r) << bad;
    EXPECT_THAT(r.error().message,
                HasSubstr("amd.com/gpucores must be an integer percentage between 1 and 100"));
  }
  EXPECT_TRUE(admit(Ctr("c", {{"amd.com/gpu", "1"}, {"amd.com/gpumem", "4096"}})).value());
  EXPECT_TRUE(admit(Ctr("c", {{"amd.com/gpucores", "101"}})).value()) << "no count: nothing to check";
  EXPECT_FALSE(admit(Ctr("c", {})).value());
  EXPECT_FALSE(admit(Ctr("c", {{"nvidia.com/gpu", "1"}})).value());
}

TEST(Amd, DiscoveryWhileTheCapacityCountsCards) {
  BackendPtr b = Make();
  NodeView n;
  n.name = "n1";
  EXPECT_TRUE(b->Discover(n).value().empty()) << "no plugin: no devices, no error";
  n.annotations[kRegister] =
      R"([{"id":"GPU-0","index":0,"count":1,"devmem":8192,"devcore":100,"type":"amd","numa":0,
           "health":true}])";
  EXPECT_TRUE(b->Discover(n).value().empty()) << "no capacity: the plugin is not running";
  n.capacity["amd.com/gpu"] = "1";
  auto devices = b->Discover(n).value();
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0].id, "GPU-0");
  EXPECT_EQ(devices[0].devmem, MiB(8192));
  EXPECT_EQ(devices[0].devcore, Cores(100));
  EXPECT_EQ(devices[0].type, "amd");
  EXPECT_TRUE(devices[0].health);
  n.capacity["amd.com/gpu"] = "0";
  EXPECT_TRUE(b->Discover(n).value().empty()) << "capacity 0: the cards are withheld (upstream: unhealthy)";
  n.capacity["amd.com/gpu"] = "1.5";
  EXPECT_THAT(b->Discover(n).error().message, HasSubstr("amd.com/gpu"));
  n.capacity["amd.com/gpu"] = "2";
  n.annotations[kRegister] = "[]";
  EXPECT_TRUE(b->Discover(n).value().empty()) << "an empty list is no devices (upstream: an error)";
  n.annotations[kRegister] = "{";
  EXPECT_THAT(b->Discover(n).error().message, HasSubstr(kRegister));
}

TEST(Amd, ThePluginPublishesEachModelsComputeUnits) {
  using backends::amd::ComputeUnits;
  EXPECT_EQ(ComputeUnits("AMD Instinct MI300X VF"), 304);
  EXPECT_EQ(ComputeUnits("amd-instinct-mi210"), 104);
  EXPECT_EQ(ComputeUnits("AMD-MI250X"), 110);
  EXPECT_EQ(ComputeUnits("AMD Radeon"), 0);
  BackendPtr b = Make();
  std::vector<DeviceInfo> cards{Card("a", 0, 65536, 100, 4, "AMD-Instinct-MI210"),
                                Card("b", 1, 65536, 100, 4, "AMD-unknown")};
  b->AddPluginFacts(cards);
  EXPECT_EQ(cards[0].devcore, Cores(104));
  EXPECT_EQ(cards[1].devcore, Cores(100)) << "a model the plugin does not know keeps what it was given";
}

TEST(Amd, RequestsFromTheLimits) {
  BackendPtr b = Make();
  ContainerView c = AmdCtr(2, 4096, 33);
  c.requests = {{"amd.com/gpu", "1"}, {"amd.com/gpumem", "1"}, {"amd.com/gpucores", "1"}};
  EXPECT_EQ(Request(*b, c), Req("AMD", 2, 4096, 0, 33));
  EXPECT_FALSE(Request(*b, Ctr("c", {{"amd.com/gpumem", "4096"}, {"amd.com/gpucores", "33"}})))
      << "memory and cores without a count";
  EXPECT_EQ(Request(*b, AmdCtr(1, 4096)), Req("AMD", 1, 4096, 0, 100)) << "no cores: all the compute units";
  EXPECT_EQ(Request(*b, AmdCtr(1)), Req("AMD", 1, 0, 100, 100)) << "no memory: the whole card";
  EXPECT_EQ(Request(*b, Ctr("c", {{"amd.com/gpu", "1"}, {"amd.com/gpumem", "0"}})),
            Req("AMD", 1, 0, 100, 100));
  EXPECT_FALSE(Request(*b, AmdCtr(0))) << "a count of 0 asks for nothing";
  ContainerView requests_only = Ctr("c", {});
  requests_only.requests["amd.com/gpu"] = "1";
  EXPECT_FALSE(Request(*b, requests_only));
  // Upstream drops these requests (the pod runs without a GPU); here each is an error naming the resource.
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"amd.com/gpu", "2147483648"}, {"amd.com/gpu", "-1"}, {"amd.com/gpumem", "-1"},
           {"amd.com/gpumem", "2147483648"}, {"amd.com/gpumem", "16Gi"}, {"amd.com/gpucores", "0"},
           {"amd.com/gpucores", "101"}}) {
    std::map<std::string, std::string> limits{{"amd.com/gpu", "1"}};
    limits[name] = value;
    auto r = b->RequestFor(Ctr("c", limits));
    ASSERT_FALSE(r) << name << "=" << value;
    EXPECT_THAT(r.error().message, HasSubstr(name)) << value;
  }
}

// --- through the scheduler ------------------------------------------------------------------------------

struct Cluster : testing::FitCluster {
  void Node(const std::string& name, const std::vector<DeviceInfo>& cards) {
    state.UpsertNode(testing::ManifestNode(name, kRegister, cards, "amd.com/gpu"));
  }
};

TEST(AmdFit, WholeCardsAndShares) {
  Cluster c;
  c.Node("n", {Card("dev-0", 0, 1000, 100, 2), Card("dev-1", 1, 1000, 100, 12)});
  auto whole = c.Run(AmdPod(2));
  ASSERT_EQ(whole.kind, FilterOutcome::Kind::kScheduled) << Failure(whole);
  const auto& picks = whole.devices.at("AMD").at(0);
  ASSERT_EQ(picks.size(), 2u);
  for (const auto& d : picks) {
    EXPECT_EQ(d.mem, MiB(1000)) << "no memory asked: the whole card";
    EXPECT_EQ(d.cores, Cores(100)) << "no cores asked: every compute unit";
  }
  auto share = c.Run(AmdPod(1, 500, 50));
  ASSERT_EQ(share.kind, FilterOutcome::Kind::kScheduled) << Failure(share);
  EXPECT_EQ(share.devices.at("AMD").at(0).at(0).mem, MiB(500));
  EXPECT_EQ(share.devices.at("AMD").at(0).at(0).cores, Cores(50));
}

TEST(AmdFit, APercentOfEachCardsComputeUnits) {
  Cluster c;
  c.Node("n", {Card("mi300x", 0, 196608, 304)});
  auto quarter = c.Run(AmdPod(1, 16384, 25));
  ASSERT_EQ(quarter.kind, FilterOutcome::Kind::kScheduled) << Failure(quarter);
  EXPECT_EQ(quarter.annotations.at(kAllocated), "mi300x,AMD-Instinct-MI300X,16384,76:;")
      << "25 % of 304 compute units, the card named by its registered type";
  EXPECT_EQ(quarter.annotations.at("hami.io/amd-devices-to-allocate"),
            "mi300x,AMD-Instinct-MI300X,16384,76:;");

  Cluster small;
  small.Node("n", {Card("dev-0", 0, 1000, 64, 2)});
  auto one = small.Run(AmdPod(1, 100, 1));
  ASSERT_EQ(one.kind, FilterOutcome::Kind::kScheduled) << Failure(one);
  EXPECT_EQ(one.devices.at("AMD").at(0).at(0).cores, Cores(1)) << "1 % of 64 is at least one unit";
  auto all = small.Run(AmdPod(1, 100, 100));
  ASSERT_EQ(all.kind, FilterOutcome::Kind::kScheduled) << Failure(all);
  EXPECT_EQ(all.devices.at("AMD").at(0).at(0).cores, Cores(64));

  Cluster none;
  none.Node("n", {Card("dev-0", 0, 1000, 0, 2)});
  EXPECT_EQ(Failure(none.Run(AmdPod(1, 100, 10))), "1/1 CardInsufficientCore") << "a card with no units";
}

TEST(AmdFit, Refusals) {
  {
    Cluster c;
    c.Node("n", {Card("dev-0", 0, 1000, 100, 2)});
    Hold(c.state, "h", "n", "AMD", "dev-0", 1, 900, 0);
    EXPECT_EQ(Failure(c.Run(AmdPod(1, 500, 10))), "1/1 CardInsufficientMemory");
  }
  {
    Cluster c;
    c.Node("n", {Card("dev-0", 0, 1000, 10, 2)});
    Hold(c.state, "h", "n", "AMD", "dev-0", 1, 0, 9);
    EXPECT_EQ(Failure(c.Run(AmdPod(1, 100, 100))), "1/1 CardInsufficientCore");
  }
  {
    Cluster c;
    c.Node("n", {Card("dev-1", 0, 1000, 100, 2)});
    EXPECT_EQ(Failure(c.Run(AmdPod(1, 100, 10, {{"amd.com/use-gpu-uuid", "dev-0"}}))),
              "1/1 CardUuidMismatch");
    EXPECT_EQ(Failure(c.Run(AmdPod(1, 100, 10, {{"amd.com/nouse-gpu-uuid", "dev-1"}}))),
              "1/1 CardUuidMismatch");
  }
  {
    Cluster c;
    c.Node("n", {Card("dev-0", 0, 1000, 100, 2)});
    Hold(c.state, "h", "n", "AMD", "dev-0", 2, 0, 0);
    EXPECT_EQ(Failure(c.Run(AmdPod(1, 100, 10))), "1/1 CardTimeSlicingExhausted");
  }
  {
    Cluster c;
    DeviceInfo sick = Card("dev-0", 0, 1000, 100, 2);
    sick.health = false;
    c.Node("n", {sick});
    EXPECT_EQ(Failure(c.Run(AmdPod(1, 100, 10))), "1/1 CardNotHealth");
  }
  {
    Cluster c;
    c.Node("n", {Card("dev-0", 0, 1000, 100, 2), Card("dev-1", 1, 1000, 100, 2)});
    Hold(c.state, "h", "n", "AMD", "dev-0", 1, 100, 10);
    EXPECT_EQ(Failure(c.Run(AmdPod(1, 100, 10, {{"hami.io/gpu-scheduler-policy", "mutex"}}))), "<fits>");
    EXPECT_EQ(Failure(c.Run(AmdPod(2, 100, 10, {{"hami.io/gpu-scheduler-policy", "mutex"}}))),
              "1/2 AllocatedCardsInsufficientRequest, 1/2 ExclusiveDeviceAllocateConflict");
  }
}

TEST(AmdFit, TypeSelectors) {
  struct Case {
    std::string key, value, card;
    bool fits;
  };
  const std::string use = "amd.com/use-gputype", nouse = "amd.com/nouse-gputype";
  const std::vector<Case> cases = {
      {use, "MI300", "MI300X", true},       {use, "MI250", "MI300X", false},
      {nouse, "MI300", "MI300X", false},    {nouse, "MI250", "MI300X", true},
      {use, "", "MI300X", true},            {use, "  ", "MI300X", true},
      {nouse, "", "MI300X", true},          {nouse, "MI250,", "MI300X", true},
      {nouse, ",MI250", "MI300X", true},    {nouse, " MI250 , ", "MI250X", false},
      {nouse, ", ", "MI300X", true},        {use, "MI300,", "MI250X", false},
      {use, "mi300x", "AMD-MI300X", true},
      // Upstream's AMD check matches nothing with a list of blank entries; every vendor's selector here
      // reads it as no constraint (docs/DECISIONS.md "AMD").
      {use, ", ", "MI300X", true},
  };
  for (const Case& k : cases) {
    Cluster c;
    c.Node("n", {Card("dev-0", 0, 1000, 100, 2, k.card)});
    const std::string got = Failure(c.Run(AmdPod(1, 100, 10, {{k.key, k.value}})));
    EXPECT_EQ(got, k.fits ? "<fits>" : "1/1 CardTypeMismatch")
        << k.key << "='" << k.value << "' on " << k.card;
  }
}

TEST(AmdFit, ASidecarFirstKeepsTheCardWithItsContainer) {
  Cluster c;
  c.Node("n", {Card("mi210", 0, 65536, 104, 4, "AMD-MI210")});
  PodView pod = Pod("p", {Ctr("sidecar", {}), AmdCtr(1, 4096, 50)});
  auto out = c.Run(pod);
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << Failure(out);
  EXPECT_EQ(out.annotations.at(kAllocated), ";mi210,AMD-MI210,4096,52:;")
      << "the sidecar's empty list first: the plugin gives the card to the second container";
}

// HAMi writes each card's registered type into the allocation (its AMD vGPU design); the ledger reads the
// allocation back by the annotation's key whatever the type says.
TEST(AmdFit, TheAllocationNamesEachCardByItsRegisteredType) {
  Cluster c;
  c.Node("n", {Card("GPU-a", 0, 196608, 304, 4, "AMD-MI300X"), Card("GPU-b", 1, 196608, 304, 4, "")});
  auto one = c.Run(AmdPod(1, 16384, 25, {{"amd.com/use-gpu-uuid", "GPU-a"}}));
  ASSERT_EQ(one.kind, FilterOutcome::Kind::kScheduled) << Failure(one);
  EXPECT_EQ(one.annotations.at(kAllocated), "GPU-a,AMD-MI300X,16384,76:;");
  EXPECT_EQ(one.devices.at("AMD").at(0).at(0).vendor, "AMD") << "the ledger charges by the vendor key";
  auto untyped = c.Run(AmdPod(1, 16384, 25, {{"amd.com/use-gpu-uuid", "GPU-b"}}));
  ASSERT_EQ(untyped.kind, FilterOutcome::Kind::kScheduled) << Failure(untyped);
  EXPECT_EQ(untyped.annotations.at(kAllocated), "GPU-b,AMD,16384,76:;")
      << "no registered type: the vendor key";

  PodView bound = AmdPod(1, 16384, 25);
  bound.uid = "bound";
  bound.annotations = one.annotations;
  auto read = AllocationFromAnnotations(bound, c.backends);
  ASSERT_TRUE(read && *read) << "the ledger reads the typed allocation back";
  const ContainerDevice& held = (*read)->devices.at("AMD").at(0).at(0);
  EXPECT_EQ(held.uuid, "GPU-a");
  EXPECT_EQ(held.vendor, "AMD");
  EXPECT_EQ(held.cores, Cores(76));
}

TEST(AmdQuota, CoresCountInPercentOnBothSides) {
  Cluster c;
  c.state.quotas().UpsertQuota(ResourceQuotaView{
      "default", "q", {{"limits.amd.com/gpucores", "50"}, {"limits.amd.com/gpumem", "40000"}}});
  // Held before its node is known: the card's share is unknown, the whole card counts.
  Hold(c.state, "early", "n", "AMD", "mi300x", 1, 16384, 76);
  const auto used = [&](const std::string& resource) {
    for (const auto& e : c.state.quotas().Entries()) {
      if (e.ns == "default" && e.resource == resource) return e.used;
    }
    return std::int64_t{-1};
  };
  EXPECT_EQ(used("amd.com/gpucores"), 100);
  c.Node("n", {Card("mi300x", 0, 196608, 304)});
  EXPECT_EQ(used("amd.com/gpucores"), 25) << "76 of 304 compute units are 25 %";
  EXPECT_EQ(used("amd.com/gpumem"), 16384);

  // The webhook's check counts the percent asked: 25 more fit the limit of 50, 26 do not.
  EXPECT_FALSE(c.state.quotas().Exceeded("default", "AMD", MiB(0), Cores(25)));
  auto over = c.state.quotas().Exceeded("default", "AMD", MiB(0), Cores(26));
  ASSERT_TRUE(over);
  EXPECT_EQ(over->resource, "amd.com/gpucores");
  PodView pod = AmdPod(1, 4096, 30);
  auto verdict = AdmitPod(pod, c.backends, c.state.quotas(), AdmissionOptions{});
  EXPECT_EQ(verdict.kind, AdmissionVerdict::Kind::kDenied) << verdict.message;
  EXPECT_THAT(verdict.message, HasSubstr("amd.com/gpucores"));

  c.state.RemovePod("early");
  EXPECT_EQ(used("amd.com/gpucores"), 0);
  Hold(c.state, "two", "n", "AMD", "mi300x", 2, 1000, 100);  // two containers on the card: 100 units
  EXPECT_EQ(used("amd.com/gpucores"), 33) << "100 of 304, rounded up";
}

}  // namespace
}  // namespace hami
