// The kube-scheduler stand-in against the embedded API server and a fake extender (a Beast server whose
// /filter and /bind answers come from each test): what it sends, how it reads the answers, how it requeues,
// and that pods end up bound on the API server.
#include "sim/scheduler/kube_scheduler.h"

#include <gtest/gtest.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "k8s/api_client.h"
#include "k8s/extender.h"
#include "sim/apiserver/api_server.h"
#include "tests/support/run_coro.h"

namespace hami {
namespace {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using namespace std::chrono_literals;
using sim::PodOutcome;
using testing::Pause;
using testing::RunCoro;
using testing::WaitUntil;
using SteadyClock = std::chrono::steady_clock;

// ---- A fake extender.

struct Reply {
  unsigned status = 200;
  std::string body;
};

struct Received {
  std::string path;
  std::string content_type;
  json::value body;
  SteadyClock::time_point at;
};

class FakeExtender {
 public:
  using Handler = std::function<asio::awaitable<Reply>(const json::value& args)>;

  explicit FakeExtender(asio::io_context& ioc) : acceptor_(ioc, {asio::ip::make_address("127.0.0.1"), 0}) {
    asio::co_spawn(ioc, Accept(), asio::detached);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port()); }

  // Set before the stand-in starts: a running handler's captures live in these.
  Handler filter;
  Handler prioritize;
  Handler bind;

  std::vector<Received> Requests(const std::string& path) const {
    std::vector<Received> out;
    for (const auto& r : received_) {
      if (r.path == path) out.push_back(r);
    }
    return out;
  }
  // The /filter calls for one pod.
  std::size_t FiltersFor(const std::string& pod) const {
    std::size_t n = 0;
    for (const auto& r : Requests("/filter"))
      n += r.body.at("Pod").at("metadata").at("name") == json::value(pod);
    return n;
  }

 private:
  asio::awaitable<void> Accept() {
    for (;;) {
      auto [ec, socket] = co_await acceptor_.async_accept(asio::as_tuple(asio::use_awaitable));
      if (ec) co_return;
      asio::co_spawn(acceptor_.get_executor(), Session(std::move(socket)), asio::detached);
    }
  }

  asio::awaitable<void> Session(asio::ip::tcp::socket socket) {
    beast::tcp_stream stream(std::move(socket));
    beast::flat_buffer buffer;
    for (;;) {
      http::request<http::string_body> request;
      auto [ec, n] = co_await http::async_read(stream, buffer, request, asio::as_tuple(asio::use_awaitable));
      if (ec) co_return;
      const std::string path(request.target());
      boost::system::error_code parse_error;
      const json::value args = json::parse(request.body(), parse_error);
      received_.push_back(
          Received{path, std::string(request[http::field::content_type]), args, SteadyClock::now()});
      Reply reply{404, "{}"};
      if (path == "/filter" && filter) reply = co_await filter(args);
      if (path == "/prioritize" && prioritize) reply = co_await prioritize(args);
      if (path == "/bind" && bind) reply = co_await bind(args);
      http::response<http::string_body> response{static_cast<http::status>(reply.status), request.version()};
      response.set(http::field::content_type, "application/json");
      response.body() = reply.body;
      response.keep_alive(request.keep_alive());
      response.prepare_payload();
      auto [wec, wn] = co_await http::async_write(stream, response, asio::as_tuple(asio::use_awaitable));
      if (wec || !response.keep_alive()) co_return;
    }
  }

  asio::ip::tcp::acceptor acceptor_;
  std::vector<Received> received_;
};

// What a cooperative extender answers: the first candidate, in the form it was asked in.
Reply ChooseFirst(const json::value& args) {
  k8s::ExtenderFilterResult result;
  if (const auto& names = args.at("NodeNames"); names.is_array() && !names.as_array().empty()) {
    result.node_names = std::vector<std::string>{std::string(names.as_array().front().as_string())};
  } else if (const auto& nodes = args.at("Nodes"); nodes.is_object()) {
    result.nodes = std::vector<json::value>{nodes.at("items").as_array().front()};
  }
  return Reply{200, k8s::ToJson(result)};
}

Reply FilterReply(const k8s::ExtenderFilterResult& result) { return Reply{200, k8s::ToJson(result)}; }

json::value NodeJson(const std::string& name) {
  return json::object{
      {"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", name}, {"labels", {{"gpu", "yes"}}}}}};
}

json::value PodJson(const std::string& name, const std::string& scheduler, const std::string& node = "") {
  json::object spec{{"schedulerName", scheduler},
                    {"containers", json::array{json::object{{"name", "c"}, {"image", "x"}}}}};
  if (!node.empty()) spec["nodeName"] = node;
  return json::object{{"apiVersion", "v1"},
                      {"kind", "Pod"},
                      {"metadata", {{"name", name}, {"namespace", "default"}}},
                      {"spec", std::move(spec)}};
}

class StandIn : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto port = server_.Start().value();
    k8s::RestConfig cfg = k8s::LoopbackHttp(port);
    k8s::ClientOptions co;
    co.qps = 0;
    co.backoff_initial = 2ms;
    co.backoff_max = 20ms;
    client_ = k8s::ApiClient::Create(ioc_.get_executor(), cfg, co).value();
    options_.extender_url = extender_.url();
    options_.initial_backoff = 10ms;
    options_.max_backoff = 40ms;
    extender_.filter = [](const json::value& args) -> asio::awaitable<Reply> { co_return ChooseFirst(args); };
    extender_.bind = [this](const json::value& args) -> asio::awaitable<Reply> {
      co_return co_await BindOnServer(args);
    };
  }

  void TearDown() override {
    if (standin_) {
      stop_.emit(asio::cancellation_type::terminal);
      const std::function<bool()> ended = [this] { return ended_; };
      RunCoro(ioc_, [&]() -> asio::awaitable<void> { EXPECT_TRUE(co_await WaitUntil(ended)); }());
    }
    server_.Stop();
  }

  void Start() {
    standin_ = std::make_unique<sim::KubeSchedulerStandIn>(*client_, options_);
    standin_->on_outcome = [this](const PodOutcome& o) { messages_[o.key].push_back(o.message); };
    asio::co_spawn(ioc_, standin_->Run(),
                   asio::bind_cancellation_slot(stop_.slot(), [this](std::exception_ptr) { ended_ = true; }));
  }

  // The extender's real work for /bind: the binding subresource on the API server.
  asio::awaitable<Reply> BindOnServer(const json::value& args) {
    const std::string ns(args.at("PodNamespace").as_string());
    const std::string name(args.at("PodName").as_string());
    const std::string uid(args.at("PodUID").as_string());
    const std::string node(args.at("Node").as_string());
    auto bound = co_await client_->Bind(ns, name, uid, node);
    co_return Reply{200, k8s::BindingResultJson(bound ? "" : bound.error().message)};
  }

  asio::awaitable<void> CreateNode(const std::string& name) {
    const std::string path = "/api/v1/nodes";
    const json::value node = NodeJson(name);
    EXPECT_TRUE(co_await client_->Create(path, node)) << name;
  }
  asio::awaitable<void> CreatePod(const std::string& name, const std::string& scheduler = "hami-scheduler",
                                  const std::string& node = "") {
    const std::string path = "/api/v1/namespaces/default/pods";
    const json::value pod = PodJson(name, scheduler, node);
    EXPECT_TRUE(co_await client_->Create(path, pod)) << name;
  }
  asio::awaitable<std::string> NodeOnServer(const std::string& pod) {
    const std::string path = k8s::PathFor("v1", "pods", "default", pod);
    auto got = co_await client_->Get(path);
    co_return got ? std::string(got->at("spec").as_object().contains("nodeName")
                                    ? got->at("spec").at("nodeName").as_string()
                                    : "")
                  : "";
  }
  asio::awaitable<std::vector<json::value>> Events() {
    const std::string path = "/api/v1/namespaces/default/events";
    const k8s::ListOptions lo;
    auto list = co_await client_->List(path, lo);
    std::vector<json::value> out;
    if (list) out.assign(list->list.at("items").as_array().begin(), list->list.at("items").as_array().end());
    co_return out;
  }

  const PodOutcome* Outcome(const std::string& pod) const {
    auto it = standin_->outcomes().find("default/" + pod);
    return it == standin_->outcomes().end() ? nullptr : &it->second;
  }
  std::function<bool()> InState(const std::string& pod, PodOutcome::State state) const {
    return [this, pod, state] {
      const auto* o = Outcome(pod);
      return o != nullptr && o->state == state;
    };
  }
  bool Saw(const std::string& pod, const std::string& message) const {
    auto it = messages_.find("default/" + pod);
    if (it == messages_.end()) return false;
    return std::find(it->second.begin(), it->second.end(), message) != it->second.end();
  }

  asio::io_context ioc_;
  sim::ApiServer server_{ioc_};
  FakeExtender extender_{ioc_};
  std::unique_ptr<k8s::ApiClient> client_;
  sim::StandInOptions options_;
  std::unique_ptr<sim::KubeSchedulerStandIn> standin_;
  asio::cancellation_signal stop_;
  bool ended_ = false;
  std::map<std::string, std::vector<std::string>> messages_;  // every message published, per pod
};

// ---- The wire functions.

TEST(StandInWire, FilterArgsAreWhatTheExtenderParses) {
  const json::value pod = PodJson("p", "hami-scheduler");
  const auto by_names = json::parse(sim::FilterArgsWithNodeNames(pod, {"a", "b"})).as_object();
  EXPECT_EQ(by_names.size(), 3u);
  EXPECT_TRUE(by_names.at("Nodes").is_null());
  EXPECT_EQ(by_names.at("NodeNames"), (json::array{"a", "b"}));
  EXPECT_EQ(by_names.at("Pod"), pod);
  auto parsed = k8s::ParseExtenderArgs(sim::FilterArgsWithNodeNames(pod, {"a", "b"}));
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_EQ(parsed->node_names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(parsed->pod.name, "p");

  const std::vector<json::value> nodes{NodeJson("a")};
  const auto by_nodes = json::parse(sim::FilterArgsWithNodes(pod, nodes)).as_object();
  EXPECT_TRUE(by_nodes.at("NodeNames").is_null());
  EXPECT_EQ(by_nodes.at("Nodes"),
            (json::object{{"metadata", json::object{}}, {"items", json::array{nodes[0]}}}));
  auto parsed_nodes = k8s::ParseExtenderArgs(sim::FilterArgsWithNodes(pod, nodes));
  ASSERT_TRUE(parsed_nodes) << parsed_nodes.error().message;
  ASSERT_TRUE(parsed_nodes->nodes);
  EXPECT_EQ(parsed_nodes->nodes->at(0), "a");

  const k8s::ExtenderBindingArgs bind{"p", "ns", "uid-1", "a"};
  auto back = k8s::ParseBindingArgs(sim::BindingArgsJson(bind));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->pod_name, "p");
  EXPECT_EQ(back->pod_namespace, "ns");
  EXPECT_EQ(back->pod_uid, "uid-1");
  EXPECT_EQ(back->node, "a");
}

TEST(StandInWire, ReadsFilterResultsLikeGo) {
  k8s::ExtenderFilterResult sent;
  sent.node_names = std::vector<std::string>{"a"};
  sent.failed_nodes = {{"b", "too small"}};
  sent.failed_and_unresolvable = {{"c", "node unregistered"}};
  auto round = sim::ParseFilterResult(k8s::ToJson(sent));
  ASSERT_TRUE(round) << round.error().message;
  EXPECT_EQ(round->node_names, sent.node_names);
  EXPECT_EQ(round->failed_nodes, sent.failed_nodes);
  EXPECT_EQ(round->failed_and_unresolvable, sent.failed_and_unresolvable);
  EXPECT_FALSE(round->nodes);

  // Keys in any case, absent and null alike.
  auto lower = sim::ParseFilterResult(R"({"nodenames":["x"],"failedNodes":null,"error":""})");
  ASSERT_TRUE(lower) << lower.error().message;
  EXPECT_EQ(lower->node_names, (std::vector<std::string>{"x"}));
  auto error = sim::ParseFilterResult(R"({"Error":"boom"})");
  ASSERT_TRUE(error);
  EXPECT_EQ(error->error, "boom");
  EXPECT_FALSE(error->node_names);

  EXPECT_FALSE(sim::ParseFilterResult(""));
  EXPECT_FALSE(sim::ParseFilterResult("[]"));
  EXPECT_FALSE(sim::ParseFilterResult(R"({"NodeNames":"a"})"));
  EXPECT_FALSE(sim::ParseFilterResult(R"({"FailedNodes":{"a":1}})"));
  EXPECT_FALSE(sim::ParseFilterResult(R"({"Nodes":{"items":3}})"));

  auto bound = sim::ParseBindingResult(R"({"Error":""})");
  ASSERT_TRUE(bound);
  EXPECT_EQ(*bound, "");
  EXPECT_EQ(sim::ParseBindingResult(R"({"error":"locked"})").value(), "locked");
  EXPECT_FALSE(sim::ParseBindingResult("{"));
}

TEST(StandInWire, KeepsOnlyInputNodesAndMergesReasons) {
  k8s::ExtenderFilterResult r;
  r.node_names = std::vector<std::string>{"b"};
  r.failed_nodes = {{"a", "x"}, {"c", "y"}};
  r.failed_and_unresolvable = {{"c", "z"}};
  auto v = sim::ReadFilterResult(r, {"a", "b", "c"}, true);
  EXPECT_EQ(v.error, "");
  EXPECT_EQ(v.feasible, (std::vector<std::string>{"b"}));
  EXPECT_EQ(v.failed_nodes, (std::map<std::string, std::string>{{"a", "x"}, {"c", "z"}}));

  r.node_names = std::vector<std::string>{"ghost"};
  v = sim::ReadFilterResult(r, {"a", "b", "c"}, true);
  EXPECT_EQ(v.error, "extender claims a filtered node \"ghost\" which is not found in the input node list");
  EXPECT_TRUE(v.feasible.empty());

  k8s::ExtenderFilterResult by_nodes;
  by_nodes.nodes = std::vector<json::value>{NodeJson("b")};
  EXPECT_EQ(sim::ReadFilterResult(by_nodes, {"a", "b"}, false).feasible, (std::vector<std::string>{"b"}));
  by_nodes.nodes = std::vector<json::value>{NodeJson("z")};
  EXPECT_NE(sim::ReadFilterResult(by_nodes, {"a", "b"}, false).error, "");

  k8s::ExtenderFilterResult failed;
  failed.error = "cache not synced";
  EXPECT_EQ(sim::ReadFilterResult(failed, {"a"}, true).error, "cache not synced");
  EXPECT_TRUE(
      sim::ReadFilterResult(k8s::ExtenderFilterResult{}, {"a"}, true).feasible.empty());  // null: none
}

TEST(StandInWire, UnschedulableMessageCountsReasonsSorted) {
  EXPECT_EQ(sim::UnschedulableMessage(4, {{"n1", "B"}, {"n2", "A"}, {"n3", "B"}}),
            "0/4 nodes are available: 1 A, 2 B.");
  EXPECT_EQ(sim::UnschedulableMessage(2, {}), "0/2 nodes are available.");
}

TEST(StandInWire, EventIsACoreV1WarningOnThePod) {
  json::value pod = PodJson("gpu", "hami-scheduler");
  pod.at("metadata").as_object()["uid"] = "u-1";
  pod.at("metadata").as_object()["resourceVersion"] = "7";
  const auto at = std::chrono::system_clock::time_point(std::chrono::seconds(1'700'000'000));
  const json::value e =
      sim::FailedSchedulingEvent(pod, "0/1 nodes are available: 1 A.", "hami-scheduler", at);
  EXPECT_EQ(e.at("metadata").at("name"), "gpu.17979cfe362a0000");
  EXPECT_EQ(e.at("metadata").at("namespace"), "default");
  EXPECT_EQ(e.at("involvedObject"), (json::object{{"kind", "Pod"},
                                                  {"namespace", "default"},
                                                  {"name", "gpu"},
                                                  {"uid", "u-1"},
                                                  {"apiVersion", "v1"},
                                                  {"resourceVersion", "7"}}));
  EXPECT_EQ(e.at("reason"), "FailedScheduling");
  EXPECT_EQ(e.at("type"), "Warning");
  EXPECT_EQ(e.at("source").at("component"), "hami-scheduler");
  EXPECT_EQ(e.at("firstTimestamp"), "2023-11-14T22:13:20Z");
  EXPECT_EQ(e.at("count"), 1);
}

TEST(StandInWire, ExtenderUrls) {
  auto plain = sim::ParseExtenderUrl("http://127.0.0.1:8080/");
  ASSERT_TRUE(plain) << plain.error().message;
  EXPECT_EQ(plain->url, "http://127.0.0.1:8080");
  EXPECT_EQ(plain->VerbUrl("filter"), "http://127.0.0.1:8080/filter");
  EXPECT_EQ(plain->VerbTarget("bind"), "/bind");
  EXPECT_FALSE(plain->config.tls());

  auto tls = sim::ParseExtenderUrl("https://[::1]/scheduler/");
  ASSERT_TRUE(tls) << tls.error().message;
  EXPECT_EQ(tls->config.host, "::1");
  EXPECT_EQ(tls->config.port, "443");
  EXPECT_TRUE(tls->config.insecure_skip_tls_verify);
  EXPECT_EQ(tls->VerbTarget("filter"), "/scheduler/filter");

  EXPECT_FALSE(sim::ParseExtenderUrl("127.0.0.1:80"));
  EXPECT_FALSE(sim::ParseExtenderUrl("ftp://host"));
  EXPECT_FALSE(sim::ParseExtenderUrl("http://host:99999"));
  EXPECT_FALSE(sim::ParseExtenderUrl("http://host:80/x?y=1"));
}

// ---- Against the API server and the fake extender.

TEST_F(StandIn, FiltersOnlyItsPendingPodsAndBindsThem) {
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        co_await CreateNode("n1");
        co_await CreateNode("n2");
        co_await CreatePod("mine");
        co_await CreatePod("theirs", "default-scheduler");
        co_await CreatePod("placed", "hami-scheduler", "n2");
        Start();
        const auto mine_bound = InState("mine", PodOutcome::State::kBound);
        CO_ASSERT_TRUE(co_await WaitUntil(mine_bound));
        EXPECT_EQ(co_await NodeOnServer("mine"), "n1");
        EXPECT_EQ(Outcome("mine")->node, "n1");
        EXPECT_EQ(Outcome("mine")->attempts, 1);

        const auto filters = extender_.Requests("/filter");
        CO_ASSERT_EQ(filters.size(), 1u);
        EXPECT_EQ(filters[0].content_type, "application/json");
        const json::object& args = filters[0].body.as_object();
        EXPECT_EQ(args.size(), 3u);
        EXPECT_TRUE(args.at("Nodes").is_null());
        EXPECT_EQ(args.at("NodeNames"), (json::array{"n1", "n2"}));
        EXPECT_EQ(args.at("Pod").at("metadata").at("name"), "mine");
        const std::string uid(args.at("Pod").at("metadata").at("uid").as_string());
        EXPECT_FALSE(uid.empty());

        const auto binds = extender_.Requests("/bind");
        CO_ASSERT_EQ(binds.size(), 1u);
        EXPECT_EQ(binds[0].content_type, "application/json");
        EXPECT_EQ(binds[0].body,
                  (json::object{
                      {"PodName", "mine"}, {"PodNamespace", "default"}, {"PodUID", uid}, {"Node", "n1"}}));

        // A bound pod has left the queue: the next pod is the only one filtered.
        co_await CreatePod("next");
        const auto next_bound = InState("next", PodOutcome::State::kBound);
        CO_ASSERT_TRUE(co_await WaitUntil(next_bound));
        EXPECT_EQ(extender_.FiltersFor("mine"), 1u);
        EXPECT_EQ(extender_.FiltersFor("next"), 1u);
        EXPECT_EQ(extender_.FiltersFor("theirs"), 0u);
        EXPECT_EQ(extender_.FiltersFor("placed"), 0u);
        EXPECT_EQ(standin_->outcomes().size(), 2u);
        EXPECT_EQ(standin_->stats().filters, 2u);
        EXPECT_EQ(standin_->stats().binds, 2u);
        EXPECT_EQ(standin_->stats().bind_failures, 0u);
      }(),
      20s);
}

TEST(StandInWire, HostPriorityListAndTheHighestScore) {
  auto scores = sim::ParseHostPriorityList(R"([{"Host":"a","Score":3},{"host":"b","score":10}])");
  ASSERT_TRUE(scores) << scores.error().message;
  EXPECT_EQ(*scores, (std::vector<std::pair<std::string, std::int64_t>>{{"a", 3}, {"b", 10}}));
  EXPECT_EQ(sim::HighestScored({"a", "b", "c"}, *scores), "b");
  EXPECT_EQ(sim::HighestScored({"a", "c"}, {{"c", 0}}), "a");  // ties: the first; unscored counts 0
  EXPECT_FALSE(sim::ParseHostPriorityList(R"({"Host":"a"})"));
  EXPECT_FALSE(sim::ParseHostPriorityList(R"([{"Host":"a","Score":"high"}])"));
  EXPECT_FALSE(sim::ParseHostPriorityList("not json"));
}

TEST_F(StandIn, AsksPrioritizeWhenSeveralNodesPassAndTakesTheHighestScore) {
  options_.prioritize = true;
  extender_.filter = [](const json::value& args) -> asio::awaitable<Reply> {
    k8s::ExtenderFilterResult r;
    r.node_names.emplace();
    for (const auto& n : args.at("NodeNames").as_array()) r.node_names->emplace_back(n.as_string());
    co_return FilterReply(r);
  };
  extender_.prioritize = [](const json::value&) -> asio::awaitable<Reply> {
    co_return Reply{200, R"([{"Host":"n1","Score":1},{"Host":"n2","Score":9}])"};
  };
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        co_await CreateNode("n1");
        co_await CreateNode("n2");
        co_await CreatePod("p");
        Start();
        const auto bound = InState("p", PodOutcome::State::kBound);
        CO_ASSERT_TRUE(co_await WaitUntil(bound));
        EXPECT_EQ(co_await NodeOnServer("p"), "n2");
        const auto asked = extender_.Requests("/prioritize");
        CO_ASSERT_EQ(asked.size(), 1u);
        EXPECT_EQ(asked[0].body.at("NodeNames"), (json::array{"n1", "n2"}));
      }(),
      20s);
}

TEST_F(StandIn, SendsWholeNodesWhenNotNodeCacheCapable) {
  options_.node_cache_capable = false;
  extender_.filter = [](const json::value& args) -> asio::awaitable<Reply> {
    k8s::ExtenderFilterResult r;
    r.nodes = std::vector<json::value>{args.at("Nodes").at("items").as_array().back()};
    r.failed_nodes = {{"n1", "not this one"}};
    co_return FilterReply(r);
  };
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        co_await CreateNode("n1");
        co_await CreateNode("n2");
        co_await CreatePod("p");
        Start();
        const auto bound = InState("p", PodOutcome::State::kBound);
        CO_ASSERT_TRUE(co_await WaitUntil(bound));
        EXPECT_EQ(co_await NodeOnServer("p"), "n2");
        const auto filters = extender_.Requests("/filter");
        CO_ASSERT_EQ(filters.size(), 1u);
        const json::object& args = filters[0].body.as_object();
        EXPECT_TRUE(args.at("NodeNames").is_null());
        EXPECT_EQ(args.at("Nodes").at("metadata"), json::object{});
        const json::array& items = args.at("Nodes").at("items").as_array();
        CO_ASSERT_EQ(items.size(), 2u);
        EXPECT_EQ(items[0].at("metadata").at("name"), "n1");
        EXPECT_EQ(items[1].at("metadata").at("name"), "n2");
        EXPECT_EQ(items[1].at("metadata").at("labels").at("gpu"), "yes");  // whole objects, as watched
        EXPECT_TRUE(items[1].at("metadata").as_object().contains("resourceVersion"));
      }(),
      20s);
}

TEST_F(StandIn, UnschedulablePodGetsAnEventAndIsRetriedWhenANodeIsAdded) {
  // A long backoff: only cluster events can bring the pod back in this test's time.
  options_.initial_backoff = 60s;
  options_.max_backoff = 60s;
  extender_.filter = [](const json::value& args) -> asio::awaitable<Reply> {
    k8s::ExtenderFilterResult r;
    r.node_names = std::vector<std::string>{};
    for (const auto& n : args.at("NodeNames").as_array()) {
      if (n == "n3") r.node_names->push_back("n3");
    }
    if (r.node_names->empty()) {
      r.failed_nodes = {{"n1", "insufficient GPU memory"}};
      r.failed_and_unresolvable = {{"n2", "node unregistered"}};
    }
    co_return FilterReply(r);
  };
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        co_await CreateNode("n1");
        co_await CreateNode("n2");
        co_await CreatePod("gpu");
        Start();
        const std::string message =
            "0/2 nodes are available: 1 insufficient GPU memory, 1 node unregistered.";
        const std::function<bool()> reported = [&] {
          return InState("gpu", PodOutcome::State::kUnschedulable)() && standin_->stats().events == 1;
        };
        CO_ASSERT_TRUE(co_await WaitUntil(reported));
        EXPECT_EQ(Outcome("gpu")->message, message);
        EXPECT_EQ(Outcome("gpu")->failed_nodes,
                  (std::map<std::string, std::string>{{"n1", "insufficient GPU memory"},
                                                      {"n2", "node unregistered"}}));
        auto events = co_await Events();
        CO_ASSERT_EQ(events.size(), 1u);
        const auto& e = events[0];
        EXPECT_EQ(e.at("reason"), "FailedScheduling");
        EXPECT_EQ(e.at("type"), "Warning");
        EXPECT_EQ(e.at("message"), json::value(message));
        EXPECT_EQ(e.at("source").at("component"), "hami-scheduler");
        EXPECT_EQ(e.at("involvedObject").at("kind"), "Pod");
        EXPECT_EQ(e.at("involvedObject").at("name"), "gpu");
        EXPECT_EQ(e.at("involvedObject").at("uid"),
                  extender_.Requests("/filter")[0].body.at("Pod").at("metadata").at("uid"));

        // A node update requeues at once; the same reasons within 10 s make no second event.
        const std::string n1 = "/api/v1/nodes/n1";
        const json::value label = json::parse(R"({"metadata":{"labels":{"touched":"yes"}}})");
        EXPECT_TRUE(co_await client_->MergePatch(n1, label));
        const std::function<bool()> retried = [&] {
          return Outcome("gpu")->attempts == 2 && standin_->stats().events_suppressed == 1;
        };
        CO_ASSERT_TRUE(co_await WaitUntil(retried));

        co_await CreateNode("n3");
        const auto bound = InState("gpu", PodOutcome::State::kBound);
        CO_ASSERT_TRUE(co_await WaitUntil(bound));
        EXPECT_EQ(co_await NodeOnServer("gpu"), "n3");
        EXPECT_EQ(Outcome("gpu")->attempts, 3);
        EXPECT_EQ(extender_.Requests("/filter").back().body.at("NodeNames"), (json::array{"n1", "n2", "n3"}));
        EXPECT_EQ((co_await Events()).size(), 1u);
        EXPECT_EQ(standin_->stats().unschedulable, 2u);
      }(),
      20s);
}

TEST_F(StandIn, ExtenderErrorsAreRetriedWithCappedExponentialBackoff) {
  options_.initial_backoff = 10ms;
  options_.max_backoff = 20ms;
  int calls = 0;
  extender_.filter = [&calls](const json::value& args) -> asio::awaitable<Reply> {
    ++calls;
    if (calls <= 2 || (calls >= 5 && calls <= 6)) co_return Reply{500, "internal error"};
    if (calls <= 4) co_return Reply{200, R"({"NodeNames":null,"Error":"node cache not synced"})"};
    co_return ChooseFirst(args);
  };
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        co_await CreateNode("n1");
        co_await CreatePod("p");
        Start();
        const auto bound = InState("p", PodOutcome::State::kBound);
        CO_ASSERT_TRUE(co_await WaitUntil(bound));
        EXPECT_EQ(Outcome("p")->attempts, 7);
        EXPECT_EQ(standin_->stats().filter_errors, 6u);
        EXPECT_TRUE(Saw("p", "failed filter with extender at URL " + extender_.url() + "/filter, code 500"));
        EXPECT_TRUE(Saw("p", "node cache not synced"));

        // Gaps of at least 10, 20, 20, ... ms (doubling, capped), and never the uncapped 40, 80, 160.
        const auto filters = extender_.Requests("/filter");
        CO_ASSERT_EQ(filters.size(), 7u);
        const std::vector<std::chrono::milliseconds> least{10ms, 20ms, 20ms, 20ms, 20ms, 20ms};
        for (std::size_t i = 0; i + 1 < filters.size(); ++i) {
          const auto gap = filters[i + 1].at - filters[i].at;
          EXPECT_GE(gap, least[i] * 8 / 10) << "gap " << i;
        }
        EXPECT_LT(filters.back().at - filters[filters.size() - 2].at, 150ms);
      }(),
      20s);
}

TEST_F(StandIn, ANodeOutsideTheInputIsAnError) {
  int calls = 0;
  extender_.filter = [&calls](const json::value& args) -> asio::awaitable<Reply> {
    if (++calls == 1) co_return Reply{200, R"({"NodeNames":["ghost"],"Error":""})"};
    co_return ChooseFirst(args);
  };
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        co_await CreateNode("n1");
        co_await CreatePod("p");
        Start();
        const auto bound = InState("p", PodOutcome::State::kBound);
        CO_ASSERT_TRUE(co_await WaitUntil(bound));
        EXPECT_TRUE(
            Saw("p", "extender claims a filtered node \"ghost\" which is not found in the input node list"));
        EXPECT_EQ(standin_->stats().filter_errors, 1u);
        CO_ASSERT_EQ(extender_.Requests("/bind").size(), 1u);  // never for the ghost
        EXPECT_EQ(extender_.Requests("/bind")[0].body.at("Node"), "n1");
      }(),
      20s);
}

TEST_F(StandIn, AFailedBindRequeuesThePodUntilABindSucceeds) {
  int calls = 0;
  extender_.bind = [this, &calls](const json::value& args) -> asio::awaitable<Reply> {
    ++calls;
    if (calls == 1) co_return Reply{200, k8s::BindingResultJson("node n1 is locked by default/other")};
    if (calls == 2) co_return Reply{500, "{}"};
    co_return co_await BindOnServer(args);
  };
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        co_await CreateNode("n1");
        co_await CreatePod("p");
        Start();
        const auto bound = InState("p", PodOutcome::State::kBound);
        CO_ASSERT_TRUE(co_await WaitUntil(bound));
        EXPECT_EQ(co_await NodeOnServer("p"), "n1");
        EXPECT_TRUE(Saw("p", "node n1 is locked by default/other"));
        EXPECT_TRUE(Saw("p", "failed bind with extender at URL " + extender_.url() + "/bind, code 500"));
        EXPECT_EQ(standin_->stats().bind_failures, 2u);
        EXPECT_EQ(standin_->stats().binds, 1u);
        EXPECT_EQ(standin_->stats().filters, 3u);  // each failed bind runs a new scheduling cycle
        const std::function<bool()> both_reported = [&] { return standin_->stats().events == 2; };
        CO_ASSERT_TRUE(co_await WaitUntil(both_reported));
        auto events = co_await Events();
        CO_ASSERT_EQ(events.size(), 2u);
        std::vector<std::string> texts;
        for (const auto& e : events) texts.emplace_back(e.at("message").as_string());
        std::sort(texts.begin(), texts.end());
        EXPECT_EQ(texts[0], "binding rejected: failed bind with extender at URL " + extender_.url() +
                                "/bind, code 500");
        EXPECT_EQ(texts[1], "binding rejected: node n1 is locked by default/other");
      }(),
      20s);
}

TEST_F(StandIn, TwentyPodsBindConcurrentlyWithinTheLimit) {
  options_.max_binds_in_flight = 4;
  int in_flight = 0, most = 0;
  extender_.bind = [this, &in_flight, &most](const json::value& args) -> asio::awaitable<Reply> {
    most = std::max(most, ++in_flight);
    co_await Pause(50ms);  // a bind waits on node locks in the real extender
    Reply reply = co_await BindOnServer(args);
    --in_flight;
    co_return reply;
  };
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        co_await CreateNode("n1");
        co_await CreateNode("n2");
        for (int i = 0; i < 20; ++i) {
          const std::string name = "p" + std::to_string(i);
          co_await CreatePod(name);
        }
        Start();
        const std::function<bool()> all_bound = [&] {
          if (standin_->outcomes().size() != 20) return false;
          for (const auto& [key, o] : standin_->outcomes()) {
            if (o.state != PodOutcome::State::kBound) return false;
          }
          return true;
        };
        CO_ASSERT_TRUE(co_await WaitUntil(all_bound, 15s));
        EXPECT_EQ(most, 4);
        EXPECT_EQ(standin_->stats().max_binds_seen, 4u);
        EXPECT_EQ(standin_->stats().binds, 20u);
        EXPECT_EQ(standin_->stats().filters, 20u);
        for (int i = 0; i < 20; ++i) {
          const std::string name = "p" + std::to_string(i);
          EXPECT_EQ(co_await NodeOnServer(name), "n1") << name;
        }
      }(),
      30s);
}

TEST_F(StandIn, DeletedAndOtherwiseBoundPodsLeaveTheQueue) {
  options_.initial_backoff = 60s;
  options_.max_backoff = 60s;
  extender_.filter = [](const json::value& args) -> asio::awaitable<Reply> {
    if (args.at("Pod").at("metadata").at("name") == "later") co_return ChooseFirst(args);
    k8s::ExtenderFilterResult r;
    r.node_names = std::vector<std::string>{};
    r.failed_nodes = {{"n1", "too small"}};
    co_return FilterReply(r);
  };
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        co_await CreateNode("n1");
        co_await CreatePod("elsewhere");
        co_await CreatePod("gone");
        Start();
        const std::function<bool()> both_unschedulable = [&] {
          return InState("elsewhere", PodOutcome::State::kUnschedulable)() &&
                 InState("gone", PodOutcome::State::kUnschedulable)();
        };
        CO_ASSERT_TRUE(co_await WaitUntil(both_unschedulable));

        // Someone else binds one; the other is deleted (a cluster event: what is still queued is retried).
        const std::string ns = "default", name = "elsewhere", node = "n1";
        const std::string path = k8s::PathFor("v1", "pods", ns, name);
        const auto pod = co_await client_->Get(path);
        CO_ASSERT_TRUE(pod);
        const std::string uid(pod->at("metadata").at("uid").as_string());
        EXPECT_TRUE(co_await client_->Bind(ns, name, uid, node));
        const auto bound_elsewhere = InState("elsewhere", PodOutcome::State::kBound);
        CO_ASSERT_TRUE(co_await WaitUntil(bound_elsewhere));
        EXPECT_EQ(Outcome("elsewhere")->node, "n1");
        EXPECT_EQ(Outcome("elsewhere")->message, "bound by another binder");

        const std::string gone = k8s::PathFor("v1", "pods", "default", "gone");
        EXPECT_TRUE(co_await client_->Delete(gone));
        const auto deleted = InState("gone", PodOutcome::State::kDeleted);
        CO_ASSERT_TRUE(co_await WaitUntil(deleted));

        co_await CreatePod("later");
        const auto later_bound = InState("later", PodOutcome::State::kBound);
        CO_ASSERT_TRUE(co_await WaitUntil(later_bound));
        EXPECT_EQ(extender_.FiltersFor("elsewhere"), 1u);
        EXPECT_EQ(extender_.FiltersFor("gone"), 1u);
        EXPECT_EQ(extender_.Requests("/bind").size(), 1u);
      }(),
      20s);
}

}  // namespace
}  // namespace hami
