// POST /refit's service over the recording ClusterWriter: the caller's authentication, every refusal, the
// unchanged and the moved container, the conflict's one retry, and the wire's hostile bodies. The cards,
// sizes and identities are those of HAMi's own refit tests (GPU-a on NUMA 1 and GPU-b on NUMA 0, 40000 MiB
// each; a container holding 20000 MiB and 30 cores of GPU-a; the device plugin's account
// hami-system/hami-device-plugin).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include "core/base64.h"
#include "core/codec/stamps.h"
#include "extender/refit_service.h"
#include "tests/support/builders.h"
#include "tests/support/run_coro.h"
#include "tests/unit/extender/fake_writer.h"

namespace hami::testing {
namespace {

using extender::RefitAnswer;
using extender::RefitRequest;

constexpr const char* kToAllocate = "hami.io/vgpu-devices-to-allocate";
constexpr const char* kAllocated = "hami.io/vgpu-devices-allocated";
constexpr const char* kLock = "hami.io/mutex.lock";
constexpr const char* kValid = "Bearer h.valid-device-plugin-token.s";

class RefitTest : public ::testing::Test {
 protected:
  void SetUp() override { Build(40000); }

  // Node node-1 with GPU-a (NUMA 1) and GPU-b (NUMA 0, `gpu_b_mem` MiB); refit-pod's container 0 holds
  // 20000 MiB and 30 cores of GPU-a and is being set up (its device plugin holds the node lock).
  void Build(std::int64_t gpu_b_mem, std::string gpu_b_mode = "hami-core") {
    DeviceInfo a = Gpu("GPU-a", 0, 40000, 10, "NVIDIA", 1);
    DeviceInfo b = Gpu("GPU-b", 1, gpu_b_mem, 10, "NVIDIA", 0);
    b.mode = std::move(gpu_b_mode);
    node_ = NvidiaNode("node-1", {a, b});
    SetLock("refit-pod");
    pod_ = AddWorkload("refit-pod", {GpuCtr("main", 1, 20000, 30)}, "GPU-a,NVIDIA,20000,30:;");
    AddCaller("hami-device-plugin-xyz", "caller-pod-uid", "node-1");
    AddCaller("hami-device-plugin-other", "caller-pod-other-uid", "node-2");
    writer_.token_reviews["h.valid-device-plugin-token.s"] = Review(
        "system:serviceaccount:hami-system:hami-device-plugin", "hami-device-plugin-xyz", "caller-pod-uid");
    writer_.token_reviews["h.wrong-node-device-plugin-token.s"] =
        Review("system:serviceaccount:hami-system:hami-device-plugin", "hami-device-plugin-other",
               "caller-pod-other-uid");
    writer_.token_reviews["h.wrong-sa-token.s"] =
        Review("system:serviceaccount:other-namespace:other-sa", "", "");
  }
  // The node lock held by pod default/<holder> ("": free), in the cache and in the API server alike.
  void SetLock(const std::string& holder) {
    node_.resource_version = std::to_string(++node_version_);
    node_.annotations.erase(kLock);
    if (!holder.empty()) node_.annotations[kLock] = codec::FormatNodeLock(clock_.Now(), "default", holder);
    feed_.UpsertNode(node_);
    writer_.nodes["node-1"] = extender::ObjectMeta{node_.resource_version, node_.annotations};
  }
  PodView AddWorkload(const std::string& name, std::vector<ContainerView> containers,
                      const std::string& devices, std::vector<ContainerView> init = {}) {
    PodView p = Pod(name, std::move(containers), std::move(init));
    p.node_name = "node-1";
    p.resource_version = "10";
    p.annotations["hami.io/vgpu-node"] = "node-1";
    p.annotations["hami.io/bind-phase"] = "allocating";
    p.annotations[kToAllocate] = devices;
    p.annotations[kAllocated] = devices;
    Cache(p);
    return p;
  }
  void Cache(const PodView& p) {
    pods_[p.Key()] = p;
    writer_.pods[p.Key()] = p;
    feed_.RecordAllocation(p);
  }
  void AddCaller(const std::string& name, const std::string& uid, const std::string& node) {
    PodView p = Pod(name, {Ctr("plugin", {})}, {}, {}, "hami-system");
    p.uid = uid;
    p.node_name = node;
    pods_[p.Key()] = p;
  }
  static extender::TokenReviewStatus Review(std::string user, std::string pod, std::string uid) {
    extender::TokenReviewStatus s;
    s.authenticated = true;
    s.username = std::move(user);
    if (!pod.empty()) s.extra["authentication.kubernetes.io/pod-name"] = {std::move(pod)};
    if (!uid.empty()) s.extra["authentication.kubernetes.io/pod-uid"] = {std::move(uid)};
    return s;
  }
  RefitRequest Request(std::vector<std::string> allowed, const PodView* pod = nullptr) {
    const PodView& p = pod ? *pod : pod_;
    return RefitRequest{p.uid, p.ns, p.name, "node-1", 0, "", "NVIDIA", std::move(allowed)};
  }
  RefitAnswer Refit(const RefitRequest& request, std::string authorization = kValid) {
    RefitAnswer out;
    RunCoro(ioc_, [&]() -> boost::asio::awaitable<void> {
      out = co_await service_.Refit(request, authorization);
    }());
    return out;
  }
  // The memory the ledger charges on card `uuid` of node-1.
  std::int64_t Charged(const std::string& uuid) const {
    const NodeEntry* n = feed_.state().FindNode("node-1");
    return n->usage[n->by_uuid.at(uuid)].mem.value();
  }
  std::size_t Count(const std::string& prefix) const {
    std::size_t n = 0;
    for (const auto& what : writer_.Whats()) n += what.starts_with(prefix) ? 1 : 0;
    return n;
  }
  std::string Written(const std::string& key) const {
    return writer_.pods.at("default/refit-pod").annotations.at(key);
  }

  boost::asio::io_context ioc_;
  Backends backends_ = BuiltinBackends();
  FixedClock clock_{TimePoint(std::chrono::seconds(1700000000))};
  FakeWriter writer_;
  extender::LedgerFeed feed_{backends_, writer_};
  extender::PodLedger ledger_{feed_};
  extender::NodeLocker locker_{writer_, clock_, std::chrono::seconds(300)};
  std::map<std::string, PodView> pods_;
  extender::LockQueue queue_{ioc_.get_executor(), feed_.state(), pods_, locker_,
                             std::chrono::milliseconds(0)};
  extender::RefitOptions options_{.device_plugin_namespace = "hami-system",
                                  .device_plugin_service_account = "hami-device-plugin"};
  extender::RefitService service_{
      feed_, ledger_, pods_, queue_, locker_, writer_, clock_, options_, extender::FilterOptions{}.policies};
  PodView pod_;
  NodeView node_;
  int node_version_ = 0;
};

TEST_F(RefitTest, MovesTheContainerToAnAllowedCardInOnePatchAndTheLedgerAtOnce) {
  const RefitAnswer a = Refit(Request({"GPU-b"}));
  ASSERT_TRUE(a.succeeded) << a.failure_reason;
  EXPECT_EQ(a.status, 200u);
  EXPECT_EQ(a.container_devices, "GPU-b,NVIDIA,20000,30:");
  EXPECT_EQ(Count("patch pod"), 1u);
  // Both annotations, the separator layout kept byte for byte.
  EXPECT_EQ(Written(kToAllocate), "GPU-b,NVIDIA,20000,30:;");
  EXPECT_EQ(Written(kAllocated), "GPU-b,NVIDIA,20000,30:;");
  const auto& patch = writer_.calls[writer_.calls.size() - 2].patch;  // the patch, then the event
  EXPECT_EQ(patch.at("metadata").at("resourceVersion").as_string(), "10");
  // The ledger moved before any watch event: GPU-a is free, GPU-b carries the container.
  EXPECT_EQ(Charged("GPU-a"), 0);
  EXPECT_EQ(Charged("GPU-b"), 20000);
  EXPECT_EQ(writer_.Whats().back(), "event Normal NumaRefitSucceeded refit-pod");
  // The pod held the node lock already: taken again without a write, and left to its device plugin.
  EXPECT_EQ(Count("patch node"), 0u);
  EXPECT_TRUE(writer_.nodes["node-1"].annotations.contains(kLock));
}

TEST_F(RefitTest, AContainerOnAllowedCardsAlreadySucceedsWithoutAWrite) {
  const RefitAnswer a = Refit(Request({"GPU-a", "GPU-b"}));
  ASSERT_TRUE(a.succeeded) << a.failure_reason;
  EXPECT_EQ(a.container_devices, "GPU-a,NVIDIA,20000,30:");
  EXPECT_EQ(Count("patch"), 0u);
  EXPECT_EQ(Count("read node"), 0u);  // not even the lock is asked for
  EXPECT_EQ(Charged("GPU-a"), 20000);
}

TEST_F(RefitTest, NoRoomOnTheAllowedCardsIsRefusedAndNothingMoves) {
  Build(16000);
  const RefitAnswer a = Refit(Request({"GPU-b"}));
  EXPECT_FALSE(a.succeeded);
  EXPECT_EQ(a.status, 200u);
  EXPECT_NE(a.failure_reason.find("no allowed device fits"), std::string::npos) << a.failure_reason;
  EXPECT_EQ(Count("patch"), 0u);
  EXPECT_EQ(Charged("GPU-a"), 20000);
  EXPECT_EQ(writer_.Whats().back(), "event Warning NumaRefitFailed refit-pod");
}

TEST_F(RefitTest, AllowedUuidsThatAreNoCardOfTheNodeAreRefused) {
  const RefitAnswer a = Refit(Request({"GPU-a-0", "GPU-a-1"}));
  EXPECT_FALSE(a.succeeded);
  EXPECT_NE(a.failure_reason.find("none of the allowed devices is a card of node node-1"), std::string::npos)
      << a.failure_reason;
}

TEST_F(RefitTest, MigCardsAreLeftOutOfTheAllowedSet) {
  // A MIG card alone is no choice; beside a usable card it is left out and the usable one is taken.
  Build(40000, "mig");
  RefitAnswer a = Refit(Request({"GPU-b"}));
  EXPECT_FALSE(a.succeeded);
  EXPECT_NE(a.failure_reason.find("MIG"), std::string::npos) << a.failure_reason;
  DeviceInfo c = Gpu("GPU-c", 2, 40000, 10, "NVIDIA", 0);
  std::vector<DeviceInfo> cards{Gpu("GPU-a", 0, 40000, 10, "NVIDIA", 1), Gpu("GPU-b", 1, 40000), c};
  cards[1].mode = "mig";
  node_ = NvidiaNode("node-1", cards);  // re-registered: GPU-b in MIG mode, GPU-c beside it
  SetLock("refit-pod");
  a = Refit(Request({"GPU-b", "GPU-c"}));
  ASSERT_TRUE(a.succeeded) << a.failure_reason;
  EXPECT_EQ(a.container_devices, "GPU-c,NVIDIA,20000,30:");
}

TEST_F(RefitTest, CardsChargedDifferentlyAreRefused) {
  SetLock("");
  PodView mixed =
      AddWorkload("mixed", {GpuCtr("main", 2, 0, 30)}, "GPU-a,NVIDIA,20000,30:GPU-b,NVIDIA,10000,30:;");
  const RefitAnswer a = Refit(Request({"GPU-c"}, &mixed));
  EXPECT_FALSE(a.succeeded);
  EXPECT_NE(a.failure_reason.find("charged differently"), std::string::npos) << a.failure_reason;
  EXPECT_EQ(Count("patch"), 0u);
}

TEST_F(RefitTest, OnlyTheNamedContainerMovesAndAConsumedEntryStaysBlank) {
  // HAMi's vector: container 0 was set up already (its to-allocate entry is blank), container 1 waits.
  PodView two = Pod("two", {GpuCtr("first", 1, 5000, 10), GpuCtr("second", 1, 20000, 30)});
  two.node_name = "node-1";
  two.resource_version = "10";
  two.annotations = {{"hami.io/vgpu-node", "node-1"},
                     {"hami.io/bind-phase", "allocating"},
                     {kToAllocate, ";GPU-a,NVIDIA,20000,30:;"},
                     {kAllocated, "GPU-a,NVIDIA,5000,10:;GPU-a,NVIDIA,20000,30:;"}};
  Cache(two);
  SetLock("two");
  RefitRequest r = Request({"GPU-b"}, &two);
  r.container_index = 1;
  r.container_name = "second";
  const RefitAnswer a = Refit(r);
  ASSERT_TRUE(a.succeeded) << a.failure_reason;
  EXPECT_EQ(writer_.pods.at("default/two").annotations.at(kToAllocate), ";GPU-b,NVIDIA,20000,30:;");
  EXPECT_EQ(writer_.pods.at("default/two").annotations.at(kAllocated),
            "GPU-a,NVIDIA,5000,10:;GPU-b,NVIDIA,20000,30:;");
  EXPECT_EQ(Charged("GPU-a"), 20000 + 5000);  // refit-pod's and container 0's
  EXPECT_EQ(Charged("GPU-b"), 20000);
  // Container 0 has nothing pending: refused.
  r.container_index = 0;
  r.container_name = "first";
  const RefitAnswer none = Refit(r);
  EXPECT_FALSE(none.succeeded);
  EXPECT_NE(none.failure_reason.find("no pending allocation"), std::string::npos) << none.failure_reason;
}

TEST_F(RefitTest, APodWhoseInitContainersFinishedKeepsItsAppOnlyCharge) {
  // HAMi's vector: the init container's peak is not charged again after a refit of the app container.
  PodView p = Pod("shrunk", {GpuCtr("main", 1, 20000, 30)}, {GpuCtr("init", 1, 30000, 60)});
  p.node_name = "node-1";
  p.resource_version = "10";
  p.init_container_statuses = {ContainerStatusView{"init", true, 0}};
  p.annotations = {{"hami.io/vgpu-node", "node-1"},
                   {"hami.io/bind-phase", "allocating"},
                   {kToAllocate, ";GPU-a,NVIDIA,20000,30:;"},
                   {kAllocated, "GPU-a,NVIDIA,30000,60:;GPU-a,NVIDIA,20000,30:;"}};
  Cache(p);
  ASSERT_EQ(Charged("GPU-a"), 20000 + 20000);  // refit-pod's and the app container's
  SetLock("shrunk");
  RefitRequest r = Request({"GPU-b"}, &p);
  r.container_index = 1;
  r.container_name = "main";
  const RefitAnswer a = Refit(r);
  ASSERT_TRUE(a.succeeded) << a.failure_reason;
  EXPECT_EQ(Charged("GPU-a"), 20000);  // refit-pod's alone: the init container's 30000 are not back
  EXPECT_EQ(Charged("GPU-b"), 20000);
}

TEST_F(RefitTest, CompetingRefitsForOneCardOnlyOneWins) {
  Build(20000);
  PodView other = AddWorkload("pod-2", {GpuCtr("main", 1, 15000, 10)}, "GPU-a,NVIDIA,15000,10:;");
  SetLock("");  // the lock is free: each refit takes it and gives it back
  PodView first = AddWorkload("pod-1", {GpuCtr("main", 1, 15000, 10)}, "GPU-a,NVIDIA,15000,10:;");
  ASSERT_TRUE(Refit(Request({"GPU-b"}, &first)).succeeded);
  const RefitAnswer second = Refit(Request({"GPU-b"}, &other));
  EXPECT_FALSE(second.succeeded);
  EXPECT_NE(second.failure_reason.find("no allowed device fits"), std::string::npos) << second.failure_reason;
  EXPECT_EQ(Written(kAllocated), "GPU-a,NVIDIA,20000,30:;");  // refit-pod untouched
  EXPECT_EQ(Count("patch node"), 4u);                         // each took it and gave it back
  EXPECT_FALSE(writer_.nodes["node-1"].annotations.contains(kLock));
}

TEST_F(RefitTest, AConflictReadsThePodOnceAndRetriesOnce) {
  // The pod moved on in the API server (another annotation written): the cache's resourceVersion is old.
  writer_.pods["default/refit-pod"].resource_version = "11";
  writer_.pods["default/refit-pod"].annotations["example.com/other"] = "x";
  const RefitAnswer a = Refit(Request({"GPU-b"}));
  ASSERT_TRUE(a.succeeded) << a.failure_reason;
  EXPECT_EQ(Count("patch pod"), 2u);
  EXPECT_EQ(Count("read pod default/refit-pod"), 1u);
  EXPECT_EQ(Written(kAllocated), "GPU-b,NVIDIA,20000,30:;");
  EXPECT_EQ(writer_.pods["default/refit-pod"].annotations["example.com/other"], "x");
}

TEST_F(RefitTest, TwoContainersRefittedBeforeTheWatchShowsTheFirstBothStayMoved) {
  PodView pair = Pod("pair", {GpuCtr("a", 1, 5000, 10), GpuCtr("b", 1, 5000, 10)});
  pair.node_name = "node-1";
  pair.resource_version = "10";
  pair.annotations = {{"hami.io/vgpu-node", "node-1"},
                      {"hami.io/bind-phase", "allocating"},
                      {kToAllocate, "GPU-a,NVIDIA,5000,10:;GPU-a,NVIDIA,5000,10:;"},
                      {kAllocated, "GPU-a,NVIDIA,5000,10:;GPU-a,NVIDIA,5000,10:;"}};
  Cache(pair);
  SetLock("pair");
  RefitRequest r = Request({"GPU-b"}, &pair);
  ASSERT_TRUE(Refit(r).succeeded);
  // The cache still shows the pod as it was: the second write conflicts, the pod is read and written again.
  r.container_index = 1;
  ASSERT_TRUE(Refit(r).succeeded);
  EXPECT_EQ(writer_.pods.at("default/pair").annotations.at(kAllocated),
            "GPU-b,NVIDIA,5000,10:;GPU-b,NVIDIA,5000,10:;");
  EXPECT_EQ(Charged("GPU-a"), 20000);  // refit-pod's alone
  EXPECT_EQ(Charged("GPU-b"), 10000);
}

TEST_F(RefitTest, AConflictWhoseContainerWasTakenMeanwhileIsRefusedAndTheLedgerGoesBack) {
  writer_.pods["default/refit-pod"].resource_version = "11";
  writer_.pods["default/refit-pod"].annotations[kToAllocate] = ";";  // the device plugin took it
  const RefitAnswer a = Refit(Request({"GPU-b"}));
  EXPECT_FALSE(a.succeeded);
  EXPECT_NE(a.failure_reason.find("changed while it was refitted"), std::string::npos) << a.failure_reason;
  EXPECT_EQ(Count("patch pod"), 1u);
  EXPECT_EQ(Charged("GPU-a"), 20000);
  EXPECT_EQ(Charged("GPU-b"), 0);
}

TEST_F(RefitTest, AFailedPatchTakesTheChargeBack) {
  writer_.fail_next_pod_patch.push_back({extender::ApiErrorKind::kServer, 500, "", "apiserver unavailable"});
  const RefitAnswer a = Refit(Request({"GPU-b"}));
  EXPECT_FALSE(a.succeeded);
  EXPECT_NE(a.failure_reason.find("apiserver unavailable"), std::string::npos) << a.failure_reason;
  EXPECT_EQ(Charged("GPU-a"), 20000);
  EXPECT_EQ(Charged("GPU-b"), 0);
}

TEST_F(RefitTest, NoPatchLeavesWhenThePluginsBudgetIsNearlySpent) {
  writer_.on_review = [this] { clock_.Advance(std::chrono::milliseconds(1600)); };
  const RefitAnswer a = Refit(Request({"GPU-b"}));
  EXPECT_FALSE(a.succeeded);
  EXPECT_NE(a.failure_reason.find("too late"), std::string::npos) << a.failure_reason;
  EXPECT_EQ(Count("patch pod"), 0u);
  EXPECT_EQ(Charged("GPU-b"), 0);
}

TEST_F(RefitTest, RefusalsAboutThePodOrTheContainer) {
  struct Case {
    const char* name;
    std::function<void(RefitRequest&)> mutate;
    const char* reason;
  };
  const Case cases[] = {
      {"unknown pod", [](RefitRequest& r) { r.pod_uid = "other-uid"; }, "is not known to the scheduler"},
      {"pod identity mismatch", [](RefitRequest& r) { r.pod_name = "other-name"; }, "is not known"},
      {"container index out of range", [](RefitRequest& r) { r.container_index = 3; },
       "outside the pod's 1 containers"},
      {"container name mismatch", [](RefitRequest& r) { r.container_name = "sidecar"; },
       "container index 0 is \"main\", not \"sidecar\""},
  };
  for (const Case& c : cases) {
    RefitRequest r = Request({"GPU-b"});
    c.mutate(r);
    const RefitAnswer a = Refit(r);
    EXPECT_FALSE(a.succeeded) << c.name;
    EXPECT_EQ(a.status, 200u) << c.name;
    EXPECT_NE(a.failure_reason.find(c.reason), std::string::npos) << c.name << ": " << a.failure_reason;
  }
  EXPECT_EQ(Count("patch"), 0u);
  // A pod on another node: the caller must be bound there too to get this far.
  RefitRequest elsewhere = Request({"GPU-b"});
  elsewhere.node = "node-2";
  const std::size_t events = Count("event");
  const RefitAnswer a = Refit(elsewhere, "Bearer h.wrong-node-device-plugin-token.s");
  EXPECT_NE(a.failure_reason.find("pod default/refit-pod with that uid is not on node node-2"),
            std::string::npos)
      << a.failure_reason;
  // Neither the node it is on is named nor an event posted on a pod of another node's plugin.
  EXPECT_EQ(a.failure_reason.find("node-1"), std::string::npos) << a.failure_reason;
  EXPECT_EQ(Count("event"), events);
  EXPECT_EQ(Charged("GPU-a"), 20000);
}

TEST_F(RefitTest, CallersThatAreNotTheDevicePluginOnThatNodeAreRefusedBeforeThePodIsLookedAt) {
  struct Case {
    const char* authorization;
    unsigned status;
    const char* reason;
  };
  const Case cases[] = {
      {"", 401, "want an Authorization: Bearer"},
      {"Basic dXNlcjpwYXNz", 401, "want an Authorization: Bearer"},
      {"Bearer h.garbage.s", 401, "the token is not valid"},
      {"Bearer h.wrong-sa-token.s", 403,
       "\"system:serviceaccount:other-namespace:other-sa\" is not the device plugin's service account"},
      {"Bearer h.wrong-node-device-plugin-token.s", 403, "does not run on node node-1"},
  };
  for (const Case& c : cases) {
    const RefitAnswer a = Refit(Request({"GPU-b"}), c.authorization);
    EXPECT_FALSE(a.succeeded) << c.authorization;
    EXPECT_EQ(a.status, c.status) << c.authorization;
    EXPECT_NE(a.failure_reason.find("caller authentication failed"), std::string::npos) << a.failure_reason;
    EXPECT_NE(a.failure_reason.find(c.reason), std::string::npos) << a.failure_reason;
  }
  // Nothing read of the pod, nothing written, no event on it; no verdict kept for any of them.
  for (const auto& what : writer_.Whats()) EXPECT_TRUE(what == "token review") << what;
  EXPECT_EQ(service_.verdicts_kept(), 0u);
  EXPECT_EQ(Charged("GPU-a"), 20000);
}

TEST_F(RefitTest, ATokenBoundToAPodThatIsGoneOrNotBoundAtAllIsRefused) {
  writer_.token_reviews["h.unbound.s"] =
      Review("system:serviceaccount:hami-system:hami-device-plugin", "", "");
  writer_.token_reviews["h.gone.s"] =
      Review("system:serviceaccount:hami-system:hami-device-plugin", "hami-device-plugin-old", "old-uid");
  EXPECT_NE(Refit(Request({"GPU-b"}), "Bearer h.unbound.s").failure_reason.find("not bound to a pod"),
            std::string::npos);
  const RefitAnswer gone = Refit(Request({"GPU-b"}), "Bearer h.gone.s");
  EXPECT_EQ(gone.status, 403u);
  EXPECT_NE(gone.failure_reason.find("does not exist"), std::string::npos) << gone.failure_reason;
  EXPECT_EQ(Count("read pod hami-system/hami-device-plugin-old"), 1u);  // not in the cache: asked once
  EXPECT_EQ(service_.verdicts_kept(), 0u);
}

TEST_F(RefitTest, APositiveVerdictIsKeptAMinuteAtMostAndNeverPastTheTokensExpiry) {
  ASSERT_TRUE(Refit(Request({"GPU-a"})).succeeded);
  ASSERT_TRUE(Refit(Request({"GPU-a"})).succeeded);
  EXPECT_EQ(Count("token review"), 1u);  // the second refit cost no TokenReview
  clock_.Advance(std::chrono::seconds(61));
  ASSERT_TRUE(Refit(Request({"GPU-a"})).succeeded);
  EXPECT_EQ(Count("token review"), 2u);
  // A JWT whose exp is 10 s away is kept 10 s.
  const std::string payload = Base64Encode(
      fmt::format(
          "{{\"exp\":{}}}",
          std::chrono::duration_cast<std::chrono::seconds>(clock_.Now().time_since_epoch()).count() + 10),
      Base64Alphabet::kUrl);
  const std::string jwt = "eyJhbGciOiJSUzI1NiJ9." + payload + ".sig";
  writer_.token_reviews[jwt] = writer_.token_reviews["h.valid-device-plugin-token.s"];
  ASSERT_TRUE(Refit(Request({"GPU-a"}), "Bearer " + jwt).succeeded);
  clock_.Advance(std::chrono::seconds(9));
  ASSERT_TRUE(Refit(Request({"GPU-a"}), "Bearer " + jwt).succeeded);
  EXPECT_EQ(Count("token review"), 3u);
  clock_.Advance(std::chrono::seconds(2));
  ASSERT_TRUE(Refit(Request({"GPU-a"}), "Bearer " + jwt).succeeded);
  EXPECT_EQ(Count("token review"), 4u);
  // A kept verdict still needs its pod on the request's node: replayed for another node, refused.
  RefitRequest elsewhere = Request({"GPU-a"});
  elsewhere.node = "node-2";
  EXPECT_EQ(Refit(elsewhere).status, 403u);
}

TEST_F(RefitTest, RefitsAreRefusedWhileTheDevicePluginsAccountIsNotConfigured) {
  extender::RefitService unconfigured{
      feed_, ledger_, pods_, queue_, locker_, writer_, clock_, {}, extender::FilterOptions{}.policies};
  RefitAnswer a;
  const RefitRequest r = Request({"GPU-b"});
  const std::size_t before = writer_.calls.size();
  RunCoro(ioc_, [&]() -> boost::asio::awaitable<void> { a = co_await unconfigured.Refit(r, kValid); }());
  EXPECT_EQ(a.status, 503u);
  EXPECT_NE(
      a.failure_reason.find("--device-plugin-namespace and --device-plugin-service-account are not set"),
      std::string::npos);
  EXPECT_EQ(writer_.calls.size(), before);
}

TEST_F(RefitTest, MetricsCountEachResult) {
  Refit(Request({"GPU-a"}));
  Refit(Request({"GPU-b"}));
  Refit(Request({"GPU-b"}), "Bearer h.garbage.s");
  k8s::prom::TextWriter w;
  service_.WriteMetrics(w);
  const std::string text = w.Take();
  EXPECT_NE(text.find("hami_scheduler_refit_total{result=\"unchanged\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("hami_scheduler_refit_total{result=\"moved\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("hami_scheduler_refit_total{result=\"unauthenticated\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("hami_scheduler_refit_duration_seconds_count 3"), std::string::npos) << text;
}

TEST_F(RefitTest, TokensNotShapedAsAJwtOrTooLongAreRefusedWithoutAReview) {
  const std::string too_long = "Bearer a." + std::string(extender::kMaxTokenBytes, 'b') + ".c";
  for (const std::string& auth : {std::string("Bearer garbage"), std::string("Bearer a..c"),
                                  std::string("Bearer a.b.c.d"), std::string("Bearer a.b+.c"), too_long}) {
    const RefitAnswer a = Refit(Request({"GPU-b"}), auth);
    EXPECT_EQ(a.status, 401u) << auth.substr(0, 40);
    EXPECT_NE(a.failure_reason.find("not a service-account token"), std::string::npos) << a.failure_reason;
  }
  EXPECT_EQ(Count("token review"), 0u);
}

TEST_F(RefitTest, AtMostFourTokenReviewsRunAtOnceAndTheNextCallerIsAskedToRetry) {
  std::vector<RefitAnswer> answers;
  std::size_t depth = 0;
  const RefitRequest r = Request({"GPU-b"});
  // Each review, while it waits, lets one more caller in with a token of its own.
  writer_.during_review = [&]() -> boost::asio::awaitable<void> {
    if (++depth > extender::kMaxReviewsInFlight) co_return;
    answers.push_back(co_await service_.Refit(r, fmt::format("Bearer h.caller-{}.s", depth)));
  };
  Refit(r, "Bearer h.caller-0.s");
  EXPECT_EQ(Count("token review"), extender::kMaxReviewsInFlight);
  ASSERT_FALSE(answers.empty());
  EXPECT_EQ(answers.front().status, 429u);  // the innermost one answered first
  EXPECT_TRUE(answers.front().retry_after);
  // Once they are done, reviews are made again.
  writer_.during_review = nullptr;
  Refit(r, "Bearer h.caller-9.s");
  EXPECT_EQ(Count("token review"), extender::kMaxReviewsInFlight + 1);
}

TEST_F(RefitTest, ABadTokenReplayedCostsNoReviewForTenSeconds) {
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Refit(Request({"GPU-b"}), "Bearer h.garbage.s").status, 401u);
    EXPECT_EQ(Refit(Request({"GPU-b"}), "Bearer h.wrong-sa-token.s").status, 403u);
  }
  EXPECT_EQ(Count("token review"), 2u);
  EXPECT_EQ(service_.rejections_kept(), 2u);
  clock_.Advance(std::chrono::seconds(11));
  EXPECT_EQ(Refit(Request({"GPU-b"}), "Bearer h.garbage.s").status, 401u);
  EXPECT_EQ(Count("token review"), 3u);
}

TEST_F(RefitTest, AFailedReviewIsAnsweredWithoutTheApiServersWordsAndNotKept) {
  writer_.review_error = extender::ApiError{
      extender::ApiErrorKind::kOther, 403, "Forbidden",
      "tokenreviews is forbidden: User \"system:serviceaccount:hami-system:hami-scheduler\""};
  for (int i = 0; i < 2; ++i) {
    const RefitAnswer a = Refit(Request({"GPU-b"}));
    EXPECT_EQ(a.status, 503u);
    EXPECT_EQ(a.failure_reason, "token review unavailable, retry");
  }
  EXPECT_EQ(Count("token review"), 2u);
  EXPECT_EQ(service_.rejections_kept(), 0u);
}

TEST_F(RefitTest, NoRetryAfterAConflictOnceTheBudgetIsSpent) {
  writer_.pods["default/refit-pod"].resource_version = "11";  // the first patch conflicts
  writer_.before_pod_patch = [this]() -> boost::asio::awaitable<void> {
    clock_.Advance(std::chrono::milliseconds(1600));
    co_return;
  };
  const RefitAnswer a = Refit(Request({"GPU-b"}));
  EXPECT_FALSE(a.succeeded);
  EXPECT_NE(a.failure_reason.find("too late"), std::string::npos) << a.failure_reason;
  EXPECT_EQ(Count("read pod default/refit-pod"), 0u);
  EXPECT_EQ(Count("patch pod"), 1u);
  EXPECT_EQ(Charged("GPU-a"), 20000);
  EXPECT_EQ(Charged("GPU-b"), 0);
}

TEST_F(RefitTest, ASecondRefitOfThePodWhileOneRunsIsRefused) {
  std::optional<RefitAnswer> second;
  const RefitRequest r = Request({"GPU-b"});
  writer_.before_pod_patch = [&]() -> boost::asio::awaitable<void> {
    if (!second) second = co_await service_.Refit(r, kValid);
  };
  const RefitAnswer first = Refit(r);
  ASSERT_TRUE(first.succeeded) << first.failure_reason;
  ASSERT_TRUE(second.has_value());
  EXPECT_FALSE(second->succeeded);
  EXPECT_EQ(second->failure_reason, "a refit of this pod is already running");
  EXPECT_EQ(Count("patch pod"), 1u);
  // Done: the pod may be refitted again.
  writer_.before_pod_patch = nullptr;
  EXPECT_TRUE(Refit(Request({"GPU-a"})).succeeded);
}

TEST_F(RefitTest, ThePodIsFoundAgainOnceTheLockIsTaken) {
  SetLock("");
  bool once = false;
  writer_.before_node_patch = [&]() -> boost::asio::awaitable<void> {
    // While the lock is taken, the device plugin consumes the container's entry (the watch shows it).
    if (!std::exchange(once, true)) pods_["default/refit-pod"].annotations[kToAllocate] = ";";
    co_return;
  };
  const RefitAnswer a = Refit(Request({"GPU-b"}));
  EXPECT_FALSE(a.succeeded);
  EXPECT_NE(a.failure_reason.find("no pending allocation"), std::string::npos) << a.failure_reason;
  EXPECT_EQ(Count("patch pod"), 0u);
  EXPECT_FALSE(writer_.nodes["node-1"].annotations.contains(kLock));  // given back
}

TEST_F(RefitTest, FinishedAndTerminatingPodsAreRefused) {
  pods_["default/refit-pod"].phase = "Succeeded";
  RefitAnswer a = Refit(Request({"GPU-b"}));
  EXPECT_NE(a.failure_reason.find("has finished"), std::string::npos) << a.failure_reason;
  pods_["default/refit-pod"].phase = "Running";
  pods_["default/refit-pod"].terminating = true;
  a = Refit(Request({"GPU-b"}));
  EXPECT_NE(a.failure_reason.find("is being deleted"), std::string::npos) << a.failure_reason;
  EXPECT_EQ(Count("patch"), 0u);
}

TEST_F(RefitTest, APodWithoutAResourceVersionIsNeverPatchedUnguarded) {
  pods_["default/refit-pod"].resource_version = "";
  const RefitAnswer a = Refit(Request({"GPU-b"}));
  EXPECT_FALSE(a.succeeded);
  EXPECT_NE(a.failure_reason.find("resourceVersion is not known"), std::string::npos) << a.failure_reason;
  EXPECT_EQ(Count("patch pod"), 0u);
  EXPECT_EQ(Charged("GPU-a"), 20000);
  EXPECT_EQ(Charged("GPU-b"), 0);
}

TEST_F(RefitTest, AnExceptionUnderTheLockStillGivesItBack) {
  SetLock("");
  writer_.before_pod_patch = []() -> boost::asio::awaitable<void> {
    throw std::runtime_error("boom");
    co_return;
  };
  const RefitRequest r = Request({"GPU-b"});
  bool threw = false;
  RunCoro(ioc_, [&]() -> boost::asio::awaitable<void> {
    try {
      co_await service_.Refit(r, kValid);
    } catch (const std::runtime_error&) {
      threw = true;
    }
  }());
  EXPECT_TRUE(threw);
  ioc_.restart();
  ioc_.poll();  // the release spawned on the way out
  EXPECT_FALSE(writer_.nodes["node-1"].annotations.contains(kLock));
  writer_.before_pod_patch = nullptr;
  EXPECT_TRUE(Refit(r).succeeded);  // nor is the pod left marked as being refitted
}

TEST_F(RefitTest, AnnotationTextReachesAnswersLogsAndEventsEscaped) {
  pods_["default/refit-pod"].annotations[kAllocated] = "GPU-a\x1b[31m,NVIDIA,x,30:;";
  const RefitAnswer a = Refit(Request({"GPU-b"}));
  EXPECT_FALSE(a.succeeded);
  for (char c : a.failure_reason) EXPECT_FALSE(c >= 0 && c < ' ') << a.failure_reason;
  ASSERT_EQ(writer_.Whats().back(), "event Warning NumaRefitFailed refit-pod");
  for (char c : writer_.calls.back().patch.as_string()) EXPECT_FALSE(c >= 0 && c < ' ');
}

// ---- the wire --------------------------------------------------------------------------------------------

constexpr const char* kBody =
    R"({"podUID":"refit-pod-uid","podNamespace":"default","podName":"refit-pod","nodeName":"node-1",)"
    R"("containerIndex":0,"containerName":"main","deviceType":"NVIDIA","allowedDeviceUUIDs":["GPU-b"]})";

TEST(RefitWire, ReadsThePluginsRequest) {
  auto r = extender::ParseRefitRequest(kBody);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->pod_uid, "refit-pod-uid");
  EXPECT_EQ(r->container_index, 0u);
  EXPECT_EQ(r->container_name, "main");
  EXPECT_EQ(r->allowed, std::vector<std::string>{"GPU-b"});
  RefitAnswer a;
  a.succeeded = true;
  a.container_devices = "GPU-b,NVIDIA,20000,30:";
  EXPECT_EQ(extender::RefitAnswerJson(a),
            R"({"succeeded":true,"containerDevices":"GPU-b,NVIDIA,20000,30:"})");
  a = RefitAnswer{};
  a.failure_reason = "no";
  EXPECT_EQ(extender::RefitAnswerJson(a), R"({"succeeded":false,"failureReason":"no"})");
}

TEST(RefitWire, HostileBodiesAreRefusedNamingTheInput) {
  const auto replaced = [](std::string from, std::string to) {
    std::string body = kBody;
    body.replace(body.find(from), from.size(), to);
    return body;
  };
  std::string many = R"("allowedDeviceUUIDs":[)";
  for (int i = 0; i < 513; ++i) many += fmt::format("{}\"GPU-{}\"", i ? "," : "", i);
  many += "]";
  const std::pair<std::string, std::string> cases[] = {
      {"{", "not JSON"},
      {"[]", "want a JSON object"},
      {replaced(R"("containerIndex":0)", R"("containerIndex":"0")"), "containerIndex must be an integer"},
      {replaced(R"("containerIndex":0)", R"("containerIndex":-1)"), "containerIndex must be an integer"},
      {replaced(R"("containerIndex":0)", R"("containerIndex":0.5)"), "containerIndex must be an integer"},
      {replaced(R"("podName":"refit-pod")", R"("podName":7)"), "podName must be a string"},
      {replaced(R"("podUID":"refit-pod-uid",)", ""), "podUID is missing"},
      {replaced(R"("deviceType":"NVIDIA")", R"("deviceType":"Ascend")"),
       "deviceType \"Ascend\" is not supported"},
      {replaced(R"("allowedDeviceUUIDs":["GPU-b"])", R"("allowedDeviceUUIDs":[])"),
       "holds 0 entries, want 1 to 512"},
      {replaced(R"("allowedDeviceUUIDs":["GPU-b"])", many), "holds 513 entries, want 1 to 512"},
      {replaced(R"(["GPU-b"])", R"(["GPU-b;x,NVIDIA,1,1:"])"), "allowedDeviceUUIDs[0] is not a device UUID"},
      {replaced(R"(["GPU-b"])", R"([7])"), "allowedDeviceUUIDs[0] is not a device UUID"},
      {replaced(R"("podName":"refit-pod")", R"("podName":"a\nb")"), "podName"},
      {replaced(R"("podNamespace":"default")", R"("podNamespace":"../kube-system")"), "podNamespace"},
      {replaced(R"("nodeName":"node-1")", R"("nodeName":"node\u0000")"), "nodeName"},
      {replaced(R"("containerName":"main")", R"("containerName":"m\u001b[31m")"), "containerName"},
  };
  for (const auto& [body, reason] : cases) {
    auto r = extender::ParseRefitRequest(body);
    ASSERT_FALSE(r) << body.substr(0, 200);
    EXPECT_NE(r.error().message.find(reason), std::string::npos) << r.error().message;
    for (char c : r.error().message) EXPECT_FALSE(c >= 0 && c < ' ') << r.error().message;
  }
  // 512 is the limit, not over it.
  std::string most = R"("allowedDeviceUUIDs":[)";
  for (int i = 0; i < 512; ++i) most += fmt::format("{}\"GPU-{}\"", i ? "," : "", i);
  EXPECT_TRUE(extender::ParseRefitRequest(replaced(R"("allowedDeviceUUIDs":["GPU-b"])", most + "]")));
}

}  // namespace
}  // namespace hami::testing
