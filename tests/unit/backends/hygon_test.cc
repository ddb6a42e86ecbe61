// The Hygon DCU backend in isolation: its default keys (its to-allocate key: docs/DECISIONS.md, D2),
// discovery from the legacy colon list, requests, annotations and admission. Case ids: docs/TEST_VECTORS.md.
// Unlike upstream, absent devices are an empty list, not an error.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>

#include "backends/hygon/hygon.h"
#include "tests/unit/backends/builtin_helpers.h"

namespace hami::vendor_tests {
namespace {

// --- DefaultSpec
// ------------------------------------------------------------------------------

TEST(DefaultSpec, Hygon) {
  const BackendSpec s = backends::hygon::DefaultSpec();
  EXPECT_EQ(s.vendor, "DCU");
  EXPECT_EQ(s.config_section, "hygon");
  EXPECT_EQ(s.health, HealthRule::kHandshake);
  EXPECT_EQ(s.keys.register_annotation, "hami.io/node-dcu-register");
  EXPECT_EQ(s.keys.handshake, "hami.io/node-handshake-dcu");
  EXPECT_EQ(s.keys.allocated, "hami.io/dcu-devices-allocated");
  EXPECT_EQ(s.keys.to_allocate, "hami.io/hcu-devices-to-allocate");  // docs/DECISIONS.md, D2
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

// --- Discover
// -----------------------------------------------------------------------------------------------

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

// --- Annotate
// -----------------------------------------------------------------------------------------------

TEST(HygonAnnotate, V63AndD2) {
  Annotations out;
  Make("hygon")->Annotate(PodView{}, {{Dev(1, "test1", "DCU", 2048, 1)}}, {}, kNow, out);
  EXPECT_EQ(out, (Annotations{{"hami.io/dcu-devices-allocated", "test1,DCU,2048,1:;"},
                              {"hami.io/hcu-devices-to-allocate", "test1,DCU,2048,1:;"}}));
}

// --- Admit
// --------------------------------------------------------------------------------------------------

TEST(HygonAdmit, V58) {
  auto b = Make("hygon");
  auto a = AdmitOne(*b, Ctr("c", {{"hygon.com/dcunum", "1"}}));
  ASSERT_TRUE(a.ok);
  EXPECT_TRUE(a.uses);
  EXPECT_FALSE(AdmitOne(*b, Ctr("c", {{"hygon.com/dcumem", "1000"}})).uses);
  EXPECT_FALSE(AdmitOne(*b, Ctr("c", {{"nvidia.com/gpu", "1"}})).uses);
}

}  // namespace
}  // namespace hami::vendor_tests
