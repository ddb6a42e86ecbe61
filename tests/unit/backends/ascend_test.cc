// Huawei Ascend in isolation: the vnpus section (one backend per chip), discovery with NetworkID, requests,
// memory templates, the webhook's mutations and refusals, and the pod annotations. Vectors A1-A11 and the
// worked template values of HAMi v2.10's Ascend backend, with the departures of docs/DECISIONS.md "Ascend"
// (unreadable quantities are errors, an absent or empty register annotation is no devices, the filter refuses
// an odd super-pod 910C count, the visible-devices variable is added once per container).
#include "backends/ascend/ascend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "backends/builtin.h"
#include "backends/common.h"
#include "core/codec/node_devices.h"
#include "tests/support/builders.h"

namespace hami {
namespace {

using ::testing::HasSubstr;
using testing::Ctr;
using testing::Req;
using testing::Request;

const TimePoint kNow = std::chrono::system_clock::from_time_t(1716199325);

Result<std::vector<BackendPtr>> TryCreate(const VendorSettings& settings = {}) {
  BackendRegistry registry;
  backends::RegisterBuiltinBackends(registry).value();
  return registry.Create("vnpus", settings);
}

// The chart's chip `cw`, built the way the binary builds it.
BackendPtr Chip(std::string_view cw, const VendorSettings& settings = {}) {
  auto all = TryCreate(settings).value();
  for (auto& b : all) {
    if (b->Vendor() == cw) return std::move(b);
  }
  throw std::invalid_argument("no chip " + std::string(cw));
}

// One vnpus.configs entry with the chart's resource names.
SettingRecord ChipRecord(const std::string& cw, std::int64_t allocatable, std::int64_t capacity = 0) {
  SettingRecord r;
  r.Set("commonWord", cw)
      .Set("resourceName", "huawei.com/" + cw)
      .Set("resourceMemoryName", "huawei.com/" + cw + "-memory")
      .Set("resourceCoreName", "huawei.com/" + cw + "-core")
      .Set("memoryAllocatable", allocatable);
  if (capacity > 0) r.Set("memoryCapacity", capacity);
  return r;
}

SettingRecord Template(const std::string& name, std::int64_t memory) {
  SettingRecord t;
  t.Set("name", name).Set("memory", memory);
  return t;
}

VendorSettings Configs(std::vector<SettingRecord> chips) {
  return VendorSettings{}.Set("configs", std::move(chips));
}

std::string CreateError(const VendorSettings& settings) {
  auto b = TryCreate(settings);
  return b ? std::string("<created without error>") : b.error().message;
}

ContainerView Npu(const std::string& cw, std::string count, std::string memory = "", std::string core = "") {
  std::map<std::string, std::string> limits{{"huawei.com/" + cw, std::move(count)}};
  if (!memory.empty()) limits["huawei.com/" + cw + "-memory"] = std::move(memory);
  if (!core.empty()) limits["huawei.com/" + cw + "-core"] = std::move(core);
  return Ctr("npu", std::move(limits));
}

PodView SoftSplitPod() {
  PodView pod;
  pod.annotations["huawei.com/vnpu-mode"] = "hami-core";
  return pod;
}

const std::vector<std::string> kChartChips = {"Ascend910A",    "Ascend910B2", "Ascend910B3", "Ascend910B4-1",
                                              "Ascend910B4",   "Ascend310P",  "Ascend910C"};

// --- the section ----------------------------------------------------------------------------------------

TEST(AscendSection, OffByDefaultAndOneBackendPerChartChip) {
  BackendRegistry registry;
  ASSERT_TRUE(backends::RegisterBuiltinBackends(registry));
  EXPECT_FALSE(registry.EnabledByDefault("vnpus")) << "--enable-ascend switches it on, as in HAMi";
  auto all = TryCreate();
  ASSERT_TRUE(all) << all.error().message;
  std::vector<std::string> vendors;
  for (const auto& b : *all) {
    vendors.push_back(b->Vendor());
    EXPECT_EQ(b->Spec().config_section, "vnpus");
  }
  EXPECT_EQ(vendors, kChartChips);
}

TEST(AscendSection, A1KeysPerChip) {
  const auto chip = Chip("Ascend910A");
  const BackendSpec& s = chip->Spec();
  EXPECT_EQ(s.keys.register_annotation, "hami.io/node-register-Ascend910A");
  EXPECT_EQ(s.keys.handshake, "hami.io/node-handshake-Ascend910A");
  EXPECT_EQ(s.keys.use_uuid, "hami.io/use-Ascend910A-uuid");
  EXPECT_EQ(s.keys.nouse_uuid, "hami.io/no-use-Ascend910A-uuid");
  EXPECT_EQ(s.keys.to_allocate, "hami.io/Ascend910A-devices-to-allocate");
  EXPECT_EQ(s.keys.allocated, "hami.io/Ascend910A-devices-allocated");
  EXPECT_EQ(s.keys.node_lock, "hami.io/mutex.lock");
  EXPECT_EQ(s.health, HealthRule::kHandshake);
  EXPECT_EQ(s.resources.count, "huawei.com/Ascend910A");
  EXPECT_EQ(s.resources.memory, "huawei.com/Ascend910A-memory");
  EXPECT_EQ(s.resources.cores, "huawei.com/Ascend910A-core");
}

// Whether the chip places a request of `count` chips by its interconnect rather than the policy's first:
// among candidates 0, 4 and 5 of a node of eight chips (each in a group of four, or in none), the first two
// in order are 0 and 4; the largest group, or the one whole module (4, 5), is 4 and 5.
bool PlacesItself(const Backend& chip, std::int32_t count, bool grouped) {
  DeviceRequest request;
  request.count = count;
  std::vector<DeviceInfo> cards(8);
  for (std::size_t i = 0; i < cards.size(); ++i) {
    cards[i].index = static_cast<std::int32_t>(i);
    if (grouped) cards[i].network = static_cast<std::int32_t>(i / 4);
  }
  if (!chip.Hooks().chooses_cards || !chip.ChoosesCards(ChoiceView{&request, {}, false, 0, {}})) return false;
  const std::vector<const DeviceInfo*> candidates{&cards[0], &cards[4], &cards[5]};
  const CardChoice choice = chip.ChooseCards(candidates, count, ChoiceView{&request, cards, false, 0, {}});
  return choice.chosen != std::vector<std::size_t>{0, 1};
}

TEST(AscendSection, FitRulesPerChipFamily) {
  // 910B: the largest interconnect groups, when every chip has one; 910C: whole modules; 310P: in order.
  EXPECT_TRUE(PlacesItself(*Chip("Ascend910B3"), 2, true));
  EXPECT_FALSE(PlacesItself(*Chip("Ascend910B3"), 2, false));
  EXPECT_FALSE(PlacesItself(*Chip("Ascend910B3"), 1, true));
  EXPECT_TRUE(Chip("Ascend910B3")->Spec().fit.vendor_score_together);
  EXPECT_TRUE(PlacesItself(*Chip("Ascend910C"), 2, false));
  EXPECT_FALSE(PlacesItself(*Chip("Ascend310P"), 2, true));
  EXPECT_FALSE(Chip("Ascend310P")->Spec().fit.vendor_score_together);
  for (const auto& cw : kChartChips) {
    const auto chip = Chip(cw);
    const auto& rule = chip->Spec().fit.soft_split;
    ASSERT_TRUE(rule.has_value()) << cw;
    EXPECT_EQ(rule->pod_annotation, "huawei.com/vnpu-mode");
    EXPECT_EQ(rule->pod_value, "hami-core");
    EXPECT_EQ(rule->node_annotation, "hami-vnpu-core");
    EXPECT_FALSE(rule->offered_by_default);
  }
  VendorSettings global;
  global.Set("hamiVnpuCore", true);
  EXPECT_TRUE(Chip("Ascend910B3", global)->Spec().fit.soft_split->offered_by_default);
}

TEST(AscendSection, ConfiguredChipsReplaceTheChartsAndAreValidated) {
  SettingRecord chip = ChipRecord("MyNpu", 4096);
  chip.Set("templates", std::vector<SettingRecord>{Template("big", 2048), Template("small", 1024)});
  auto one = TryCreate(Configs({chip}));
  ASSERT_TRUE(one) << one.error().message;
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ(one->front()->Vendor(), "MyNpu");
  EXPECT_FALSE(PlacesItself(*one->front(), 2, true));

  EXPECT_EQ(CreateError(Configs({ChipRecord("MyNpu", 4096), ChipRecord("MyNpu", 8192)})),
            "vnpus.configs[1].commonWord: MyNpu is configured already (configs[0])");
  EXPECT_THAT(CreateError(Configs({ChipRecord("bad/name", 4096)})),
              HasSubstr("vnpus.configs[0].commonWord: \"bad/name\" is not a chip name"));
  EXPECT_THAT(CreateError(Configs({ChipRecord(std::string(44, 'a'), 4096)})),
              HasSubstr("vnpus.configs[0].commonWord"));
  EXPECT_EQ(CreateError(Configs({ChipRecord("N", 0)})),
            "vnpus.configs[0].memoryAllocatable: 0 is not a positive number of MiB");
  EXPECT_EQ(CreateError(Configs({ChipRecord("N", 4096, 2048)})),
            "vnpus.configs[0].memoryCapacity: 2048 MiB is below memoryAllocatable (4096 MiB)");
  SettingRecord huge = ChipRecord("N", 4096);
  huge.Set("templates", std::vector<SettingRecord>{Template("t", 8192)});
  EXPECT_EQ(CreateError(Configs({huge})),
            "vnpus.configs[0].templates[0]: t (8192 MiB) is larger than the card (4096 MiB)");
  SettingRecord runtime = ChipRecord("N", 4096);
  runtime.Set("runtimeClassName", "Not A Name");
  EXPECT_THAT(CreateError(Configs({runtime})), HasSubstr("vnpus.configs[0].runtimeClassName"));
  SettingRecord negative = ChipRecord("N", 4096);
  negative.Set("memoryFactor", std::int64_t{-1});
  EXPECT_THAT(CreateError(Configs({negative})), HasSubstr("vnpus.configs[0].memoryFactor: -1 is negative"));
  EXPECT_TRUE(TryCreate(Configs({}))->empty()) << "an empty list configures no chip";
  EXPECT_THAT(CreateError(VendorSettings{}.Set("runtimeClassName", std::string("Not A Name"))),
              HasSubstr("vnpus.runtimeClassName"));
}

TEST(AscendSection, TheChartsChipsTakeTheSectionsRuntimeClassAndEnv) {
  VendorSettings s;
  s.Set("runtimeClassName", std::string("ascend")).Set("overwriteEnv", true);
  auto backends = TryCreate(s).value();
  ASSERT_EQ(backends.size(), kChartChips.size());
  for (const auto& b : backends) {
    PodView pod;
    ContainerView plain = Ctr("plain", {});
    EXPECT_FALSE(*b->Admit(plain, pod));
    EXPECT_EQ(plain.env.size(), 1u) << b->Vendor();
    ContainerView asking = Npu(b->Vendor(), "2");
    ASSERT_TRUE(*b->Admit(asking, pod)) << b->Vendor();
    EXPECT_EQ(pod.runtime_class_name, "ascend") << b->Vendor();
  }
}

// --- discovery --------------------------------------------------------------------------------------------

NodeView Registered(const std::string& cw, std::string manifest) {
  NodeView n;
  n.name = "n";
  n.annotations["hami.io/node-register-" + cw] = std::move(manifest);
  return n;
}

TEST(AscendDiscover, A2ManifestAndItsNetwork) {
  auto b = Chip("Ascend910A");
  auto one = b->Discover(Registered("Ascend910A", R"([{"ID":"GPU-0","Count":4,"Devmem":8738,"Devcore":8,
      "Type":"huawei.com/Ascend910","Numa":0,"Health":true}])"));
  ASSERT_TRUE(one) << one.error().message;
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].id, "GPU-0");
  EXPECT_EQ((*one)[0].count, 4);
  EXPECT_EQ((*one)[0].devmem, MiB(8738));
  EXPECT_FALSE((*one)[0].network.has_value());

  auto grouped = b->Discover(Registered("Ascend910A", R"([{"id":"a","count":4,"devmem":65536,"devcore":20,
      "type":"Ascend910A","health":true,"custominfo":{"NetworkID":1}},
      {"id":"b","count":4,"devmem":65536,"health":true,"custominfo":{"NetworkID":0.0,"Other":"x"}},
      {"id":"c","count":4,"devmem":65536,"health":true,"custominfo":{}}])"));
  ASSERT_TRUE(grouped) << grouped.error().message;
  EXPECT_EQ((*grouped)[0].network, 1);
  EXPECT_EQ((*grouped)[1].network, 0) << "Go reads custominfo numbers as floats: 0.0 is network 0";
  EXPECT_FALSE((*grouped)[2].network.has_value());
}

TEST(AscendDiscover, A2AbsentEmptyAndMalformed) {
  auto b = Chip("Ascend910A");
  NodeView bare;
  bare.name = "n";
  EXPECT_TRUE(b->Discover(bare)->empty()) << "no plugin of this chip: no devices, no error";
  EXPECT_TRUE(b->Discover(Registered("Ascend910A", "[]"))->empty());
  auto empty = b->Discover(Registered("Ascend910A", ""));
  ASSERT_FALSE(empty);
  EXPECT_THAT(empty.error().message, HasSubstr("hami.io/node-register-Ascend910A"));
  for (const char* bad : {R"([{"id":"a","custominfo":{"NetworkID":1.5}}])",
                          R"([{"id":"a","custominfo":{"NetworkID":"1"}}])",
                          R"([{"id":"a","custominfo":{"NetworkID":-1}}])",
                          R"([{"id":"a","custominfo":[1]}])"}) {
    auto r = b->Discover(Registered("Ascend910A", bad));
    ASSERT_FALSE(r) << bad;
    EXPECT_THAT(r.error().message, HasSubstr("custominfo")) << bad;
  }
  // Another chip's annotation is not this chip's.
  EXPECT_TRUE(
      Chip("Ascend910B4")->Discover(Registered("Ascend910B4-1", R"([{"id":"a","health":true}])"))->empty());
}

TEST(AscendPublish, NetworkIdsAsThePluginNumbersThem) {
  std::vector<DeviceInfo> cards = backends::DemoCards("npu", 8, 4, 65536, 20, "Ascend910B3");
  auto networks = [&](std::string_view cw) {
    auto chip = Chip(cw);
    std::vector<DeviceInfo> listed = cards;
    chip->AddPluginFacts(listed);
    auto published = chip->Publish(listed);
    EXPECT_TRUE(published.annotation.has_value());
    auto back = codec::DecodeDeviceManifest(*published.annotation).value();
    std::vector<std::optional<std::int32_t>> out;
    for (const auto& d : back) out.push_back(d.network);
    return out;
  };
  using N = std::optional<std::int32_t>;
  EXPECT_EQ(networks("Ascend910B3"), (std::vector<N>{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(networks("Ascend910C"), (std::vector<N>(8, 0)));
  EXPECT_EQ(networks("Ascend310P"), (std::vector<N>(8, std::nullopt)));
  EXPECT_EQ(Chip("Ascend910B3")->Publish(cards).resources.at("huawei.com/Ascend910B3"), "32");
  // Publish itself adds nothing: what Discover read publishes back the same (the fuzzer's round trip).
  auto plain = codec::DecodeDeviceManifest(*Chip("Ascend910B3")->Publish(cards).annotation).value();
  EXPECT_FALSE(plain[0].network.has_value());
}

// --- requests ---------------------------------------------------------------------------------------------

TEST(AscendRequest, A3Vectors) {
  auto a = Chip("Ascend910A");
  EXPECT_EQ(Request(*a, Ctr("none", {})), std::nullopt);
  EXPECT_EQ(Request(*a, Npu("Ascend910A", "2", "8738")), Req("Ascend910A", 2, 8738, 0, 0));
  EXPECT_EQ(Request(*a, Npu("Ascend910A", "2")), Req("Ascend910A", 2, 0, 100, 0));
  EXPECT_EQ(Request(*Chip("Ascend910B3"), Npu("Ascend910B3", "1", "15360", "10")),
            Req("Ascend910B3", 1, 15360, 0, 10));
  // No template rounding here: the webhook has written the rounded value already.
  EXPECT_EQ(Request(*a, Npu("Ascend910A", "1", "2000")), Req("Ascend910A", 1, 2000, 0, 0));
  ContainerView in_requests = Ctr("r", {});
  in_requests.requests["huawei.com/Ascend910A"] = "1";
  in_requests.requests["huawei.com/Ascend910A-memory"] = "4369";
  EXPECT_EQ(Request(*a, in_requests), Req("Ascend910A", 1, 4369, 0, 0));
}

TEST(AscendRequest, A3MemoryFactor) {
  for (const auto& [factor, mem] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {10, 1280}, {100, 12800}, {0, 128}, {1, 128}}) {
    SettingRecord chip = ChipRecord("N", 65536);
    chip.Set("memoryFactor", factor);
    auto b = TryCreate(Configs({chip})).value();
    EXPECT_EQ(Request(*b.front(), Npu("N", "1", "128")), Req("N", 1, mem, 0, 0)) << "factor " << factor;
  }
}

TEST(AscendRequest, A3UnreadableQuantitiesAreRefusedByName) {
  // Upstream turns each of these into an empty request (the pod then asks for nothing); here each is an
  // error naming the resource.
  auto a = Chip("Ascend910A");
  const std::vector<std::pair<ContainerView, std::string>> cases = {
      {Npu("Ascend910A", "1", "16Gi"), "huawei.com/Ascend910A-memory"},
      {Npu("Ascend910A", "1", "16Gi", "10"), "huawei.com/Ascend910A-memory"},
      {Npu("Ascend910A", "1", "-1m"), "huawei.com/Ascend910A-memory"},
      {Npu("Ascend910A", "1", "-100"), "huawei.com/Ascend910A-memory"},
      {Npu("Ascend910A", "2200000000"), "huawei.com/Ascend910A"},
      {Npu("Ascend910A", "1", "", "-1"), "huawei.com/Ascend910A-core"},
      {Npu("Ascend910A", "1", "", "2200000000"), "huawei.com/Ascend910A-core"},
  };
  for (const auto& [c, resource] : cases) {
    auto r = a->RequestFor(c);
    ASSERT_FALSE(r) << resource;
    EXPECT_THAT(r.error().message, HasSubstr(resource));
  }
  SettingRecord chip = ChipRecord("N", 65536);
  chip.Set("memoryFactor", std::int64_t{10});
  auto scaled = TryCreate(Configs({chip})).value();
  auto r = scaled.front()->RequestFor(Npu("N", "1", "300000000"));
  ASSERT_FALSE(r) << "300000000 units of 10 MiB overflow";
  EXPECT_THAT(r.error().message, HasSubstr("huawei.com/N-memory"));
}

// --- templates --------------------------------------------------------------------------------------------

backends::ascend::Chip ChartChip(std::string_view cw) {
  for (const auto& c : backends::ascend::ChartChips()) {
    if (c.common_word == cw) return c;
  }
  throw std::invalid_argument(std::string(cw));
}

TEST(AscendTemplates, WorkedValues) {
  struct Case {
    const char* chip;
    std::int64_t asked, memory;
    const char* name;
  };
  const Case cases[] = {
      {"Ascend910A", 2000, 2184, "vir02"},          {"Ascend910A", 2185, 4369, "vir04"},
      {"Ascend910A", 8738, 8738, "vir08"},          {"Ascend910A", 17477, 32768, ""},
      {"Ascend910A", 20000, 32768, ""},             {"Ascend910A", 40000, 0, ""},
      {"Ascend910A", 0, 2184, "vir02"},             {"Ascend910B2", 1, 8192, "vir03_1c_8g"},
      {"Ascend910B2", 16385, 32768, "vir12_3c_32g"}, {"Ascend910B2", 32769, 65536, ""},
      {"Ascend910B2", 65537, 0, ""},                {"Ascend910B3", 2000, 16384, "vir05_1c_16g"},
      {"Ascend910B4-1", 2000, 16384, "vir05_1c_16g"}, {"Ascend910C", 16385, 32768, "vir10_3c_32g"},
      {"Ascend910B3", 32769, 65536, ""},            {"Ascend910B4", 8193, 16384, "vir10_3c_16g"},
      {"Ascend910B4", 16385, 32768, ""},            {"Ascend910B4", 32769, 0, ""},
      {"Ascend310P", 3072, 3072, "vir01"},          {"Ascend310P", 6145, 12288, "vir04"},
      {"Ascend310P", 12289, 21527, ""},             {"Ascend310P", 24576, 21527, ""},
      {"Ascend310P", 24577, 0, ""},
  };
  for (const Case& c : cases) {
    const auto r = backends::ascend::RoundToTemplate(ChartChip(c.chip), c.asked);
    EXPECT_EQ(r.memory, c.memory) << c.chip << " " << c.asked;
    EXPECT_EQ(r.name, c.name) << c.chip << " " << c.asked;
  }
}

TEST(AscendTemplates, The910B4_1CarriesItsOwnSixteenAndThirtyTwoGiB) {
  // Upstream once copied the 910B4's 8/16 GiB templates into the 64 GiB 910B4-1 (#1497): not here.
  const auto chip = ChartChip("Ascend910B4-1");
  ASSERT_EQ(chip.templates.size(), 2u);
  EXPECT_EQ(chip.templates[0].memory, 16384);
  EXPECT_EQ(chip.templates[1].memory, 32768);
  EXPECT_EQ(chip.memory_allocatable, 65536);
}

// --- the webhook ------------------------------------------------------------------------------------------

Result<bool> Admit(const Backend& b, ContainerView& c, PodView& pod) { return b.Admit(c, pod); }

TEST(AscendAdmit, A4MemoryIsRoundedAndWrittenIntoLimitsAndRequests) {
  auto a = Chip("Ascend910A");
  PodView pod;
  ContainerView none = Ctr("none", {});
  EXPECT_FALSE(*Admit(*a, none, pod));

  ContainerView whole = Npu("Ascend910A", "1", "20000");
  ASSERT_TRUE(*Admit(*a, whole, pod));
  EXPECT_EQ(whole.limits.at("huawei.com/Ascend910A-memory"), "32768");
  EXPECT_EQ(whole.requests.at("huawei.com/Ascend910A-memory"), "32768");

  ContainerView vnpu = Npu("Ascend910A", "1", "8738");
  ASSERT_TRUE(*Admit(*a, vnpu, pod));
  EXPECT_EQ(vnpu.requests.at("huawei.com/Ascend910A-memory"), "8738");

  ContainerView count_only = Npu("Ascend910A", "1");
  ASSERT_TRUE(*Admit(*a, count_only, pod));
  EXPECT_EQ(count_only.limits.at("huawei.com/Ascend910A-memory"), "32768");
  EXPECT_EQ(count_only.requests.at("huawei.com/Ascend910A-memory"), "32768");

  ContainerView too_big = Npu("Ascend910A", "2", "40000");
  auto big = Admit(*a, too_big, pod);
  ASSERT_FALSE(big);
  EXPECT_THAT(big.error().message, HasSubstr("huawei.com/Ascend910A-memory 40000 is invalid"));

  ContainerView multi = Npu("Ascend910A", "2", "8738");
  auto m = Admit(*a, multi, pod);
  ASSERT_FALSE(m);
  EXPECT_THAT(m.error().message, HasSubstr("vNPU not supported for multiple devices"));

  ContainerView two_whole = Npu("Ascend910A", "2", "32768");
  EXPECT_TRUE(*Admit(*a, two_whole, pod)) << "several whole cards are fine";

  ContainerView in_requests = Ctr("r", {});
  in_requests.requests["huawei.com/Ascend910A"] = "1";
  EXPECT_FALSE(*Admit(*a, in_requests, pod)) << "the count must be in limits, as upstream reads it";
}

TEST(AscendAdmit, A5SuperPodPairs) {
  auto c = Chip("Ascend910C");
  PodView pod;
  ContainerView one = Npu("Ascend910C", "1");
  one.requests["huawei.com/Ascend910C"] = "1";
  ASSERT_TRUE(*Admit(*c, one, pod));
  EXPECT_EQ(one.limits.at("huawei.com/Ascend910C"), "2");
  EXPECT_EQ(one.requests.at("huawei.com/Ascend910C"), "2");

  ContainerView three = Npu("Ascend910C", "3");
  auto odd = Admit(*c, three, pod);
  ASSERT_FALSE(odd);
  EXPECT_THAT(odd.error().message, HasSubstr("Ascend910C device request must be 1 or 2*n, got 3"));

  ContainerView four = Npu("Ascend910C", "4");
  ASSERT_TRUE(*Admit(*c, four, pod));
  EXPECT_EQ(four.limits.at("huawei.com/Ascend910C"), "4");

  // A vNPU is rounded up to the module too, as upstream: two vNPUs of the template, one on each NPU.
  ContainerView vnpu = Npu("Ascend910C", "1", "16384");
  vnpu.requests = vnpu.limits;
  ASSERT_TRUE(*Admit(*c, vnpu, pod));
  EXPECT_EQ(vnpu.limits.at("huawei.com/Ascend910C"), "2");
  EXPECT_EQ(vnpu.requests.at("huawei.com/Ascend910C"), "2");
  EXPECT_EQ(vnpu.limits.at("huawei.com/Ascend910C-memory"), "16384");
  EXPECT_EQ(vnpu.requests.at("huawei.com/Ascend910C-memory"), "16384");
  EXPECT_EQ(Request(*c, vnpu), Req("Ascend910C", 2, 16384, 0, 0)) << "what the filter then reads";
  PodView soft = SoftSplitPod();
  ContainerView shared = Npu("Ascend910C", "1", "20000");
  ASSERT_TRUE(*Admit(*c, shared, soft));
  EXPECT_EQ(shared.limits.at("huawei.com/Ascend910C"), "2") << "soft split too";
  EXPECT_EQ(shared.limits.at("huawei.com/Ascend910C-memory"), "20000");

  // The odd count comes first, before the other checks (upstream's order).
  ContainerView odd_cores = Npu("Ascend910C", "3", "", "10");
  EXPECT_THAT(Admit(*c, odd_cores, pod).error().message, HasSubstr("must be 1 or 2*n, got 3"));

  // A pod the webhook did not see: the filter refuses an odd count rather than split a module.
  for (const char* n : {"1", "3"}) {
    auto r = c->RequestFor(Npu("Ascend910C", n));
    ASSERT_FALSE(r) << n;
    EXPECT_THAT(r.error().message,
                HasSubstr(std::string("allocated whole modules of 2 NPUs, so the count must be even, got ") + n))
        << n;
  }
  EXPECT_EQ(Request(*c, Npu("Ascend910C", "2")), Req("Ascend910C", 2, 0, 100, 0));

  // Without superPod a 910C is an ordinary chip.
  SettingRecord plain = ChipRecord("Ascend910C", 65536);
  plain.Set("templates", std::vector<SettingRecord>{Template("vir05_1c_16g", 16384)});
  auto no_pod = TryCreate(Configs({plain})).value();
  ContainerView single = Npu("Ascend910C", "1", "16384");
  ASSERT_TRUE(*Admit(*no_pod.front(), single, pod));
  EXPECT_EQ(single.limits.at("huawei.com/Ascend910C"), "1");
  ContainerView three_plain = Npu("Ascend910C", "3");
  EXPECT_TRUE(*Admit(*no_pod.front(), three_plain, pod));
}

TEST(AscendAdmit, A6SoftSplitKeepsMemoryAndCores) {
  SettingRecord chip = ChipRecord("Ascend910A", 32768);  // no templates
  auto a = std::move(TryCreate(Configs({chip})).value().front());
  PodView soft = SoftSplitPod();
  ContainerView c = Npu("Ascend910A", "1", "15360", "20");
  ASSERT_TRUE(*Admit(*a, c, soft));
  EXPECT_EQ(c.limits.at("huawei.com/Ascend910A-memory"), "15360");
  EXPECT_EQ(c.limits.at("huawei.com/Ascend910A-core"), "20");

  PodView hard;
  ContainerView h = Npu("Ascend910A", "1", "15360");
  ASSERT_TRUE(*Admit(*a, h, hard));
  EXPECT_EQ(h.limits.at("huawei.com/Ascend910A-memory"), "32768") << "no template: the whole card";
  EXPECT_FALSE(h.limits.contains("huawei.com/Ascend910A-core"));

  for (const char* cores : {"10", "25"}) {
    ContainerView bad = Npu("Ascend910A", "1", "", cores);
    auto r = Admit(*a, bad, hard);
    ASSERT_FALSE(r) << cores;
    EXPECT_THAT(r.error().message, HasSubstr("huawei.com/Ascend910A-core is only supported in hami-core"));
  }
  ContainerView zero = Npu("Ascend910A", "1", "", "0");
  EXPECT_TRUE(*Admit(*a, zero, hard)) << "a core of 0 is allowed (#2026)";
  ContainerView soft_cores = Npu("Ascend910A", "1", "", "10");
  EXPECT_TRUE(*Admit(*a, soft_cores, soft));
  ContainerView soft_multi = Npu("Ascend910A", "2", "4096");
  EXPECT_TRUE(*Admit(*a, soft_multi, soft)) << "soft split shares cards by memory: several are fine";
}

TEST(AscendAdmit, RuntimeClassAndVisibleDevicesOncePerContainer) {
  std::vector<SettingRecord> chips;
  for (const char* cw : {"ChipA", "ChipB"}) {
    SettingRecord r = ChipRecord(cw, 4096);
    r.Set("overwriteEnv", true).Set("runtimeClassName", std::string("ascend"));
    chips.push_back(r);
  }
  auto backends = TryCreate(Configs(chips)).value();
  PodView pod;
  ContainerView plain = Ctr("plain", {});
  for (const auto& b : backends) EXPECT_FALSE(*Admit(*b, plain, pod));
  ASSERT_EQ(plain.env.size(), 1u) << "one variable, not one per chip";
  EXPECT_EQ(plain.env[0].name, "ASCEND_VISIBLE_DEVICES");
  EXPECT_EQ(plain.env[0].value, "");
  EXPECT_FALSE(pod.runtime_class_name.has_value()) << "only pods that use a chip get its runtime class";

  // The variable's last entry is what the container gets: a value the user set is overridden, as upstream's
  // appended entry does; an empty one last already is left alone.
  ContainerView chosen = Ctr("chosen", {});
  chosen.env = {{"ASCEND_VISIBLE_DEVICES", "0"}, {"FOO", "bar"}};
  for (const auto& b : backends) EXPECT_FALSE(*Admit(*b, chosen, pod));
  EXPECT_EQ(chosen.env, (std::vector<EnvVar>{{"ASCEND_VISIBLE_DEVICES", "0"}, {"FOO", "bar"},
                                             {"ASCEND_VISIBLE_DEVICES", ""}}));
  ContainerView hidden = Ctr("hidden", {});
  hidden.env = {{"ASCEND_VISIBLE_DEVICES", ""}};
  for (const auto& b : backends) EXPECT_FALSE(*Admit(*b, hidden, pod));
  EXPECT_EQ(hidden.env.size(), 1u);

  // A container with NPUs of one chip gets nothing from the other chip's overwriteEnv: after the device
  // plugin's value, an empty one would hide the NPUs it was given (upstream appends it).
  ContainerView holder = Npu("ChipB", "1");
  EXPECT_FALSE(*Admit(*backends[0], holder, pod));
  EXPECT_TRUE(*Admit(*backends[1], holder, pod));
  EXPECT_TRUE(holder.env.empty());

  ContainerView asking = Npu("ChipA", "1");
  ASSERT_TRUE(*Admit(*backends[0], asking, pod));
  EXPECT_EQ(pod.runtime_class_name, "ascend");
  PodView named;
  named.runtime_class_name = "mine";
  ContainerView again = Npu("ChipA", "1");
  ASSERT_TRUE(*Admit(*backends[0], again, named));
  EXPECT_EQ(named.runtime_class_name, "mine") << "a pod's own runtime class is kept";
}

// --- pod annotations --------------------------------------------------------------------------------------

ContainerDevice Dev(std::int32_t index, std::string uuid, std::string vendor, std::int64_t mem,
                    std::int64_t cores) {
  return ContainerDevice{index, std::move(uuid), std::move(vendor), MiB(mem), Cores(cores), std::nullopt};
}

TEST(AscendAnnotate, A11RuntimeJsonAndPodKeys) {
  auto a = Chip("Ascend910A");
  Annotations out;
  a->Annotate(PodView{}, {{Dev(0, "device-0", "Ascend910A", 8738, 1)}}, {}, kNow, out);
  EXPECT_EQ(out.at("huawei.com/Ascend910A"),
            R"([{"UUID":"device-0","temp":"vir08","memory":8738,"core":1}])");
  EXPECT_EQ(out.at("hami.io/Ascend910A-devices-allocated"), "device-0,Ascend910A,8738,1:;");
  EXPECT_EQ(out.at("hami.io/Ascend910A-devices-to-allocate"), "device-0,Ascend910A,8738,1:;");
  EXPECT_EQ(out.at("predicate-time"), "1716199325");

  Annotations soft;
  Chip("Ascend910B3")
      ->Annotate(SoftSplitPod(), {{Dev(1, "ascend-uuid-1", "Ascend910B3", 8192, 5)}}, {}, kNow, soft);
  EXPECT_EQ(soft.at("huawei.com/Ascend910B3"), R"([{"UUID":"ascend-uuid-1","memory":8192,"core":5}])");

  // Whole cards carry no template; zero cores are left out; containers are flattened in order.
  Annotations whole;
  a->Annotate(PodView{},
              {{Dev(0, "d0", "Ascend910A", 32768, 0)}, {}, {Dev(1, "d1", "Ascend910A", 2184, 0)}}, {}, kNow,
              whole);
  EXPECT_EQ(whole.at("huawei.com/Ascend910A"),
            R"([{"UUID":"d0","memory":32768},{"UUID":"d1","temp":"vir02","memory":2184}])");
  EXPECT_EQ(whole.at("hami.io/Ascend910A-devices-allocated"),
            "d0,Ascend910A,32768,0:;;d1,Ascend910A,2184,0:;");
}

}  // namespace
}  // namespace hami
