// The Cambricon MLU backend in isolation: its default keys, cards from node capacity, requests, annotations
// and admission. Case ids: docs/TEST_VECTORS.md; decisions (D7): docs/DECISIONS.md. Unlike upstream, absent
// devices are an empty list, not an error.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>

#include "backends/cambricon/cambricon.h"
#include "tests/unit/backends/builtin_helpers.h"

namespace hami::vendor_tests {
namespace {

// --- DefaultSpec
// ------------------------------------------------------------------------------

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

// --- Discover
// -----------------------------------------------------------------------------------------------

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

// --- RequestFor
// ---------------------------------------------------------------------------------------------

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

// --- Annotate
// -----------------------------------------------------------------------------------------------

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

// --- Admit
// --------------------------------------------------------------------------------------------------

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

}  // namespace
}  // namespace hami::vendor_tests
