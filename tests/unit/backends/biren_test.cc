// Biren in isolation and through the scheduler: discovery (cores scored as 100), the handshake, requests
// by count, the fit's checks and pod annotations. HAMi v2.10's Biren vectors (those of Vastai outside die
// mode), with the departures of docs/DECISIONS.md "Biren".
#include "backends/biren/biren.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "core/health.h"
#include "tests/support/builders.h"

namespace hami {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using testing::Ctr;
using testing::Failure;
using testing::Hold;
using testing::Pod;
using testing::Req;
using testing::Request;

const TimePoint kNow = std::chrono::system_clock::from_time_t(1767225600);  // 2026-01-01 00:00:00 UTC
constexpr const char* kRegister = "hami.io/node-biren-register";

BackendPtr Make() { return std::move(backends::biren::Module().create({}).value().at(0)); }

DeviceInfo Device(std::string id, std::int32_t index, std::int32_t count = 4) {
  return testing::Gpu(std::move(id), index, 32768, count, "Biren");
}

PodView BrPod(int count, std::map<std::string, std::string> annotations = {}) {
  return Pod("p", {Ctr("br", {{"birentech.com/gpu", std::to_string(count)}})}, {}, std::move(annotations));
}

TEST(Biren, TheSpecNamesHamisCapitalisedKeys) {
  const BackendPtr b = Make();
  const BackendSpec& s = b->Spec();
  EXPECT_EQ(s.vendor, "Biren");
  EXPECT_EQ(s.keys.register_annotation, kRegister);
  EXPECT_EQ(s.keys.handshake, "hami.io/node-handshake-biren");
  EXPECT_EQ(s.keys.allocated, "hami.io/Biren-devices-allocated");
  EXPECT_EQ(s.keys.to_allocate, "hami.io/Biren-devices-to-allocate");
  EXPECT_EQ(s.keys.node_lock, "hami.io/mutex.lock");
  EXPECT_EQ(s.keys.use_uuid, "birentech.com/use-gpuuuid");
  EXPECT_EQ(s.keys.nouse_uuid, "birentech.com/nouse-gpuuuid");
  EXPECT_EQ(s.resources.count, "birentech.com/gpu");
  EXPECT_TRUE(s.resources.memory.empty()) << "no quota";
  EXPECT_EQ(s.health, HealthRule::kHandshake);
  EXPECT_FALSE(b->Hooks().chooses_cards) << "several cards are taken in the policy's order";
}

TEST(Biren, DiscoveryAndTheHandshake) {
  BackendPtr b = Make();
  NodeView n;
  n.name = "n1";
  EXPECT_TRUE(b->Discover(n).value().empty()) << "no annotation: no plugin (upstream: an error)";
  n.annotations[kRegister] =
      R"([{"id":"7-0","count":1,"devmem":32768,"type":"Biren","health":true,"devicepairscore":{}}])";
  auto devices = b->Discover(n).value();
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0].id, "7-0");
  EXPECT_EQ(devices[0].count, 1);
  EXPECT_EQ(devices[0].devmem, MiB(32768));
  EXPECT_EQ(devices[0].devcore, Cores(100)) << "scored as 100 cores";
  EXPECT_TRUE(devices[0].health);
  for (const char* bad : {":", ""}) {
    n.annotations[kRegister] = bad;
    EXPECT_THAT(b->Discover(n).error().message, HasSubstr(kRegister)) << "'" << bad << "'";
  }

  setenv("TZ", "UTC", 1);
  tzset();
  const BackendSpec spec = backends::biren::DefaultSpec();
  NodeView h;
  h.name = "n";
  h.annotations["hami.io/node-handshake-biren"] = "Requesting_2025-01-07 00:00:00";
  EXPECT_FALSE(EvaluateHealth(spec, h, {}, kNow, 60s).healthy);
  h.allocatable["birentech.com/gpu"] = "4";
  EXPECT_TRUE(EvaluateHealth(spec, h, {}, kNow, 60s).healthy) << "the plugin still advertises devices";
  h.annotations["hami.io/node-handshake-biren"] = "Unknown";
  EXPECT_EQ(EvaluateHealth(spec, h, {}, kNow, 60s).handshake_patch, "Requesting_2026-01-01 00:00:00");
}

TEST(Biren, RequestsAndAdmissionByCount) {
  BackendPtr b = Make();
  EXPECT_FALSE(Request(*b, Ctr("c", {})));
  EXPECT_EQ(Request(*b, Ctr("c", {{"birentech.com/gpu", "2"}})), Req("Biren", 2, 0, kPercentUnset, 0));
  ContainerView requests_only = Ctr("c", {});
  requests_only.requests["birentech.com/gpu"] = "1";
  EXPECT_EQ(Request(*b, requests_only), Req("Biren", 1, 0, kPercentUnset, 0));
  auto bad = b->RequestFor(Ctr("c", {{"birentech.com/gpu", "0.5"}}));
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().message, HasSubstr("birentech.com/gpu"));
  PodView pod;
  ContainerView asking = Ctr("c", {{"birentech.com/gpu", "1"}});
  EXPECT_TRUE(b->Admit(asking, pod).value());
  EXPECT_FALSE(b->Admit(requests_only, pod).value()) << "limits only";
}

// --- through the scheduler ------------------------------------------------------------------------------

struct Cluster : testing::FitCluster {
  void Node(const std::vector<DeviceInfo>& devices) {
    state.UpsertNode(testing::ManifestNode("n", kRegister, devices, "birentech.com/gpu"));
  }
};

TEST(BirenFit, SharedByCountAlone) {
  {
    Cluster c;
    c.Node({Device("7-0", 0)});
    auto out = c.Run(BrPod(1));
    ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << Failure(out);
    EXPECT_EQ(out.annotations.at("hami.io/Biren-devices-allocated"), "7-0,Biren,0,0:;");
    EXPECT_EQ(out.annotations.at("hami.io/Biren-devices-to-allocate"), "7-0,Biren,0,0:;");
    EXPECT_EQ(Failure(c.Run(BrPod(1, {{"birentech.com/use-gpuuuid", "7-1"}}))), "1/1 CardUuidMismatch");
    EXPECT_EQ(Failure(c.Run(BrPod(1, {{"birentech.com/nouse-gpuuuid", "7-0"}}))), "1/1 CardUuidMismatch");
    Hold(c.state, "h", "n", "Biren", "7-0", 1, 0, 0);
    EXPECT_EQ(Failure(c.Run(BrPod(1, {{"hami.io/gpu-scheduler-policy", "mutex"}}))),
              "1/1 ExclusiveDeviceAllocateConflict");
    Hold(c.state, "h2", "n", "Biren", "7-0", 3, 0, 0);
    EXPECT_EQ(Failure(c.Run(BrPod(1))), "1/1 CardTimeSlicingExhausted");
    EXPECT_EQ(Failure(c.Run(BrPod(2))), "NodeInsufficientDevice");
  }
  {
    Cluster c;
    c.Node({Device("7-0", 0, 1), Device("7-1", 1, 1)});
    Hold(c.state, "h", "n", "Biren", "7-1", 1, 0, 0);
    EXPECT_EQ(Failure(c.Run(BrPod(2))),
              "1/2 AllocatedCardsInsufficientRequest, 1/2 CardTimeSlicingExhausted");
    DeviceInfo sick = Device("7-2", 0);
    sick.health = false;
    Cluster s;
    s.Node({sick});
    EXPECT_EQ(Failure(s.Run(BrPod(1))), "1/1 CardNotHealth");
  }
}

}  // namespace
}  // namespace hami
