// The NVIDIA backend in isolation: its default keys, discovery from the JSON manifest (MIG profiles, pair
// scores), requests, annotations, admission and its settings. Case ids: docs/TEST_VECTORS.md; decisions
// (D7): docs/DECISIONS.md. Unlike upstream, absent devices are an empty list, not an error, and admission
// replaces an env var instead of appending a duplicate.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "backends/nvidia/nvidia.h"
#include "core/cluster_state.h"
#include "core/codec/pod_devices.h"
#include "tests/unit/backends/builtin_helpers.h"

namespace hami::vendor_tests {
namespace {

// --- DefaultSpec
// ------------------------------------------------------------------------------

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
  {
    // The topology-aware policy places several GPUs by their pair scores (Backend::ChoosesCards).
    const Backends all = testing::BuiltinBackends();
    const Backend& nvidia = *all.Find("NVIDIA");
    DeviceRequest two;
    two.count = 2;
    EXPECT_TRUE(nvidia.Hooks().chooses_cards);
    EXPECT_TRUE(nvidia.ChoosesCards(ChoiceView{&two, {}, true, 0, {}}));
    EXPECT_FALSE(nvidia.ChoosesCards(ChoiceView{&two, {}, false, 0, {}}));
  }
  EXPECT_TRUE(s.fit.mig);
  EXPECT_FALSE(s.fit.same_device_across_containers);
  EXPECT_TRUE(s.lock.owner_aware);
  EXPECT_FALSE(s.lock.fixed_expiry.has_value());
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

// --- Admit
// --------------------------------------------------------------------------------------------------

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

// --- config overrides
// ---------------------------------------------------------------------------------------

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
}  // namespace hami::vendor_tests
