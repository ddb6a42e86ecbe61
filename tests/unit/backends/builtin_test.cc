// The built-in vendors together: the registration list and the order of vendor keys, a section that builds
// several backends, and what the four first vendors share (each plugin's publication format, the defaults of
// a factory without settings, count requests (docs/DECISIONS.md, D7), configured keys, resource names and
// memory factors).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backends/builtin.h"
#include "backends/cambricon/cambricon.h"
#include "backends/common.h"
#include "backends/hygon/hygon.h"
#include "backends/mthreads/mthreads.h"
#include "backends/nvidia/nvidia.h"
#include "tests/unit/backends/builtin_helpers.h"

namespace hami::vendor_tests {
namespace {

// --- DefaultSpec
// ------------------------------------------------------------------------------

// Each vendor's plugin publishes its cards its own way (the inverse of its discovery): NVIDIA a JSON manifest
// and no handshake answer, Hygon the legacy colon list, Cambricon and Moore Threads only node capacity.
TEST(Publish, EachPluginPublishesInItsVendorsFormat) {
  DeviceInfo healthy;
  healthy.id = "card-0";
  healthy.count = 10;
  healthy.devmem = MiB(16384);
  healthy.devcore = Cores(100);
  healthy.health = true;
  DeviceInfo sick = healthy;
  sick.id = "card-1";
  sick.health = false;
  const std::vector<DeviceInfo> cards{healthy, sick};

  const NodePublication nvidia = Make("nvidia")->Publish(cards);
  ASSERT_TRUE(nvidia.annotation);
  EXPECT_EQ(nvidia.annotation->front(), '[');
  EXPECT_FALSE(nvidia.answers_handshake);
  EXPECT_EQ(nvidia.resources, (std::map<std::string, std::string>{{"nvidia.com/gpu", "10"}}));

  const NodePublication hygon = Make("hygon")->Publish(cards);
  ASSERT_TRUE(hygon.annotation);
  EXPECT_EQ(hygon.annotation->back(), ':');
  EXPECT_TRUE(hygon.answers_handshake);
  EXPECT_EQ(Make("hygon")->Publish({}).annotation, ":");

  const NodePublication mlu = Make("cambricon")->Publish(cards);
  EXPECT_FALSE(mlu.annotation);
  const BackendSpec cs = backends::cambricon::DefaultSpec();
  EXPECT_EQ(mlu.resources.at(cs.resources.count), "10");
  EXPECT_EQ(mlu.resources.at(cs.resources.cores), "100");  // one healthy card
  EXPECT_EQ(mlu.resources.at(cs.resources.memory), "64");  // 16384 MiB in 256 MiB units
  const BackendSpec ms = backends::mthreads::DefaultSpec();
  const NodePublication mt = Make("mthreads")->Publish(cards);
  EXPECT_FALSE(mt.annotation);
  EXPECT_EQ(mt.resources.at(ms.resources.cores), "16");
}

TEST(DefaultSpec, FactoriesWithoutSettingsUseTheDefaults) {
  EXPECT_EQ(Make("nvidia")->Spec().keys.allocated, backends::nvidia::DefaultSpec().keys.allocated);
  EXPECT_EQ(Make("nvidia")->Spec().resources.count, backends::nvidia::DefaultSpec().resources.count);
  EXPECT_EQ(Make("cambricon")->Spec().keys.to_allocate, backends::cambricon::DefaultSpec().keys.to_allocate);
  EXPECT_EQ(Make("mthreads")->Spec().resources.memory, backends::mthreads::DefaultSpec().resources.memory);
  EXPECT_EQ(Make("hygon")->Spec().keys.to_allocate, backends::hygon::DefaultSpec().keys.to_allocate);
}

TEST(Registry, BuiltinNamesAndVendorOrder) {
  BackendRegistry registry;
  ASSERT_TRUE(backends::RegisterBuiltinBackends(registry));
  EXPECT_EQ(registry.Names(),
            (std::vector<std::string>{"amd", "awsneuron", "biren", "cambricon", "enflame", "hygon", "iluvatars",
                                      "kunlun", "metax", "mthreads", "nvidia", "remotegpu", "vastai",
                                      "vnpus"}));
  EXPECT_FALSE(backends::RegisterBuiltinBackends(registry)) << "registering a name twice must fail";
  EXPECT_FALSE(registry.Create("iluvatar", VendorSettings{})) << "HAMi's section is iluvatars";
  // Backends are kept sorted by vendor key: the order node locks are taken in.
  Backends b = testing::BuiltinBackends();
  ASSERT_EQ(b.size(), 14u);
  EXPECT_EQ(b.at(0).Vendor(), "AMD");
  EXPECT_EQ(b.at(1).Vendor(), "AWSNeuron");
  EXPECT_EQ(b.at(2).Vendor(), "Biren");
  EXPECT_EQ(b.at(3).Vendor(), "DCU");
  EXPECT_EQ(b.at(4).Vendor(), "Enflame");
  EXPECT_EQ(b.at(5).Vendor(), "GCU");
  EXPECT_EQ(b.at(6).Vendor(), "MLU");
  EXPECT_EQ(b.at(7).Vendor(), "Metax-GPU");
  EXPECT_EQ(b.at(8).Vendor(), "Metax-SGPU");
  EXPECT_EQ(b.at(9).Vendor(), "Mthreads");
  EXPECT_EQ(b.at(10).Vendor(), "NVIDIA");
  EXPECT_EQ(b.at(11).Vendor(), "Vastai");
  EXPECT_EQ(b.at(12).Vendor(), "XPU");
  EXPECT_EQ(b.at(13).Vendor(), "kunlun") << "byte order: lower case last";
  EXPECT_EQ(b.IndexOf("NVIDIA"), 10);
  EXPECT_EQ(b.IndexOf("nvidia"), -1);
  EXPECT_EQ(b.Find("MLU"), &b.at(6));
}

// A section that lists chips builds one backend per entry, each with a vendor key of its own; an empty list
// builds none.
TEST(Registry, ASectionMayBuildSeveralBackendsOrNone) {
  VendorSchema schema;
  schema.fields = {{"chips", SettingKind::kRecordList, {{"name", SettingKind::kString, {}, true}}}};
  BackendRegistry registry;
  ASSERT_TRUE(registry.Register(VendorModule{
      "chips", schema, [](const VendorSettings& s) -> Result<std::vector<BackendPtr>> {
        // A chip that discovers nothing and asks for nothing: only its identity matters here.
        class Chip final : public Hooked<Chip, backends::BasicBackend> {
         public:
          using Hooked::Hooked;
          Result<std::vector<DeviceInfo>> Discover(const NodeView&) const override {
            return std::vector<DeviceInfo>();
          }
          Result<std::optional<DeviceRequest>> RequestFor(const ContainerView&) const override {
            return std::optional<DeviceRequest>();
          }
        };
        std::vector<BackendPtr> list;
        for (const SettingRecord& chip : s.Records("chips")) {
          BackendSpec spec;
          spec.vendor = chip.String("name").value_or("");
          list.push_back(std::make_unique<Chip>(std::move(spec)));
        }
        return list;
      }}));
  SettingRecord a, b;
  a.Set("name", "ChipA");
  b.Set("name", "ChipB");
  auto two = registry.Create("chips", VendorSettings{}.Set("chips", std::vector<SettingRecord>{a, b}));
  ASSERT_TRUE(two) << two.error().message;
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ(two->at(0)->Vendor(), "ChipA");
  EXPECT_EQ(two->at(1)->Vendor(), "ChipB");
  auto none = registry.Create("chips", VendorSettings{});
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
}

// A hook is on when the backend overrides it; a shared rule that hands work to a hook the backend does not
// override is refused when the backend is created, naming the rule and the hook.
namespace hooks {

class Plain final : public Hooked<Plain, backends::BasicBackend> {
 public:
  using Hooked::Hooked;
  Result<std::vector<DeviceInfo>> Discover(const NodeView&) const override { return std::vector<DeviceInfo>(); }
  Result<std::optional<DeviceRequest>> RequestFor(const ContainerView&) const override {
    return std::optional<DeviceRequest>();
  }
};

class Checking final : public Hooked<Checking, backends::BasicBackend> {
 public:
  using Hooked::Hooked;
  Result<std::vector<DeviceInfo>> Discover(const NodeView&) const override { return std::vector<DeviceInfo>(); }
  Result<std::optional<DeviceRequest>> RequestFor(const ContainerView&) const override {
    return std::optional<DeviceRequest>();
  }
  std::optional<Reason> RefuseCard(const DeviceInfo&, const DeviceUsage&, const DeviceRequest&,
                                   const CardCheckView&) const override {
    return Reason::kCardTypeMismatch;
  }
};

template <class B>
Result<std::vector<BackendPtr>> CreateWith(FitRules rules) {
  BackendRegistry registry;
  EXPECT_TRUE(registry.Register(VendorModule{
      "v", VendorSchema{}, [rules](const VendorSettings&) -> Result<std::vector<BackendPtr>> {
        BackendSpec spec;
        spec.vendor = "V";
        spec.fit = rules;
        std::vector<BackendPtr> list;
        list.push_back(std::make_unique<B>(std::move(spec)));
        return list;
      }}));
  return registry.Create("v", VendorSettings{});
}

}  // namespace hooks

TEST(Registry, AHookIsOnWhenOverriddenAndARuleNeedsItsHook) {
  EXPECT_FALSE(hooks::Plain(BackendSpec{}).Hooks().refuse_card);
  EXPECT_TRUE(hooks::Checking(BackendSpec{}).Hooks().refuse_card);
  EXPECT_FALSE(hooks::Checking(BackendSpec{}).Hooks().charged);
  FitRules sizes;
  sizes.vendor_sizes = true;
  auto refused = hooks::CreateWith<hooks::Plain>(sizes);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message,
            "backend V: FitRules::vendor_sizes needs RefuseCard, which it does not override");
  EXPECT_TRUE(hooks::CreateWith<hooks::Checking>(sizes));
  FitRules first;
  first.vendor_checks_first = true;
  EXPECT_FALSE(hooks::CreateWith<hooks::Plain>(first));
  FitRules no_split;
  no_split.split_count_limits = false;
  EXPECT_FALSE(hooks::CreateWith<hooks::Plain>(no_split));
  FitRules together;
  together.vendor_score_together = true;
  auto no_score = hooks::CreateWith<hooks::Checking>(together);
  ASSERT_FALSE(no_score);
  EXPECT_EQ(no_score.error().message,
            "backend V: FitRules::vendor_score_together needs AllocationScore, which it does not override");
  // Every built-in backend's rules have their hooks (they are created through the same check).
  const Backends all = testing::BuiltinBackends();
  for (const auto& b : all) EXPECT_TRUE(CheckFitRules(*b)) << b->Vendor();
}

// --- RequestFor
// ---------------------------------------------------------------------------------------------

TEST(AllRequests, D7CountsForEveryVendor) {
  for (const char* section : {"nvidia", "cambricon", "mthreads", "hygon"}) {
    auto b = Make(section);
    const std::string& count = b->Spec().resources.count;
    EXPECT_EQ(Request(*b, Ctr("c", {{count, "0"}})), std::nullopt) << section;
    EXPECT_EQ(Request(*b, Requests("c", {{count, "0"}})), std::nullopt) << section;
    EXPECT_EQ(Request(*b, Ctr("c", {{count, "3"}}))->count, 3) << section;
    EXPECT_EQ(Request(*b, Ctr("c", {{count, "3"}}))->vendor, b->Vendor()) << section;
    for (const char* bad : {"-1", "1.5", "4294967296", "2147483648", "many"}) {
      const std::string e = RequestError(*b, Ctr("c", {{count, bad}}));
      EXPECT_TRUE(Contains(e, count)) << section << " " << bad << ": " << e;
    }
  }
}

// --- Annotate
// -----------------------------------------------------------------------------------------------

TEST(Annotate, ConfiguredKeysAreWritten) {
  VendorSettings s;
  s.Set("annotations.allocated", "example.com/allocated");
  s.Set("annotations.toAllocate", "hami.io/dcu-devices-to-allocate");
  Annotations out;
  Make("hygon", s)->Annotate(PodView{}, {{Dev(0, "x", "DCU", 1, 1)}}, {}, kNow, out);
  EXPECT_EQ(out, (Annotations{{"example.com/allocated", "x,DCU,1,1:;"},
                              {"hami.io/dcu-devices-to-allocate", "x,DCU,1,1:;"}}));
  VendorSettings none;
  none.Set("annotations.toAllocate", "");
  Annotations only_allocated;
  Make("nvidia", none)->Annotate(PodView{}, {{Dev(0, "g", "NVIDIA", 1, 1)}}, {}, kNow, only_allocated);
  EXPECT_EQ(only_allocated, (Annotations{{"hami.io/vgpu-devices-allocated", "g,NVIDIA,1,1:;"}}));
}

// --- config overrides
// ---------------------------------------------------------------------------------------

TEST(Settings, KeysAndResourceNamesOverride) {
  for (const char* section : {"nvidia", "cambricon", "mthreads", "hygon"}) {
    VendorSettings s;
    s.Set("resourceCountName", "example.com/count");
    s.Set("resourceMemoryName", "example.com/mem");
    s.Set("resourceCoreName", "example.com/cores");
    s.Set("annotations.register", "example.com/register");
    s.Set("annotations.score", "example.com/score");
    s.Set("annotations.handshake", "example.com/handshake");
    s.Set("annotations.allocated", "example.com/allocated");
    s.Set("annotations.toAllocate", "example.com/to-allocate");
    s.Set("annotations.nodeLock", "example.com/lock");
    auto b = Make(section, s);
    const BackendSpec& spec = b->Spec();
    EXPECT_EQ(spec.resources.count, "example.com/count") << section;
    EXPECT_EQ(spec.resources.memory, "example.com/mem") << section;
    EXPECT_EQ(spec.resources.cores, "example.com/cores") << section;
    EXPECT_EQ(spec.keys.register_annotation, "example.com/register") << section;
    EXPECT_EQ(spec.keys.score_annotation, "example.com/score") << section;
    EXPECT_EQ(spec.keys.handshake, "example.com/handshake") << section;
    EXPECT_EQ(spec.keys.allocated, "example.com/allocated") << section;
    EXPECT_EQ(spec.keys.to_allocate, "example.com/to-allocate") << section;
    EXPECT_EQ(spec.keys.node_lock, "example.com/lock") << section;
    // The renamed resources are the ones read.
    auto r = Request(
        *b, Ctr("c", {{"example.com/count", "1"}, {"example.com/mem", "4"}, {"example.com/cores", "8"}}));
    ASSERT_TRUE(r.has_value()) << section;
    EXPECT_EQ(r->count, 1) << section;
    EXPECT_EQ(r->memory.value(), 4 * spec.resources.memory_factor) << section;
  }
  VendorSettings pct;
  pct.Set("resourceMemoryPercentageName", "example.com/pct");
  pct.Set("resourcePriorityName", "example.com/prio");
  auto n = Make("nvidia", pct);
  EXPECT_EQ(n->Spec().resources.memory_percentage, "example.com/pct");
  EXPECT_EQ(n->Spec().resources.priority, "example.com/prio");
  EXPECT_EQ(Request(*n, Ctr("c", {{"nvidia.com/gpu", "1"}, {"example.com/pct", "40"}}))->mem_percent, 40);
}

TEST(Settings, OverriddenKeysDriveDiscovery) {
  VendorSettings nv;
  nv.Set("annotations.register", "example.com/gpus");
  auto n = Make("nvidia", nv);
  NodeView node = testing::NvidiaNode("n", {testing::Gpu("GPU-0", 0)});
  auto old_key = n->Discover(node);
  ASSERT_TRUE(old_key) << old_key.error().message;
  EXPECT_TRUE(old_key->empty());
  node.annotations["example.com/gpus"] = node.annotations.at("hami.io/node-nvidia-register");
  auto new_key = n->Discover(node);
  ASSERT_TRUE(new_key) << new_key.error().message;
  EXPECT_EQ(new_key->size(), 1u);

  VendorSettings dcu;
  dcu.Set("annotations.register", "example.com/dcus");
  NodeView d;
  d.annotations["example.com/dcus"] = "DCU-1,4,16384,100,DCU-K100,0,true:";
  auto found = Make("hygon", dcu)->Discover(d);
  ASSERT_TRUE(found) << found.error().message;
  EXPECT_EQ(found->size(), 1u);

  VendorSettings mlu;
  mlu.Set("resourceCoreName", "cambricon.com/mlu370.smlu.vcore");
  mlu.Set("resourceMemoryName", "cambricon.com/mlu370.smlu.vmemory");
  auto cap = Make("cambricon", mlu)
                 ->Discover(CapacityNode("n", {{"cambricon.com/mlu370.smlu.vcore", "100"},
                                               {"cambricon.com/mlu370.smlu.vmemory", "16"}}));
  ASSERT_TRUE(cap) << cap.error().message;
  ASSERT_EQ(cap->size(), 1u);
  EXPECT_EQ((*cap)[0].devmem, 4096_MiB);
}

TEST(Settings, MemoryFactor) {
  VendorSettings two;
  two.Set("memoryFactor", 2);
  EXPECT_EQ(Make("nvidia", two)->Spec().resources.memory_factor, 2);
  EXPECT_EQ(Make("hygon", two)->Spec().resources.memory_factor, 2);
  VendorSettings zero;
  zero.Set("memoryFactor", 0);  // 0 and 1 both mean MiB
  EXPECT_EQ(Make("nvidia", zero)->Spec().resources.memory_factor, 1);
  EXPECT_EQ(Request(*Make("nvidia", zero), Ctr("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "100"}}))
                ->memory,
            100_MiB);
  VendorSettings negative;
  negative.Set("memoryFactor", -2);
  EXPECT_TRUE(Contains(CreateError("nvidia", negative), "memoryFactor"));
  EXPECT_TRUE(Contains(CreateError("hygon", negative), "memoryFactor"));
  // Cambricon and Moore Threads count memory in fixed units: the key is rejected, whatever its value.
  for (std::int64_t f : {1, 256, 512}) {
    VendorSettings s;
    s.Set("memoryFactor", f);
    EXPECT_TRUE(Contains(CreateError("cambricon", s), "cambricon.memoryFactor")) << f;
    EXPECT_TRUE(Contains(CreateError("mthreads", s), "mthreads.memoryFactor")) << f;
  }
}

TEST(Settings, RequiredNamesMustNotBeEmpty) {
  for (const char* section : {"nvidia", "cambricon", "mthreads", "hygon"}) {
    VendorSettings count;
    count.Set("resourceCountName", "");
    EXPECT_TRUE(Contains(CreateError(section, count), "resourceCountName")) << section;
    VendorSettings allocated;
    allocated.Set("annotations.allocated", "");
    EXPECT_FALSE(TryMake(section, allocated)) << section;
  }
}

}  // namespace
}  // namespace hami::vendor_tests
