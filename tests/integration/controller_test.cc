// The extender as `serve` runs it (SchedulerService: the services composed behind their HTTP adapter), over
// real loopback HTTP against the embedded API server: readiness, /filter (reservation in memory), /bind
// (node lock, the Binding with the decision, waiting for a busy lock, owner gone), the health pass's
// handshake, the reservation sweep, and /metrics.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>
#include <fstream>
#include <sstream>
#include <thread>

#include "cmd/app.h"
#include "cmd/service.h"
#include "core/codec/stamps.h"
#include "core/keys.h"
#include "extender/explain_wire.h"
#include "k8s/http_client.h"
#include "sim/apiserver/api_server.h"
#include "sim/apiserver/resources.h"
#include "tests/support/builders.h"
#include "tests/support/run_coro.h"

namespace hami {
namespace {
namespace asio = boost::asio;
namespace json = boost::json;
namespace http = boost::beast::http;
using namespace std::chrono_literals;
using testing::RunCoro;
using testing::WaitUntil;

json::value NvidiaNode(const std::string& name, int gpus, int mem = 16000) {
  json::array manifest;
  for (int i = 0; i < gpus; ++i)
    manifest.push_back({{"id", name + "-gpu" + std::to_string(i)},
                        {"index", i},
                        {"count", 10},
                        {"devmem", mem},
                        {"devcore", 100},
                        {"type", "NVIDIA-T4"},
                        {"health", true}});
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata",
           {{"name", name}, {"annotations", {{"hami.io/node-nvidia-register", json::serialize(manifest)}}}}},
          {"status",
           {{"capacity", {{"nvidia.com/gpu", std::to_string(gpus * 10)}}},
            {"allocatable", {{"nvidia.com/gpu", std::to_string(gpus * 10)}}}}}};
}

json::value GpuPod(const std::string& name, int mem) {
  return json::parse(fmt::format(
      R"({{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{}","namespace":"default"}},
          "spec":{{"schedulerName":"hami-scheduler","containers":[{{"name":"c","image":"x",
            "resources":{{"limits":{{"nvidia.com/gpu":"1","nvidia.com/gpumem":"{}"}}}}}}]}},
          "status":{{"phase":"Pending"}}}})",
      name, mem));
}

// A pod bound to `node` whose allocation annotation holds `mem` MiB of the node's first GPU.
json::value BoundGpuPod(const std::string& name, const std::string& node, int mem) {
  json::value pod = GpuPod(name, mem);
  pod.at("metadata").as_object()["annotations"] = {
      {"hami.io/vgpu-node", node},
      {"hami.io/vgpu-devices-allocated", fmt::format("{}-gpu0,NVIDIA,{},0:;", node, mem)}};
  pod.at("spec").as_object()["nodeName"] = node;
  return pod;
}

class ControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    port_ = server_.Start().value();
    rest_ = k8s::LoopbackHttp(port_);
    cfg_.serving.http_bind = "127.0.0.1:0";
    cfg_.serving.metrics_bind_address = "";
    cfg_.kube.qps = 0;
    cfg_.extender.bind.node_lock_retry_timeout = 3s;
    backends_ = testing::BuiltinBackends();
  }
  void StartService(std::chrono::milliseconds health_interval = 50ms) {
    cmd::ServiceOptions so = service_options_;
    so.health_interval = health_interval;
    so.reflector_backoff = 5ms;
    so.hostname = "test-host";
    service_ = cmd::SchedulerService::Create(ioc_, cfg_, backends_, rest_, *clock_, so).value();
    ASSERT_TRUE(service_->Listen());
    service_->Start();
    k8s::RestConfig ext = k8s::LoopbackHttp(service_->port());
    extender_ = k8s::HttpClient::Create(ioc_.get_executor(), ext).value();
  }
  void TearDown() override {
    if (service_) {
      service_->Kill();
      RunCoro(ioc_, [&]() -> asio::awaitable<void> {
        const std::function<bool()> stopped = [&] { return service_->stopped(); };
        EXPECT_TRUE(co_await WaitUntil(stopped));
      }());
    }
  }
  // Coroutine helpers take `const char*` and strings by value: GCC 12 cannot keep a string literal (an array)
  // or a braced temporary alive across co_await in the caller's frame.
  asio::awaitable<k8s::HttpResponse> Call(http::verb verb, const char* path, std::string body = {}) {
    const k8s::HttpRequest req{verb, path, body, body.empty() ? "" : "application/json", "", "test"};
    auto r = co_await extender_->Send(req, 10s);
    EXPECT_TRUE(r) << path;
    co_return r ? *r : k8s::HttpResponse{};
  }
  asio::awaitable<json::object> Post(const char* path, std::string body) {
    auto r = co_await Call(http::verb::post, path, std::move(body));
    EXPECT_EQ(r.status, 200u) << r.body;
    co_return json::parse(r.body).as_object();
  }
  asio::awaitable<void> Ready() {
    const std::function<bool()> ready = [&] { return service_->extender().ready(); };
    EXPECT_TRUE(co_await WaitUntil(ready));
  }
  json::object Stored(const std::string& resource, const std::string& ns, const std::string& name) {
    auto o = server_.store().Find(resource, ns, name);
    return o ? *o : json::object{};
  }
  // A client of the metrics listener of its own, which the tests put on 127.0.0.2 (127.0.0.1:0 is the
  // extender's address: the same listener).
  std::unique_ptr<k8s::HttpClient> MetricsClient() {
    k8s::RestConfig rest = k8s::LoopbackHttp(service_->metrics_port());
    rest.host = "127.0.0.2";
    return k8s::HttpClient::Create(ioc_.get_executor(), rest).value();
  }
  static std::string Annotation(const json::object& o, const std::string& key) {
    auto* a = o.at("metadata").as_object().if_contains("annotations");
    if (!a) return "";
    auto* v = a->as_object().if_contains(key);
    return v ? std::string(v->as_string()) : "";
  }
  std::string FilterArgs(const std::string& pod, const json::array& nodes) {
    return json::serialize(json::object{{"Pod", Stored("pods", "default", pod)}, {"NodeNames", nodes}});
  }
  static std::string BindArgs(const json::object& pod, const std::string& node) {
    const auto& meta = pod.at("metadata").as_object();
    return json::serialize(json::object{{"PodName", meta.at("name")},
                                        {"PodNamespace", "default"},
                                        {"PodUID", meta.at("uid")},
                                        {"Node", node}});
  }

  asio::io_context ioc_;
  sim::ApiServer server_{ioc_};
  std::uint16_t port_ = 0;
  k8s::RestConfig rest_;
  config::Config cfg_;
  Backends backends_;
  // The next `count` requests of `method` under `prefix` answer 500 (a watch that cannot reconnect, a
  // binding refused...).
  void Fail500(const std::string& method, const std::string& prefix, int count) {
    sim::FaultRule rule;
    rule.count = count;
    rule.status = 500;
    rule.method = method;
    rule.path_prefix = prefix;
    server_.FailNext(rule);
  }
  // Tests that move time themselves: the service reads this clock (call before StartService()).
  FixedClock* UseFixedClock(TimePoint start = std::chrono::system_clock::now()) {
    auto fixed = std::make_unique<FixedClock>(start);
    FixedClock* clock = fixed.get();
    clock_ = std::move(fixed);
    return clock;
  }
  std::unique_ptr<Clock> clock_ = std::make_unique<SystemClock>();
  cmd::ServiceOptions service_options_;
  std::unique_ptr<cmd::SchedulerService> service_;
  std::unique_ptr<k8s::HttpClient> extender_;
};

TEST_F(ControllerTest, ReadyOnlyAfterSyncAndFirstHealthPass) {
  ASSERT_TRUE(server_.store().Create(NvidiaNode("gpu-a", 1)));
  StartService();
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    EXPECT_EQ((co_await Call(http::verb::get, "/healthz")).status, 200u);
    co_await Ready();
    EXPECT_GE(service_->extender().stats().health_passes, 1u);
    EXPECT_EQ((co_await Call(http::verb::get, "/readyz")).status, 200u);
    EXPECT_EQ((co_await Call(http::verb::get, "/nope")).status, 404u);
    EXPECT_EQ((co_await Call(http::verb::get, "/filter")).status, 405u);
    // Bad JSON is an Error in a 200 answer, as kube-scheduler expects.
    auto bad = co_await Call(http::verb::post, "/filter", "{not json");
    EXPECT_EQ(bad.status, 200u);
    EXPECT_FALSE(json::parse(bad.body).at("Error").as_string().empty());
    auto no_pod = co_await Post("/filter", R"({"NodeNames":["gpu-a"]})");
    EXPECT_EQ(std::string(no_pod.at("Error").as_string()), std::string("extender args missing pod"));
  }());
}

// POST /refit over HTTP, as the device plugin sends it: the statuses and the JSON answer of what is refused
// before any refit (the service's own decisions: tests/unit/extender/refit_test.cc; the whole path on the
// real API server: tests/e2e/refit.sh).
TEST_F(ControllerTest, RefitAnswersJsonWithAStatusPerKindOfRefusal) {
  cfg_.extender.refit.device_plugin_namespace = "hami-system";
  cfg_.extender.refit.device_plugin_service_account = "hami-device-plugin";
  StartService();
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    co_await Ready();
    const std::string body =
        R"({"podUID":"u","podNamespace":"default","podName":"p","nodeName":"gpu-a","containerIndex":0,)"
        R"("deviceType":"NVIDIA","allowedDeviceUUIDs":["GPU-b"]})";
    struct Case {
      std::string body, authorization;
      unsigned status;
      std::string reason;
    };
    const std::vector<Case> cases = {
        {std::string((1 << 20) + 1, ' '), "", 413, "larger than the 1 MiB limit"},
        {"{", "", 400, "refit request: not JSON"},
        {body, "", 401, "want an Authorization: Bearer"},
        {body, "Bearer forged", 401, "not a service-account token"},
        // The embedded API server serves no TokenReview: the review fails, and nothing is let in (its
        // words are logged, not answered).
        {body, "Bearer eyJh.eyJz.c2ln", 503, "token review unavailable, retry"},
    };
    for (const Case& c : cases) {
      k8s::HttpRequest req;
      req.verb = http::verb::post;
      req.target = "/refit";
      req.body = c.body;
      req.content_type = "application/json";
      req.authorization = c.authorization;
      auto r = co_await extender_->Send(req, 10s);
      if (!r) {
        ADD_FAILURE() << c.reason;
        continue;
      }
      EXPECT_EQ(r->status, c.status) << r->body;
      const json::object answer = json::parse(r->body).as_object();
      EXPECT_FALSE(answer.at("succeeded").as_bool());
      EXPECT_NE(std::string(answer.at("failureReason").as_string()).find(c.reason), std::string::npos)
          << r->body;
    }
  }());
}

TEST_F(ControllerTest, FilterReservesThenBindLocksAndWritesTheDecisionWithTheBinding) {
  ASSERT_TRUE(server_.store().Create(NvidiaNode("gpu-a", 1)));
  ASSERT_TRUE(server_.store().Create(NvidiaNode("gpu-b", 1, 2000)));
  ASSERT_TRUE(server_.store().Create(GpuPod("p1", 3000)));
  ASSERT_TRUE(server_.store().Create(GpuPod("p-big", 9000)));
  StartService();
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    co_await Ready();
    const std::string filter_p1 = FilterArgs("p1", {"gpu-a", "gpu-b", "ghost"});
    auto r = co_await Post("/filter", filter_p1);
    EXPECT_TRUE(r.at("Error").as_string().empty());
    EXPECT_EQ(json::serialize(r.at("NodeNames")), std::string(R"(["gpu-a"])"));
    EXPECT_TRUE(r.at("FailedNodes").as_object().empty());
    // Unschedulable, every candidate has its reason: gpu-b is too small even empty, ghost is unknown, so no
    // pod leaving either makes room (FailedAndUnresolvableNodes).
    const std::string unfit = FilterArgs("p-big", {"gpu-b", "ghost"});
    auto u = co_await Post("/filter", unfit);
    EXPECT_EQ(json::serialize(u.at("NodeNames")), std::string("[]"));
    const json::object& unresolvable = u.at("FailedAndUnresolvableNodes").as_object();
    EXPECT_NE(std::string(unresolvable.at("gpu-b").as_string()).find("CardInsufficientMemory"),
              std::string::npos);
    EXPECT_EQ(std::string(unresolvable.at("ghost").as_string()), std::string("node unregistered"));
    EXPECT_TRUE(u.at("FailedNodes").as_object().empty());
    // Reserved, and nothing written on the pod yet: the Binding writes the decision.
    json::object pod = Stored("pods", "default", "p1");
    EXPECT_EQ(Annotation(pod, "hami.io/vgpu-node"), std::string());
    EXPECT_EQ(service_->extender().state().PodCount(), 1u);

    const std::string bind_p1 = BindArgs(pod, "gpu-a");
    auto b = co_await Post("/bind", bind_p1);
    EXPECT_TRUE(b.at("Error").as_string().empty());
    pod = Stored("pods", "default", "p1");
    EXPECT_EQ(std::string(pod.at("spec").at("nodeName").as_string()), std::string("gpu-a"));
    EXPECT_EQ(Annotation(pod, "hami.io/vgpu-node"), std::string("gpu-a"));
    EXPECT_EQ(Annotation(pod, "hami.io/vgpu-devices-allocated"), std::string("gpu-a-gpu0,NVIDIA,3000,0:;"));
    EXPECT_EQ(Annotation(pod, "hami.io/vgpu-devices-to-allocate"), std::string("gpu-a-gpu0,NVIDIA,3000,0:;"));
    EXPECT_FALSE(Annotation(pod, "hami.io/vgpu-time").empty());
    EXPECT_EQ(std::string(pod.at("metadata").at("labels").at("hami.io/vgpu-node").as_string()),
              std::string("gpu-a"));
    EXPECT_EQ(Annotation(pod, "hami.io/bind-phase"), std::string("allocating"));
    EXPECT_FALSE(Annotation(pod, "hami.io/bind-time").empty());
    const std::string lock = Annotation(Stored("nodes", "", "gpu-a"), "hami.io/mutex.lock");
    EXPECT_TRUE(lock.ends_with(",default,p1")) << lock;
    const std::function<bool()> events = [&] { return service_->extender().events().stats().created >= 3; };
    EXPECT_TRUE(co_await WaitUntil(events));
  }());
  std::set<std::string> reasons;
  for (const auto& e : server_.store().Objects("events"))
    reasons.insert(std::string(e->at("reason").as_string()));
  EXPECT_TRUE(reasons.contains("FilteringSucceed"));
  EXPECT_TRUE(reasons.contains("BindingSucceed"));
}

TEST_F(ControllerTest, AnEarlierDecisionsKeysTheBindingDoesNotReplaceAreRemovedBeforeIt) {
  ASSERT_TRUE(server_.store().Create(NvidiaNode("gpu-a", 1)));
  // Filtered before by HAMi (it writes the decision at filter) onto a Hygon node, then never bound.
  json::value pod = GpuPod("p1", 3000);
  pod.at("metadata").as_object()["annotations"] = {
      {"hami.io/vgpu-node", "dcu-x"},
      {"hami.io/vgpu-time", "1716199325"},
      {"hami.io/dcu-devices-allocated", "DCU-1,DCU,1000,10:;"},
      {"hami.io/hcu-devices-to-allocate", "DCU-1,DCU,1000,10:;"}};
  ASSERT_TRUE(server_.store().Create(pod));
  StartService();
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    co_await Ready();
    const std::string args = FilterArgs("p1", {"gpu-a"});
    EXPECT_TRUE((co_await Post("/filter", args)).at("Error").as_string().empty());
    const std::string bind = BindArgs(Stored("pods", "default", "p1"), "gpu-a");
    EXPECT_TRUE((co_await Post("/bind", bind)).at("Error").as_string().empty());
    const json::object bound = Stored("pods", "default", "p1");
    EXPECT_EQ(Annotation(bound, "hami.io/vgpu-node"), std::string("gpu-a"));
    EXPECT_EQ(Annotation(bound, "hami.io/vgpu-devices-to-allocate"),
              std::string("gpu-a-gpu0,NVIDIA,3000,0:;"));
    EXPECT_EQ(Annotation(bound, "hami.io/dcu-devices-allocated"), std::string());
    EXPECT_EQ(Annotation(bound, "hami.io/hcu-devices-to-allocate"), std::string());  // docs/DECISIONS.md, D2
  }());
}

TEST_F(ControllerTest, ANodeNameTooLongForALabelIsWrittenAsAnAnnotationOnly) {
  const std::string node(70, 'n');  // a valid node name (DNS subdomain), too long for a label value
  ASSERT_TRUE(server_.store().Create(NvidiaNode(node, 1)));
  ASSERT_TRUE(server_.store().Create(GpuPod("p1", 3000)));
  StartService();
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    co_await Ready();
    const std::string args = FilterArgs("p1", {node});
    auto r = co_await Post("/filter", args);
    EXPECT_TRUE(r.at("Error").as_string().empty()) << json::serialize(r);
    const std::string bind_p1 = BindArgs(Stored("pods", "default", "p1"), node);
    EXPECT_TRUE((co_await Post("/bind", bind_p1)).at("Error").as_string().empty());
    const json::object pod = Stored("pods", "default", "p1");
    EXPECT_EQ(Annotation(pod, "hami.io/vgpu-node"), node);
    const auto* labels = pod.at("metadata").as_object().if_contains("labels");
    EXPECT_TRUE(labels == nullptr || !labels->as_object().contains("hami.io/vgpu-node"));
  }());
}

TEST_F(ControllerTest, NodesFormForSchedulersWithoutNodeCache) {
  // kube-scheduler with nodeCacheCapable: false sends whole Node objects and expects Nodes back.
  ASSERT_TRUE(server_.store().Create(NvidiaNode("gpu-a", 1)));
  ASSERT_TRUE(server_.store().Create(NvidiaNode("gpu-b", 1, 2000)));
  ASSERT_TRUE(server_.store().Create(GpuPod("p1", 3000)));
  StartService();
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    co_await Ready();
    const json::array items{Stored("nodes", "", "gpu-a"), Stored("nodes", "", "gpu-b")};
    const std::string args =
        json::serialize(json::object{{"Pod", Stored("pods", "default", "p1")},
                                     {"Nodes", {{"metadata", json::object{}}, {"items", items}}}});
    auto r = co_await Post("/filter", args);
    EXPECT_TRUE(r.at("Error").as_string().empty()) << json::serialize(r);
    EXPECT_TRUE(r.at("NodeNames").is_null());
    const auto& chosen = r.at("Nodes").at("items").as_array();
    CO_ASSERT_EQ(chosen.size(), 1u);
    EXPECT_EQ(std::string(chosen[0].at("metadata").at("name").as_string()), std::string("gpu-a"));
    // The decision is live, as with NodeNames: reserved (the Binding writes it).
    EXPECT_EQ(service_->extender().state().PodCount(), 1u);
  }());
}

TEST_F(ControllerTest, BindWaitsForABusyLockAndStealsFromAGoneOwner) {
  ASSERT_TRUE(server_.store().Create(NvidiaNode("gpu-a", 2)));
  ASSERT_TRUE(server_.store().Create(GpuPod("p1", 1000)));
  ASSERT_TRUE(server_.store().Create(GpuPod("p2", 1000)));
  ASSERT_TRUE(server_.store().Create(GpuPod("p3", 1000)));
  StartService();
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    co_await Ready();
    for (const char* p : {"p1", "p2", "p3"}) {
      const std::string args = FilterArgs(p, {"gpu-a"});
      auto r = co_await Post("/filter", args);
      EXPECT_EQ(json::serialize(r.at("NodeNames")), std::string(R"(["gpu-a"])"));
    }
    const std::string bind_p1 = BindArgs(Stored("pods", "default", "p1"), "gpu-a");
    EXPECT_TRUE((co_await Post("/bind", bind_p1)).at("Error").as_string().empty());
    // p2's bind waits while p1 holds the lock; the device plugin's release (here: by hand) lets it go on.
    bool p2_done = false;
    json::object p2_result;
    asio::co_spawn(
        ioc_,
        [&]() -> asio::awaitable<void> {
          const std::string bind_p2 = BindArgs(Stored("pods", "default", "p2"), "gpu-a");
          p2_result = co_await Post("/bind", bind_p2);
          p2_done = true;
        },
        asio::detached);
    const std::function<bool()> waiting = [&] { return service_->extender().stats().lock_waits == 1; };
    EXPECT_TRUE(co_await WaitUntil(waiting));
    EXPECT_FALSE(p2_done);
    const json::value release = {{"metadata", {{"annotations", {{"hami.io/mutex.lock", nullptr}}}}}};
    EXPECT_TRUE(server_.store().Patch(*sim::FindResourceByName("nodes"), "", "gpu-a", sim::PatchType::kMerge,
                                      release));
    const std::function<bool()> done = [&] { return p2_done; };
    EXPECT_TRUE(co_await WaitUntil(done));
    EXPECT_TRUE(p2_result.at("Error").as_string().empty());
    EXPECT_TRUE(Annotation(Stored("nodes", "", "gpu-a"), "hami.io/mutex.lock").ends_with(",default,p2"));
    // A fresh lock whose owner pod does not exist is dangling: p3's bind replaces it at once.
    const json::value dangling = {
        {"metadata",
         {{"annotations",
           {{"hami.io/mutex.lock",
             codec::FormatNodeLock(std::chrono::system_clock::now(), "default", "ghost")}}}}}};
    EXPECT_TRUE(server_.store().Patch(*sim::FindResourceByName("nodes"), "", "gpu-a", sim::PatchType::kMerge,
                                      dangling));
    const std::string bind_p3 = BindArgs(Stored("pods", "default", "p3"), "gpu-a");
    EXPECT_TRUE((co_await Post("/bind", bind_p3)).at("Error").as_string().empty());
    EXPECT_TRUE(Annotation(Stored("nodes", "", "gpu-a"), "hami.io/mutex.lock").ends_with(",default,p3"));
    EXPECT_EQ(service_->extender().locker().stats().stolen, 1u);
  }());
}

TEST_F(ControllerTest, QueuedBindsTakeTheLockInArrivalOrderWithoutPolling) {
  ASSERT_TRUE(server_.store().Create(NvidiaNode("gpu-a", 2)));
  const std::vector<std::string> pods{"q1", "q2", "q3", "q4"};
  for (const auto& p : pods) ASSERT_TRUE(server_.store().Create(GpuPod(p, 1000)));
  cfg_.extender.bind.node_lock_retry_timeout = 20s;
  StartService(std::chrono::hours(1));  // no health pass writes the node meanwhile
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    co_await Ready();
    extender::Extender& c = service_->extender();
    for (const auto& p : pods) {
      const std::string args = FilterArgs(p, {"gpu-a"});
      EXPECT_TRUE((co_await Post("/filter", args)).at("Error").as_string().empty());
    }
    const std::string bind_q1 = BindArgs(Stored("pods", "default", "q1"), "gpu-a");
    EXPECT_TRUE((co_await Post("/bind", bind_q1)).at("Error").as_string().empty());
    // q2, q3, q4 arrive in this order while q1 holds the lock.
    std::vector<std::string> finished;
    for (std::size_t i = 1; i < pods.size(); ++i) {
      const std::string args = BindArgs(Stored("pods", "default", pods[i]), "gpu-a");
      asio::co_spawn(
          ioc_,
          [&, args, name = pods[i]]() -> asio::awaitable<void> {
            auto r = co_await Post("/bind", args);
            EXPECT_TRUE(r.at("Error").as_string().empty()) << name << ": " << json::serialize(r);
            finished.push_back(name);
          },
          asio::detached);
      const std::function<bool()> queued = [&, i] { return c.stats().lock_waits == i; };
      EXPECT_TRUE(co_await WaitUntil(queued));
    }
    // Waiting costs no request: the binds wait on the node watch, not by reading the node or the owner pod.
    const auto reads = [&] {
      std::uint64_t n = 0;
      for (const auto& [kind, count] : service_->client().requests_by_kind())
        if (kind.first == "get") n += count;
      return n;
    };
    // While q2's bind runs, kube-scheduler's retry of it (after its httpTimeout) changes nothing: a re-filter
    // would free the devices that bind is about to claim, a second bind would share its lock.
    const std::string refilter_q2 = FilterArgs("q2", {"gpu-a"});
    EXPECT_NE(
        std::string((co_await Post("/filter", refilter_q2)).at("Error").as_string()).find("is being bound"),
        std::string::npos);
    const std::string rebind_q2 = BindArgs(Stored("pods", "default", "q2"), "gpu-a");
    EXPECT_NE(
        std::string((co_await Post("/bind", rebind_q2)).at("Error").as_string()).find("being bound already"),
        std::string::npos);
    const std::uint64_t before = reads();
    asio::steady_timer pause(ioc_, 2500ms);  // each waiter's re-check timer fires twice
    co_await pause.async_wait(asio::use_awaitable);
    EXPECT_EQ(reads(), before);
    EXPECT_TRUE(finished.empty());
    // Each release (the device plugin's, here by hand) lets exactly the next bind in arrival order go.
    for (std::size_t i = 1; i < pods.size(); ++i) {
      const json::value release = {{"metadata", {{"annotations", {{"hami.io/mutex.lock", nullptr}}}}}};
      EXPECT_TRUE(server_.store().Patch(*sim::FindResourceByName("nodes"), "", "gpu-a",
                                        sim::PatchType::kMerge, release));
      const std::function<bool()> next = [&, i] { return finished.size() == i; };
      EXPECT_TRUE(co_await WaitUntil(next));
      EXPECT_EQ(finished.back(), pods[i]);
      EXPECT_TRUE(
          Annotation(Stored("nodes", "", "gpu-a"), "hami.io/mutex.lock").ends_with(",default," + pods[i]));
      EXPECT_EQ(Annotation(Stored("pods", "default", pods[i]), "hami.io/bind-phase"),
                std::string("allocating"));
    }
    EXPECT_EQ(reads(), before);  // the locks were taken from the cached node
  }());
}

TEST_F(ControllerTest, ALockTheStaleCacheShowsAsOursIsReadBackBeforeItIsReentered) {
  ASSERT_TRUE(server_.store().Create(NvidiaNode("gpu-a", 1)));
  ASSERT_TRUE(server_.store().Create(GpuPod("p1", 1000)));
  ASSERT_TRUE(server_.store().Create(GpuPod("other", 1000)));
  cfg_.extender.bind.node_lock_retry_timeout = 1s;
  StartService(std::chrono::hours(1));
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    co_await Ready();
    extender::Extender& c = service_->extender();
    const std::string filter_p1 = FilterArgs("p1", {"gpu-a"});
    EXPECT_TRUE((co_await Post("/filter", filter_p1)).at("Error").as_string().empty());
    // The node cache shows a lock of p1 (left by an earlier bind of it)...
    const json::value ours = {
        {"metadata",
         {{"annotations",
           {{"hami.io/mutex.lock",
             codec::FormatNodeLock(std::chrono::system_clock::now(), "default", "p1")}}}}}};
    EXPECT_TRUE(
        server_.store().Patch(*sim::FindResourceByName("nodes"), "", "gpu-a", sim::PatchType::kMerge, ours));
    const std::function<bool()> seen = [&] {
      return c.state().FindNode("gpu-a")->node.annotations.contains("hami.io/mutex.lock");
    };
    EXPECT_TRUE(co_await WaitUntil(seen));
    // ...then the node watch goes down, the device plugin releases it and another pod's bind takes it.
    Fail500("GET", "/api/v1/nodes?", 1000000);
    server_.DropWatches();
    const json::value theirs = {
        {"metadata",
         {{"annotations",
           {{"hami.io/mutex.lock",
             codec::FormatNodeLock(std::chrono::system_clock::now(), "default", "other")}}}}}};
    EXPECT_TRUE(server_.store().Patch(*sim::FindResourceByName("nodes"), "", "gpu-a", sim::PatchType::kMerge,
                                      theirs));
    // p1's bind must not hold the lock on the cache's word.
    const std::string bind_p1 = BindArgs(Stored("pods", "default", "p1"), "gpu-a");
    auto r = co_await Post("/bind", bind_p1);
    EXPECT_NE(std::string(r.at("Error").as_string()).find("default/other"), std::string::npos)
        << json::serialize(r);
    EXPECT_EQ(Stored("pods", "default", "p1").at("spec").as_object().if_contains("nodeName"), nullptr);
    EXPECT_TRUE(Annotation(Stored("nodes", "", "gpu-a"), "hami.io/mutex.lock").ends_with(",default,other"));
    server_.ClearFaults();
  }());
}

TEST_F(ControllerTest, AFilterWaitsWhileTheBindsInFlightNeedMoreOfTheBudgetThanTheirTimeout) {
  ASSERT_TRUE(server_.store().Create(NvidiaNode("gpu-a", 2)));
  ASSERT_TRUE(server_.store().Create(NvidiaNode("gpu-b", 2)));
  // q1 on gpu-a and q2 on gpu-b hold the locks; q3 and q4 wait at the head of each node's queue.
  const std::vector<std::pair<std::string, std::string>> pods{
      {"q1", "gpu-a"}, {"q2", "gpu-b"}, {"q3", "gpu-a"}, {"q4", "gpu-b"}, {"q5", "gpu-a"}};
  for (const auto& [p, node] : pods) ASSERT_TRUE(server_.store().Create(GpuPod(p, 1000)));
  // 2 requests/s (the burst is large, so no request actually waits): a bind in flight needs 1 s of it.
  cfg_.kube.qps = 2;
  cfg_.kube.burst = 1000;
  cfg_.extender.bind.node_lock_retry_timeout = 20s;
  service_options_.bind_backlog = 1500ms;
  StartService(std::chrono::hours(1));
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    co_await Ready();
    extender::Extender& c = service_->extender();
    for (std::size_t i = 0; i < 4; ++i) {
      const std::string args = FilterArgs(pods[i].first, {pods[i].second});
      EXPECT_TRUE((co_await Post("/filter", args)).at("Error").as_string().empty());
    }
    for (std::size_t i = 0; i < 2; ++i) {
      const std::string args = BindArgs(Stored("pods", "default", pods[i].first), pods[i].second);
      EXPECT_TRUE((co_await Post("/bind", args)).at("Error").as_string().empty());
    }
    // Two binds at the head of a queue: 2 s of the budget in flight, more than 1.5 s.
    for (std::size_t i = 2; i < 4; ++i) {
      // The coroutine owns its body (Post takes it by reference).
      asio::co_spawn(
          ioc_,
          [&, args = BindArgs(Stored("pods", "default", pods[i].first),
                              pods[i].second)]() -> asio::awaitable<void> { co_await Post("/bind", args); },
          asio::detached);
      const std::function<bool()> queued = [&, i] { return c.stats().lock_waits == i - 1; };
      EXPECT_TRUE(co_await WaitUntil(queued));
    }
    bool answered = false;
    const std::string filter_q5 = FilterArgs("q5", {"gpu-a"});
    asio::co_spawn(
        ioc_,
        [&]() -> asio::awaitable<void> {
          auto r = co_await Post("/filter", filter_q5);
          EXPECT_TRUE(r.at("Error").as_string().empty()) << json::serialize(r);
          answered = true;
        },
        asio::detached);
    const std::function<bool()> held = [&] { return c.stats().filters_held == 1; };
    EXPECT_TRUE(co_await WaitUntil(held));
    asio::steady_timer pause(ioc_, 300ms);
    co_await pause.async_wait(asio::use_awaitable);
    EXPECT_FALSE(answered);
    // q1's plugin is done: q3 binds, one bind is left in flight (1 s), and q5's filter goes on.
    const json::value release = {{"metadata", {{"annotations", {{"hami.io/mutex.lock", nullptr}}}}}};
    EXPECT_TRUE(server_.store().Patch(*sim::FindResourceByName("nodes"), "", "gpu-a", sim::PatchType::kMerge,
                                      release));
    const std::function<bool()> done = [&] { return answered; };
    EXPECT_TRUE(co_await WaitUntil(done));
    auto m = co_await Call(http::verb::get, "/metrics");
    EXPECT_NE(m.body.find("hami_scheduler_filters_held_total 1"), std::string::npos);
    c.Stop();  // q4 still waits for q2's lock
  }());
}

TEST_F(ControllerTest, RefilterFreesTheEarlierReservationAndFilterWritesNothing) {
  ASSERT_TRUE(server_.store().Create(NvidiaNode("gpu-a", 1)));
  ASSERT_TRUE(server_.store().Create(GpuPod("p1", 10000)));
  StartService();
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    co_await Ready();
    const std::string args = FilterArgs("p1", {"gpu-a"});
    for (int i = 0; i < 3; ++i) {
      // 10000 of 16000 MiB: it fits only if the earlier reservation of the same pod was freed first.
      auto r = co_await Post("/filter", args);
      EXPECT_EQ(json::serialize(r.at("NodeNames")), std::string(R"(["gpu-a"])")) << i;
    }
    EXPECT_EQ(service_->extender().state().PodCount(), 1u);
    EXPECT_EQ(service_->extender().state().FindNode("gpu-a")->usage[0].mem.value(), 10000);
    // The decision is held in memory until the Binding writes it: the filter sent no request at all.
    EXPECT_EQ(Annotation(Stored("pods", "default", "p1"), "hami.io/vgpu-node"), std::string());
    for (const auto& [kind, n] : service_->client().requests_by_kind())
      EXPECT_TRUE(kind.first == "list" || kind.first == "watch" || kind.second == "nodes")
          << kind.first << " " << kind.second << ": " << n;
    // An unschedulable re-filter frees the earlier reservation: kube-scheduler will not bind it there.
    const std::string nowhere = FilterArgs("p1", {"ghost"});
    auto u = co_await Post("/filter", nowhere);
    EXPECT_EQ(json::serialize(u.at("NodeNames")), std::string("[]"));
    EXPECT_EQ(service_->extender().state().FindNode("gpu-a")->usage[0].mem.value(), 0);
    auto again = co_await Post("/filter", args);
    EXPECT_EQ(json::serialize(again.at("NodeNames")), std::string(R"(["gpu-a"])"));
    EXPECT_EQ(service_->extender().state().FindNode("gpu-a")->usage[0].mem.value(), 10000);
    // Deleting the pod releases it.
    EXPECT_TRUE(server_.store().Delete(*sim::FindResourceByName("pods"), "default", "p1"));
    const std::function<bool()> released = [&] { return service_->extender().state().PodCount() == 0; };
    EXPECT_TRUE(co_await WaitUntil(released));
    EXPECT_EQ(service_->extender().state().FindNode("gpu-a")->usage[0].mem.value(), 0);
    server_.ClearFaults();
  }());
}

TEST_F(ControllerTest, HealthPassRequestsHandshakesAndWithholdsDevicesOfAGonePlugin) {
  FixedClock* clock = UseFixedClock();
  // A Hygon node whose device plugin registered but does not answer handshakes and has no allocatable count.
  json::value dcu = {
      {"apiVersion", "v1"},
      {"kind", "Node"},
      {"metadata",
       {{"name", "dcu-a"},
        {"annotations", {{"hami.io/node-dcu-register", "DCU-1,4,16384,100,DCU-K100,0,true:"}}}}}};
  ASSERT_TRUE(server_.store().Create(dcu));
  ASSERT_TRUE(server_.store().Create(NvidiaNode("gpu-a", 1)));
  StartService(std::chrono::hours(1));  // passes run when the test says so
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    co_await Ready();
    extender::Extender& c = service_->extender();
    const auto dcu_devices = [&] { return c.state().FindNode("dcu-a")->devices.size(); };
    EXPECT_EQ(dcu_devices(), 1u);
    // The first pass asked for a handshake (Hygon's key) and none on NVIDIA's node without... NVIDIA's key.
    // Written, and seen by the node cache (the next pass decides from the cache).
    const std::function<bool()> asked = [&] {
      const auto& cached = c.state().FindNode("dcu-a")->node.annotations;
      auto seen = cached.find("hami.io/node-handshake-dcu");
      return Annotation(Stored("nodes", "", "dcu-a"), "hami.io/node-handshake-dcu")
                 .starts_with("Requesting_") &&
             seen != cached.end() && seen->second.starts_with("Requesting_");
    };
    EXPECT_TRUE(co_await WaitUntil(asked));
    // Within the 60 s window the devices stay; after it, with no allocatable count, they are withheld and the
    // handshake annotation is removed so that the plugin can register again.
    clock->Advance(30s);
    co_await c.HealthPass();
    EXPECT_EQ(dcu_devices(), 1u);
    clock->Advance(31s);
    co_await c.HealthPass();
    EXPECT_EQ(dcu_devices(), 0u);
    EXPECT_EQ(c.stats().cleanups, 1u);
    EXPECT_EQ(Annotation(Stored("nodes", "", "dcu-a"), "hami.io/node-handshake-dcu"), std::string());
    // The next pass asks again, but a request of ours is no sign of the plugin: the devices stay withheld.
    const std::function<bool()> cleaned = [&] {
      return !c.state().FindNode("dcu-a")->node.annotations.contains("hami.io/node-handshake-dcu");
    };
    EXPECT_TRUE(co_await WaitUntil(cleaned));
    co_await c.HealthPass();
    EXPECT_TRUE(co_await WaitUntil(asked));
    EXPECT_EQ(dcu_devices(), 0u);
    // A node event (here: a label) does not bring the withheld devices back...
    const json::value label = {{"metadata", {{"labels", {{"x", "y"}}}}}};
    EXPECT_TRUE(
        server_.store().Patch(*sim::FindResourceByName("nodes"), "", "dcu-a", sim::PatchType::kMerge, label));
    const std::function<bool()> labelled = [&] {
      return c.state().FindNode("dcu-a")->node.labels.contains("x");
    };
    EXPECT_TRUE(co_await WaitUntil(labelled));
    EXPECT_EQ(dcu_devices(), 0u);
    // ...the plugin answering does: the next pass sees a report and makes the devices available again.
    const json::value report = {
        {"metadata", {{"annotations", {{"hami.io/node-handshake-dcu", "Reported now"}}}}}};
    EXPECT_TRUE(server_.store().Patch(*sim::FindResourceByName("nodes"), "", "dcu-a", sim::PatchType::kMerge,
                                      report));
    const std::function<bool()> reported = [&] {
      const auto& a = c.state().FindNode("dcu-a")->node.annotations;
      auto it = a.find("hami.io/node-handshake-dcu");
      return it != a.end() && it->second.starts_with("Reported");
    };
    EXPECT_TRUE(co_await WaitUntil(reported));
    co_await c.HealthPass();
    EXPECT_EQ(dcu_devices(), 1u);
  }());
}

// `simulate` decides as `serve` does: one snapshot, with a node whose handshake request expired
// unanswered and whose nvidia.com/gpu allocatable is 0, through `simulate --now T` and through the controller
// (its first health pass at T) gives the same placements and the same refusals.
TEST_F(ControllerTest, SimulateDecidesAsServeOnTheSameSnapshot) {
  const TimePoint t = std::chrono::floor<std::chrono::seconds>(std::chrono::system_clock::now());
  clock_ = std::make_unique<FixedClock>(t);
  json::value stale = NvidiaNode("gpu-stale", 2);
  stale.at("metadata").as_object()["annotations"].as_object()["hami.io/node-handshake"] =
      codec::FormatHandshakeRequest(t - 10min);
  stale.at("status").at("allocatable").as_object()["nvidia.com/gpu"] = "0";
  ASSERT_TRUE(server_.store().Create(stale));
  ASSERT_TRUE(server_.store().Create(NvidiaNode("gpu-ok", 1)));
  ASSERT_TRUE(server_.store().Create(NvidiaNode("gpu-small", 1, 2000)));
  const std::vector<std::pair<std::string, int>> pods = {{"p1", 3000}, {"p2", 15000}, {"p3", 3000}};
  for (const auto& [name, mem] : pods) ASSERT_TRUE(server_.store().Create(GpuPod(name, mem)));
  // The snapshot, as `kubectl get nodes,pods -A -o json` would print it before serve starts.
  json::array items;
  for (const std::string node : {"gpu-stale", "gpu-ok", "gpu-small"})
    items.push_back(Stored("nodes", "", node));
  for (const auto& p : pods) items.push_back(Stored("pods", "default", p.first));
  const std::string snapshot = ::testing::TempDir() + "/simulate_parity_snapshot.json";
  std::ofstream(snapshot) << json::serialize(
      json::object{{"apiVersion", "v1"}, {"kind", "List"}, {"items", items}});

  std::ostringstream out, err;
  ASSERT_EQ(cmd::Simulate({"--cluster", snapshot, "--now", codec::FormatRfc3339(t)}, out, err), cmd::kExitOk)
      << err.str();
  const json::value simulated = json::parse(out.str());
  EXPECT_NE(err.str().find("node gpu-stale: NVIDIA devices withheld"), std::string::npos) << err.str();

  StartService(std::chrono::hours(1));  // one health pass, at t
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    co_await Ready();
    const json::array candidates = {"gpu-ok", "gpu-small", "gpu-stale"};
    for (std::size_t i = 0; i < pods.size(); ++i) {
      const std::string& name = pods[i].first;
      const json::object& sim = simulated.at("results").at(i).as_object();
      EXPECT_EQ(sim.at("pod").as_string(), "default/" + name);
      auto served = co_await Post("/filter", FilterArgs(name, candidates));
      EXPECT_TRUE(served.at("Error").as_string().empty()) << name;
      const json::array& chosen = served.at("NodeNames").as_array();
      if (chosen.empty()) {
        EXPECT_EQ(sim.at("outcome").as_string(), "unschedulable") << name;
        // simulate lists every refusal; /filter parts them into the two kinds kube-scheduler tells apart.
        json::object refusals = served.at("FailedNodes").as_object();
        for (const auto& [node, reason] : served.at("FailedAndUnresolvableNodes").as_object())
          refusals[node] = reason;
        EXPECT_EQ(json::serialize(sim.at("failedNodes")), json::serialize(json::value(std::move(refusals))))
            << name;
      } else {
        EXPECT_EQ(json::serialize(sim.at("node")), json::serialize(chosen.at(0))) << name;
        // Bound (the Binding writes the decision), and the node lock released as its device plugin would.
        const std::string node(chosen.at(0).as_string());
        const std::string bind = BindArgs(Stored("pods", "default", name), node);
        EXPECT_TRUE((co_await Post("/bind", bind)).at("Error").as_string().empty()) << name;
        const json::value unlock = {{"metadata", {{"annotations", {{"hami.io/mutex.lock", nullptr}}}}}};
        EXPECT_TRUE(server_.store().Patch(*sim::FindResourceByName("nodes"), "", node, sim::PatchType::kMerge,
                                          unlock));
        EXPECT_EQ(Annotation(Stored("pods", "default", name), "hami.io/vgpu-devices-allocated"),
                  std::string(sim.at("annotations").at("hami.io/vgpu-devices-allocated").as_string()))
            << name;
      }
    }
  }());
  // And what both decided: the stale node's devices count for nothing.
  const auto& r = simulated.at("results").as_array();
  EXPECT_EQ(r.at(0).at("node").as_string(), "gpu-ok");
  EXPECT_EQ(r.at(1).at("outcome").as_string(), "unschedulable");
  EXPECT_EQ(r.at(1).at("failedNodes").at("gpu-stale").as_string(), "node unregistered");
  EXPECT_EQ(r.at(2).at("node").as_string(), "gpu-ok");
}

// POST /preempt over HTTP: the victims as kube-scheduler reads them, and input it cannot act on refused with
// a status other than 200 and the reason in the body.
TEST_F(ControllerTest, PreemptNamesTheVictimsAndRefusesWhatTheCachesContradict) {
  ASSERT_TRUE(server_.store().Create(NvidiaNode("gpu-a", 1)));
  json::value low = BoundGpuPod("low", "gpu-a", 10000);
  low.at("spec").as_object()["priority"] = 10;
  ASSERT_TRUE(server_.store().Create(low));
  StartService();
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    co_await Ready();
    const std::string low_uid(Stored("pods", "default", "low").at("metadata").at("uid").as_string());
    json::value high = GpuPod("high", 10000);
    high.at("metadata").as_object()["uid"] = "uid-high";
    high.at("spec").as_object()["priority"] = 1000;
    high.at("spec").as_object()["schedulerName"] = "hami-scheduler";
    const auto args = [&](const json::object& victims) {
      return json::serialize(json::object{{"Pod", high}, {"NodeNameToMetaVictims", victims}});
    };
    json::object empty;
    empty["Pods"] = json::array{};
    empty["NumPDBViolations"] = 0;
    json::object on_a, on_ghost;
    on_a["gpu-a"] = empty;
    on_ghost["ghost"] = empty;
    const std::string want =
        R"({"NodeNameToMetaVictims":{"gpu-a":{"Pods":[{"UID":")" + low_uid + R"("}],"NumPDBViolations":0}}})";
    const std::string ask_a = args(on_a), ask_ghost = args(on_ghost), huge_body(2 << 20, ' ');
    auto answer = co_await Post("/preempt", ask_a);
    EXPECT_EQ(json::serialize(answer), want);
    auto bad = co_await Call(http::verb::post, "/preempt", "{not json");
    EXPECT_EQ(bad.status, 400u);
    EXPECT_NE(bad.body.find("ExtenderPreemptionArgs: invalid JSON"), std::string::npos) << bad.body;
    // A node the caches do not have is left out (the log says why); the others are answered.
    auto ghost = co_await Post("/preempt", ask_ghost);
    EXPECT_EQ(json::serialize(ghost), R"({"NodeNameToMetaVictims":{}})");
    auto huge = co_await Call(http::verb::post, "/preempt", huge_body);
    EXPECT_EQ(huge.status, 413u);
    EXPECT_EQ((co_await Call(http::verb::get, "/preempt")).status, 405u);
    // The ledger still charges the victim: nothing was decided or evicted.
    EXPECT_EQ(service_->extender().state().FindNode("gpu-a")->usage[0].mem.value(), 10000);
  }());
}

// --filter-mode=all-fitting over HTTP: every fitting node passes /filter, /prioritize scores them, and /bind
// places the pod on the node kube-scheduler chose (not the one binpack alone would take).
TEST_F(ControllerTest, AllFittingModeFiltersScoresAndPlacesAtBind) {
  cfg_.extender.filter.policies.filter_mode = FilterMode::kAllFitting;
  ASSERT_TRUE(server_.store().Create(NvidiaNode("gpu-a", 1)));
  ASSERT_TRUE(server_.store().Create(NvidiaNode("gpu-b", 1)));
  ASSERT_TRUE(server_.store().Create(BoundGpuPod("half", "gpu-a", 8000)));
  ASSERT_TRUE(server_.store().Create(GpuPod("p", 4000)));
  StartService();
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    co_await Ready();
    const std::string args = FilterArgs("p", json::array{"gpu-a", "gpu-b", "ghost"});
    auto f = co_await Post("/filter", args);
    EXPECT_EQ(json::serialize(f.at("NodeNames")), R"(["gpu-a","gpu-b"])");
    EXPECT_EQ(json::serialize(f.at("FailedAndUnresolvableNodes")), R"({"ghost":"node unregistered"})");
    const std::string scored = FilterArgs("p", json::array{"gpu-a", "gpu-b"});
    auto p = co_await Call(http::verb::post, "/prioritize", scored);
    EXPECT_EQ(p.status, 200u);
    EXPECT_EQ(p.body, R"([{"Host":"gpu-a","Score":10},{"Host":"gpu-b","Score":1}])");
    auto bad = co_await Call(http::verb::post, "/prioritize", "{not json");
    EXPECT_EQ(bad.status, 400u);
    EXPECT_NE(bad.body.find("ExtenderArgs: invalid JSON"), std::string::npos) << bad.body;
    const std::string huge(2 << 20, ' ');
    EXPECT_EQ((co_await Call(http::verb::post, "/prioritize", huge)).status, 413u);
    EXPECT_EQ(service_->extender().state().PodCount(), 1u);  // nothing reserved by the filter
    // kube-scheduler chose gpu-b (its soft constraints outweighed binpack's score).
    const std::string bind = BindArgs(Stored("pods", "default", "p"), "gpu-b");
    EXPECT_TRUE((co_await Post("/bind", bind)).at("Error").as_string().empty());
    const json::object pod = Stored("pods", "default", "p");
    EXPECT_EQ(std::string(pod.at("spec").at("nodeName").as_string()), "gpu-b");
    EXPECT_EQ(Annotation(pod, "hami.io/vgpu-devices-allocated"), "gpu-b-gpu0,NVIDIA,4000,0:;");
  }());
}

TEST_F(ControllerTest, APodRecreatedWhileTheWatchWasDownReleasesTheOldHold) {
  ASSERT_TRUE(server_.store().Create(NvidiaNode("gpu-a", 1)));
  json::value bound = GpuPod("p1", 3000);
  auto& meta = bound.at("metadata").as_object();
  meta["annotations"] = {{"hami.io/vgpu-node", "gpu-a"},
                         {"hami.io/vgpu-devices-allocated", "gpu-a-gpu0,NVIDIA,3000,0:;"}};
  bound.at("spec").as_object()["nodeName"] = "gpu-a";
  ASSERT_TRUE(server_.store().Create(bound));
  StartService();
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    co_await Ready();
    extender::Extender& c = service_->extender();
    EXPECT_EQ(c.state().FindNode("gpu-a")->usage[0].mem.value(), 3000);
    // Deleted and re-created (no devices yet) while no watch delivers it; the history is gone, so the
    // controller relists and sees the same name with another uid.
    Fail500("GET", "/api/v1/pods", 1000000);  // the pod watch cannot reconnect meanwhile
    server_.DropWatches();
    auto& store = server_.store();
    EXPECT_TRUE(store.Delete(*sim::FindResourceByName("pods"), "default", "p1"));
    EXPECT_TRUE(store.Create(GpuPod("p1", 1000)));
    store.Compact();
    // The controller tries to list and watch again and is refused (twice at least) before the fault ends.
    const std::uint64_t before = server_.requests_served();
    const std::function<bool()> refused = [&] { return server_.requests_served() >= before + 2; };
    EXPECT_TRUE(co_await WaitUntil(refused));
    EXPECT_EQ(c.state().FindNode("gpu-a")->usage[0].mem.value(), 3000);
    server_.ClearFaults();
    const std::function<bool()> released = [&] {
      return c.state().FindNode("gpu-a")->usage[0].mem.value() == 0;
    };
    EXPECT_TRUE(co_await WaitUntil(released));
    EXPECT_EQ(c.state().PodCount(), 0u);
  }());
}

// What the device plugin does once it has set the devices up: bind-phase success, node lock released.
void Allocated(sim::ApiServer& server, const std::string& pod, const std::string& node) {
  const json::value done = {{"metadata", {{"annotations", {{"hami.io/bind-phase", "success"}}}}}};
  EXPECT_TRUE(
      server.store().Patch(*sim::FindResourceByName("pods"), "default", pod, sim::PatchType::kMerge, done));
  const json::value unlock = {{"metadata", {{"annotations", {{"hami.io/mutex.lock", nullptr}}}}}};
  EXPECT_TRUE(
      server.store().Patch(*sim::FindResourceByName("nodes"), "", node, sim::PatchType::kMerge, unlock));
}

std::string ResourceVersion(const json::object& o) {
  return std::string(o.at("metadata").at("resourceVersion").as_string());
}

TEST_F(ControllerTest, ABindRetriedForABoundPodAnswersWithoutTouchingLockOrPhase) {
  ASSERT_TRUE(server_.store().Create(NvidiaNode("gpu-a", 1)));
  ASSERT_TRUE(server_.store().Create(NvidiaNode("gpu-b", 1)));
  ASSERT_TRUE(server_.store().Create(GpuPod("p1", 3000)));
  ASSERT_TRUE(server_.store().Create(GpuPod("p2", 3000)));
  StartService();
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    co_await Ready();
    extender::Extender& c = service_->extender();
    const std::string filter_p1 = FilterArgs("p1", {"gpu-a"});
    EXPECT_TRUE((co_await Post("/filter", filter_p1)).at("Error").as_string().empty());
    const std::string bind_p1 = BindArgs(Stored("pods", "default", "p1"), "gpu-a");
    EXPECT_TRUE((co_await Post("/bind", bind_p1)).at("Error").as_string().empty());
    const std::function<bool()> seen_bound = [&] {
      const PodView* p = c.CachedPod("default/p1");
      return p != nullptr && p->node_name == "gpu-a";
    };
    EXPECT_TRUE(co_await WaitUntil(seen_bound));

    // Bound + allocating (the first answer was lost, the device plugin is not done): success, and neither
    // the pod nor the node is written.
    const std::string pod_rv = ResourceVersion(Stored("pods", "default", "p1"));
    const std::string node_rv = ResourceVersion(Stored("nodes", "", "gpu-a"));
    auto again = co_await Post("/bind", bind_p1);
    EXPECT_TRUE(again.at("Error").as_string().empty()) << json::serialize(again);
    EXPECT_EQ(ResourceVersion(Stored("pods", "default", "p1")), pod_rv);
    EXPECT_EQ(ResourceVersion(Stored("nodes", "", "gpu-a")), node_rv);

    // Bound + success (allocated, lock released): success; no lock is taken, the phase stays success.
    Allocated(server_, "p1", "gpu-a");
    const std::function<bool()> seen_done = [&] {
      const PodView* p = c.CachedPod("default/p1");
      auto it = p->annotations.find("hami.io/bind-phase");
      return it != p->annotations.end() && it->second == "success";
    };
    EXPECT_TRUE(co_await WaitUntil(seen_done));
    auto third = co_await Post("/bind", bind_p1);
    EXPECT_TRUE(third.at("Error").as_string().empty()) << json::serialize(third);
    EXPECT_EQ(Annotation(Stored("pods", "default", "p1"), "hami.io/bind-phase"), std::string("success"));
    EXPECT_EQ(Annotation(Stored("nodes", "", "gpu-a"), "hami.io/mutex.lock"), std::string());
    EXPECT_EQ(c.stats().rebinds, 2u);

    // Bound elsewhere: a clear error naming both nodes; gpu-b is not locked, the pod not written.
    const std::string elsewhere = BindArgs(Stored("pods", "default", "p1"), "gpu-b");
    const std::string rv_before = ResourceVersion(Stored("pods", "default", "p1"));
    auto other = co_await Post("/bind", elsewhere);
    EXPECT_NE(std::string(other.at("Error").as_string())
                  .find("already bound to node gpu-a, cannot bind it to gpu-b"),
              std::string::npos)
        << json::serialize(other);
    EXPECT_EQ(Annotation(Stored("nodes", "", "gpu-b"), "hami.io/mutex.lock"), std::string());
    EXPECT_EQ(ResourceVersion(Stored("pods", "default", "p1")), rv_before);

    // The node is free for the next pod at once (today's second bind held it until the lock timeout).
    const std::string filter_p2 = FilterArgs("p2", {"gpu-a"});
    EXPECT_TRUE((co_await Post("/filter", filter_p2)).at("Error").as_string().empty());
    const std::string bind_p2 = BindArgs(Stored("pods", "default", "p2"), "gpu-a");
    EXPECT_TRUE((co_await Post("/bind", bind_p2)).at("Error").as_string().empty());
    EXPECT_EQ(c.stats().lock_waits, 0u);
  }());
}

TEST_F(ControllerTest, ABindRetriedBeforeTheWatchShowsThePodBoundLeavesLockAndPhaseAlone) {
  ASSERT_TRUE(server_.store().Create(NvidiaNode("gpu-a", 1)));
  ASSERT_TRUE(server_.store().Create(GpuPod("p1", 3000)));
  StartService();
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    co_await Ready();
    extender::Extender& c = service_->extender();
    const std::string filter_p1 = FilterArgs("p1", {"gpu-a"});
    EXPECT_TRUE((co_await Post("/filter", filter_p1)).at("Error").as_string().empty());
    const std::function<bool()> seen = [&] { return c.CachedPod("default/p1") != nullptr; };
    EXPECT_TRUE(co_await WaitUntil(seen));
    // The pod watch is down, so the cache still shows p1 unbound while it is bound and allocated.
    Fail500("GET", "/api/v1/pods", 1000000);
    server_.DropWatches();
    const std::string bind_p1 = BindArgs(Stored("pods", "default", "p1"), "gpu-a");
    EXPECT_TRUE((co_await Post("/bind", bind_p1)).at("Error").as_string().empty());
    Allocated(server_, "p1", "gpu-a");
    EXPECT_TRUE(c.CachedPod("default/p1")->node_name.empty());
    auto again = co_await Post("/bind", bind_p1);
    EXPECT_TRUE(again.at("Error").as_string().empty()) << json::serialize(again);
    EXPECT_EQ(Annotation(Stored("pods", "default", "p1"), "hami.io/bind-phase"), std::string("success"));
    EXPECT_EQ(Annotation(Stored("nodes", "", "gpu-a"), "hami.io/mutex.lock"), std::string());
    server_.ClearFaults();
  }());
}

TEST_F(ControllerTest, AReservationNeverBoundExpiresAndItsAnnotationsGo) {
  FixedClock* clock = UseFixedClock();
  cfg_.extender.bind.reservation_timeout = 300s;
  ASSERT_TRUE(server_.store().Create(NvidiaNode("gpu-a", 1)));
  ASSERT_TRUE(server_.store().Create(GpuPod("p1", 10000)));
  ASSERT_TRUE(server_.store().Create(GpuPod("p2", 3000)));
  StartService(std::chrono::hours(1));  // passes (and expiry) run when the test says so
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    co_await Ready();
    extender::Extender& c = service_->extender();
    const auto used = [&] { return c.state().FindNode("gpu-a")->usage[0].mem.value(); };
    // p1 as HAMi's extender leaves a pod whose binding failed (it writes the decision at filter and the
    // phase before binding): allocated, `allocating`, stamped at the filter and, 10 s later, at the bind.
    const auto unix_seconds = [&] {
      return std::to_string(
          std::chrono::duration_cast<std::chrono::seconds>(clock->Now().time_since_epoch()).count());
    };
    const std::string filter_time = unix_seconds();
    clock->Advance(10s);
    const json::value hami_left = {{"metadata",
                                    {{"labels", {{"hami.io/vgpu-node", "gpu-a"}}},
                                     {"annotations",
                                      {{"hami.io/vgpu-node", "gpu-a"},
                                       {"hami.io/vgpu-time", filter_time},
                                       {"hami.io/vgpu-devices-allocated", "gpu-a-gpu0,NVIDIA,10000,0:;"},
                                       {"hami.io/vgpu-devices-to-allocate", "gpu-a-gpu0,NVIDIA,10000,0:;"},
                                       {"hami.io/bind-phase", "allocating"},
                                       {"hami.io/bind-time", unix_seconds()}}}}}};
    EXPECT_TRUE(server_.store().Patch(*sim::FindResourceByName("pods"), "default", "p1",
                                      sim::PatchType::kMerge, hami_left));
    const std::function<bool()> seen = [&] {
      const PodView* p = c.CachedPod("default/p1");
      return p != nullptr && p->annotations.contains("hami.io/bind-phase");
    };
    EXPECT_TRUE(co_await WaitUntil(seen));
    // Not bound: it holds no device, so its annotations charge nothing (docs/DECISIONS.md, "The ledger");
    // the sweep still removes them after the timeout.
    EXPECT_EQ(used(), 0);

    // A bound pod is never expired, however old its decision.
    const std::string filter_p2 = FilterArgs("p2", {"gpu-a"});
    EXPECT_TRUE((co_await Post("/filter", filter_p2)).at("Error").as_string().empty());
    const std::string bind_p2 = BindArgs(Stored("pods", "default", "p2"), "gpu-a");
    EXPECT_TRUE((co_await Post("/bind", bind_p2)).at("Error").as_string().empty());
    const std::function<bool()> p2_bound = [&] {
      const PodView* p = c.CachedPod("default/p2");
      return p != nullptr && !p->node_name.empty();
    };
    EXPECT_TRUE(co_await WaitUntil(p2_bound));
    EXPECT_EQ(used(), 3000);

    // The timeout counts from the bind (the later stamp): not yet 300 s after it.
    clock->Advance(299s);
    co_await c.ExpireReservations();
    EXPECT_EQ(c.stats().expired, 0u);
    EXPECT_EQ(used(), 3000);
    clock->Advance(2s);
    co_await c.ExpireReservations();
    EXPECT_EQ(c.stats().expired, 1u);
    EXPECT_EQ(used(), 3000);
    const json::object p1 = Stored("pods", "default", "p1");
    for (const char* key : {"hami.io/vgpu-node", "hami.io/vgpu-time", "hami.io/vgpu-devices-allocated",
                            "hami.io/vgpu-devices-to-allocate", "hami.io/bind-phase", "hami.io/bind-time"})
      EXPECT_EQ(Annotation(p1, key), std::string()) << key;
    const auto* labels = p1.at("metadata").as_object().if_contains("labels");
    EXPECT_TRUE(labels == nullptr || !labels->as_object().contains("hami.io/vgpu-node"));
    EXPECT_FALSE(Annotation(Stored("pods", "default", "p2"), "hami.io/vgpu-node").empty());
    // The watch event of the cleared pod changes nothing more; the pod can be filtered again from scratch.
    const std::function<bool()> cleared = [&] {
      return !c.CachedPod("default/p1")->annotations.contains("hami.io/vgpu-node");
    };
    EXPECT_TRUE(co_await WaitUntil(cleared));
    co_await c.ExpireReservations();
    EXPECT_EQ(c.stats().expired, 1u);
    EXPECT_EQ(used(), 3000);
    const std::string again = FilterArgs("p1", {"gpu-a"});
    auto refiltered = co_await Post("/filter", again);
    EXPECT_EQ(json::serialize(refiltered.at("NodeNames")), std::string(R"(["gpu-a"])"));
    EXPECT_EQ(used(), 13000);
    auto m = co_await Call(http::verb::get, "/metrics");
    EXPECT_NE(m.body.find("hami_scheduler_reservations_expired_total 1"), std::string::npos) << m.body;
  }());
}

TEST_F(ControllerTest, OurReservationOfAPodNeverBoundIsFreedAfterTheTimeoutWithNothingToClean) {
  FixedClock* clock = UseFixedClock();
  cfg_.extender.bind.reservation_timeout = 300s;
  ASSERT_TRUE(server_.store().Create(NvidiaNode("gpu-a", 1)));
  ASSERT_TRUE(server_.store().Create(GpuPod("p1", 10000)));
  StartService(std::chrono::hours(1));  // passes (and expiry) run when the test says so
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    co_await Ready();
    extender::Extender& c = service_->extender();
    const auto used = [&] { return c.state().FindNode("gpu-a")->usage[0].mem.value(); };
    const std::string filter_p1 = FilterArgs("p1", {"gpu-a"});
    EXPECT_TRUE((co_await Post("/filter", filter_p1)).at("Error").as_string().empty());
    // The binding fails: nothing was written on the pod (the decision and the phase travel in the Binding),
    // and the devices stay reserved for a retry.
    Fail500("POST", "/api/v1/namespaces/default/pods/p1/binding", 100);
    const std::string bind_p1 = BindArgs(Stored("pods", "default", "p1"), "gpu-a");
    EXPECT_FALSE((co_await Post("/bind", bind_p1)).at("Error").as_string().empty());
    server_.ClearFaults();
    const json::object p1 = Stored("pods", "default", "p1");
    for (const char* key : {"hami.io/vgpu-node", "hami.io/vgpu-devices-to-allocate", "hami.io/bind-phase"})
      EXPECT_EQ(Annotation(p1, key), std::string()) << key;
    EXPECT_EQ(Annotation(Stored("nodes", "", "gpu-a"), "hami.io/mutex.lock"), std::string());
    EXPECT_EQ(used(), 10000);
    clock->Advance(299s);
    co_await c.ExpireReservations();
    EXPECT_EQ(used(), 10000);
    clock->Advance(2s);
    co_await c.ExpireReservations();
    EXPECT_EQ(c.stats().expired, 1u);
    EXPECT_EQ(used(), 0);
    // The bind kube-scheduler may still send finds no reservation and says so.
    auto late = co_await Post("/bind", bind_p1);
    EXPECT_NE(std::string(late.at("Error").as_string()).find("holds no device reservation"),
              std::string::npos)
        << json::serialize(late);
  }());
}

TEST_F(ControllerTest, ReservationsAndLocksLeftByAKilledProcessAreFreedButNotADecisionRewrittenMeanwhile) {
  const auto start = std::chrono::system_clock::now();
  FixedClock* clock = UseFixedClock(start);
  cfg_.extender.bind.reservation_timeout = 120s;
  // The killed process had also locked the node for p1's bind.
  json::value node = NvidiaNode("gpu-a", 1);
  node.at("metadata").at("annotations").as_object()["hami.io/mutex.lock"] =
      codec::FormatNodeLock(start, "default", "p1");
  ASSERT_TRUE(server_.store().Create(node));
  // Left by a process killed between filter and bind: annotations, a decision time, no nodeName.
  const std::string stamp =
      std::to_string(std::chrono::duration_cast<std::chrono::seconds>(start.time_since_epoch()).count());
  for (const char* name : {"p1", "p2"}) {
    json::value pod = GpuPod(name, 4000);
    pod.at("metadata").as_object()["annotations"] = {
        {"hami.io/vgpu-node", "gpu-a"},
        {"hami.io/vgpu-time", stamp},
        {"hami.io/vgpu-devices-allocated", "gpu-a-gpu0,NVIDIA,4000,0:;"},
        {"hami.io/vgpu-devices-to-allocate", "gpu-a-gpu0,NVIDIA,4000,0:;"}};
    ASSERT_TRUE(server_.store().Create(pod));
  }
  StartService(std::chrono::hours(1));
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    co_await Ready();
    extender::Extender& c = service_->extender();
    // Not bound: their annotations charge nothing (docs/DECISIONS.md, "The ledger"); the sweep still
    // removes them.
    EXPECT_EQ(c.state().FindNode("gpu-a")->usage[0].mem.value(), 0);
    co_await c.ExpireReservations();  // too early for either, and for the lock
    EXPECT_EQ(c.stats().expired, 0u);
    EXPECT_FALSE(Annotation(Stored("nodes", "", "gpu-a"), "hami.io/mutex.lock").empty());
    // p2 is re-filtered (its decision rewritten) while the pod watch is down: the cache still shows the old
    // state, whose resourceVersion the expiry's compare-and-swap names, so p2's new decision stays.
    Fail500("GET", "/api/v1/pods", 1000000);
    server_.DropWatches();
    clock->Advance(121s);
    const std::string fresh = std::to_string(
        std::chrono::duration_cast<std::chrono::seconds>(clock->Now().time_since_epoch()).count());
    const json::value refiltered = {{"metadata", {{"annotations", {{"hami.io/vgpu-time", fresh}}}}}};
    EXPECT_TRUE(server_.store().Patch(*sim::FindResourceByName("pods"), "default", "p2",
                                      sim::PatchType::kMerge, refiltered));
    co_await c.ExpireReservations();
    EXPECT_EQ(c.stats().expired, 1u);
    EXPECT_EQ(Annotation(Stored("pods", "default", "p1"), "hami.io/vgpu-node"), std::string());
    EXPECT_EQ(Annotation(Stored("pods", "default", "p1"), "hami.io/vgpu-devices-to-allocate"), std::string());
    EXPECT_EQ(Annotation(Stored("pods", "default", "p2"), "hami.io/vgpu-node"), std::string("gpu-a"));
    EXPECT_EQ(Annotation(Stored("pods", "default", "p2"), "hami.io/vgpu-time"), fresh);
    EXPECT_EQ(c.state().FindNode("gpu-a")->usage[0].mem.value(), 0);
    EXPECT_EQ(Annotation(Stored("nodes", "", "gpu-a"), "hami.io/mutex.lock"), std::string());
    EXPECT_EQ(c.stats().abandoned_locks, 1u);
    server_.ClearFaults();
  }());
}

TEST_F(ControllerTest, MetricsUseHamiNamesAndCountDecisions) {
  cfg_.extender.legacy_metrics = true;
  ASSERT_TRUE(server_.store().Create(NvidiaNode("gpu-a", 1)));
  ASSERT_TRUE(server_.store().Create(GpuPod("p1", 3000)));
  StartService();
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    co_await Ready();
    const std::string args = FilterArgs("p1", {"gpu-a"});
    co_await Post("/filter", args);
    auto m = co_await Call(http::verb::get, "/metrics");
    EXPECT_EQ(m.content_type, std::string("text/plain; version=0.0.4; charset=utf-8"));
    for (const char* line :
         {"hami_gpu_memory_allocated_bytes{zone=\"vGPU\",node=\"gpu-a\",device_uuid=\"gpu-a-gpu0\","
          "device_index=\"0\",device_cores=\"100\",device_type=\"NVIDIA-T4\"} 3145728000",
          "hami_gpu_shared_count{zone=\"vGPU\",node=\"gpu-a\",device_uuid=\"gpu-a-gpu0\",device_index=\"0\","
          "device_type=\"NVIDIA-T4\"} 1",
          "hami_vgpu_memory_allocated_bytes{zone=\"vGPU\",namespace=\"default\",node=\"gpu-a\",pod=\"p1\","
          "container_index=\"0\",device_uuid=\"gpu-a-gpu0\"} 3145728000",
          "hami_scheduler_filter_decisions_total{result=\"scheduled\"} 1",
          "GPUDeviceMemoryAllocated{zone=\"vGPU\",nodeid=\"gpu-a\",deviceuuid=\"gpu-a-gpu0\",deviceidx=\"0\","
          "devicecores=\"100\",devicetype=\"NVIDIA-T4\"} 3145728000",
          "vGPUMemoryAllocated{zone=\"vGPU\",podnamespace=\"default\",nodename=\"gpu-a\",podname=\"p1\","
          "containeridx=\"0\",deviceuuid=\"gpu-a-gpu0\"} 3145728000",
          "hami_scheduler_filter_duration_seconds_count 1"}) {
      EXPECT_NE(m.body.find(line), std::string::npos) << line << "\n" << m.body;
    }
  }());
}

// The metrics listener serves /metrics, /healthz and /readyz and nothing else: /filter and /bind are only
// on the extender listener. /metrics shows the listeners' connection counters and the loop's exceptions.
TEST_F(ControllerTest, MetricsListenerHasNoExtenderRoutes) {
  cfg_.serving.metrics_bind_address =
      "127.0.0.2:0";  // "127.0.0.1:0", the extender's, would mean the same listener
  ASSERT_TRUE(server_.store().Create(NvidiaNode("gpu-a", 1)));
  StartService();
  auto metrics = MetricsClient();
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    co_await Ready();
    const auto call = [&](http::verb verb, const char* path) -> asio::awaitable<k8s::HttpResponse> {
      const k8s::HttpRequest req{verb, path, verb == http::verb::post ? "{}" : "", "application/json",
                                 "",   "t"};
      auto r = co_await metrics->Send(req, 10s);
      EXPECT_TRUE(r) << path;
      co_return r ? *r : k8s::HttpResponse{};
    };
    EXPECT_EQ((co_await call(http::verb::post, "/filter")).status, 404u);
    EXPECT_EQ((co_await call(http::verb::post, "/bind")).status, 404u);
    EXPECT_EQ((co_await call(http::verb::get, "/filter")).status, 404u);
    EXPECT_EQ((co_await call(http::verb::get, "/healthz")).status, 200u);
    EXPECT_EQ((co_await call(http::verb::get, "/readyz")).status, 200u);
    const k8s::HttpResponse m = co_await call(http::verb::get, "/metrics");
    EXPECT_EQ(m.status, 200u);
    for (const char* line :
         {"hami_http_connection_failures_total{listener=\"extender\"} 0",
          "hami_http_connection_failures_total{listener=\"metrics\"} 0",
          "hami_http_connections_refused_total{listener=\"metrics\"} 0",
          "hami_http_open_connections{listener=\"metrics\"} 1", "hami_event_loop_exceptions_total 0"}) {
      EXPECT_NE(m.body.find(line), std::string::npos) << line << "\n" << m.body;
    }
    // The extender listener keeps /metrics too.
    EXPECT_EQ((co_await Call(http::verb::get, "/metrics")).status, 200u);
  }());
}

// GET /api/explain/<ns>/<pod>, /api/nodes and /api/overview on the metrics listener (never on the
// extender's): why a pod is pending as the running scheduler sees it, and the devices as the ledger has them;
// and `hami-scheduler explain --server` reading the first.
TEST_F(ControllerTest, ExplainAPendingPodOnTheMetricsListener) {
  cfg_.serving.metrics_bind_address = "127.0.0.2:0";
  ASSERT_TRUE(server_.store().Create(NvidiaNode("gpu-a", 1)));
  ASSERT_TRUE(server_.store().Create(BoundGpuPod("held", "gpu-a", 12000)));
  ASSERT_TRUE(server_.store().Create(GpuPod("wants", 6000)));
  StartService();
  auto metrics = MetricsClient();
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    co_await Ready();
    const auto get = [&](const char* path) -> asio::awaitable<k8s::HttpResponse> {
      const k8s::HttpRequest req{http::verb::get, path, "", "", "", "t"};
      auto r = co_await metrics->Send(req, 10s);
      EXPECT_TRUE(r) << path;
      co_return r ? *r : k8s::HttpResponse{};
    };
    const k8s::HttpResponse e = co_await get("/api/explain/default/wants");
    EXPECT_EQ(e.status, 200u) << e.body;
    auto parsed = extender::ParseExplanation(e.body);
    EXPECT_TRUE(parsed) << (parsed ? "" : parsed.error().message);
    CO_ASSERT_TRUE(parsed);
    CO_ASSERT_EQ(parsed->nodes.size(), 1u);
    EXPECT_EQ(parsed->nodes[0].Summary(),
              "1/1 CardInsufficientMemory; c needs 6000 MiB on one card: the closest, gpu-a-gpu0, has "
              "4000 MiB free (2000 MiB short), cores 0/100 used");
    EXPECT_EQ((co_await get("/api/explain/default/nobody")).status, 404u);
    const k8s::HttpResponse bad = co_await get("/api/explain/default/Bad%0Aname");
    EXPECT_EQ(bad.status, 400u);
    EXPECT_EQ(bad.body.find('\n'), bad.body.size() - 1) << bad.body;  // the name shown escaped, one line
    EXPECT_EQ((co_await get("/api/elsewhere")).status, 404u);
    // A fit on every node each: at most 10 computed a second, then 429 (a window may begin mid-loop).
    unsigned last = 0;
    int asked = 0;
    while (last != 429u && asked < 25) {
      const std::string path = fmt::format("/api/explain/default/nobody-{}", asked++);
      last = (co_await get(path.c_str())).status;
    }
    EXPECT_EQ(last, 429u);
    EXPECT_GE(asked, 8) << "the limit is 10 a second; 3 were asked before";
    // The devices as the ledger has them.
    const k8s::HttpResponse nodes = co_await get("/api/nodes");
    EXPECT_EQ(nodes.status, 200u);
    EXPECT_NE(nodes.body.find(R"("id":"gpu-a-gpu0","vendor":"NVIDIA")"), std::string::npos) << nodes.body;
    EXPECT_NE(nodes.body.find(R"("memoryMiB":{"used":12000,"total":16000})"), std::string::npos)
        << nodes.body;
    const k8s::HttpResponse overview = co_await get("/api/overview");
    EXPECT_NE(overview.body.find(R"("vendor":"NVIDIA","nodes":1)"), std::string::npos) << overview.body;
    // Not on the extender listener.
    EXPECT_EQ((co_await Call(http::verb::get, "/api/explain/default/wants")).status, 404u);
    EXPECT_EQ((co_await Call(http::verb::get, "/api/nodes")).status, 404u);
    // No ResourceQuota in the namespace: the use shows, with no limit.
    const k8s::HttpResponse quotas = co_await get("/api/quotas");
    EXPECT_NE(quotas.body.find(R"({"namespace":"default","resource":"nvidia.com/gpumem","used":12000,)"
                               R"("limit":null})"),
              std::string::npos)
        << quotas.body;
  }());
  // The command against the running scheduler (its own event loop, as it runs from a shell).
  std::thread serving([&] { ioc_.run_for(std::chrono::seconds(5)); });
  std::ostringstream out, err;
  const int code = cmd::Run(
      {"explain", "default/wants", "--server", fmt::format("http://127.0.0.2:{}", service_->metrics_port())},
      out, err);
  ioc_.stop();
  serving.join();
  EXPECT_EQ(code, 0) << err.str();
  EXPECT_NE(out.str().find("gpu-a  1/1 CardInsufficientMemory; c needs 6000 MiB on one card"),
            std::string::npos)
      << out.str();
}

}  // namespace
}  // namespace hami
