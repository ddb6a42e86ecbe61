// Iluvatar in isolation and through the scheduler: the iluvatars list (one backend per chip; the chart's
// four when absent), discovery in the legacy colon format, requests in 256 MiB units, the webhook's cores for
// several cards and the runtime's container-name variable, and the fit. Vectors I1-I6 of HAMi v2.10's
// Iluvatar backend, with the departures of docs/DECISIONS.md "Iluvatar".
#include "backends/iluvatar/iluvatar.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "backends/common.h"
#include "core/scheduler.h"
#include "tests/support/builders.h"

namespace hami {
namespace {

using ::testing::HasSubstr;
using testing::Ctr;
using testing::Pod;
using testing::Req;
using testing::Request;

const TimePoint kNow = std::chrono::system_clock::from_time_t(1716199325);
const char* kCard = "GPU-bad51c5a-ed4c-591d-91bf-c04a12e19eae,10,8192,100,MR-V100,0,true:";

Result<std::vector<BackendPtr>> TryCreate(const VendorSettings& settings = {}) {
  return backends::iluvatar::Module().create(settings);
}

BackendPtr Chip(std::string_view cw, const VendorSettings& settings = {}) {
  for (auto& b : TryCreate(settings).value()) {
    if (b->Vendor() == cw) return std::move(b);
  }
  throw std::invalid_argument("no chip " + std::string(cw));
}

TEST(Iluvatar, TheChartsFourChipsWhenTheListIsAbsent) {
  std::vector<std::string> chips;
  for (const auto& b : TryCreate().value()) chips.push_back(b->Vendor());
  EXPECT_EQ(chips, (std::vector<std::string>{"MR-V100", "MR-V50", "BI-V150", "BI-V100"}));
  const BackendPtr chip = Chip("BI-V150");
  const BackendSpec& s = chip->Spec();
  EXPECT_EQ(s.resources.count, "iluvatar.ai/BI-V150-vgpu");
  EXPECT_EQ(s.resources.memory, "iluvatar.ai/BI-V150.vMem");
  EXPECT_EQ(s.resources.cores, "iluvatar.ai/BI-V150.vCore");
  EXPECT_EQ(s.resources.memory_factor, 256);
  EXPECT_EQ(s.keys.register_annotation, "hami.io/node-BI-V150-register");
  EXPECT_EQ(s.keys.handshake, "hami.io/node-handshake-BI-V150");
  EXPECT_EQ(s.keys.allocated, "hami.io/BI-V150-devices-allocated");
  EXPECT_EQ(s.keys.to_allocate, "hami.io/BI-V150-devices-to-allocate");
  EXPECT_EQ(s.keys.use_uuid, "hami.io/use-BI-V150-uuid");
  EXPECT_EQ(s.keys.nouse_uuid, "hami.io/no-use-BI-V150-uuid");
  EXPECT_EQ(s.keys.node_lock, "hami.io/mutex.lock");
  EXPECT_EQ(s.health, HealthRule::kHandshake);
}

SettingRecord ChipRecord(const std::string& cw, const std::string& count) {
  SettingRecord r;
  r.Set("commonWord", cw).Set("resourceCountName", count);
  return r;
}

TEST(Iluvatar, ConfiguredChipsAndTheirErrors) {
  VendorSettings one;
  one.Set("chips", std::vector<SettingRecord>{ChipRecord("X-1", "example.com/x1")});
  auto built = TryCreate(one).value();
  ASSERT_EQ(built.size(), 1u);
  EXPECT_EQ(built[0]->Spec().resources.count, "example.com/x1");
  VendorSettings none;
  none.Set("chips", std::vector<SettingRecord>{});
  EXPECT_TRUE(TryCreate(none).value().empty()) << "an empty list configures no chip";

  VendorSettings twice;
  twice.Set("chips", std::vector<SettingRecord>{ChipRecord("X-1", "a/b"), ChipRecord("X-1", "c/d")});
  EXPECT_EQ(TryCreate(twice).error().message,
            "iluvatars[1].commonWord: X-1 is configured already (iluvatars[0])");
  VendorSettings hostile;
  hostile.Set("chips", std::vector<SettingRecord>{ChipRecord("a/../b", "a/b")});
  EXPECT_THAT(TryCreate(hostile).error().message, HasSubstr("iluvatars[0].commonWord"));
  VendorSettings nameless;
  nameless.Set("chips", std::vector<SettingRecord>{ChipRecord("X-1", "")});
  EXPECT_EQ(TryCreate(nameless).error().message, "iluvatars[0].resourceCountName: must not be empty");
}

TEST(Iluvatar, I1DiscoveryInTheLegacyColonFormat) {
  BackendPtr b = Chip("MR-V100");
  NodeView n;
  n.name = "n1";
  EXPECT_TRUE(b->Discover(n).value().empty()) << "no plugin of this chip here";
  n.annotations["hami.io/node-MR-V100-register"] = kCard;
  auto devices = b->Discover(n).value();
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0].id, "GPU-bad51c5a-ed4c-591d-91bf-c04a12e19eae");
  EXPECT_EQ(devices[0].count, 10);
  EXPECT_EQ(devices[0].devmem, MiB(8192));
  EXPECT_EQ(devices[0].devcore, Cores(100));
  EXPECT_EQ(devices[0].type, "MR-V100");
  EXPECT_TRUE(devices[0].health);
  EXPECT_EQ(devices[0].mode, "hami-core");
  NodeView again = n;
  again.annotations["hami.io/node-MR-V100-register"] = b->Publish(devices).annotation.value();
  EXPECT_EQ(b->Discover(again).value(), devices) << "what the simulated plugin writes reads back";
  for (const char* bad : {"[]", ""}) {
    n.annotations["hami.io/node-MR-V100-register"] = bad;
    auto err = b->Discover(n);
    ASSERT_FALSE(err) << bad;
    EXPECT_THAT(err.error().message, HasSubstr("hami.io/node-MR-V100-register"));
  }
  n.annotations["hami.io/node-MR-V100-register"] = ":";
  EXPECT_TRUE(b->Discover(n).value().empty());
}

TEST(Iluvatar, I5Requests) {
  BackendPtr b = Chip("MR-V100");
  EXPECT_FALSE(Request(*b, Ctr("c", {})));
  EXPECT_EQ(Request(*b, Ctr("c", {{"iluvatar.ai/MR-V100-vgpu", "1"},
                                  {"iluvatar.ai/MR-V100.vMem", "1000"},
                                  {"iluvatar.ai/MR-V100.vCore", "100"}})),
            Req("MR-V100", 1, 256000, 0, 100));
  EXPECT_EQ(Request(*b, Ctr("c", {{"iluvatar.ai/MR-V100-vgpu", "1"}})), Req("MR-V100", 1, 0, 100, 0));
  for (const char* unreadable : {"16Gi", "16.0Gi", "-1"}) {
    auto r = b->RequestFor(
        Ctr("c", {{"iluvatar.ai/MR-V100-vgpu", "1"}, {"iluvatar.ai/MR-V100.vMem", unreadable}}));
    ASSERT_FALSE(r) << unreadable << ": refused, not dropped";
    EXPECT_THAT(r.error().message, HasSubstr("iluvatar.ai/MR-V100.vMem"));
  }
  // The webhook's cores for two cards (200) are 100 per card, as the cards are charged.
  EXPECT_EQ(Request(*b, Ctr("c", {{"iluvatar.ai/MR-V100-vgpu", "2"}, {"iluvatar.ai/MR-V100.vCore", "200"}})),
            Req("MR-V100", 2, 0, 100, 100));
}

TEST(Iluvatar, I3AdmissionTakesSeveralCardsWholeAndNamesTheContainer) {
  BackendPtr b = Chip("MR-V100");
  PodView pod;
  ContainerView two = Ctr("app", {{"iluvatar.ai/MR-V100-vgpu", "2"}, {"iluvatar.ai/MR-V100.vCore", "1"}});
  EXPECT_TRUE(b->Admit(two, pod).value());
  EXPECT_EQ(two.limits.at("iluvatar.ai/MR-V100.vCore"), "200");
  ASSERT_EQ(two.env.size(), 1u);
  EXPECT_EQ(two.env[0], (EnvVar{"SOL_CONTINER_NAME", "app"}));
  EXPECT_TRUE(b->Admit(two, pod).value());
  EXPECT_EQ(two.env.size(), 1u) << "added once";

  ContainerView one = Ctr("one", {{"iluvatar.ai/MR-V100-vgpu", "1"}, {"iluvatar.ai/MR-V100.vCore", "30"}});
  EXPECT_TRUE(b->Admit(one, pod).value());
  EXPECT_EQ(one.limits.at("iluvatar.ai/MR-V100.vCore"), "30");
  ContainerView plain = Ctr("plain", {});
  EXPECT_FALSE(b->Admit(plain, pod).value());
  EXPECT_TRUE(plain.env.empty());
  ContainerView bad = Ctr("bad", {{"iluvatar.ai/MR-V100-vgpu", "two"}});
  EXPECT_THAT(b->Admit(bad, pod).error().message, HasSubstr("iluvatar.ai/MR-V100-vgpu"));
}

TEST(Iluvatar, I2AnnotationsAreThePodDeviceEncoding) {
  BackendPtr b = Chip("MR-V100");
  Annotations out;
  const PodVendorDevices devices{
      {ContainerDevice{0, "k8s-gpu-iluvatar-0", "MR-V100", MiB(0), Cores(0), std::nullopt}}};
  b->Annotate(PodView{}, devices, {}, kNow, out);
  EXPECT_EQ(out.at("hami.io/MR-V100-devices-allocated"), "k8s-gpu-iluvatar-0,MR-V100,0,0:;");
  EXPECT_EQ(out.at("hami.io/MR-V100-devices-to-allocate"), "k8s-gpu-iluvatar-0,MR-V100,0,0:;");
}

TEST(IluvatarFit, I6TheSharedSkeleton) {
  const Backends backends = testing::BuiltinBackends({{"iluvatars", VendorSettings{}}});
  ClusterState state(backends);
  NodeView n;
  n.name = "n";
  n.annotations["hami.io/node-MR-V100-register"] =
      "dev-0,100,128,100,MR-V100,0,true:dev-1,100,128,100,MR-V100,0,true:";
  n.allocatable["iluvatar.ai/MR-V100-vgpu"] = "200";
  state.UpsertNode(n);
  Scheduler s(state, SchedulerOptions{});
  const auto pod = [](std::string mem, std::string cores, std::map<std::string, std::string> a = {}) {
    return Pod("p",
               {Ctr("c", {{"iluvatar.ai/MR-V100-vgpu", "1"}, {"iluvatar.ai/MR-V100.vMem", mem},
                          {"iluvatar.ai/MR-V100.vCore", cores}})},
               {}, std::move(a));
  };
  // 128 MiB cards: a quarter of a unit does not exist, so the cards are asked by percent here.
  const PodView by_percent =
      Pod("p", {Ctr("c", {{"iluvatar.ai/MR-V100-vgpu", "1"}, {"iluvatar.ai/MR-V100.vCore", "50"}})});
  auto fits = s.Filter(by_percent, {"n"}, kNow);
  ASSERT_EQ(fits.kind, FilterOutcome::Kind::kScheduled);
  EXPECT_EQ(fits.devices.at("MR-V100").at(0).at(0).uuid, "dev-1");
  EXPECT_EQ(s.Filter(pod("2", "50"), {"n"}, kNow).failed_nodes.at("n"), "2/2 CardInsufficientMemory");
  testing::Hold(state, "h", "n", "MR-V100", "dev-0", 1, 0, 0);
  EXPECT_EQ(s.Filter(pod("0", "10", {{"hami.io/gpu-scheduler-policy", "mutex"},
                                     {"hami.io/use-MR-V100-uuid", "dev-0"}}),
                     {"n"}, kNow)
                .failed_nodes.at("n"),
            "1/2 CardUuidMismatch, 1/2 ExclusiveDeviceAllocateConflict");
}

TEST(IluvatarFit, OnlyWithItsSwitch) {
  for (const auto& b : testing::BuiltinBackends()) {
    EXPECT_NE(b->Spec().config_section, "iluvatars") << b->Vendor() << " built without --enable-iluvatar";
  }
}

}  // namespace
}  // namespace hami
