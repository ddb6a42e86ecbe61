// The Moore Threads backend in isolation: its default keys, cards from node capacity, requests, annotations
// (its to-allocate key too: docs/DECISIONS.md, D3) and admission. Case ids: docs/TEST_VECTORS.md. Unlike
// upstream, absent devices are an empty list, not an error.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "backends/mthreads/mthreads.h"
#include "tests/unit/backends/builtin_helpers.h"

namespace hami::vendor_tests {
namespace {

// --- DefaultSpec
// ------------------------------------------------------------------------------

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

// --- Discover
// -----------------------------------------------------------------------------------------------

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

// --- RequestFor
// ---------------------------------------------------------------------------------------------

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

// --- Annotate
// -----------------------------------------------------------------------------------------------

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

// --- Admit
// --------------------------------------------------------------------------------------------------

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

}  // namespace
}  // namespace hami::vendor_tests
