// The four built-in backends in isolation: discovery, requests, annotations, admission, default protocol keys
// and config overrides. Vectors are reference/hami-backends.md §8.3-§8.7, adapted where this project
// deliberately differs from upstream (PROTOCOL.md D2, D3, D7; absent devices are an empty list, not an error;
// NVIDIA admission replaces an env var instead of appending a duplicate).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backends/builtin.h"
#include "backends/common.h"
#include "backends/cambricon/cambricon.h"
#include "backends/hygon/hygon.h"
#include "backends/mthreads/mthreads.h"
#include "backends/nvidia/nvidia.h"
#include "core/backend.h"
#include "core/cluster_state.h"
#include "core/codec/pod_devices.h"
#include "tests/support/builders.h"

namespace hami {
namespace {

using testing::Ctr;
using testing::Req;
using testing::Request;

const TimePoint kNow = std::chrono::system_clock::from_time_t(1716199325);

Result<BackendPtr> TryMake(std::string_view section, const VendorSettings& settings = {}) {
  BackendRegistry registry;
  backends::RegisterBuiltinBackends(registry).value();
  auto built = registry.Create(section, settings);
  if (!built) return built.error();
  if (built->size() != 1) return Error{fmt::format("{} backends from section {}", built->size(), section)};
  return std::move(built->front());
}

BackendPtr Make(std::string_view section, const VendorSettings& settings = {}) {
  return TryMake(section, settings).value();
}

// The error of a factory call, or a marker that makes a comparison fail when creation succeeded.
std::string CreateError(std::string_view section, const VendorSettings& settings) {
  auto b = TryMake(section, settings);
  return b ? std::string("<created without error>") : b.error().message;
}

ContainerView Requests(std::string name, std::map<std::string, std::string> requests,
                       std::map<std::string, std::string> limits = {}) {
  ContainerView c = Ctr(std::move(name), std::move(limits));
  for (auto& [k, v] : requests) c.requests[k] = v;
  return c;
}


// RequestFor that must fail; returns the message ("<no error>" when it succeeded, so a find() check fails).
std::string RequestError(const Backend& b, const ContainerView& c) {
  auto r = b.RequestFor(c);
  return r ? std::string("<no error>") : r.error().message;
}

bool Contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

NodeView CapacityNode(std::string name, std::map<std::string, std::string> capacity) {
  NodeView n;
  n.name = std::move(name);
  for (auto& [k, v] : capacity) n.capacity[k] = v;
  return n;
}

ContainerDevice Dev(std::int32_t index, std::string uuid, std::string vendor, std::int64_t mem,
                    std::int64_t cores) {
  return ContainerDevice{index, std::move(uuid), std::move(vendor), MiB(mem), Cores(cores), std::nullopt};
}

// --- DefaultSpec: PROTOCOL.md §1
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

TEST(DefaultSpec, Nvidia) {
  const BackendSpec s = backends::nvidia::DefaultSpec();
  EXPECT_EQ(s.vendor, "NVIDIA");
  EXPECT_EQ(s.config_section, "nvidia");
  EXPECT_EQ(s.health, HealthRule::kHandshakeAndDeviceChecks);
  EXPECT_EQ(s.keys.register_annotation, "hami.io/node-nvidia-register");
  EXPECT_EQ(s.keys.score_annotation, "hami.io/node-nvidia-score");
  EXPECT_EQ(s.keys.handshake, "hami.io/node-handshake");
  EXPECT_EQ(s.keys.allocated, "hami.io/vgpu-devices-allocated");
  EXPECT_EQ(s.keys.to_allocate, "hami.io/vgpu-devices-to-allocate");
  EXPECT_EQ(s.keys.node_lock, "hami.io/mutex.lock");
  EXPECT_EQ(s.keys.use_uuid, "nvidia.com/use-gpuuuid");
  EXPECT_EQ(s.keys.nouse_uuid, "nvidia.com/nouse-gpuuuid");
  EXPECT_EQ(s.keys.use_type, "nvidia.com/use-gputype");
  EXPECT_EQ(s.keys.nouse_type, "nvidia.com/nouse-gputype");
  EXPECT_EQ(s.resources.count, "nvidia.com/gpu");
  EXPECT_EQ(s.resources.memory, "nvidia.com/gpumem");
  EXPECT_EQ(s.resources.memory_percentage, "nvidia.com/gpumem-percentage");
  EXPECT_EQ(s.resources.cores, "nvidia.com/gpucores");
  EXPECT_EQ(s.resources.priority, "nvidia.com/priority");
  EXPECT_EQ(s.resources.memory_factor, 1);
  EXPECT_TRUE(s.fit.cordon);
  EXPECT_EQ(s.fit.numa_bind_annotation, "nvidia.com/numa-bind");
  EXPECT_EQ(s.fit.mode_annotation, "nvidia.com/vgpu-mode");
  EXPECT_TRUE(s.fit.quota_in_fit);
  EXPECT_TRUE(s.fit.topology);
  EXPECT_TRUE(s.fit.mig);
  EXPECT_FALSE(s.fit.same_device_across_containers);
  EXPECT_TRUE(s.lock.owner_aware);
  EXPECT_FALSE(s.lock.fixed_expiry.has_value());
}

TEST(DefaultSpec, Cambricon) {
  const BackendSpec s = backends::cambricon::DefaultSpec();
  EXPECT_EQ(s.vendor, "MLU");
  EXPECT_EQ(s.config_section, "cambricon");
  EXPECT_EQ(s.health, HealthRule::kAlwaysHealthy);
  EXPECT_EQ(s.keys.register_annotation, "");
  EXPECT_EQ(s.keys.handshake, "");
  EXPECT_EQ(s.keys.allocated, "hami.io/cambricon-mlu-devices-allocated");
  EXPECT_EQ(s.keys.to_allocate, "hami.io/cambricon-mlu-devices-to-allocate");
  EXPECT_EQ(s.keys.node_lock, "cambricon.com/dsmlu.lock");
  EXPECT_EQ(s.keys.use_uuid, "cambricon.com/use-gpuuuid");
  EXPECT_EQ(s.keys.nouse_uuid, "cambricon.com/nouse-gpuuuid");
  EXPECT_EQ(s.keys.use_type, "");  // cambricon.com/use-mlutype is defined upstream but never used
  EXPECT_EQ(s.resources.count, "cambricon.com/vmlu");
  EXPECT_EQ(s.resources.memory, "cambricon.com/mlu.smlu.vmemory");
  EXPECT_EQ(s.resources.memory_percentage, "");
  EXPECT_EQ(s.resources.cores, "cambricon.com/mlu.smlu.vcore");
  EXPECT_EQ(s.resources.memory_factor, 256);
  EXPECT_TRUE(s.fit.quota_in_fit);
  EXPECT_FALSE(s.fit.cordon);
  EXPECT_FALSE(s.fit.mig);
  EXPECT_FALSE(s.lock.owner_aware);
  EXPECT_EQ(s.lock.fixed_expiry, std::chrono::seconds(120));
}

TEST(DefaultSpec, Mthreads) {
  const BackendSpec s = backends::mthreads::DefaultSpec();
  EXPECT_EQ(s.vendor, "Mthreads");
  EXPECT_EQ(s.config_section, "mthreads");
  EXPECT_EQ(s.health, HealthRule::kAlwaysHealthy);
  EXPECT_EQ(s.keys.allocated, "hami.io/mthreads-vgpu-devices-allocated");
  EXPECT_EQ(s.keys.to_allocate, "hami.io/mthreads-vgpu-devices-to-allocate");
  EXPECT_EQ(s.keys.node_lock, "");
  EXPECT_EQ(s.keys.use_uuid, "mthreads.ai/use-gpuuuid");
  EXPECT_EQ(s.keys.nouse_uuid, "mthreads.ai/nouse-gpuuuid");
  EXPECT_EQ(s.resources.count, "mthreads.com/vgpu");
  EXPECT_EQ(s.resources.memory, "mthreads.com/sgpu-memory");
  EXPECT_EQ(s.resources.cores, "mthreads.com/sgpu-core");
  EXPECT_EQ(s.resources.memory_factor, 512);
  EXPECT_TRUE(s.fit.same_device_across_containers);
  EXPECT_FALSE(s.fit.quota_in_fit);
}

TEST(DefaultSpec, Hygon) {
  const BackendSpec s = backends::hygon::DefaultSpec();
  EXPECT_EQ(s.vendor, "DCU");
  EXPECT_EQ(s.config_section, "hygon");
  EXPECT_EQ(s.health, HealthRule::kHandshake);
  EXPECT_EQ(s.keys.register_annotation, "hami.io/node-dcu-register");
  EXPECT_EQ(s.keys.handshake, "hami.io/node-handshake-dcu");
  EXPECT_EQ(s.keys.allocated, "hami.io/dcu-devices-allocated");
  EXPECT_EQ(s.keys.to_allocate, "hami.io/hcu-devices-to-allocate");  // PROTOCOL.md D2
  EXPECT_EQ(s.keys.node_lock, "hami.io/mutex.lock");
  EXPECT_EQ(s.keys.use_uuid, "hygon.com/use-gpuuuid");
  EXPECT_EQ(s.keys.nouse_uuid, "hygon.com/nouse-gpuuuid");
  EXPECT_EQ(s.keys.use_type, "hygon.com/use-dcutype");
  EXPECT_EQ(s.keys.nouse_type, "hygon.com/nouse-dcutype");
  EXPECT_EQ(s.resources.count, "hygon.com/dcunum");
  EXPECT_EQ(s.resources.memory, "hygon.com/dcumem");
  EXPECT_EQ(s.resources.cores, "hygon.com/dcucores");
  EXPECT_EQ(s.resources.memory_factor, 1);
  EXPECT_FALSE(s.fit.quota_in_fit);
  EXPECT_FALSE(s.fit.cordon);
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
                                      "kunlun", "metax", "mthreads", "nvidia", "vastai", "vnpus"}));
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
        class Chip final : public backends::BasicBackend {
         public:
          using BasicBackend::BasicBackend;
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

// --- Discover
// -----------------------------------------------------------------------------------------------

TEST(NvidiaDiscover, V26Manifest) {
  auto b = Make("nvidia");
  NodeView n;
  n.name = "n";
  n.annotations["hami.io/node-nvidia-register"] =
      R"([{"id":"GPU-0","count":5,"devmem":8192,"devcore":100,"type":"NVIDIA-Tesla P4","numa":0,"health":true,"index":0}])";
  auto d = b->Discover(n);
  ASSERT_TRUE(d) << d.error().message;
  ASSERT_EQ(d->size(), 1u);
  EXPECT_EQ((*d)[0].id, "GPU-0");
  EXPECT_EQ((*d)[0].count, 5);
  EXPECT_EQ((*d)[0].devmem, 8192_MiB);
  EXPECT_EQ((*d)[0].devcore, 100_cores);
  EXPECT_EQ((*d)[0].type, "NVIDIA-Tesla P4");
  EXPECT_TRUE((*d)[0].health);
  // The vendor is the backend that discovered the device (set by the registry).
  Backends all = testing::BuiltinBackends();
  ClusterState state(all);
  state.UpsertNode(n);
  ASSERT_EQ(state.FindNode("n")->devices.size(), 1u);
  EXPECT_EQ(state.FindNode("n")->devices[0].vendor, "NVIDIA");
}

TEST(NvidiaDiscover, V26AbsentEmptyAndMalformed) {
  auto b = Make("nvidia");
  NodeView n;
  n.name = "n";
  auto absent = b->Discover(n);
  ASSERT_TRUE(absent) << absent.error().message;
  EXPECT_TRUE(absent->empty());
  n.annotations["hami.io/node-nvidia-register"] = "[]";
  auto empty = b->Discover(n);
  ASSERT_TRUE(empty) << empty.error().message;
  EXPECT_TRUE(empty->empty());
  n.annotations["hami.io/node-nvidia-register"] = "not-valid-json";
  auto bad = b->Discover(n);
  ASSERT_FALSE(bad);
  EXPECT_TRUE(Contains(bad.error().message, "hami.io/node-nvidia-register")) << bad.error().message;
}

TEST(NvidiaDiscover, V26MigProfiles) {
  auto b = Make("nvidia");
  NodeView n;
  n.annotations["hami.io/node-nvidia-register"] =
      R"([{"id":"GPU-0","count":7,"devmem":40960,"devcore":100,"type":"NVIDIA-A100","mode":"mig","health":true,)"
      R"("migProfiles":[{"name":"1g.5gb","memoryMB":4864,"core":14,"sliceCount":1,"placements":[{"start":6,"size":1}]}]}])";
  auto d = b->Discover(n);
  ASSERT_TRUE(d) << d.error().message;
  ASSERT_EQ(d->size(), 1u);
  EXPECT_EQ((*d)[0].mode, "mig");
  ASSERT_EQ((*d)[0].mig_profiles.size(), 1u);
  EXPECT_EQ((*d)[0].mig_profiles[0].name, "1g.5gb");
  EXPECT_EQ((*d)[0].mig_profiles[0].memory_mib, 4864);
  EXPECT_EQ((*d)[0].mig_profiles[0].placements, (std::vector<MigPlacement>{{6, 1}}));
}

TEST(NvidiaDiscover, V26PairScores) {
  auto b = Make("nvidia");
  NodeView n;
  n.annotations["hami.io/node-nvidia-register"] =
      R"([{"id":"GPU-0","count":10,"devmem":8192,"devcore":100,"type":"NVIDIA-A","health":true},)"
      R"({"id":"GPU-1","index":1,"count":10,"devmem":8192,"devcore":100,"type":"NVIDIA-A","health":true}])";
  n.annotations["hami.io/node-nvidia-score"] =
      R"([{"uuid":"GPU-0","score":{"GPU-1":100}},{"uuid":"GPU-1","score":{"GPU-0":100}}])";
  auto d = b->Discover(n);
  ASSERT_TRUE(d) << d.error().message;
  ASSERT_EQ(d->size(), 2u);
  EXPECT_EQ((*d)[0].pair_scores.at("GPU-1"), 100);
  EXPECT_EQ((*d)[1].pair_scores.at("GPU-0"), 100);
  n.annotations["hami.io/node-nvidia-score"] = "{bad";
  auto bad = b->Discover(n);
  ASSERT_FALSE(bad);
  EXPECT_TRUE(Contains(bad.error().message, "hami.io/node-nvidia-score")) << bad.error().message;
}

TEST(CambriconDiscover, V43OneCardFromCapacity) {
  auto b = Make("cambricon");
  auto d = b->Discover(
      CapacityNode("test", {{"cambricon.com/mlu.smlu.vcore", "1"}, {"cambricon.com/mlu.smlu.vmemory", "1"}}));
  ASSERT_TRUE(d) << d.error().message;
  ASSERT_EQ(d->size(), 1u);
  const DeviceInfo& x = (*d)[0];
  EXPECT_EQ(x.index, 0);
  EXPECT_EQ(x.id, "test-cambricon-mlu-0");
  EXPECT_EQ(x.count, 100);
  EXPECT_EQ(x.devmem, 25600_MiB);
  EXPECT_EQ(x.devcore, 100_cores);
  EXPECT_EQ(x.type, "MLU");
  EXPECT_EQ(x.numa, 0);
  EXPECT_TRUE(x.health);
}

TEST(CambriconDiscover, CardsAreCeilOfVcoreOverHundred) {
  auto b = Make("cambricon");
  auto two = b->Discover(CapacityNode(
      "n", {{"cambricon.com/mlu.smlu.vcore", "200"}, {"cambricon.com/mlu.smlu.vmemory", "128"}}));
  ASSERT_TRUE(two) << two.error().message;
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[1].id, "n-cambricon-mlu-1");
  EXPECT_EQ((*two)[1].index, 1);
  EXPECT_EQ((*two)[1].devmem, 16384_MiB);  // 128 * 256 * 100 / 200
  auto partial = b->Discover(CapacityNode(
      "n", {{"cambricon.com/mlu.smlu.vcore", "150"}, {"cambricon.com/mlu.smlu.vmemory", "150"}}));
  ASSERT_TRUE(partial) << partial.error().message;
  EXPECT_EQ(partial->size(), 2u);
}

// Found by tests/fuzz/fuzz_node_discovery: "2Gi" cores made 21 million cards (the fuzzer ran out of memory),
// and a huge memory capacity overflowed the per-card computation.
TEST(CambriconDiscover, AbsurdCapacityIsAnErrorNotMillionsOfCards) {
  auto b = Make("cambricon");
  auto many = b->Discover(CapacityNode("n", {{"cambricon.com/mlu.smlu.vcore", "2Gi"}}));
  ASSERT_FALSE(many);
  EXPECT_TRUE(Contains(many.error().message, "cambricon.com/mlu.smlu.vcore")) << many.error().message;
  auto huge = b->Discover(CapacityNode(
      "n", {{"cambricon.com/mlu.smlu.vcore", "100"}, {"cambricon.com/mlu.smlu.vmemory", "8Ei"}}));
  ASSERT_FALSE(huge);
  EXPECT_TRUE(Contains(huge.error().message, "cambricon.com/mlu.smlu.vmemory")) << huge.error().message;
  auto max = b->Discover(CapacityNode("n", {{"cambricon.com/mlu.smlu.vcore", "102400"}}));
  ASSERT_TRUE(max) << max.error().message;
  EXPECT_EQ(max->size(), 1024u);
}

TEST(CambriconDiscover, AbsentIsEmptyMalformedIsAnError) {
  auto b = Make("cambricon");
  auto none = b->Discover(CapacityNode("n", {}));
  ASSERT_TRUE(none) << none.error().message;
  EXPECT_TRUE(none->empty());
  auto zero = b->Discover(CapacityNode("n", {{"cambricon.com/mlu.smlu.vcore", "0"}}));
  ASSERT_TRUE(zero) << zero.error().message;
  EXPECT_TRUE(zero->empty());
  auto bad = b->Discover(CapacityNode("n", {{"cambricon.com/mlu.smlu.vcore", "lots"}}));
  ASSERT_FALSE(bad);
  EXPECT_TRUE(Contains(bad.error().message, "cambricon.com/mlu.smlu.vcore")) << bad.error().message;
  auto frac = b->Discover(CapacityNode(
      "n", {{"cambricon.com/mlu.smlu.vcore", "100"}, {"cambricon.com/mlu.smlu.vmemory", "1.5"}}));
  ASSERT_FALSE(frac);
  EXPECT_TRUE(Contains(frac.error().message, "cambricon.com/mlu.smlu.vmemory")) << frac.error().message;
}

TEST(MthreadsDiscover, V53OneCardFromCapacity) {
  auto b = Make("mthreads");
  auto d =
      b->Discover(CapacityNode("test", {{"mthreads.com/sgpu-memory", "1"}, {"mthreads.com/sgpu-core", "1"}}));
  ASSERT_TRUE(d) << d.error().message;
  ASSERT_EQ(d->size(), 1u);
  const DeviceInfo& x = (*d)[0];
  EXPECT_EQ(x.index, 0);
  EXPECT_EQ(x.id, "test-mthreads-0");
  EXPECT_EQ(x.count, 100);
  EXPECT_EQ(x.devmem, 8192_MiB);
  EXPECT_EQ(x.devcore, 16_cores);
  EXPECT_EQ(x.type, "Mthreads");
  EXPECT_EQ(x.numa, 0);
  EXPECT_TRUE(x.health);
}

TEST(MthreadsDiscover, CardsAndErrors) {
  auto b = Make("mthreads");
  auto two =
      b->Discover(CapacityNode("m", {{"mthreads.com/sgpu-memory", "192"}, {"mthreads.com/sgpu-core", "32"}}));
  ASSERT_TRUE(two) << two.error().message;
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[1].id, "m-mthreads-1");
  EXPECT_EQ((*two)[1].devmem, 49152_MiB);  // 192 * 512 * 16 / 32
  auto none = b->Discover(CapacityNode("m", {{"mthreads.com/sgpu-memory", "192"}}));
  ASSERT_TRUE(none) << none.error().message;
  EXPECT_TRUE(none->empty());
  auto bad = b->Discover(CapacityNode("m", {{"mthreads.com/sgpu-core", "-16"}}));
  ASSERT_FALSE(bad);
  EXPECT_TRUE(Contains(bad.error().message, "mthreads.com/sgpu-core")) << bad.error().message;
}

TEST(HygonDiscover, V60) {
  auto b = Make("hygon");
  NodeView n;
  n.name = "n";
  auto absent = b->Discover(n);
  ASSERT_TRUE(absent) << absent.error().message;
  EXPECT_TRUE(absent->empty());

  n.annotations["hami.io/node-dcu-register"] = "test-0,1,1024,100,DCU,0,true,0,test:";
  auto d = b->Discover(n);
  ASSERT_TRUE(d) << d.error().message;
  ASSERT_EQ(d->size(), 1u);
  const DeviceInfo& x = (*d)[0];
  EXPECT_EQ(x.id, "test-0");
  EXPECT_EQ(x.count, 1);
  EXPECT_EQ(x.devmem, 1024_MiB);
  EXPECT_EQ(x.devcore, 100_cores);
  EXPECT_EQ(x.type, "DCU");
  EXPECT_EQ(x.numa, 0);
  EXPECT_TRUE(x.health);
  EXPECT_EQ(x.index, 0);
  EXPECT_EQ(x.mode, "test");

  n.annotations["hami.io/node-dcu-register"] = ":";
  auto none = b->Discover(n);
  ASSERT_TRUE(none) << none.error().message;
  EXPECT_TRUE(none->empty());

  for (const char* bad : {"", "test-0,1,1024,100,DCU:"}) {
    n.annotations["hami.io/node-dcu-register"] = bad;
    auto r = b->Discover(n);
    ASSERT_FALSE(r) << "'" << bad << "'";
    EXPECT_TRUE(Contains(r.error().message, "hami.io/node-dcu-register")) << r.error().message;
  }
}

// --- RequestFor
// ---------------------------------------------------------------------------------------------

TEST(NvidiaRequest, V27Vectors) {
  auto b = Make("nvidia");
  EXPECT_EQ(Request(*b, Ctr("c", {{"nvidia.com/gpu", "1"}})), Req("NVIDIA", 1, 0, 100, 0));
  EXPECT_EQ(Request(*b, Ctr("c", {{"nvidia.com/gpu", "2"}, {"nvidia.com/gpumem", "4096"}})),
            Req("NVIDIA", 2, 4096, kPercentUnset, 0));
  EXPECT_EQ(Request(*b, Ctr("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "50"}})),
            Req("NVIDIA", 1, 0, 50, 0));
  for (const char* pct : {"150", "4294967346", "101"}) {
    EXPECT_EQ(Request(*b, Ctr("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", pct}})),
              Req("NVIDIA", 1, 0, 100, 0))
        << pct;
  }
  EXPECT_EQ(Request(*b, Ctr("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpucores", "50"}})),
            Req("NVIDIA", 1, 0, 100, 50));
  EXPECT_EQ(Request(*b, Ctr("c", {{"cpu", "1"}})), std::nullopt);
  EXPECT_EQ(Request(*b, Requests("c", {{"nvidia.com/gpu", "1"}})), Req("NVIDIA", 1, 0, 100, 0));
  EXPECT_EQ(Request(*b, Ctr("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "0"}})),
            Req("NVIDIA", 1, 0, 100, 0));
  EXPECT_EQ(Request(*b, Requests("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "0"}})),
            Req("NVIDIA", 1, 0, 100, 0));
  EXPECT_EQ(Request(*b, Ctr("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "-1"}})),
            Req("NVIDIA", 1, 0, 100, 0));
  EXPECT_EQ(Request(*b, Ctr("c", {{"nvidia.com/gpu", "1"},
                                  {"nvidia.com/gpumem", "2000"},
                                  {"nvidia.com/gpumem-percentage", "0"}})),
            Req("NVIDIA", 1, 2000, kPercentUnset, 0));
  // Limits win over requests.
  EXPECT_EQ(Request(*b, Requests("c", {{"nvidia.com/gpumem", "1000"}},
                                 {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "3000"}})),
            Req("NVIDIA", 1, 3000, kPercentUnset, 0));
}

TEST(NvidiaRequest, D7UnreadableMemoryIsAnErrorNamingTheResource) {
  auto b = Make("nvidia");
  for (const char* mem : {"16Gi", "16.0Gi", "1.5", "-1", "abc"}) {
    const std::string e = RequestError(*b, Ctr("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", mem}}));
    EXPECT_TRUE(Contains(e, "nvidia.com/gpumem")) << mem << ": " << e;
  }
  const std::string cores =
      RequestError(*b, Ctr("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpucores", "0.5"}}));
  EXPECT_TRUE(Contains(cores, "nvidia.com/gpucores")) << cores;
  const std::string pct =
      RequestError(*b, Ctr("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "12.5"}}));
  EXPECT_TRUE(Contains(pct, "nvidia.com/gpumem-percentage")) << pct;
}

TEST(NvidiaRequest, D7Counts) {
  auto b = Make("nvidia");
  EXPECT_EQ(Request(*b, Ctr("c", {{"nvidia.com/gpu", "0"}, {"nvidia.com/gpumem", "100"}})), std::nullopt);
  for (const char* n : {"-1", "1.5", "4294967296", "500m"}) {
    const std::string e = RequestError(*b, Ctr("c", {{"nvidia.com/gpu", n}}));
    EXPECT_TRUE(Contains(e, "nvidia.com/gpu")) << n << ": " << e;
  }
  EXPECT_EQ(Request(*b, Ctr("c", {{"nvidia.com/gpu", "2147483647"}}))->count, 2147483647);
}

TEST(NvidiaRequest, V28MemoryFactor) {
  VendorSettings s;
  s.Set("memoryFactor", 2);
  auto b = Make("nvidia", s);
  EXPECT_EQ(Request(*b, Ctr("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "1024"}})),
            Req("NVIDIA", 1, 2048, kPercentUnset, 0));
  const std::string e = RequestError(*b, Ctr("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "1Gi"}}));
  EXPECT_TRUE(Contains(e, "nvidia.com/gpumem")) << e;
  // The largest value that still fits int32 after scaling is accepted, one more is not.
  EXPECT_EQ(Request(*b, Ctr("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "1073741823"}}))->memory,
            MiB(2147483646));
  EXPECT_FALSE(b->RequestFor(Ctr("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "1073741824"}})));
}

TEST(NvidiaRequest, V29DefaultMemoryAndCores) {
  VendorSettings s;
  s.Set("defaultMemory", 512);
  s.Set("defaultCores", 20);
  s.Set("memoryFactor", 4);  // the default is not scaled (upstream S5)
  auto b = Make("nvidia", s);
  EXPECT_EQ(Request(*b, Ctr("c", {{"nvidia.com/gpu", "1"}})), Req("NVIDIA", 1, 512, kPercentUnset, 20));
  EXPECT_EQ(Request(*b, Ctr("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "0"}})),
            Req("NVIDIA", 1, 512, kPercentUnset, 20));
  EXPECT_EQ(Request(*b, Ctr("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "0"}})),
            Req("NVIDIA", 1, 512, kPercentUnset, 20));
  // An explicit percentage or core value wins over the defaults.
  EXPECT_EQ(Request(*b, Ctr("c", {{"nvidia.com/gpu", "1"},
                                  {"nvidia.com/gpumem-percentage", "30"},
                                  {"nvidia.com/gpucores", "0"}})),
            Req("NVIDIA", 1, 0, 30, 0));
}

TEST(CambriconRequest, V46Vectors) {
  VendorSettings s;
  s.Set("resourceCountName", "cambricon.com/mlu");  // the names of the upstream test
  auto b = Make("cambricon", s);
  EXPECT_EQ(Request(*b, Ctr("c", {})), std::nullopt);
  EXPECT_EQ(Request(*b, Ctr("c", {{"cambricon.com/mlu", "1"},
                                  {"cambricon.com/mlu.smlu.vmemory", "1000"},
                                  {"cambricon.com/mlu.smlu.vcore", "2"}})),
            Req("MLU", 1, 256000, 0, 2));
  EXPECT_EQ(Request(*b, Ctr("c", {{"cambricon.com/mlu", "1"}, {"cambricon.com/mlu.smlu.vmemory", "1000"}})),
            Req("MLU", 1, 256000, 0, 100));
  EXPECT_EQ(Request(*b, Ctr("c", {{"cambricon.com/mlu", "1"}, {"cambricon.com/mlu.smlu.vcore", "2"}})),
            Req("MLU", 1, 0, 100, 2));
  for (const char* mem : {"16Gi", "16.0Gi", "8388608"}) {  // 8388608 * 256 MiB overflows int32
    const std::string e =
        RequestError(*b, Ctr("c", {{"cambricon.com/mlu", "1"}, {"cambricon.com/mlu.smlu.vmemory", mem}}));
    EXPECT_TRUE(Contains(e, "cambricon.com/mlu.smlu.vmemory")) << mem << ": " << e;
  }
  // The default count name is no longer read once it is renamed.
  EXPECT_EQ(Request(*b, Ctr("c", {{"cambricon.com/vmlu", "1"}})), std::nullopt);
  EXPECT_EQ(Request(*Make("cambricon"), Ctr("c", {{"cambricon.com/vmlu", "1"}})), Req("MLU", 1, 0, 100, 100));
}

TEST(CambriconRequest, D7Counts) {
  auto b = Make("cambricon");
  EXPECT_EQ(Request(*b, Ctr("c", {{"cambricon.com/vmlu", "0"}})), std::nullopt);
  for (const char* n : {"-1", "0.5", "4294967296"}) {
    const std::string e = RequestError(*b, Ctr("c", {{"cambricon.com/vmlu", n}}));
    EXPECT_TRUE(Contains(e, "cambricon.com/vmlu")) << n << ": " << e;
  }
}

TEST(MthreadsRequest, V56Vectors) {
  auto b = Make("mthreads");
  EXPECT_EQ(Request(*b, Ctr("c", {{"mthreads.com/vgpu", "1"},
                                  {"mthreads.com/sgpu-memory", "1000"},
                                  {"mthreads.com/sgpu-core", "1"}})),
            Req("Mthreads", 1, 512000, 0, 1));
  EXPECT_EQ(Request(*b, Requests("c", {{"mthreads.com/sgpu-memory", "2"}, {"mthreads.com/sgpu-core", "1"}})),
            std::nullopt);
  EXPECT_EQ(Request(*b, Requests("c", {{"mthreads.com/vgpu", "1"}})), Req("Mthreads", 1, 0, 100, 0));
  EXPECT_EQ(Request(*b, Ctr("c", {{"mthreads.com/vgpu", "0"}})), std::nullopt);
  for (const char* n : {"-1", "4294967296"}) {
    const std::string e = RequestError(*b, Ctr("c", {{"mthreads.com/vgpu", n}}));
    EXPECT_TRUE(Contains(e, "mthreads.com/vgpu")) << n << ": " << e;
  }
  for (const char* mem : {"16Gi", "16.0Gi"}) {
    const std::string e =
        RequestError(*b, Ctr("c", {{"mthreads.com/vgpu", "1"}, {"mthreads.com/sgpu-memory", mem}}));
    EXPECT_TRUE(Contains(e, "mthreads.com/sgpu-memory")) << mem << ": " << e;
  }
}

TEST(MthreadsRequest, PodTotalsAreDividedPerDevice) {
  auto b = Make("mthreads");
  // multi_cards.yaml after the webhook: vgpu 2, core 32, memory 192 -> per device 49152 MiB, 16 cores.
  EXPECT_EQ(Request(*b, Ctr("c", {{"mthreads.com/vgpu", "2"},
                                  {"mthreads.com/sgpu-memory", "192"},
                                  {"mthreads.com/sgpu-core", "32"}})),
            Req("Mthreads", 2, 49152, 0, 16));
  // Integer division: 3 units over 2 devices is 768 MiB each; 5 cores over 2 devices is 2.
  EXPECT_EQ(Request(*b, Ctr("c", {{"mthreads.com/vgpu", "2"},
                                  {"mthreads.com/sgpu-memory", "3"},
                                  {"mthreads.com/sgpu-core", "5"}})),
            Req("Mthreads", 2, 768, 0, 2));
}

TEST(HygonRequest, V64Vectors) {
  auto b = Make("hygon");
  EXPECT_EQ(Request(*b, Ctr("c", {})), std::nullopt);
  EXPECT_EQ(
      Request(
          *b,
          Ctr("c", {{"hygon.com/dcunum", "1"}, {"hygon.com/dcucores", "1"}, {"hygon.com/dcumem", "1024"}})),
      Req("DCU", 1, 1024, 0, 1));
  EXPECT_EQ(Request(*b, Requests("c", {{"hygon.com/dcucores", "1"}, {"hygon.com/dcumem", "1024"}},
                                 {{"hygon.com/dcunum", "1"}})),
            Req("DCU", 1, 1024, 0, 1));
  EXPECT_EQ(Request(*b, Requests("c", {{"hygon.com/dcucores", "1"}}, {{"hygon.com/dcunum", "1"}})),
            Req("DCU", 1, 0, 100, 1));
  EXPECT_EQ(Request(*b, Ctr("c", {{"hygon.com/dcunum", "2"}})), Req("DCU", 2, 0, 100, 100));
  const std::string mem =
      RequestError(*b, Ctr("c", {{"hygon.com/dcunum", "1"}, {"hygon.com/dcumem", "16Gi"}}));
  EXPECT_TRUE(Contains(mem, "hygon.com/dcumem")) << mem;
  // Upstream treats a fractional memory as "absent" (a whole card); D7 makes it an error.
  const std::string frac =
      RequestError(*b, Ctr("c", {{"hygon.com/dcunum", "1"}, {"hygon.com/dcumem", "1.5"}}));
  EXPECT_TRUE(Contains(frac, "hygon.com/dcumem")) << frac;
  const std::string count = RequestError(*b, Ctr("c", {{"hygon.com/dcunum", "2200000000"}}));
  EXPECT_TRUE(Contains(count, "hygon.com/dcunum")) << count;
  const std::string cores =
      RequestError(*b, Ctr("c", {{"hygon.com/dcunum", "1"}, {"hygon.com/dcucores", "-1"}}));
  EXPECT_TRUE(Contains(cores, "hygon.com/dcucores")) << cores;
}

TEST(HygonRequest, MemoryFactor) {
  VendorSettings big;
  big.Set("memoryFactor", 1024);
  const std::string e = RequestError(*Make("hygon", big),
                                     Ctr("c", {{"hygon.com/dcunum", "1"}, {"hygon.com/dcumem", "3000000"}}));
  EXPECT_TRUE(Contains(e, "hygon.com/dcumem")) << e;
  VendorSettings two;
  two.Set("memoryFactor", 2);
  EXPECT_EQ(Request(*Make("hygon", two), Ctr("c", {{"hygon.com/dcunum", "1"}, {"hygon.com/dcumem", "800"}})),
            Req("DCU", 1, 1600, 0, 100));
}

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

TEST(NvidiaAnnotate, V25BothKeys) {
  Annotations out;
  Make("nvidia")->Annotate(PodView{}, {{Dev(0, "nvidia-device-0", "NVIDIA", 2000, 1)}}, {}, kNow, out);
  EXPECT_EQ(out, (Annotations{{"hami.io/vgpu-devices-allocated", "nvidia-device-0,NVIDIA,2000,1:;"},
                              {"hami.io/vgpu-devices-to-allocate", "nvidia-device-0,NVIDIA,2000,1:;"}}));
}

TEST(NvidiaAnnotate, MigAllocationsWrittenForMigSlots) {
  ContainerDevice d = Dev(0, "GPU-M", "NVIDIA", 10240, 14);
  d.mig = MigSlot{"1g.10gb", MigPlacement{6, 1}};
  Annotations out;
  Make("nvidia")->Annotate(PodView{}, {{}, {d}}, {}, kNow, out);
  EXPECT_EQ(out.at("hami.io/vgpu-devices-allocated"), ";GPU-M,NVIDIA,10240,14:;");
  ASSERT_TRUE(out.contains("hami.io/vgpu-mig-allocations"));
  auto mig = codec::DecodeMigAllocations(out.at("hami.io/vgpu-mig-allocations"));
  ASSERT_TRUE(mig) << mig.error().message;
  ASSERT_EQ(mig->size(), 1u);
  EXPECT_EQ((*mig)[0].container_index, 1);
  EXPECT_EQ((*mig)[0].device_index, 0);
  EXPECT_EQ((*mig)[0].gpu_uuid, "GPU-M");
  EXPECT_EQ((*mig)[0].profile, "1g.10gb");
  EXPECT_EQ((*mig)[0].placement, (MigPlacement{6, 1}));
  Annotations plain;
  Make("nvidia")->Annotate(PodView{}, {{Dev(0, "GPU-0", "NVIDIA", 1, 1)}}, {}, kNow, plain);
  EXPECT_FALSE(plain.contains("hami.io/vgpu-mig-allocations"));
}

TEST(CambriconAnnotate, V47) {
  auto b = Make("cambricon");
  Annotations out;
  b->Annotate(PodView{}, {{Dev(0, "device-0", "MLU", 256000, 1)}}, {}, kNow, out);
  EXPECT_EQ(out, (Annotations{{"CAMBRICON_DSMLU_ASSIGNED", "false"},
                              {"CAMBRICON_DSMLU_PROFILE", "0_1_1000"},
                              {"hami.io/cambricon-mlu-devices-allocated", "device-0,MLU,256000,1:;"},
                              {"hami.io/cambricon-mlu-devices-to-allocate", "device-0,MLU,256000,1:;"}}));
  Annotations second;
  b->Annotate(PodView{}, {{}, {Dev(0, "device-0", "MLU", 256000, 1)}}, {}, kNow, second);
  EXPECT_EQ(second.at("CAMBRICON_DSMLU_PROFILE"), "0_1_1000");
  EXPECT_EQ(second.at("hami.io/cambricon-mlu-devices-allocated"), ";device-0,MLU,256000,1:;");
  EXPECT_EQ(second.at("hami.io/cambricon-mlu-devices-to-allocate"), ";device-0,MLU,256000,1:;");
  // The profile names the first device of the first container that has one.
  Annotations many;
  b->Annotate(PodView{},
              {{},
               {Dev(2, "d2", "MLU", 512, 30), Dev(3, "d3", "MLU", 768, 40)},
               {Dev(1, "d1", "MLU", 256, 5)}},
              {}, kNow, many);
  EXPECT_EQ(many.at("CAMBRICON_DSMLU_PROFILE"), "2_30_2");
}

TEST(MthreadsAnnotate, V54AndD3) {
  auto b = Make("mthreads");
  Annotations out;
  b->Annotate(PodView{}, {{Dev(0, "test1", "Mthreads", 1000, 1)}}, {}, kNow, out);
  EXPECT_EQ(out.at("mthreads.com/gpu-index"), "0");
  EXPECT_EQ(out.at("mthreads.com/predicate-node"), "");
  EXPECT_EQ(out.at("mthreads.com/predicate-time"), "1716199325000000000");
  EXPECT_EQ(out.at("hami.io/mthreads-vgpu-devices-allocated"), "test1,Mthreads,1000,1:;");
  EXPECT_EQ(out.at("hami.io/mthreads-vgpu-devices-to-allocate"), "test1,Mthreads,1000,1:;");  // D3
  EXPECT_EQ(out.size(), 5u);
}

TEST(MthreadsAnnotate, PredicateNodeAndLastContainerIndexes) {
  auto b = Make("mthreads");
  const Annotations written{{"hami.io/vgpu-node", "node-7"}};
  Annotations out;
  b->Annotate(PodView{},
              {{Dev(0, "a", "Mthreads", 1, 1), Dev(1, "b", "Mthreads", 1, 1)},
               {},
               {Dev(3, "c", "Mthreads", 1, 1)}},
              written, kNow, out);
  EXPECT_EQ(out.at("mthreads.com/predicate-node"), "node-7");
  EXPECT_EQ(out.at("mthreads.com/gpu-index"), "3");  // the last container with devices wins
  Annotations one;
  b->Annotate(PodView{}, {{Dev(0, "a", "Mthreads", 1, 1), Dev(1, "b", "Mthreads", 1, 1)}}, written, kNow,
              one);
  EXPECT_EQ(one.at("mthreads.com/gpu-index"), "0,1");
}

TEST(HygonAnnotate, V63AndD2) {
  Annotations out;
  Make("hygon")->Annotate(PodView{}, {{Dev(1, "test1", "DCU", 2048, 1)}}, {}, kNow, out);
  EXPECT_EQ(out, (Annotations{{"hami.io/dcu-devices-allocated", "test1,DCU,2048,1:;"},
                              {"hami.io/hcu-devices-to-allocate", "test1,DCU,2048,1:;"}}));
}

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

// --- Admit
// --------------------------------------------------------------------------------------------------

struct Admitted {
  bool ok = false;    // Admit returned a value
  bool uses = false;  // ... and that value
  std::string error;  // Admit's error, if any
  ContainerView container;
  PodView pod;
};

Admitted AdmitOne(const Backend& b, ContainerView c, PodView pod = {}) {
  Admitted a;
  auto r = b.Admit(c, pod);
  a.ok = r.has_value();
  if (r) {
    a.uses = *r;
  } else {
    a.error = r.error().message;
  }
  a.container = std::move(c);
  a.pod = std::move(pod);
  return a;
}

TEST(NvidiaAdmit, V19DefaultGpuNum) {
  auto b = Make("nvidia");
  for (const char* resource :
       {"nvidia.com/gpu", "nvidia.com/gpucores", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage"}) {
    auto a = AdmitOne(*b, Ctr("c", {{resource, "50"}}));
    ASSERT_TRUE(a.ok) << resource << ": " << a.error;
    EXPECT_TRUE(a.uses) << resource;
    EXPECT_TRUE(a.container.limits.contains("nvidia.com/gpu")) << resource;
  }
  EXPECT_EQ(AdmitOne(*b, Ctr("c", {{"nvidia.com/gpumem", "1000"}})).container.limits.at("nvidia.com/gpu"),
            "1");
  auto none = AdmitOne(*b, Ctr("c", {}));
  ASSERT_TRUE(none.ok);
  EXPECT_FALSE(none.uses);
  EXPECT_TRUE(none.container.limits.empty());

  VendorSettings zero;
  zero.Set("defaultGPUNum", 0);
  auto off = AdmitOne(*Make("nvidia", zero), Ctr("c", {{"nvidia.com/gpumem", "1000"}}));
  ASSERT_TRUE(off.ok);
  EXPECT_FALSE(off.uses);
  EXPECT_FALSE(off.container.limits.contains("nvidia.com/gpu"));
  VendorSettings three;
  three.Set("defaultGPUNum", 3);
  EXPECT_EQ(AdmitOne(*Make("nvidia", three), Ctr("c", {{"nvidia.com/gpucores", "10"}}))
                .container.limits.at("nvidia.com/gpu"),
            "3");
}

TEST(NvidiaAdmit, V20PercentageValidation) {
  auto b = Make("nvidia");
  for (const char* ok : {"0", "100"}) {
    auto a = AdmitOne(*b, Ctr("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", ok}}));
    EXPECT_TRUE(a.ok) << ok << ": " << a.error;
  }
  for (const char* bad : {"101", "150", "-1", "12.5"}) {
    auto a = AdmitOne(*b, Ctr("main", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", bad}}));
    ASSERT_FALSE(a.ok) << bad;
    EXPECT_TRUE(Contains(a.error, "nvidia.com/gpumem-percentage")) << a.error;
    EXPECT_TRUE(Contains(a.error, "main")) << a.error;
  }
  auto req =
      AdmitOne(*b, Requests("c", {{"nvidia.com/gpumem-percentage", "150"}}, {{"nvidia.com/gpu", "1"}}));
  EXPECT_FALSE(req.ok) << "a percentage in requests is validated too";
}

TEST(NvidiaAdmit, V21ExclusiveCoreDefaulting) {
  auto b = Make("nvidia");
  const auto cores_after = [&](const ContainerView& c) -> std::string {
    auto a = AdmitOne(*b, c);
    EXPECT_TRUE(a.ok) << a.error;
    auto it = a.container.limits.find("nvidia.com/gpucores");
    return it == a.container.limits.end() ? "<none>" : it->second;
  };
  EXPECT_EQ(cores_after(Ctr("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "100"}})), "100");
  EXPECT_EQ(cores_after(Requests("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "100"}})),
            "100");
  EXPECT_EQ(cores_after(Ctr("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "50"}})),
            "<none>");
  EXPECT_EQ(cores_after(Ctr("c", {{"nvidia.com/gpu", "1"}})), "100");
  EXPECT_EQ(cores_after(Ctr("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpucores", "70"}})), "70");
  EXPECT_EQ(cores_after(Ctr("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "8192"}})), "<none>");

  auto req = AdmitOne(*b, Requests("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpucores", "55"}}));
  ASSERT_TRUE(req.ok) << req.error;
  EXPECT_EQ(req.container.requests.at("nvidia.com/gpucores"), "55");
  EXPECT_FALSE(req.container.limits.contains("nvidia.com/gpucores"));

  VendorSettings no_mem;
  no_mem.Set("resourceMemoryName", "");
  auto a = AdmitOne(*Make("nvidia", no_mem), Ctr("c", {{"nvidia.com/gpu", "1"}}));
  ASSERT_TRUE(a.ok) << a.error;
  EXPECT_EQ(a.container.limits.at("nvidia.com/gpucores"), "100");

  VendorSettings custom;
  custom.Set("resourceCountName", "hami.io/gpu");
  custom.Set("resourceMemoryPercentageName", "hami.io/gpumem-percentage");
  custom.Set("resourceCoreName", "hami.io/gpucores");
  auto c = AdmitOne(*Make("nvidia", custom),
                    Ctr("c", {{"hami.io/gpu", "1"}, {"hami.io/gpumem-percentage", "100"}}));
  ASSERT_TRUE(c.ok) << c.error;
  EXPECT_TRUE(c.uses);
  EXPECT_EQ(c.container.limits.at("hami.io/gpucores"), "100");
  EXPECT_FALSE(c.container.limits.contains("nvidia.com/gpucores"));
}

TEST(NvidiaAdmit, PriorityIsTheQuantitysWholeValueAsHamiWritesIt) {
  auto plain = Make("nvidia");
  for (const auto& [given, written] :
       std::vector<std::pair<std::string, std::string>>{{"1k", "1000"}, {"1.5", "2"}, {"7", "7"}}) {
    auto a = AdmitOne(*plain, Ctr("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/priority", given}}));
    ASSERT_TRUE(a.ok) << a.error;
    EXPECT_EQ(a.container.env, (std::vector<EnvVar>{{"CUDA_TASK_PRIORITY", written}})) << given;
  }
  auto bad = AdmitOne(*plain, Ctr("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/priority", "high"}}));
  EXPECT_FALSE(bad.ok);
  EXPECT_NE(bad.error.find("nvidia.com/priority in container c"), std::string::npos) << bad.error;
}

TEST(NvidiaAdmit, ACountInRequestsOnlyIsAdmittedTheSameTwice) {
  auto b = Make("nvidia");
  ContainerView c = Ctr("c", {});
  c.requests["nvidia.com/gpu"] = "1";
  auto first = AdmitOne(*b, c);
  ASSERT_TRUE(first.ok) << first.error;
  auto second = AdmitOne(*b, first.container);
  ASSERT_TRUE(second.ok) << second.error;
  EXPECT_EQ(second.container.limits, first.container.limits);
  EXPECT_FALSE(second.container.limits.contains("nvidia.com/gpu"));
}

TEST(NvidiaRequest, AValueBeyondInt64IsTooLargeNotFractional) {
  auto b = Make("nvidia");
  auto r = b->RequestFor(Ctr("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "99999999999999999999"}}));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("\"99999999999999999999\" is too large, out of range"), std::string::npos)
      << r.error().message;
  auto frac = b->RequestFor(Ctr("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "1.5"}}));
  ASSERT_FALSE(frac);
  EXPECT_NE(frac.error().message.find("is not a whole number"), std::string::npos) << frac.error().message;
}

TEST(NvidiaAdmit, V22Extras) {
  auto plain = Make("nvidia");
  auto prio = AdmitOne(*plain, Ctr("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/priority", "5"}}));
  ASSERT_TRUE(prio.ok) << prio.error;
  EXPECT_EQ(prio.container.env, (std::vector<EnvVar>{{"CUDA_TASK_PRIORITY", "5"}}));
  EXPECT_TRUE(AdmitOne(*plain, Ctr("c", {{"nvidia.com/gpu", "1"}})).container.env.empty());

  VendorSettings force;
  force.Set("gpuCorePolicy", "force");
  auto f = AdmitOne(*Make("nvidia", force), Ctr("c", {{"nvidia.com/gpu", "1"}}));
  ASSERT_TRUE(f.ok) << f.error;
  EXPECT_EQ(f.container.env, (std::vector<EnvVar>{{"GPU_CORE_UTILIZATION_POLICY", "force"}}));
  VendorSettings dflt;
  dflt.Set("gpuCorePolicy", "default");
  EXPECT_TRUE(AdmitOne(*Make("nvidia", dflt), Ctr("c", {{"nvidia.com/gpu", "1"}})).container.env.empty());

  VendorSettings rc;
  rc.Set("runtimeClassName", "nvidia");
  auto r = AdmitOne(*Make("nvidia", rc), Ctr("c", {{"nvidia.com/gpu", "1"}}));
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.pod.runtime_class_name, std::optional<std::string>("nvidia"));
  PodView preset;
  preset.runtime_class_name = "custom";
  EXPECT_EQ(AdmitOne(*Make("nvidia", rc), Ctr("c", {{"nvidia.com/gpu", "1"}}), preset).pod.runtime_class_name,
            std::optional<std::string>("custom"));
  EXPECT_EQ(AdmitOne(*Make("nvidia", rc), Ctr("c", {{"cpu", "1"}})).pod.runtime_class_name, std::nullopt);

  VendorSettings ow;
  ow.Set("overwriteEnv", true);
  auto none = AdmitOne(*Make("nvidia", ow), Ctr("c", {{"cpu", "1"}}));
  ASSERT_TRUE(none.ok) << none.error;
  EXPECT_FALSE(none.uses);
  EXPECT_EQ(none.container.env, (std::vector<EnvVar>{{"NVIDIA_VISIBLE_DEVICES", "none"}}));
  EXPECT_TRUE(AdmitOne(*Make("nvidia", ow), Ctr("c", {{"nvidia.com/gpu", "1"}})).container.env.empty());
}

TEST(NvidiaAdmit, EnvVarsAreReplacedNotDuplicated) {
  VendorSettings s;
  s.Set("gpuCorePolicy", "disable");
  auto b = Make("nvidia", s);
  ContainerView c = Ctr("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/priority", "5"}});
  c.env = {{"OTHER", "x"}, {"CUDA_TASK_PRIORITY", "1"}};
  auto once = AdmitOne(*b, c);
  ASSERT_TRUE(once.ok) << once.error;
  const std::vector<EnvVar> want{
      {"OTHER", "x"}, {"CUDA_TASK_PRIORITY", "5"}, {"GPU_CORE_UTILIZATION_POLICY", "disable"}};
  EXPECT_EQ(once.container.env, want);
  auto twice = AdmitOne(*b, once.container);
  ASSERT_TRUE(twice.ok) << twice.error;
  EXPECT_EQ(twice.container.env, want);
}

TEST(CambriconAdmit, V44ReportsCountInLimits) {
  VendorSettings s;
  s.Set("resourceCountName", "cambricon.com/mlu");
  auto custom = AdmitOne(*Make("cambricon", s), Ctr("c", {{"cambricon.com/mlu", "1"}}));
  ASSERT_TRUE(custom.ok);
  EXPECT_TRUE(custom.uses);
  auto b = Make("cambricon");
  EXPECT_TRUE(AdmitOne(*b, Ctr("c", {{"cambricon.com/vmlu", "1"}})).uses);
  EXPECT_FALSE(AdmitOne(*b, Ctr("c", {{"cambricon.com/mlu", "1"}})).uses);
  EXPECT_FALSE(
      AdmitOne(*b, Requests("c", {{"cambricon.com/vmlu", "1"}})).uses);  // requests only: not detected
  auto a = AdmitOne(*b, Ctr("c", {{"cambricon.com/vmlu", "1"}}));
  EXPECT_EQ(a.container.limits.size(), 1u) << "nothing is injected";
}

TEST(MthreadsAdmit, V52) {
  auto b = Make("mthreads");
  struct Case {
    ContainerView c;
    bool ok;
    bool uses;
  };
  const std::vector<Case> cases{
      {Ctr("c",
           {{"mthreads.com/vgpu", "2"}, {"mthreads.com/sgpu-memory", "2"}, {"mthreads.com/sgpu-core", "1"}}),
       true, true},
      {Ctr("c", {{"mthreads.com/vgpu", "2"}}), true, true},
      {Requests("c", {{"mthreads.com/vgpu", "2"}}), true, true},
      {Requests("c", {{"mthreads.com/vgpu", "1"}}), true, true},
      {Ctr("c", {{"mthreads.com/sgpu-memory", "2"}, {"mthreads.com/sgpu-core", "1"}}), true, false},
      {Ctr("c", {{"mthreads.com/vgpu", "1"}, {"mthreads.com/sgpu-core", "1"}}), true, true},
      {Ctr("c",
           {{"mthreads.com/vgpu", "1"}, {"mthreads.com/sgpu-memory", "2"}, {"mthreads.com/sgpu-core", "1"}}),
       true, true},
      {Ctr("c", {{"mthreads.com/vgpu", "1"}, {"mthreads.com/sgpu-memory", "3"}}), false, false},
      {Ctr("c", {{"mthreads.com/vgpu", "0"}}), false, false},
      {Ctr("c", {{"mthreads.com/vgpu", "-1"}}), false, false},
      {Requests("c", {{"mthreads.com/vgpu", "0"}}), false, false},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    auto a = AdmitOne(*b, cases[i].c);
    EXPECT_EQ(a.ok, cases[i].ok) << "case " << i << ": " << a.error;
    if (a.ok) {
      EXPECT_EQ(a.uses, cases[i].uses) << "case " << i;
    }
  }
  auto bad_mem = AdmitOne(*b, Ctr("c", {{"mthreads.com/vgpu", "1"}, {"mthreads.com/sgpu-memory", "3"}}));
  EXPECT_TRUE(Contains(bad_mem.error, "[2, 4, 8, 16, 32, 64, 96]")) << bad_mem.error;
  auto zero = AdmitOne(*b, Ctr("c", {{"mthreads.com/vgpu", "0"}}));
  EXPECT_TRUE(Contains(zero.error, "mthreads.com/vgpu")) << zero.error;
}

TEST(MthreadsAdmit, V52LimitsRewritten) {
  auto b = Make("mthreads");
  auto multi = AdmitOne(*b, Ctr("c", {{"mthreads.com/vgpu", "2"},
                                      {"mthreads.com/sgpu-memory", "2"},
                                      {"mthreads.com/sgpu-core", "1"}}));
  ASSERT_TRUE(multi.ok) << multi.error;
  EXPECT_EQ(multi.container.limits.at("mthreads.com/sgpu-core"), "32");
  EXPECT_EQ(multi.container.limits.at("mthreads.com/sgpu-memory"), "192");
  EXPECT_EQ(multi.pod.annotations.at("mthreads.com/request-gpu-num"), "2");
  auto whole = AdmitOne(*b, Ctr("c", {{"mthreads.com/vgpu", "1"}, {"mthreads.com/sgpu-core", "1"}}));
  ASSERT_TRUE(whole.ok) << whole.error;
  EXPECT_EQ(whole.container.limits.at("mthreads.com/sgpu-core"), "16");  // a user core limit is overwritten
  EXPECT_EQ(whole.container.limits.at("mthreads.com/sgpu-memory"), "96");
  EXPECT_FALSE(whole.pod.annotations.contains("mthreads.com/request-gpu-num"));
  auto sized = AdmitOne(*b, Ctr("c", {{"mthreads.com/vgpu", "1"},
                                      {"mthreads.com/sgpu-memory", "8"},
                                      {"mthreads.com/sgpu-core", "4"}}));
  ASSERT_TRUE(sized.ok) << sized.error;
  EXPECT_EQ(sized.container.limits.at("mthreads.com/sgpu-core"), "4");
  EXPECT_EQ(sized.container.limits.at("mthreads.com/sgpu-memory"), "8");
}

TEST(HygonAdmit, V58) {
  auto b = Make("hygon");
  auto a = AdmitOne(*b, Ctr("c", {{"hygon.com/dcunum", "1"}}));
  ASSERT_TRUE(a.ok);
  EXPECT_TRUE(a.uses);
  EXPECT_FALSE(AdmitOne(*b, Ctr("c", {{"hygon.com/dcumem", "1000"}})).uses);
  EXPECT_FALSE(AdmitOne(*b, Ctr("c", {{"nvidia.com/gpu", "1"}})).uses);
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

TEST(Settings, NvidiaValidation) {
  VendorSettings policy;
  policy.Set("gpuCorePolicy", "sometimes");
  EXPECT_TRUE(Contains(CreateError("nvidia", policy), "gpuCorePolicy"));
  for (const char* ok : {"default", "force", "disable"}) {
    VendorSettings s;
    s.Set("gpuCorePolicy", ok);
    EXPECT_TRUE(TryMake("nvidia", s)) << ok;
  }
  VendorSettings mem;
  mem.Set("defaultMemory", -1);
  EXPECT_TRUE(Contains(CreateError("nvidia", mem), "defaultMemory"));
  VendorSettings cores;
  cores.Set("defaultCores", -1);
  EXPECT_TRUE(Contains(CreateError("nvidia", cores), "defaultCores"));
  VendorSettings many_cores;
  many_cores.Set("defaultCores", 101);
  EXPECT_TRUE(Contains(CreateError("nvidia", many_cores), "defaultCores"));
  VendorSettings num;
  num.Set("defaultGPUNum", -1);
  EXPECT_TRUE(Contains(CreateError("nvidia", num), "defaultGPUNum"));
  VendorSettings edge;
  edge.Set("defaultCores", 100);
  edge.Set("defaultMemory", 0);
  edge.Set("defaultGPUNum", 0);
  EXPECT_TRUE(TryMake("nvidia", edge));
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

TEST(Settings, MigProfileAllowlistValidation) {
  VendorSettings bad;
  bad.Set("migProfileAllowlist", testing::MigAllowlist({{{"A100"}, {"1g.10gb", "big"}}}));
  EXPECT_TRUE(Contains(CreateError("nvidia", bad), "big"));
  VendorSettings no_digit;
  no_digit.Set("migProfileAllowlist", testing::MigAllowlist({{{"A100"}, {"g.10gb"}}}));
  EXPECT_FALSE(TryMake("nvidia", no_digit));
  VendorSettings no_models;
  no_models.Set("migProfileAllowlist", testing::MigAllowlist({{{}, {"1g.10gb"}}}));
  EXPECT_TRUE(Contains(CreateError("nvidia", no_models), "migProfileAllowlist"));
  VendorSettings no_profiles;
  no_profiles.Set("migProfileAllowlist", testing::MigAllowlist({{{"A100"}, {}}}));
  EXPECT_FALSE(TryMake("nvidia", no_profiles));
}

TEST(NvidiaMig, ProfileAllowlist) {
  VendorSettings s;
  s.Set("migProfileAllowlist", testing::MigAllowlist({{{"A100"}, {"1g.10gb", "2g.20gb"}},
                                                      {{"A100-SXM4-80GB", "H100"}, {"7g.80gb"}}}));
  auto b = Make("nvidia", s);
  EXPECT_TRUE(b->MigProfileAllowed("NVIDIA A100-PCIE-40GB", "1g.10gb"));
  EXPECT_TRUE(b->MigProfileAllowed("NVIDIA A100-PCIE-40GB", "2g.20gb"));
  EXPECT_FALSE(b->MigProfileAllowed("NVIDIA A100-PCIE-40GB", "3g.40gb"));
  EXPECT_FALSE(b->MigProfileAllowed("NVIDIA A100-PCIE-40GB", "7g.80gb"));
  EXPECT_TRUE(b->MigProfileAllowed("nvidia a100-sxm4-80gb", "7g.80gb"));  // models match case-insensitively
  EXPECT_TRUE(b->MigProfileAllowed("NVIDIA H100 80GB HBM3", "7g.80gb"));
  EXPECT_FALSE(b->MigProfileAllowed("NVIDIA H100 80GB HBM3", "1g.10gb"));
  EXPECT_TRUE(b->MigProfileAllowed("NVIDIA A30", "1g.6gb")) << "a model not listed allows every profile";
  auto open = Make("nvidia");
  EXPECT_TRUE(open->MigProfileAllowed("NVIDIA A100-PCIE-40GB", "3g.40gb"));
  // Other vendors have no MIG.
  EXPECT_TRUE(Make("hygon")->MigProfileAllowed("DCU", "1g.10gb"));
}

}  // namespace
}  // namespace hami
