// Enflame in isolation and through the scheduler: whole GCUs from capacity (`GCU`) and DRS hard partitions
// of the cards listed in enflame.com/gcu-drs-capacity (`Enflame`): discovery and its errors, requests in
// slices or by memory and cores, the webhook, the profile choice, the fit (slices counted from the cores
// charged), the ledger's re-booking of bound pods, the quota, and the plugin's pod annotations. Vectors E1-E7
// and G1-G3 of HAMi v2.10's Enflame backends, with the departures of docs/DECISIONS.md "Enflame".
#include "backends/enflame/enflame.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backends/common.h"
#include "core/admission.h"
#include "core/cluster_state.h"
#include "core/keys.h"
#include "core/scheduler.h"
#include "tests/support/builders.h"

namespace hami {
namespace {

namespace json = boost::json;
using backends::enflame::CardProfiles;
using backends::enflame::ChooseProfile;
using backends::enflame::DrsCapacity;
using backends::enflame::DrsProfile;
using backends::enflame::ParseProfileName;
using backends::enflame::SlicesInUse;
using ::testing::HasSubstr;
using testing::Ctr;
using testing::Failure;
using testing::FitCluster;
using testing::Hold;
using testing::Pod;
using testing::Req;
using testing::Request;

const TimePoint kNow = std::chrono::system_clock::from_time_t(1716199325);
constexpr const char* kCapacity = "enflame.com/gcu-drs-capacity";
constexpr const char* kDrsAllocated = "hami.io/enflame-vgpu-devices-allocated";
// E1: one card of six slices, HAMi's example profiles.
constexpr const char* kE1 =
    R"({"devices":[{"index":"0","minor":"0","capacity":6}],)"
    R"("profiles":{"1g.6gb":"0","3g.20gb":"1","6g.40gb":"2"}})";

BackendPtr Make(std::string_view vendor, const VendorSettings& settings = {}) {
  auto all = backends::enflame::Module().create(settings).value();
  for (auto& b : all) {
    if (b->Vendor() == vendor) return std::move(b);
  }
  throw std::invalid_argument("no backend " + std::string(vendor));
}

NodeView DrsNode(const std::string& name, const std::string& annotation) {
  NodeView n;
  n.name = name;
  n.annotations[kCapacity] = annotation;
  return n;
}

// A DRS annotation of `cards` cards of `capacity` slices each with `profiles` (name -> ID, as JSON text).
std::string Drs(int cards, int capacity, const std::string& profiles) {
  std::string devices;
  for (int i = 0; i < cards; ++i) {
    devices += (i ? "," : "") + std::string(R"({"index":")") + std::to_string(i) + R"(","minor":")" +
               std::to_string(i) + R"(","capacity":)" + std::to_string(capacity) + "}";
  }
  return R"({"devices":[)" + devices + R"(],"profiles":)" + profiles + "}";
}
const std::string kProfiles = R"({"1g.6gb":"0","3g.20gb":"1","6g.40gb":"2"})";

NodeView GcuNode(const std::string& name, int cards) {
  NodeView n;
  n.name = name;
  n.capacity["enflame.com/gcu"] = std::to_string(cards);
  n.allocatable = n.capacity;
  return n;
}

std::string Error(const Backend& b, const NodeView& node) {
  auto devices = b.Discover(node);
  return devices ? "<no error>" : devices.error().message;
}

PodView DrsPod(const std::string& name, std::map<std::string, std::string> limits,
               std::map<std::string, std::string> annotations = {}) {
  return Pod(name, {Ctr("pod-gcu-example1", std::move(limits))}, {}, std::move(annotations));
}

// ---- G: whole GCUs

TEST(EnflameGcu, G1CardsFromCapacityWhileItCountsSome) {
  BackendPtr b = Make("GCU");
  auto two = b->Discover(GcuNode("testnode", 2)).value();
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].id, "testnode-GCU-0");
  EXPECT_EQ(two[1].id, "testnode-GCU-1");
  EXPECT_EQ(two[1].index, 1);
  EXPECT_EQ(two[0].count, 1);
  EXPECT_EQ(two[0].devmem, MiB(100));
  EXPECT_EQ(two[0].devcore, Cores(100));
  EXPECT_EQ(two[0].type, "GCU");
  EXPECT_TRUE(two[0].health);
  // No capacity (or 0): no cards, so a node whose capacity drops to 0 loses them.
  EXPECT_TRUE(b->Discover(GcuNode("testnode", 0)).value().empty());
  EXPECT_TRUE(b->Discover(NodeView{}).value().empty());
  NodeView bad = GcuNode("testnode", 1);
  bad.capacity["enflame.com/gcu"] = "1.5";
  EXPECT_THAT(Error(*b, bad), HasSubstr("enflame.com/gcu"));
  EXPECT_THAT(Error(*b, GcuNode("big", 1025)), HasSubstr("more than the 1024"));
  EXPECT_EQ(b->Spec().health, HealthRule::kAlwaysHealthy);
  EXPECT_EQ(b->Publish(two).resources.at("enflame.com/gcu"), "2");
}

TEST(EnflameGcu, G2WholeCardRequests) {
  BackendPtr b = Make("GCU");
  EXPECT_EQ(Request(*b, Ctr("c", {{"enflame.com/gcu", "3"}})), Req("GCU", 3, 100, 100, 100));
  ContainerView requests = Ctr("c", {});
  requests.requests["enflame.com/gcu"] = "2";
  EXPECT_EQ(Request(*b, requests), Req("GCU", 2, 100, 100, 100));
  EXPECT_FALSE(Request(*b, Ctr("c", {})));
  EXPECT_THAT(b->RequestFor(Ctr("c", {{"enflame.com/gcu", "1.5"}})).error().message,
              HasSubstr("enflame.com/gcu"));
  // Admission: the pod is ours when the count is in the limits (no mutation).
  PodView pod;
  ContainerView limited = Ctr("c", {{"enflame.com/gcu", "1"}});
  EXPECT_TRUE(b->Admit(limited, pod).value());
  EXPECT_FALSE(b->Admit(requests, pod).value());
  EXPECT_FALSE(requests.limits.contains("enflame.com/gcu"));
}

TEST(EnflameGcuFit, G3AlwaysExclusiveAndNoUuidFilter) {
  const auto gcu = [](int n, std::map<std::string, std::string> annotations = {}) {
    return Pod("p", {Ctr("c", {{"enflame.com/gcu", std::to_string(n)}})}, {}, std::move(annotations));
  };
  FitCluster c;
  c.state.UpsertNode(GcuNode("n", 2));
  auto one = c.Run(gcu(1));
  ASSERT_EQ(one.kind, FilterOutcome::Kind::kScheduled) << Failure(one);
  const std::string allocated = one.annotations.at("hami.io/enflame-gcu-devices-allocated");
  EXPECT_THAT(allocated, ::testing::MatchesRegex("n-GCU-[01],GCU,100,100:;"));
  EXPECT_EQ(one.annotations.at("hami.io/enflame-gcu-devices-to-allocate"), allocated);
  // The UUID keys of the DRS backend are not the GCU's: it has none (upstream ignores them too).
  EXPECT_EQ(c.Run(gcu(1, {{"enflame.com/use-gpuuuid", "other"}})).kind, FilterOutcome::Kind::kScheduled);

  Hold(c.state, "h", "n", "GCU", "n-GCU-0", 1, 100, 100);
  EXPECT_EQ(Failure(c.Run(gcu(2))),
            "1/2 AllocatedCardsInsufficientRequest, 1/2 ExclusiveDeviceAllocateConflict")
      << "a card in use is refused as exclusive, under the spread GPU policy too";
  Hold(c.state, "h2", "n", "GCU", "n-GCU-1", 1, 100, 100);
  EXPECT_EQ(Failure(c.Run(gcu(1))), "2/2 ExclusiveDeviceAllocateConflict");
  EXPECT_EQ(Failure(c.Run(gcu(3))), "NodeInsufficientDevice");

  FitCluster lone;
  lone.state.UpsertNode(GcuNode("n", 1));
  Hold(lone.state, "h", "n", "GCU", "n-GCU-0", 1, 100, 100);
  EXPECT_EQ(Failure(lone.Run(gcu(1))), "1/1 ExclusiveDeviceAllocateConflict");
}

// ---- E: DRS partitions

TEST(EnflameDrs, E1DiscoveryFromTheCapacityAnnotation) {
  BackendPtr b = Make("Enflame");
  auto devices = b->Discover(DrsNode("node-a", kE1)).value();
  ASSERT_EQ(devices.size(), 1u);
  const DeviceInfo& d = devices[0];
  EXPECT_EQ(d.id, "node-a-enflame-drs-0");
  EXPECT_EQ(d.type, "Enflame");
  EXPECT_EQ(d.devmem, MiB(40960));
  EXPECT_EQ(d.devcore, Cores(100));
  EXPECT_EQ(d.count, 6);
  EXPECT_TRUE(d.health);
  ASSERT_NE(d.CustomInfo("minor"), nullptr);
  EXPECT_EQ(*d.CustomInfo("minor"), "0");
  EXPECT_EQ(*d.CustomInfo("index"), "0");
  EXPECT_EQ(*d.CustomInfo("maxSlice"), "6");
  // Publish is the inverse of Discover: the plugin's annotation reads back as the same cards.
  const NodePublication published = b->Publish(devices);
  EXPECT_EQ(published.resources.at("enflame.com/drs-gcu"), "6");
  EXPECT_EQ(b->Discover(DrsNode("node-a", *published.annotation)).value(), devices);

  // Index and minor: an unreadable index is the entry's position; an empty minor is the index.
  auto odd = b->Discover(DrsNode("n", R"({"devices":[{"index":"x","capacity":2},{"index":"7","minor":" 3 ",)"
                                      R"("capacity":"4"}],"profiles":{" 2G.10GB ":"a"}})"))
                 .value();
  ASSERT_EQ(odd.size(), 2u);
  EXPECT_EQ(odd[0].id, "n-enflame-drs-0");
  EXPECT_EQ(*odd[0].CustomInfo("minor"), "0");
  EXPECT_EQ(odd[1].id, "n-enflame-drs-7");
  EXPECT_EQ(odd[1].index, 7);
  EXPECT_EQ(*odd[1].CustomInfo("minor"), "3");
  EXPECT_EQ(odd[1].count, 4);
  EXPECT_EQ(odd[1].devmem, MiB(10240));
}

TEST(EnflameDrs, DiscoveryErrorsNameTheAnnotation) {
  BackendPtr b = Make("Enflame");
  // No annotation: no plugin, no cards (upstream: an error, and the cards it had stay).
  EXPECT_TRUE(b->Discover(NodeView{}).value().empty());
  EXPECT_THAT(Error(*b, DrsNode("n", "{")), HasSubstr("failed to parse enflame.com/gcu-drs-capacity: "));
  EXPECT_THAT(Error(*b, DrsNode("n", "[]")),
              HasSubstr("failed to parse enflame.com/gcu-drs-capacity: not a JSON object"));
  EXPECT_THAT(Error(*b, DrsNode("n", R"({"devices":{},"profiles":{"1g.6gb":"0"}})")),
              HasSubstr("devices is not an array"));
  EXPECT_THAT(Error(*b, DrsNode("n", R"({"devices":[{"index":0,"capacity":1}],"profiles":{"1g.6gb":"0"}})")),
              HasSubstr("devices[0].index is not a string"));
  EXPECT_THAT(Error(*b, DrsNode("n", R"({"devices":[],"profiles":{"1g.6gb":"0"}})")),
              HasSubstr("no drs devices found on node n"));
  EXPECT_EQ(Error(*b, DrsNode("n", R"({"devices":[{"index":"0","capacity":6}],"profiles":{}})")),
            "no valid drs profiles found on node n");
  EXPECT_EQ(Error(*b, DrsNode("n", R"({"devices":[{"index":"0","capacity":6}],"profiles":{"big":"0"}})")),
            "no valid drs profiles found on node n");
  for (const char* capacity : {"0", "-1", "\"abc\"", "1e300", "null", "true", "2147483648"}) {
    EXPECT_EQ(Error(*b, DrsNode("n", std::string(R"({"devices":[{"index":"0","capacity":)") + capacity +
                                         R"(}],"profiles":{"1g.6gb":"0"}})")),
              "invalid drs capacity on node n")
        << capacity;
  }
  EXPECT_THAT(Error(*b, DrsNode("n", R"({"devices":[{"index":"1","capacity":1},{"index":"1","capacity":1}],)"
                                     R"("profiles":{"1g.6gb":"0"}})")),
              HasSubstr("device index 1 is listed twice"));
  // Sizes a node cannot have are refused before they are built.
  EXPECT_THAT(Error(*b, DrsNode("n", Drs(1025, 1, kProfiles))),
              HasSubstr("1025 devices, more than the 1024"));
  std::string many = "{";
  for (int i = 0; i < 1025; ++i)
    many += (i ? "," : "") + std::string("\"") + std::to_string(i + 1) + "g.1gb\":\"0\"";
  EXPECT_THAT(Error(*b, DrsNode("n", Drs(1, 1, many + "}"))), HasSubstr("1025 profiles, more than the 1024"));
}

TEST(EnflameDrs, E6CapacityValues) {
  EXPECT_EQ(DrsCapacity(json::value(42.0)).value(), 42);
  EXPECT_EQ(DrsCapacity(json::value(6.9)).value(), 6) << "the fraction is dropped";
  EXPECT_EQ(DrsCapacity(json::value(7)).value(), 7);
  EXPECT_EQ(DrsCapacity(json::value("2147483648")).value(), 2147483647) << "a string is clamped";
  EXPECT_EQ(DrsCapacity(json::value(" 5 ")).value(), 5);
  for (double bad : {std::nan(""), std::numeric_limits<double>::infinity(),
                     -std::numeric_limits<double>::infinity(), 1e300, 2147483648.0}) {
    EXPECT_FALSE(DrsCapacity(json::value(bad))) << bad;
  }
  EXPECT_FALSE(DrsCapacity(json::value("7.0")));
  EXPECT_FALSE(DrsCapacity(json::value(nullptr)));
  EXPECT_EQ(ParseProfileName(" 3G.20GB "), (std::pair<std::int64_t, std::int64_t>{3, 20}));
  EXPECT_EQ(ParseProfileName("3g.x"), (std::pair<std::int64_t, std::int64_t>{3, 0}));
  EXPECT_EQ(ParseProfileName("3g"), (std::pair<std::int64_t, std::int64_t>{0, 0}));
  EXPECT_EQ(ParseProfileName("4294967299g.20gb"), (std::pair<std::int64_t, std::int64_t>{4294967299, 20}));
}

TEST(EnflameDrs, E2RequestsInSlicesOrByMemoryAndCores) {
  BackendPtr b = Make("Enflame");
  DeviceRequest direct = Req("Enflame", 1, 0, 0, 0);
  direct.partition = 3;
  EXPECT_EQ(Request(*b, Ctr("c", {{"enflame.com/drs-gcu", "3"}})), direct);
  EXPECT_EQ(Request(*b, Ctr("c", {{"enflame.com/gcu-memory", "20480"}, {"enflame.com/gcu-core", "40"}})),
            Req("Enflame", 1, 20480, 0, 40));
  EXPECT_EQ(Request(*b, Ctr("c", {{"enflame.com/gcu-core", "40"}})), Req("Enflame", 1, 0, 0, 40));
  ContainerView requests = Ctr("c", {});
  requests.requests["enflame.com/drs-gcu"] = "1";
  EXPECT_EQ(Request(*b, requests)->partition, 1);
  EXPECT_FALSE(Request(*b, Ctr("c", {})));
  EXPECT_FALSE(Request(*b, Ctr("c", {{"enflame.com/drs-gcu", "0"}})));
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"enflame.com/drs-gcu", "2147483648"},
           {"enflame.com/drs-gcu", "1.5"},
           {"enflame.com/gcu-memory", "16Gi"},
           {"enflame.com/gcu-core", "101"}}) {
    auto r = b->RequestFor(Ctr("c", {{name, value}}));
    ASSERT_FALSE(r) << name << "=" << value;
    EXPECT_THAT(r.error().message, HasSubstr(name));
  }
}

TEST(EnflameDrs, E7AdmissionChecksAndCopiesAcross) {
  BackendPtr b = Make("Enflame");
  PodView pod;
  ContainerView spec = Ctr("c", {{"enflame.com/gcu-memory", "20480"}, {"enflame.com/gcu-core", "50"}});
  EXPECT_TRUE(b->Admit(spec, pod).value());
  EXPECT_EQ(spec.requests.at("enflame.com/gcu-memory"), "20480");
  EXPECT_EQ(spec.requests.at("enflame.com/gcu-core"), "50");
  ContainerView requested = Ctr("c", {});
  requested.requests["enflame.com/drs-gcu"] = "3";
  EXPECT_TRUE(b->Admit(requested, pod).value());
  EXPECT_EQ(requested.limits.at("enflame.com/drs-gcu"), "3");
  ContainerView plain = Ctr("c", {{"cpu", "1"}});
  EXPECT_FALSE(b->Admit(plain, pod).value());
  const auto refused = [&](std::map<std::string, std::string> limits) {
    ContainerView c = Ctr("c", std::move(limits));
    auto r = b->Admit(c, pod);
    return r ? std::string("<admitted>") : r.error().message;
  };
  EXPECT_EQ(refused({{"enflame.com/drs-gcu", "0"}}), "enflame.com/drs-gcu must be greater than 0");
  EXPECT_EQ(refused({{"enflame.com/gcu-memory", "0"}}), "enflame.com/gcu-memory must be greater than 0");
  EXPECT_EQ(refused({{"enflame.com/gcu-core", "0"}}), "enflame.com/gcu-core must be in range (0,100]");
  EXPECT_EQ(refused({{"enflame.com/gcu-core", "101"}}), "enflame.com/gcu-core must be in range (0,100]");
  // Through the whole webhook: a fraction of a slice is refused by the request's reading.
  FitCluster c;
  PodView half = DrsPod("p", {{"enflame.com/drs-gcu", "1.5"}});
  auto verdict = AdmitPod(half, c.backends, c.state.quotas(), AdmissionOptions{});
  EXPECT_EQ(verdict.kind, AdmissionVerdict::Kind::kDenied);
  EXPECT_THAT(verdict.message, HasSubstr("enflame.com/drs-gcu"));
}

DeviceInfo Card(const std::string& profiles, const std::string& max_slice = "6") {
  DeviceInfo d;
  d.id = "card";
  d.count = 6;
  d.devmem = MiB(40960);
  d.devcore = Cores(100);
  d.health = true;
  d.custom_info = {{"index", "0"}, {"maxSlice", max_slice}, {"minor", "0"}, {"profiles", profiles}};
  return d;
}

DeviceRequest Direct(std::int32_t slices) {
  DeviceRequest r = Req("Enflame", 1, 0, 0, 0);
  r.partition = slices;
  return r;
}

TEST(EnflameDrs, E3ProfileChoiceAndItsCharge) {
  const std::vector<DrsProfile> profiles = CardProfiles(Card(kProfiles));
  ASSERT_EQ(profiles.size(), 3u);
  EXPECT_EQ(profiles[0], (DrsProfile{"1g.6gb", "0", 1, 6, 17}));
  EXPECT_EQ(profiles[1], (DrsProfile{"3g.20gb", "1", 3, 20, 50}));
  EXPECT_EQ(profiles[2], (DrsProfile{"6g.40gb", "2", 6, 40, 100}));
  EXPECT_EQ(ChooseProfile(profiles, Direct(3))->name, "3g.20gb");
  EXPECT_FALSE(ChooseProfile(profiles, Direct(2)));
  EXPECT_EQ(ChooseProfile(profiles, Req("Enflame", 1, 20480, 0, 40))->name, "3g.20gb");
  EXPECT_EQ(ChooseProfile(profiles, Req("Enflame", 1, 0, 0, 60))->name, "6g.40gb");
  EXPECT_EQ(ChooseProfile(profiles, Req("Enflame", 1, 0, 0, 0))->name, "1g.6gb");
  EXPECT_FALSE(ChooseProfile(profiles, Req("Enflame", 1, 50000, 0, 0)));

  BackendPtr b = Make("Enflame");
  const DeviceInfo card = Card(kProfiles);
  EXPECT_EQ(b->RefuseCard(card, DeviceUsage{}, Direct(3), CardCheckView{}), std::nullopt);
  const CardCharge charged = b->Charged(card, DeviceUsage{}, Direct(3), CardCharge{MiB(0), Cores(0)}, {});
  EXPECT_EQ(charged.mem, MiB(20480));
  EXPECT_EQ(charged.cores, Cores(50));
  const CardCharge by_spec =
      b->Charged(card, DeviceUsage{}, Req("Enflame", 1, 20480, 0, 40), CardCharge{MiB(0), Cores(0)}, {});
  EXPECT_EQ(by_spec.mem, MiB(20480));
  EXPECT_EQ(by_spec.cores, Cores(50));
}

// The profile table is parsed once, when the node is discovered: a discovered card carries it, and the
// card's checks and charges answer the same with it as from the published table alone.
TEST(EnflameDrs, ProfilesAreParsedAtDiscoveryAndAnswerAsTheTable) {
  BackendPtr b = Make("Enflame");
  auto devices = b->Discover(DrsNode("node-a", kE1)).value();
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_NE(devices[0].facts.data, nullptr);
  DeviceInfo unparsed = devices[0];
  unparsed.facts = {};
  EXPECT_EQ(unparsed, devices[0]) << "the parse takes no part in comparing cards";
  for (const DeviceRequest& request :
       {Direct(1), Direct(3), Direct(6), Direct(2), Req("Enflame", 1, 20480, 0, 40), Req("Enflame", 1, 0, 0, 60),
        Req("Enflame", 1, 50000, 0, 0)}) {
    for (const std::int64_t used_cores : {0, 17, 50, 83, 100}) {
      const DeviceUsage used{1, MiB(0), Cores(used_cores)};
      EXPECT_EQ(b->RefuseCard(devices[0], used, request, {}), b->RefuseCard(unparsed, used, request, {}))
          << request.partition << " " << used_cores;
      const CardCharge shared{MiB(1), Cores(1)};
      const CardCharge a = b->Charged(devices[0], used, request, shared, {});
      const CardCharge c = b->Charged(unparsed, used, request, shared, {});
      EXPECT_EQ(a.mem, c.mem);
      EXPECT_EQ(a.cores, c.cores);
    }
  }
}

// Quirk 3: one unit. The memory resource is MiB whatever its size (upstream reads values up to twice the
// largest profile's GB as GB: `20` there is 3g.20gb, here 20 MiB, the smallest profile).
TEST(EnflameDrs, MemoryIsAlwaysMiB) {
  const std::vector<DrsProfile> profiles = CardProfiles(Card(kProfiles));
  EXPECT_EQ(ChooseProfile(profiles, Req("Enflame", 1, 20, 0, 0))->name, "1g.6gb");
  EXPECT_EQ(ChooseProfile(profiles, Req("Enflame", 1, 80, 0, 0))->name, "1g.6gb");
  EXPECT_EQ(ChooseProfile(profiles, Req("Enflame", 1, 100, 0, 0))->name, "1g.6gb");
  EXPECT_EQ(ChooseProfile(profiles, Req("Enflame", 1, 6144, 0, 0))->name, "1g.6gb");
  EXPECT_EQ(ChooseProfile(profiles, Req("Enflame", 1, 6145, 0, 0))->name, "3g.20gb") << "7 GB";
  EXPECT_EQ(ChooseProfile(profiles, Req("Enflame", 1, 20481, 0, 0))->name, "6g.40gb") << "21 GB";
}

TEST(EnflameDrs, E5ProfilesThatCannotBeCarvedAreNeverOffered) {
  BackendPtr b = Make("Enflame");
  for (const char* table : {R"({"4294967299g.4294967299gb":"0"})", R"({"4294967299g.20gb":"0"})",
                            R"({"2g.4294967299gb":"0"})"}) {
    EXPECT_TRUE(CardProfiles(Card(table)).empty()) << table;
    EXPECT_EQ(b->RefuseCard(Card(table), DeviceUsage{}, Direct(2), CardCheckView{}), Reason::kModeNotFit);
    EXPECT_EQ(Error(*b, DrsNode("n", Drs(1, 6, table))), "no valid drs profiles found on node n") << table;
  }
  // A card whose largest size reads 1 and a profile of int32's largest size: its core share overflows int32.
  EXPECT_TRUE(CardProfiles(Card(R"({"2147483647g.20gb":"0"})", "1")).empty());
  // Beside a valid profile an oversized one is skipped, the valid one still chosen.
  const auto mixed = CardProfiles(Card(R"({"2g.4294967299gb":"0","3g.20gb":"1"})", "3"));
  ASSERT_EQ(mixed.size(), 1u);
  EXPECT_EQ(mixed[0].name, "3g.20gb");
  EXPECT_EQ(b->RefuseCard(Card(R"({"2g.4294967299gb":"0","3g.20gb":"1"})", "3"), DeviceUsage{}, Direct(2),
                          CardCheckView{}),
            Reason::kModeNotFit);
  // Unreadable custominfo: a largest size that is not an integer is taken from the profiles; a table that
  // is not JSON offers nothing. Never a crash.
  for (const char* max_slice : {"NaN", "-inf", "1e300", "7.0", ""}) {
    const auto p = CardProfiles(Card(kProfiles, max_slice));
    ASSERT_EQ(p.size(), 3u) << max_slice;
    EXPECT_EQ(p[0].core_percent, 17) << max_slice;
  }
  EXPECT_EQ(CardProfiles(Card(kProfiles, "7"))[0].core_percent, 15) << "a readable largest size is used";
  EXPECT_TRUE(CardProfiles(Card("{not json")).empty());
  EXPECT_EQ(b->RefuseCard(Card("{not json"), DeviceUsage{}, Direct(1), CardCheckView{}), Reason::kModeNotFit);
}

TEST(EnflameDrs, SlicesInUseComeBackFromTheCoresCharged) {
  EXPECT_EQ(SlicesInUse(Cores(0), 6), 0);
  EXPECT_EQ(SlicesInUse(Cores(17), 6), 1);
  EXPECT_EQ(SlicesInUse(Cores(34), 6), 2) << "two 1g or one 2g";
  EXPECT_EQ(SlicesInUse(Cores(50), 6), 3);
  EXPECT_EQ(SlicesInUse(Cores(67), 6), 4) << "1g + 3g";
  EXPECT_EQ(SlicesInUse(Cores(85), 6), 5) << "five 1g";
  EXPECT_EQ(SlicesInUse(Cores(100), 6), 6);
  EXPECT_EQ(SlicesInUse(Cores(-5), 6), 0);
  // E6's saturation: a charge no card holds counts int32's largest, never overflows.
  EXPECT_EQ(SlicesInUse(Cores(std::numeric_limits<std::int64_t>::max()), 6), 2147483647);
  EXPECT_EQ(SlicesInUse(Cores(2 * 2147483647LL), 2147483647), 2147483647);
}

// Decisions: quirks 1 and 2 fixed. A card takes a partition only while its free slices hold its size.
TEST(EnflameDrsFit, FreeSlicesHoldThePartition) {
  // Quirk 2: a card of two slices never takes a 3g partition (upstream: Count 2 > Used 0, and it fits).
  FitCluster small;
  small.state.UpsertNode(DrsNode("n", Drs(1, 2, kProfiles)));
  EXPECT_EQ(Failure(small.Run(DrsPod("p", {{"enflame.com/drs-gcu", "3"}}))), "1/1 CardTimeSlicingExhausted");
  EXPECT_EQ(small.Run(DrsPod("p", {{"enflame.com/drs-gcu", "1"}})).kind, FilterOutcome::Kind::kScheduled);

  // Quirk 1: a card of four slices with a 3g partition bound (re-booked from its annotation) has one slice
  // left; upstream re-books Used += 1, and memory (20 GB free) and cores (50 free) let a second 3g in.
  FitCluster four;
  four.state.UpsertNode(DrsNode("n", Drs(1, 4, kProfiles)));
  auto first = four.Run(DrsPod("first", {{"enflame.com/drs-gcu", "3"}}));
  ASSERT_EQ(first.kind, FilterOutcome::Kind::kScheduled) << Failure(first);
  PodView bound = DrsPod("first", {{"enflame.com/drs-gcu", "3"}});
  bound.node_name = "n";
  bound.annotations.insert(first.annotations.begin(), first.annotations.end());
  auto read = AllocationFromAnnotations(bound, four.backends);
  ASSERT_TRUE(read && read->has_value()) << (read ? "no allocation" : read.error().message);
  four.state.AddPod(std::move(**read));
  EXPECT_EQ(Failure(four.Run(DrsPod("second", {{"enflame.com/drs-gcu", "3"}}))),
            "1/1 CardTimeSlicingExhausted");
  EXPECT_EQ(four.Run(DrsPod("one", {{"enflame.com/drs-gcu", "1"}})).kind, FilterOutcome::Kind::kScheduled);

  // Six slices: two 3g partitions fill the card whether placed now or re-booked; a third is refused.
  FitCluster six;
  six.state.UpsertNode(DrsNode("n", Drs(1, 6, kProfiles)));
  Hold(six.state, "a", "n", "Enflame", "n-enflame-drs-0", 1, 20480, 50);
  EXPECT_EQ(six.Run(DrsPod("b", {{"enflame.com/drs-gcu", "3"}})).kind, FilterOutcome::Kind::kScheduled);
  Hold(six.state, "b", "n", "Enflame", "n-enflame-drs-0", 1, 20480, 50);
  EXPECT_EQ(Failure(six.Run(DrsPod("c", {{"enflame.com/drs-gcu", "1"}}))), "1/1 CardTimeSlicingExhausted");

  // Left as upstream: five 1g partitions (17 % of the cores each) leave a slice that a sixth cannot take,
  // its 17 % being more than the 15 % free.
  FitCluster ones;
  ones.state.UpsertNode(DrsNode("n", Drs(1, 6, kProfiles)));
  for (int i = 0; i < 5; ++i)
    Hold(ones.state, "p" + std::to_string(i), "n", "Enflame", "n-enflame-drs-0", 1, 6144, 17);
  EXPECT_EQ(Failure(ones.Run(DrsPod("p", {{"enflame.com/drs-gcu", "1"}}))), "1/1 CardInsufficientCore");
}

TEST(EnflameDrsFit, E4ReasonsOfTheFit) {
  FitCluster c;
  c.state.UpsertNode(DrsNode("n", Drs(2, 6, R"({"1g.6gb":"0"})")));
  EXPECT_EQ(Failure(c.Run(DrsPod("p", {{"enflame.com/drs-gcu", "3"}}))), "2/2 ModeNotFit")
      << "no 3g profile on the node (upstream counts it once: 1/2)";
  EXPECT_EQ(Failure(c.Run(DrsPod("p", {{"enflame.com/drs-gcu", "1"}},
                                 {{"enflame.com/use-gpuuuid", "n-enflame-drs-9"}}))),
            "2/2 CardUuidMismatch");
  auto chosen =
      c.Run(DrsPod("p", {{"enflame.com/drs-gcu", "1"}}, {{"enflame.com/use-gpuuuid", "n-enflame-drs-1"}}));
  ASSERT_EQ(chosen.kind, FilterOutcome::Kind::kScheduled) << Failure(chosen);
  EXPECT_EQ(chosen.annotations.at(kDrsAllocated), "n-enflame-drs-1,Enflame,6144,100:;")
      << "the only profile is the whole card's share";

  FitCluster mutex;
  mutex.state.UpsertNode(DrsNode("n", Drs(1, 2, kProfiles)));
  Hold(mutex.state, "h", "n", "Enflame", "n-enflame-drs-0", 1, 6144, 17);
  EXPECT_EQ(Failure(mutex.Run(DrsPod("p", {{"enflame.com/drs-gcu", "1"}},
                                     {{std::string(keys::kGpuPolicy), "mutex"}}))),
            "1/1 ExclusiveDeviceAllocateConflict");

  FitCluster memory;
  memory.state.UpsertNode(DrsNode("n", Drs(1, 6, kProfiles)));
  Hold(memory.state, "h", "n", "Enflame", "n-enflame-drs-0", 1, 30000, 0);
  EXPECT_EQ(Failure(memory.Run(DrsPod("p", {{"enflame.com/drs-gcu", "3"}}))), "1/1 CardInsufficientMemory");
}

// Quirk 6 copied: the plugin's wire format, the first card of each container.
TEST(EnflameDrsFit, AnnotationsForThePlugin) {
  FitCluster c;
  c.state.UpsertNode(DrsNode("node-a", kE1));
  auto out = c.Run(DrsPod("p", {{"enflame.com/drs-gcu", "3"}}), {"node-a"});
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << Failure(out, "node-a");
  const Annotations& a = out.annotations;
  EXPECT_EQ(a.at(kDrsAllocated), "node-a-enflame-drs-0,Enflame,20480,50:;");
  EXPECT_FALSE(a.contains("hami.io/enflame-vgpu-devices-to-allocate"));
  EXPECT_EQ(a.at("enflame.com/gcu-assigned"), "false");
  EXPECT_EQ(a.at("enflame.com/gcu-assigned-time"), "1716199325000000000");
  EXPECT_EQ(a.at("enflame.com/gcu-assigned-index"), "0");
  EXPECT_EQ(a.at("enflame.com/gcu-assigned-id"), "0");
  EXPECT_EQ(a.at("enflame.com/gcu-assigned-minor"), "0");
  EXPECT_EQ(a.at("enflame.com/gcu-request-size"), "3");
  EXPECT_EQ(a.at("assigned-containers"),
            R"({"pod-gcu-example1":{"allocated":false,"request":3,"profileID":"1",)"
            R"("profileName":"3g.20gb"}})");

  // By memory and cores: the same profile. Two containers: one entry each, sorted by name; the index,
  // minor and size keys are the first container's.
  FitCluster two;
  two.state.UpsertNode(DrsNode("n", R"({"devices":[{"index":"4","minor":"9","capacity":6}],)"
                                    R"("profiles":{"1g.6gb":"0","3g.20gb":"1","6g.40gb":"2"}})"));
  PodView pod = Pod("p", {Ctr("zeta", {{"enflame.com/gcu-memory", "20480"}, {"enflame.com/gcu-core", "40"}}),
                          Ctr("alpha", {{"enflame.com/drs-gcu", "1"}})});
  auto both = two.Run(pod);
  ASSERT_EQ(both.kind, FilterOutcome::Kind::kScheduled) << Failure(both);
  EXPECT_EQ(both.annotations.at(kDrsAllocated),
            "n-enflame-drs-4,Enflame,20480,50:;n-enflame-drs-4,Enflame,6144,17:;");
  EXPECT_EQ(both.annotations.at("assigned-containers"),
            R"({"alpha":{"allocated":false,"request":1,"profileID":"0","profileName":"1g.6gb"},)"
            R"("zeta":{"allocated":false,"request":3,"profileID":"1","profileName":"3g.20gb"}})");
  EXPECT_EQ(both.annotations.at("enflame.com/gcu-assigned-index"), "4");
  EXPECT_EQ(both.annotations.at("enflame.com/gcu-assigned-minor"), "9");
  EXPECT_EQ(both.annotations.at("enflame.com/gcu-request-size"), "3");

  // Without the node's cards (Annotate alone) only what the allocation says.
  Annotations bare;
  const PodVendorDevices one{{ContainerDevice{0, "x", "Enflame", MiB(20480), Cores(50), std::nullopt}}};
  Make("Enflame")->Annotate(PodView{}, one, {}, kNow, bare);
  EXPECT_EQ(bare.at(kDrsAllocated), "x,Enflame,20480,50:;");
  EXPECT_EQ(bare.at("enflame.com/gcu-assigned"), "false");
  EXPECT_FALSE(bare.contains("assigned-containers"));
}

// Quirk 4 fixed: a pod asking for slices counts no memory at admission (its profile is unknown before a
// node is chosen); once placed its profile's MiB and cores count like every allocation.
TEST(EnflameDrsQuota, SlicesCountNoMemoryUntilPlaced) {
  FitCluster c;
  c.state.quotas().UpsertQuota(
      ResourceQuotaView{"default", "q", {{"limits.enflame.com/gcu-memory", "10000"}}});
  PodView direct = DrsPod("d", {{"enflame.com/drs-gcu", "3"}});
  auto verdict = AdmitPod(direct, c.backends, c.state.quotas(), AdmissionOptions{});
  EXPECT_EQ(verdict.kind, AdmissionVerdict::Kind::kAllowed) << verdict.message;
  EXPECT_TRUE(verdict.quota.empty()) << "upstream counts the slice number (3) as memory";
  PodView spec = DrsPod("s", {{"enflame.com/gcu-memory", "20480"}});
  auto denied = AdmitPod(spec, c.backends, c.state.quotas(), AdmissionOptions{});
  EXPECT_EQ(denied.kind, AdmissionVerdict::Kind::kDenied);
  EXPECT_THAT(denied.message, HasSubstr("enflame.com/gcu-memory"));

  Hold(c.state, "placed", "n", "Enflame", "n-enflame-drs-0", 1, 20480, 50);
  std::int64_t used = -1, cores = -1;
  for (const auto& e : c.state.quotas().Entries()) {
    if (e.resource == "enflame.com/gcu-memory") used = e.used;
    if (e.resource == "enflame.com/gcu-core") cores = e.used;
  }
  EXPECT_EQ(used, 20480);
  EXPECT_EQ(cores, 50);
}

TEST(Enflame, SettingsAndFlags) {
  // Quirk 5 copied: with no configuration the DRS backend reads HAMi's names.
  auto defaults = backends::enflame::Module().create({}).value();
  ASSERT_EQ(defaults.size(), 2u);
  EXPECT_EQ(defaults[0]->Vendor(), "GCU");
  EXPECT_EQ(defaults[0]->Spec().resources.count, "enflame.com/gcu");
  const ResourceNames& drs = defaults[1]->Spec().resources;
  EXPECT_EQ(drs.count, "enflame.com/drs-gcu");
  EXPECT_EQ(drs.memory, "enflame.com/gcu-memory");
  EXPECT_EQ(drs.cores, "enflame.com/gcu-core");
  EXPECT_TRUE(defaults[1]->Spec().keys.to_allocate.empty());
  EXPECT_TRUE(defaults[1]->Spec().keys.node_lock.empty());
  EXPECT_TRUE(defaults[0]->Spec().keys.node_lock.empty());

  VendorSettings s;
  s.Set("resourceNameGCU", std::string("x.com/gcu"))
      .Set("resourceNameDRSGCU", std::string(""))
      .Set("resourceNameVGCU", std::string("x.com/vgcu"))
      .Set("resourceNameGCUMemory", std::string("x.com/mem"))
      .Set("resourceNameGCUCore", std::string(""));
  auto set = backends::enflame::Module().create(s).value();
  EXPECT_EQ(set[0]->Spec().resources.count, "x.com/gcu");
  EXPECT_EQ(set[1]->Spec().resources.count, "x.com/vgcu") << "an empty DRS name falls back to the legacy one";
  EXPECT_EQ(set[1]->Spec().resources.memory, "x.com/mem");
  EXPECT_EQ(set[1]->Spec().resources.cores, "enflame.com/gcu-core");
  VendorSettings off;
  off.Set("resourceNameGCU", std::string(""));
  auto drs_only = backends::enflame::Module().create(off).value();
  ASSERT_EQ(drs_only.size(), 1u) << "an empty GCU name takes no whole cards";
  EXPECT_EQ(drs_only[0]->Vendor(), "Enflame");

  // HAMi's --enflame-* flags are the module's, accepted with no effect; the vendor is no longer
  // unimplemented.
  const VendorModule module = backends::enflame::Module();
  std::vector<std::string> names;
  for (const VendorFlag& f : module.flags) {
    EXPECT_EQ(f.effect, VendorFlag::Effect::kNoEffect) << f.name;
    names.push_back(f.name);
  }
  EXPECT_THAT(names, ::testing::ElementsAre(
                         "enflame-gcu-resource-name", "enflame-drs-gcu-resource-name",
                         "enflame-gcu-memory-resource-name", "enflame-gcu-core-resource-name",
                         "enflame-vgcu-resource-name", "enflame-vgcu-legacy-resource-name",
                         "enflame-vgcu-percentage-resource-name"));
  BackendRegistry registry;
  ASSERT_TRUE(backends::RegisterBuiltinBackends(registry));
  EXPECT_EQ(registry.Unimplemented("enflame"), nullptr);
  EXPECT_NE(registry.Schema("enflame"), nullptr);
}

TEST(Enflame, TheSimulatedPluginListsHamisProfiles) {
  BackendPtr b = Make("Enflame");
  std::vector<DeviceInfo> cards = backends::DemoCards("drs", 2, 6, 40960, 100, "Enflame");
  cards[1].health = false;
  b->AddPluginFacts(cards);
  const NodePublication published = b->Publish(cards);
  EXPECT_EQ(published.resources.at("enflame.com/drs-gcu"), "6") << "the healthy card's slices";
  auto devices = b->Discover(DrsNode("n", *published.annotation)).value();
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0].count, 6);
  EXPECT_EQ(devices[0].devmem, MiB(40960));
  EXPECT_EQ(CardProfiles(devices[0]).size(), 3u);
}

}  // namespace
}  // namespace hami
