// The in-memory API server: pure pieces (selectors, patches, Store) directly, and the HTTP surface over real
// loopback connections with a small Beast client. Every coroutine runs with a time budget; nothing sleeps.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <set>
#include <sstream>
#include <string>

#include "cmd/sim_apiserver.h"
#include "k8s/api_client.h"
#include "k8s/files.h"
#include "k8s/json_patch.h"
#include "k8s/objects.h"
#include "k8s/rest_config.h"
#include "sim/apiserver/api_server.h"
#include "sim/apiserver/patch.h"
#include "sim/apiserver/protobuf.h"
#include "sim/apiserver/selector.h"
#include "sim/apiserver/store.h"
#include "tests/support/hostile_http.h"
#include "tests/support/run_coro.h"
#include "tests/support/test_certs.h"

#ifndef HAMI_SOURCE_DIR
#define HAMI_SOURCE_DIR "."
#endif

namespace hami::sim {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

// ---------------------------------------------------------------------------------------------------------
// Test support

using hami::testing::RunCoro;
using k8s::JsonEqual;

json::value Parse(std::string_view text) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  return ec ? json::value() : v;
}

// Walks a path of keys and indexes ("metadata", "name"); null if anything is missing.
const json::value* At(const json::value& v, std::initializer_list<std::string_view> path) {
  const json::value* cur = &v;
  for (std::string_view key : path) {
    if (const json::object* o = cur->if_object()) {
      cur = o->if_contains(key);
    } else if (const json::array* a = cur->if_array()) {
      const std::size_t i = std::stoul(std::string(key));
      cur = i < a->size() ? &(*a)[i] : nullptr;
    } else {
      cur = nullptr;
    }
    if (!cur) return nullptr;
  }
  return cur;
}

std::string Str(const json::value& v, std::initializer_list<std::string_view> path) {
  const json::value* f = At(v, path);
  if (!f) return "<missing>";
  if (f->is_string()) return std::string(f->get_string());
  return json::serialize(*f);
}

std::string Str(const ObjectPtr& o, std::initializer_list<std::string_view> path) {
  return o ? Str(json::value(*o), path) : "<null>";
}

std::vector<std::string> Names(const json::value& list) {
  std::vector<std::string> out;
  if (const json::value* items = At(list, {"items"}); items && items->is_array()) {
    for (const auto& i : items->as_array()) out.push_back(Str(i, {"metadata", "name"}));
  }
  return out;
}

std::string Pod(std::string_view name, std::string_view labels = "{}", std::string_view node = "") {
  return fmt::format(R"({{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{}","labels":{}}},
      "spec":{{"containers":[{{"name":"c","image":"busybox"}}]{}}}}})",
                     name, labels, node.empty() ? "" : fmt::format(R"(,"nodeName":"{}")", node));
}

json::object PodObject(std::string_view name, std::string_view ns = "default",
                       std::string_view labels = "{}") {
  json::object o = Parse(Pod(name, labels)).as_object();
  o["metadata"].as_object()["namespace"] = ns;
  return o;
}

struct Response {
  unsigned status = 0;
  std::string body;
  std::string content_type;
  std::string retry_after;
  json::value Json() const { return Parse(body); }
};

// A keep-alive HTTP/1.1 client over one loopback connection.
class Client {
 public:
  explicit Client(std::uint16_t port) : port_(port) {}

  asio::awaitable<Response> Send(http::verb method, std::string target, std::string body = {},
                                 std::string content_type = "application/json",
                                 std::string accept = "application/json") {
    if (!stream_) co_await Connect();
    http::request<http::string_body> req{method, target, 11};
    req.set(http::field::host, fmt::format("127.0.0.1:{}", port_));
    req.set(http::field::accept, accept);
    if (!body.empty() || method == http::verb::post || method == http::verb::put ||
        method == http::verb::patch) {
      req.set(http::field::content_type, content_type);
      req.body() = std::move(body);
    }
    req.prepare_payload();
    stream_->expires_after(5s);
    co_await http::async_write(*stream_, req, asio::use_awaitable);
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 * 1024 * 1024);
    co_await http::async_read(*stream_, buffer_, parser, asio::use_awaitable);
    const auto& res = parser.get();
    Response r{res.result_int(), res.body(), std::string(res[http::field::content_type]),
               std::string(res[http::field::retry_after])};
    if (!res.keep_alive()) stream_.reset();
    ++requests_;
    co_return r;
  }

  asio::awaitable<Response> Get(std::string target, std::string accept = "application/json") {
    return Send(http::verb::get, std::move(target), {}, "application/json", std::move(accept));
  }
  asio::awaitable<Response> Post(std::string target, std::string body) {
    return Send(http::verb::post, std::move(target), std::move(body));
  }
  asio::awaitable<Response> Put(std::string target, std::string body) {
    return Send(http::verb::put, std::move(target), std::move(body));
  }
  asio::awaitable<Response> Patch(std::string target, std::string body,
                                  std::string type = "application/merge-patch+json") {
    return Send(http::verb::patch, std::move(target), std::move(body), std::move(type));
  }
  asio::awaitable<Response> Delete(std::string target, std::string body = {}) {
    return Send(http::verb::delete_, std::move(target), std::move(body));
  }

  int connects() const { return connects_; }

 private:
  asio::awaitable<void> Connect() {
    stream_.emplace(co_await asio::this_coro::executor);
    stream_->expires_after(5s);
    co_await stream_->async_connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port_),
                                    asio::use_awaitable);
    ++connects_;
  }

  std::uint16_t port_;
  std::optional<beast::tcp_stream> stream_;
  beast::flat_buffer buffer_;
  int connects_ = 0;
  int requests_ = 0;
};

// A watch stream: decodes the chunked body with a streaming JSON parser fed in 7-byte pieces, so events are
// found whatever the chunk and read boundaries; records each chunk to check the framing.
class WatchStream {
 public:
  asio::awaitable<void> Open(std::uint16_t port, std::string target,
                             std::string accept = "application/json") {
    stream_.emplace(co_await asio::this_coro::executor);
    stream_->expires_after(5s);
    co_await stream_->async_connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port),
                                    asio::use_awaitable);
    http::request<http::empty_body> req{http::verb::get, target, 11};
    req.set(http::field::host, "127.0.0.1");
    req.set(http::field::accept, accept);
    co_await http::async_write(*stream_, req, asio::use_awaitable);
    parser_.emplace();
    parser_->body_limit(boost::none);
    on_header_ = [this](std::uint64_t size, std::string_view, beast::error_code&) {
      if (size > 0) chunks_.emplace_back();
    };
    on_body_ = [this](std::uint64_t, std::string_view body, beast::error_code&) -> std::size_t {
      if (!chunks_.empty()) chunks_.back() += body;
      Feed(body);
      return body.size();
    };
    parser_->on_chunk_header(on_header_);
    parser_->on_chunk_body(on_body_);
    co_await http::async_read_header(*stream_, buffer_, *parser_, asio::use_awaitable);
    status_ = parser_->get().result_int();
    chunked_ = parser_->get().chunked();
    if (!chunked_) {
      co_await http::async_read(*stream_, buffer_, *parser_, asio::use_awaitable);
      body_ = parser_->get().body();
      done_ = true;
      clean_ = true;
    }
  }

  // The next event; nullopt once the stream has ended (clean() tells how).
  asio::awaitable<std::optional<json::value>> Next(std::chrono::milliseconds timeout = 3s) {
    while (events_.empty() && !done_) {
      stream_->expires_after(timeout);
      auto [ec, n] =
          co_await http::async_read_some(*stream_, buffer_, *parser_, asio::as_tuple(asio::use_awaitable));
      if (ec) {
        done_ = true;
        error_ = ec;
        break;
      }
      if (parser_->is_done()) {
        done_ = true;
        clean_ = true;
      }
    }
    if (events_.empty()) co_return std::nullopt;
    json::value e = std::move(events_.front());
    events_.pop_front();
    co_return e;
  }

  // After a clean end: another request on the same connection (keep-alive).
  asio::awaitable<unsigned> Reuse(std::string target) {
    http::request<http::empty_body> req{http::verb::get, target, 11};
    req.set(http::field::host, "127.0.0.1");
    stream_->expires_after(5s);
    co_await http::async_write(*stream_, req, asio::use_awaitable);
    http::response<http::string_body> res;
    co_await http::async_read(*stream_, buffer_, res, asio::use_awaitable);
    co_return res.result_int();
  }

  void Close() {
    beast::error_code ignored;
    stream_->socket().close(ignored);
  }

  unsigned status() const { return status_; }
  bool chunked() const { return chunked_; }
  bool clean() const { return clean_; }
  bool done() const { return done_; }
  beast::error_code error() const { return error_; }
  const std::string& body() const { return body_; }
  const std::vector<std::string>& chunks() const { return chunks_; }
  bool parse_error() const { return parse_error_; }

 private:
  void Feed(std::string_view data) {
    while (!data.empty() && !parse_error_) {
      std::string_view piece = data.substr(0, 7);
      data.remove_prefix(piece.size());
      while (!piece.empty()) {
        boost::system::error_code ec;
        const std::size_t used = json_.write_some(piece.data(), piece.size(), ec);
        if (ec) {
          parse_error_ = true;
          return;
        }
        piece.remove_prefix(used);
        if (json_.done()) {
          events_.push_back(json_.release());
          json_.reset();
        }
      }
    }
  }

  std::optional<beast::tcp_stream> stream_;
  beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::string_body>> parser_;
  std::function<void(std::uint64_t, std::string_view, beast::error_code&)> on_header_;
  std::function<std::size_t(std::uint64_t, std::string_view, beast::error_code&)> on_body_;
  json::stream_parser json_;
  std::deque<json::value> events_;
  std::vector<std::string> chunks_;
  std::string body_;
  unsigned status_ = 0;
  bool chunked_ = false;
  bool done_ = false;
  bool clean_ = false;
  bool parse_error_ = false;
  beast::error_code error_;
};

// Polls `done` every few milliseconds until it holds or `budget` runs out.
asio::awaitable<bool> Eventually(std::function<bool()> done, std::chrono::milliseconds budget = 2s) {
  asio::steady_timer tick(co_await asio::this_coro::executor);
  const auto until = std::chrono::steady_clock::now() + budget;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) co_return false;
    tick.expires_after(5ms);
    co_await tick.async_wait(asio::use_awaitable);
  }
  co_return true;
}

// Protobuf wire helpers for building Kubernetes protobuf bodies by hand.
std::string Varint(std::uint64_t v) {
  std::string out;
  do {
    out += static_cast<char>((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
  return out;
}
std::string Bytes(int field, std::string_view bytes) {
  return Varint(static_cast<std::uint64_t>(field) << 3 | 2) + Varint(bytes.size()) + std::string(bytes);
}
std::string Envelope(std::string_view api_version, std::string_view kind, std::string_view raw) {
  return std::string("k8s\0", 4) + Bytes(1, Bytes(1, api_version) + Bytes(2, kind)) + Bytes(2, raw) +
         Bytes(3, "") + Bytes(4, "");
}

const TimePoint kT0 = std::chrono::sys_days(std::chrono::year(2026) / 11 / 29) + 12h;

class SimApiServer : public ::testing::Test {
 protected:
  void SetUp() override { Restart({}); }
  void TearDown() override {
    if (server_) server_->Stop();
    if (!HasFailure()) Drain();
  }
  void Restart(ApiServerOptions options) {
    if (server_) {
      server_->Stop();
      Drain();
    }
    server_ = std::make_unique<ApiServer>(ioc_, std::move(options), &clock_);
    auto port = server_->Start();
    ASSERT_TRUE(port) << port.error().message;
    port_ = *port;
  }
  void Drain() {
    ioc_.restart();
    ioc_.run_for(500ms);
  }
  void Run(asio::awaitable<void> body, std::chrono::milliseconds budget = 5s) {
    RunCoro(ioc_, std::move(body), budget);
  }
  Store& store() { return server_->store(); }
  std::string Rv() const { return std::to_string(server_->store().resource_version()); }

  FixedClock clock_{kT0};
  asio::io_context ioc_;
  std::unique_ptr<ApiServer> server_;
  std::uint16_t port_ = 0;
};

// ---------------------------------------------------------------------------------------------------------
// Pure pieces

TEST(LabelSelector, ParsesAndMatchesEveryOperator) {
  const json::object labels{{"app", "web"}, {"tier", "gpu"}, {"rank", "5"}};
  auto m = [&](std::string_view sel) {
    auto s = LabelSelector::Parse(sel);
    EXPECT_TRUE(s) << sel << ": " << (s ? "" : s.error().message);
    return s && s->Matches(&labels);
  };
  EXPECT_TRUE(m(""));
  EXPECT_TRUE(m("app=web"));
  EXPECT_TRUE(m("app==web,tier=gpu"));
  EXPECT_FALSE(m("app=db"));
  EXPECT_TRUE(m("app!=db"));
  EXPECT_TRUE(m("missing!=x"));
  EXPECT_TRUE(m("app in (db, web)"));
  EXPECT_FALSE(m("app notin (db,web)"));
  EXPECT_TRUE(m("tier notin (cpu)"));
  EXPECT_TRUE(m("app"));
  EXPECT_FALSE(m("!app"));
  EXPECT_TRUE(m("!missing"));
  EXPECT_TRUE(m("rank>4,rank<6"));
  EXPECT_FALSE(m("rank>5"));
  EXPECT_FALSE(LabelSelector::Parse("app in web"));
  EXPECT_FALSE(LabelSelector::Parse("app=a=b"));
  EXPECT_FALSE(LabelSelector::Parse("a in (x"));
  EXPECT_FALSE(LabelSelector::Parse(",a"));
}

TEST(FieldSelector, ReadsDottedPathsAndEscapes) {
  const json::object pod = Parse(R"({"metadata":{"name":"p,1","namespace":"ns"},"spec":{"nodeName":"n1"},
                                     "status":{"phase":"Running"}})")
                               .as_object();
  auto m = [&](std::string_view sel) {
    auto s = FieldSelector::Parse(sel);
    EXPECT_TRUE(s) << sel;
    return s && s->Matches(pod);
  };
  EXPECT_TRUE(m("metadata.name=p\\,1"));
  EXPECT_TRUE(m("metadata.namespace==ns,spec.nodeName=n1"));
  EXPECT_TRUE(m("status.phase!=Pending"));
  EXPECT_FALSE(m("spec.nodeName="));
  EXPECT_TRUE(m("spec.schedulerName="));  // missing reads as ""
  EXPECT_FALSE(FieldSelector::Parse("spec.nodeName"));
}

TEST(MergePatch, FollowsRfc7386) {
  // The RFC's own example.
  const json::value target = Parse(R"({"title":"Goodbye!","author":{"givenName":"John","familyName":"Doe"},
                                       "tags":["example","sample"],"content":"This will be unchanged"})");
  const json::value patch = Parse(R"({"title":"Hello!","phoneNumber":"+01-123-456-7890",
                                      "author":{"familyName":null},"tags":["example"]})");
  EXPECT_TRUE(JsonEqual(ApplyMergePatch(target, patch),
                        Parse(R"({"title":"Hello!","author":{"givenName":"John"},"tags":["example"],
                                  "content":"This will be unchanged","phoneNumber":"+01-123-456-7890"})")));
  EXPECT_TRUE(JsonEqual(ApplyMergePatch(Parse(R"({"a":"b"})"), Parse(R"(["c"])")), Parse(R"(["c"])")));
}

TEST(StrategicMergePatch, MergesListsByKeyAndHonoursDirectives) {
  const json::value pod = Parse(R"({
    "metadata":{"labels":{"a":"1","b":"2"},"finalizers":["x"]},
    "spec":{"containers":[{"name":"c1","image":"i1","env":[{"name":"E","value":"1"}]},{"name":"c2","image":"i2"}],
            "tolerations":[{"key":"k1"}],"taints":[{"key":"a"},{"key":"b"}],
            "volumes":[{"name":"v","emptyDir":{},"hostPath":null}]},
    "status":{"conditions":[{"type":"Ready","status":"False"},{"type":"PodScheduled","status":"True"}]}})");
  auto r = ApplyStrategicMergePatch(pod, Parse(R"({
    "metadata":{"labels":{"b":null,"c":"3"},"finalizers":["y"]},
    "spec":{"$setElementOrder/containers":[{"name":"c2"},{"name":"c1"}],
            "containers":[{"name":"c1","image":"i1b","env":[{"name":"F","value":"2"}]},{"name":"c2","$patch":"delete"}],
            "tolerations":[{"key":"k2"}],"taints":[{"key":"b"}],
            "volumes":[{"name":"v","$retainKeys":["name","configMap"],"configMap":{"name":"cm"}}]},
    "status":{"conditions":[{"type":"Ready","status":"True"}]}})"));
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(Str(*r, {"metadata", "labels"}), R"({"a":"1","c":"3"})");
  EXPECT_EQ(Str(*r, {"metadata", "finalizers"}), R"(["x","y"])");
  EXPECT_EQ(Str(*r, {"spec", "containers"}),
            R"([{"name":"c1","image":"i1b","env":[{"name":"E","value":"1"},{"name":"F","value":"2"}]}])");
  EXPECT_EQ(Str(*r, {"spec", "tolerations"}), R"([{"key":"k2"}])") << "lists without a strategy are replaced";
  EXPECT_EQ(Str(*r, {"spec", "taints"}), R"([{"key":"b"}])")
      << "taints are atomic (kubectl taint key- relies on it)";
  EXPECT_EQ(Str(*r, {"spec", "volumes"}), R"([{"name":"v","configMap":{"name":"cm"}}])");
  EXPECT_EQ(Str(*r, {"status", "conditions"}),
            R"([{"type":"Ready","status":"True"},{"type":"PodScheduled","status":"True"}])");

  auto ordered = ApplyStrategicMergePatch(
      pod, Parse(R"({"spec":{"$setElementOrder/containers":[{"name":"c2"},{"name":"c1"}]}})"));
  ASSERT_TRUE(ordered);
  EXPECT_EQ(Str(*ordered, {"spec", "containers", "0", "name"}), "c2");
  auto replaced = ApplyStrategicMergePatch(pod, Parse(R"({"spec":{"$patch":"replace","containers":[]}})"));
  ASSERT_TRUE(replaced);
  EXPECT_EQ(Str(*replaced, {"spec"}), R"({"containers":[]})");
  auto deleted =
      ApplyStrategicMergePatch(pod, Parse(R"({"metadata":{"$deleteFromPrimitiveList/finalizers":["x"]}})"));
  ASSERT_TRUE(deleted);
  EXPECT_EQ(Str(*deleted, {"metadata", "finalizers"}), "[]");
  EXPECT_FALSE(ApplyStrategicMergePatch(pod, Parse(R"({"spec":{"$patch":"explode"}})")));
}

TEST(Protobuf, DecodesTheNamespacesAndQuotasKubectlCreates) {
  const std::string meta = Bytes(1, "team-x") + Bytes(2, "") + Bytes(11, Bytes(1, "a") + Bytes(2, "b"));
  auto ns =
      DecodeKubernetesProtobuf(Envelope("v1", "Namespace", Bytes(1, meta) + Bytes(2, "") + Bytes(3, "")));
  ASSERT_TRUE(ns) << ns.error().message;
  EXPECT_EQ(
      json::serialize(*ns),
      R"({"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team-x","labels":{"a":"b"}},"spec":{},)"
      R"("status":{}})");
  const std::string hard = Bytes(1, Bytes(1, "limits.nvidia.com/gpumem") + Bytes(2, Bytes(1, "20000")));
  auto quota = DecodeKubernetesProtobuf(
      Envelope("v1", "ResourceQuota",
               Bytes(1, Bytes(1, "q") + Bytes(3, "team-x")) + Bytes(2, hard + Bytes(2, "Scope"))));
  ASSERT_TRUE(quota) << quota.error().message;
  EXPECT_EQ(Str(json::value(*quota), {"spec"}),
            R"({"hard":{"limits.nvidia.com/gpumem":"20000"},"scopes":["Scope"]})");
  EXPECT_FALSE(DecodeKubernetesProtobuf(Envelope("v1", "Pod", "")));
  EXPECT_FALSE(DecodeKubernetesProtobuf("{}"));
  EXPECT_FALSE(DecodeKubernetesProtobuf(Envelope("v1", "Namespace",
                                                 "\x0a\x05"
                                                 "ab")));  // truncated field
}

TEST(Store, AssignsServerMetadataAndVersions) {
  FixedClock clock(kT0);
  Store store({}, &clock);
  const std::uint64_t rv0 = store.resource_version();
  auto pod = store.Create(json::value(PodObject("p1", "team-b")));
  ASSERT_TRUE(pod) << pod.error().message;
  EXPECT_EQ(Str(*pod, {"metadata", "creationTimestamp"}), "2026-11-29T12:00:00Z");
  EXPECT_EQ(Str(*pod, {"metadata", "generation"}), "1");
  EXPECT_EQ(Str(*pod, {"metadata", "uid"}).size(), 36u);
  EXPECT_EQ(Str(*pod, {"spec", "schedulerName"}), "default-scheduler");
  EXPECT_EQ(Str(*pod, {"status", "phase"}), "Pending");
  EXPECT_NE(store.Find("namespaces", "", "team-b"), nullptr) << "namespaces are created on demand";
  EXPECT_EQ(store.resource_version(), rv0 + 2);
  EXPECT_EQ(Str(*pod, {"metadata", "resourceVersion"}), std::to_string(rv0 + 2));
  // A no-op update keeps the version; a spec change bumps generation; a label change does not.
  const ResourceType& pods = *FindResource("", "v1", "pods");
  auto same = store.Update(pods, "team-b", "p1", **pod);
  ASSERT_TRUE(same);
  EXPECT_EQ(*same, *pod);
  auto relabeled =
      store.Patch(pods, "team-b", "p1", PatchType::kMerge, Parse(R"({"metadata":{"labels":{"x":"y"}}})"));
  ASSERT_TRUE(relabeled);
  EXPECT_EQ(Str(*relabeled, {"metadata", "generation"}), "1");
  auto respecced = store.Patch(pods, "team-b", "p1", PatchType::kMerge, Parse(R"({"spec":{"priority":5}})"));
  ASSERT_TRUE(respecced);
  EXPECT_EQ(Str(*respecced, {"metadata", "generation"}), "2");
  // Invalid names and label values are 422.
  auto bad = store.Create(json::value(PodObject("Bad_Name")));
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, 422);
  auto long_label = store.Create(json::value(
      PodObject("p2", "default", fmt::format(R"({{"hami.io/vgpu-node":"{}"}})", std::string(64, 'n')))));
  ASSERT_FALSE(long_label);
  EXPECT_EQ(long_label.error().reason, "Invalid");
}

// What kube-apiserver refuses in a Lease the embedded server refuses too: a duration that is not positive,
// negative transitions (422), and times that are no RFC 3339 time (400: the object cannot be decoded).
TEST(Store, ValidatesLeasesAsKubeApiserverDoes) {
  Store store;
  const auto lease = [](std::string_view spec) {
    return Parse(fmt::format(R"({{"apiVersion":"coordination.k8s.io/v1","kind":"Lease",
        "metadata":{{"name":"hami-scheduler","namespace":"kube-system"}},"spec":{}}})",
                             spec));
  };
  for (const char* spec : {R"({"holderIdentity":"a","leaseDurationSeconds":-5})",
                           R"({"leaseDurationSeconds":0})", R"({"leaseTransitions":-1})"}) {
    auto refused = store.Create(lease(spec));
    ASSERT_FALSE(refused) << spec;
    EXPECT_EQ(refused.error().code, 422) << spec;
    EXPECT_NE(refused.error().message.find("must be greater than"), std::string::npos)
        << refused.error().message;
  }
  for (const char* spec : {R"({"renewTime":"garbage"})", R"({"acquireTime":5})",
                           R"({"leaseDurationSeconds":"15"})", R"({"holderIdentity":7})"}) {
    auto refused = store.Create(lease(spec));
    ASSERT_FALSE(refused) << spec;
    EXPECT_EQ(refused.error().code, 400) << spec;
  }
  auto good = store.Create(lease(R"({"holderIdentity":"a_1","leaseDurationSeconds":15,
      "renewTime":"2026-12-01T10:00:00.000000Z","leaseTransitions":0})"));
  ASSERT_TRUE(good) << good.error().message;
  // An update is validated the same way.
  json::value worse = **good;
  worse.at("spec").as_object()["renewTime"] = "yesterday";
  auto updated = store.Update(*FindResource("coordination.k8s.io", "v1", "leases"), "kube-system",
                              "hami-scheduler", worse.as_object());
  ASSERT_FALSE(updated);
  EXPECT_EQ(updated.error().code, 400);
}

TEST(Store, ExactListReconstructsAnOlderVersion) {
  Store store;
  const ResourceType& pods = *FindResource("", "v1", "pods");
  ASSERT_TRUE(store.Create(json::value(PodObject("a"))));
  ASSERT_TRUE(store.Create(json::value(PodObject("b"))));
  const std::string rv = std::to_string(store.resource_version());
  ASSERT_TRUE(store.Delete(pods, "default", "a"));
  ASSERT_TRUE(
      store.Patch(pods, "default", "b", PatchType::kMerge, Parse(R"({"metadata":{"labels":{"v":"2"}}})")));
  ASSERT_TRUE(store.Create(json::value(PodObject("c"))));
  ListOptions exact;
  exact.resource_version = rv;
  exact.resource_version_match = "Exact";
  auto old = store.List(pods, "", exact);
  ASSERT_TRUE(old) << old.error().message;
  ASSERT_EQ(old->items.size(), 2u);
  EXPECT_EQ(Str(old->items[0], {"metadata", "name"}), "a");
  EXPECT_EQ(Str(old->items[1], {"metadata", "labels"}), "{}");
  EXPECT_EQ(std::to_string(old->resource_version), rv);
  store.Compact();
  auto gone = store.List(pods, "", exact);
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, 410);
  ListOptions future;
  future.resource_version = std::to_string(store.resource_version() + 10);
  auto too_new = store.List(pods, "", future);
  ASSERT_FALSE(too_new);
  EXPECT_EQ(too_new.error().code, 504);
}

TEST(Store, HistoryWindowExpiresOldVersions) {
  StoreOptions options;
  options.history_limit = 3;
  Store store(options);
  const ResourceType& pods = *FindResource("", "v1", "pods");
  const std::string start = std::to_string(store.resource_version());
  WatchOptions from_start;
  from_start.resource_version = start;
  ASSERT_TRUE(store.Watch(pods, "", from_start));
  for (const char* n : {"a", "b", "c", "d"}) ASSERT_TRUE(store.Create(json::value(PodObject(n))));
  auto expired = store.Watch(pods, "", from_start);
  ASSERT_FALSE(expired);
  EXPECT_EQ(expired.error().code, 410);
  EXPECT_EQ(expired.error().reason, "Expired");
  WatchOptions recent;
  recent.resource_version = std::to_string(store.oldest_resource_version());
  auto ok = store.Watch(pods, "", recent);
  ASSERT_TRUE(ok);
  EXPECT_EQ((*ok)->queued(), 3u);
}

TEST(Store, LoadsTheSimulateClusterFile) {
  auto text = k8s::ReadInput(std::string(HAMI_SOURCE_DIR) + "/examples/cluster.yaml");
  ASSERT_TRUE(text) << text.error().message;
  auto docs = k8s::ParseDocuments(*text, "cluster.yaml");
  ASSERT_TRUE(docs) << docs.error().message;
  Store store;
  std::vector<std::string> skipped;
  auto loaded = store.Load(*docs, &skipped);
  ASSERT_TRUE(loaded) << loaded.error().message;
  EXPECT_EQ(store.Objects("nodes").size(), 5u);
  EXPECT_GE(store.Objects("pods").size(), 2u);
  EXPECT_EQ(store.Objects("resourcequotas").size(), 1u);
  EXPECT_EQ(*loaded, store.Objects("nodes").size() + store.Objects("pods").size() +
                         store.Objects("resourcequotas").size());
}

TEST(ApiServerCommand, HelpAndBadFlags) {
  std::ostringstream out;
  std::ostringstream err;
  EXPECT_EQ(cmd::SimApiServer({"--help"}, out, err), 0);
  EXPECT_NE(out.str().find("--kubeconfig-out"), std::string::npos);
  EXPECT_EQ(cmd::SimApiServer({"--bogus"}, out, err), 2);
  EXPECT_NE(err.str().find("unknown flag '--bogus'"), std::string::npos);
  // --kubeconfig reads a kubeconfig everywhere else: here it is no flag, so a user's file is never written.
  EXPECT_EQ(cmd::SimApiServer({"--kubeconfig", "/tmp/never-written"}, out, err), 2);
  EXPECT_NE(err.str().find("unknown flag '--kubeconfig'"), std::string::npos);
  EXPECT_EQ(cmd::SimApiServer({"--listen", "127.0.0.1:99999"}, out, err), 2);
  EXPECT_EQ(cmd::SimApiServer({"--cluster", "/nonexistent.yaml"}, out, err), 2);
}

// ---------------------------------------------------------------------------------------------------------
// HTTP: discovery

TEST_F(SimApiServer, ServesTheDiscoveryDocumentsKubectlReads) {
  Run([&]() -> asio::awaitable<void> {
    Client c(port_);
    auto api = co_await c.Get("/api");
    EXPECT_EQ(api.status, 200u);
    EXPECT_EQ(Str(api.Json(), {"kind"}), "APIVersions");
    EXPECT_EQ(Str(api.Json(), {"versions", "0"}), "v1");
    auto v1 = co_await c.Get("/api/v1");
    EXPECT_EQ(v1.content_type, "application/json");
    std::set<std::string> names;
    const json::value v1_doc = v1.Json();
    for (const auto& r : At(v1_doc, {"resources"})->as_array()) names.insert(Str(r, {"name"}));
    for (const char* want : {"pods", "pods/status", "pods/binding", "nodes", "nodes/status", "events",
                             "resourcequotas", "namespaces", "bindings"}) {
      EXPECT_TRUE(names.count(want)) << want;
    }
    auto apis = co_await c.Get("/apis");
    EXPECT_EQ(Str(apis.Json(), {"groups", "0", "name"}), "coordination.k8s.io");
    auto group = co_await c.Get("/apis/coordination.k8s.io");
    EXPECT_EQ(Str(group.Json(), {"preferredVersion", "groupVersion"}), "coordination.k8s.io/v1");
    auto leases = co_await c.Get("/apis/coordination.k8s.io/v1");
    EXPECT_EQ(Str(leases.Json(), {"resources", "0", "name"}), "leases");
    auto version = co_await c.Get("/version");
    EXPECT_EQ(Str(version.Json(), {"minor"}), "32");
    auto oapi = co_await c.Get("/openapi/v3");
    EXPECT_EQ(Str(oapi.Json(), {"paths", "api/v1", "serverRelativeURL"}),
              "/openapi/v3/api/v1?hash=hami-sim-1");
    auto oapi_v1 = co_await c.Get("/openapi/v3/api/v1?hash=hami-sim-1");
    EXPECT_EQ(Str(oapi_v1.Json(), {"paths", "/api/v1/namespaces/{namespace}/pods/{name}", "patch",
                                   "x-kubernetes-group-version-kind", "kind"}),
              "Pod");
    EXPECT_EQ((co_await c.Get("/openapi/v2")).status, 404u);
    auto missing = co_await c.Get("/apis/apps/v1");
    EXPECT_EQ(missing.status, 404u);
    EXPECT_EQ(Str(missing.Json(), {"kind"}), "Status");
    EXPECT_EQ(Str(missing.Json(), {"reason"}), "NotFound");
    EXPECT_EQ((co_await c.Get("/healthz")).body, "ok");
    EXPECT_EQ(c.connects(), 1) << "every request above went over one keep-alive connection";
  }());
}

// ---------------------------------------------------------------------------------------------------------
// HTTP: CRUD

TEST_F(SimApiServer, CreateGetUpdateDelete) {
  Run([&]() -> asio::awaitable<void> {
    Client c(port_);
    auto created = co_await c.Post("/api/v1/namespaces/team-a/pods", Pod("p1", R"({"app":"web"})"));
    EXPECT_EQ(created.status, 201u);
    const json::value pod = created.Json();
    EXPECT_EQ(Str(pod, {"metadata", "namespace"}), "team-a") << "namespace defaults from the URL";
    EXPECT_EQ(Str(pod, {"metadata", "uid"}).size(), 36u);
    EXPECT_EQ(Str(pod, {"metadata", "creationTimestamp"}), "2026-11-29T12:00:00Z");
    EXPECT_EQ(Str(pod, {"metadata", "generation"}), "1");
    const std::string rv1 = Str(pod, {"metadata", "resourceVersion"});
    EXPECT_EQ(rv1, Rv());

    auto dup = co_await c.Post("/api/v1/namespaces/team-a/pods", Pod("p1"));
    EXPECT_EQ(dup.status, 409u);
    EXPECT_EQ(Str(dup.Json(), {"reason"}), "AlreadyExists");
    EXPECT_EQ(Str(dup.Json(), {"message"}), R"(pods "p1" already exists)");
    EXPECT_EQ(Str(dup.Json(), {"details", "name"}), "p1");

    auto generated = co_await c.Post("/api/v1/namespaces/team-a/pods",
                                     R"({"metadata":{"generateName":"worker-"},"spec":{"containers":[]}})");
    EXPECT_EQ(generated.status, 201u);
    EXPECT_TRUE(Str(generated.Json(), {"metadata", "name"}).starts_with("worker-"));
    EXPECT_EQ(Str(generated.Json(), {"metadata", "name"}).size(), 12u);

    auto wrong_ns =
        co_await c.Post("/api/v1/namespaces/team-a/pods", R"({"metadata":{"name":"x","namespace":"other"}})");
    EXPECT_EQ(wrong_ns.status, 400u);
    EXPECT_EQ(Str(wrong_ns.Json(), {"reason"}), "BadRequest");

    auto got = co_await c.Get("/api/v1/namespaces/team-a/pods/p1");
    EXPECT_EQ(got.status, 200u);
    EXPECT_EQ(Str(got.Json(), {"metadata", "labels", "app"}), "web");
    auto missing = co_await c.Get("/api/v1/namespaces/team-a/pods/nope");
    EXPECT_EQ(missing.status, 404u);
    EXPECT_EQ(Str(missing.Json(), {"message"}), R"(pods "nope" not found)");
    EXPECT_EQ(Str(missing.Json(), {"details", "kind"}), "pods");

    // PUT: a stale resourceVersion is a Conflict; the current one succeeds and bumps the version.
    json::value update = got.Json();
    update.as_object()["spec"].as_object()["priority"] = 7;
    update.as_object()["metadata"].as_object()["resourceVersion"] = "1";
    auto stale = co_await c.Put("/api/v1/namespaces/team-a/pods/p1", json::serialize(update));
    EXPECT_EQ(stale.status, 409u);
    EXPECT_EQ(Str(stale.Json(), {"reason"}), "Conflict");
    EXPECT_NE(Str(stale.Json(), {"message"}).find("the object has been modified"), std::string::npos);
    update.as_object()["metadata"].as_object()["resourceVersion"] = rv1;
    auto updated = co_await c.Put("/api/v1/namespaces/team-a/pods/p1", json::serialize(update));
    EXPECT_EQ(updated.status, 200u);
    EXPECT_EQ(Str(updated.Json(), {"spec", "priority"}), "7");
    EXPECT_EQ(Str(updated.Json(), {"metadata", "generation"}), "2");
    EXPECT_NE(Str(updated.Json(), {"metadata", "resourceVersion"}), rv1);
    EXPECT_EQ(Str(updated.Json(), {"metadata", "uid"}), Str(pod, {"metadata", "uid"}));
    auto renamed = co_await c.Put("/api/v1/namespaces/team-a/pods/p1", Pod("other"));
    EXPECT_EQ(renamed.status, 400u);

    // DELETE with a failing precondition, then for real.
    auto guarded =
        co_await c.Delete("/api/v1/namespaces/team-a/pods/p1",
                          R"({"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"nope"}})");
    EXPECT_EQ(guarded.status, 409u);
    auto deleted = co_await c.Delete("/api/v1/namespaces/team-a/pods/p1?gracePeriodSeconds=30");
    EXPECT_EQ(deleted.status, 200u);
    EXPECT_EQ(Str(deleted.Json(), {"kind"}), "Status");
    EXPECT_EQ(Str(deleted.Json(), {"status"}), "Success");
    EXPECT_EQ(Str(deleted.Json(), {"details", "uid"}), Str(pod, {"metadata", "uid"}));
    EXPECT_EQ((co_await c.Get("/api/v1/namespaces/team-a/pods/p1")).status, 404u);
    EXPECT_EQ((co_await c.Delete("/api/v1/namespaces/team-a/pods/p1")).status, 404u);
  }());
}

TEST_F(SimApiServer, ClusterScopedAndGroupedKindsUseTheirPaths) {
  Run([&]() -> asio::awaitable<void> {
    Client c(port_);
    auto node =
        co_await c.Post("/api/v1/nodes", R"({"apiVersion":"v1","kind":"Node","metadata":{"name":"n1"}})");
    EXPECT_EQ(node.status, 201u);
    EXPECT_EQ(At(node.Json(), {"metadata", "namespace"}), nullptr);
    EXPECT_EQ((co_await c.Get("/api/v1/nodes/n1")).status, 200u);
    EXPECT_EQ((co_await c.Get("/api/v1/namespaces/default/nodes/n1")).status, 404u);
    EXPECT_EQ((co_await c.Get("/api/v1/pods/p1")).status, 404u) << "namespaced kinds need a namespace";
    auto wrong_kind =
        co_await c.Post("/api/v1/nodes", R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"x"}})");
    EXPECT_EQ(wrong_kind.status, 400u);

    auto lease = co_await c.Post("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases", R"({
        "apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"hami-scheduler"},
        "spec":{"holderIdentity":"a_1","leaseDurationSeconds":15,"renewTime":"2026-11-29T12:00:00.000000Z"}})");
    EXPECT_EQ(lease.status, 201u);
    json::value renew = lease.Json();
    renew.as_object()["spec"].as_object()["holderIdentity"] = "b_2";
    auto put = co_await c.Put("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/hami-scheduler",
                              json::serialize(renew));
    EXPECT_EQ(put.status, 200u);
    auto again = co_await c.Put("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/hami-scheduler",
                                json::serialize(renew));
    EXPECT_EQ(again.status, 409u) << "a PUT of the same old lease object loses the race";
    auto missing_lease = co_await c.Get("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/nope");
    EXPECT_EQ(Str(missing_lease.Json(), {"message"}), R"(leases.coordination.k8s.io "nope" not found)");

    auto event = co_await c.Post("/api/v1/namespaces/default/events", R"({
        "metadata":{"name":"p.18a2b3c4d5e6f708"},"involvedObject":{"kind":"Pod","namespace":"default","name":"p"},
        "reason":"BindingSucceed","message":"bound","type":"Normal","count":1,
        "source":{"component":"hami-scheduler"},"firstTimestamp":"2026-11-29T12:00:00Z",
        "lastTimestamp":"2026-11-29T12:00:00Z"})");
    EXPECT_EQ(event.status, 201u);
    auto events = co_await c.Get("/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dp");
    EXPECT_EQ(Names(events.Json()), std::vector<std::string>{"p.18a2b3c4d5e6f708"});

    auto quota = co_await c.Post("/api/v1/namespaces/team-a/resourcequotas", R"({
        "metadata":{"name":"gpu"},"spec":{"hard":{"limits.nvidia.com/gpumem":"20000"}}})");
    EXPECT_EQ(quota.status, 201u);
    auto quota_status = co_await c.Patch("/api/v1/namespaces/team-a/resourcequotas/gpu/status",
                                         R"({"status":{"used":{"limits.nvidia.com/gpumem":"1000"}}})");
    EXPECT_EQ(Str(quota_status.Json(), {"status", "used", "limits.nvidia.com/gpumem"}), "1000");

    EXPECT_EQ((co_await c.Delete("/api/v1/namespaces/default")).status, 403u);
    auto ns_list = co_await c.Get("/api/v1/namespaces");
    EXPECT_EQ(Names(ns_list.Json()), (std::vector<std::string>{"default", "kube-node-lease", "kube-public",
                                                               "kube-system", "team-a"}));
    EXPECT_EQ((co_await c.Delete("/api/v1/namespaces/team-a")).status, 200u);
    EXPECT_EQ((co_await c.Get("/api/v1/namespaces/team-a/resourcequotas/gpu")).status, 404u)
        << "deleting a namespace deletes its objects";
    EXPECT_EQ(Names((co_await c.Get("/api/v1/namespaces")).Json()).size(), 4u);
  }());
}

TEST_F(SimApiServer, AnswersProtocolErrorsWithStatusBodies) {
  Run([&]() -> asio::awaitable<void> {
    Client c(port_);
    auto bad_json = co_await c.Post("/api/v1/namespaces/default/pods", "{not json");
    EXPECT_EQ(bad_json.status, 400u);
    auto no_name = co_await c.Post("/api/v1/namespaces/default/pods", "{}");
    EXPECT_EQ(no_name.status, 422u);
    EXPECT_EQ(Str(no_name.Json(), {"reason"}), "Invalid");
    auto method = co_await c.Send(http::verb::put, "/api/v1/namespaces/default/pods", "{}");
    EXPECT_EQ(method.status, 405u);
    EXPECT_EQ(Str(method.Json(), {"reason"}), "MethodNotAllowed");
    auto protobuf = co_await c.Send(http::verb::post, "/api/v1/namespaces/default/pods", "\x6b\x38\x73",
                                    "application/vnd.kubernetes.protobuf");
    EXPECT_EQ(protobuf.status, 415u);
    EXPECT_EQ(Str(protobuf.Json(), {"reason"}), "UnsupportedMediaType");
    auto ns = co_await c.Send(http::verb::post, "/api/v1/namespaces",
                              Envelope("v1", "Namespace", Bytes(1, Bytes(1, "from-protobuf"))),
                              "application/vnd.kubernetes.protobuf",
                              "application/vnd.kubernetes.protobuf,application/json");
    EXPECT_EQ(ns.status, 201u) << ns.body;
    EXPECT_EQ(Str(ns.Json(), {"metadata", "name"}), "from-protobuf") << "answered in JSON";
    auto yaml =
        co_await c.Send(http::verb::post, "/api/v1/namespaces/default/pods",
                        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: from-yaml\n", "application/yaml");
    EXPECT_EQ(yaml.status, 201u);
    auto future = co_await c.Get("/api/v1/pods?resourceVersion=999999");
    EXPECT_EQ(future.status, 504u);
    EXPECT_EQ(future.retry_after, "1");
    auto bad_selector = co_await c.Get("/api/v1/pods?labelSelector=a%20in%20b");
    EXPECT_EQ(bad_selector.status, 400u);
  }());
}

TEST_F(SimApiServer, RejectsBodiesOverTheLimit) {
  ApiServerOptions options;
  options.body_limit = 1024;
  Restart(options);
  Run([&]() -> asio::awaitable<void> {
    Client c(port_);
    auto big = co_await c.Post("/api/v1/namespaces/default/pods", std::string(4096, ' '));
    EXPECT_EQ(big.status, 413u);
  }());
}

// Oversized heads, trailers, chunk lines and bodies: each is answered with a 4xx or its connection closed,
// nothing escapes the event loop (RunCoro would rethrow it), and the server keeps answering.
TEST_F(SimApiServer, HostileRequestsNeverEndTheServer) {
  Run(
      [&]() -> asio::awaitable<void> {
        for (const auto& hostile : hami::testing::HostileRequests("/api/v1/namespaces/default/pods")) {
          const unsigned status = co_await hami::testing::SendRaw(ioc_, port_, hostile.bytes);
          EXPECT_TRUE(status == 0 || (status >= 400 && status < 500)) << hostile.name << ": " << status;
          const unsigned health =
              co_await hami::testing::SendRaw(ioc_, port_, "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
          EXPECT_EQ(health, 200u) << "after " << hostile.name;
        }
      }(),
      60s);
  EXPECT_EQ(server_->connection_failures(), 0u);
}

// ---------------------------------------------------------------------------------------------------------
// HTTP: lists

TEST_F(SimApiServer, ListsWithLabelAndFieldSelectors) {
  ASSERT_TRUE(store().Create(json::value(PodObject("a", "default", R"({"app":"web","tier":"gpu"})"))));
  ASSERT_TRUE(store().Create(json::value(PodObject("b", "default", R"({"app":"db"})"))));
  ASSERT_TRUE(store().Create(json::value(PodObject("c", "other", R"({"app":"web"})"))));
  const ResourceType& pods = *FindResource("", "v1", "pods");
  ASSERT_TRUE(store().Bind("default", "a", Parse(R"({"target":{"name":"n1"}})").as_object()));
  ASSERT_TRUE(store().Patch(pods, "default", "a", PatchType::kMerge,
                            Parse(R"({"status":{"phase":"Running"}})"), Subresource::kStatus));
  ASSERT_TRUE(store().Patch(pods, "other", "c", PatchType::kMerge,
                            Parse(R"({"spec":{"schedulerName":"hami-scheduler"}})")));
  Run([&]() -> asio::awaitable<void> {
    Client c(port_);
    using V = std::vector<std::string>;
    const std::vector<std::pair<std::string, V>> cases = {
        {"/api/v1/pods", {"a", "b", "c"}},
        {"/api/v1/namespaces/default/pods", {"a", "b"}},
        {"/api/v1/pods?labelSelector=app%3Dweb", {"a", "c"}},
        {"/api/v1/pods?labelSelector=app!%3Dweb", {"b"}},
        {"/api/v1/pods?labelSelector=app+in+(db,cache)", {"b"}},
        {"/api/v1/pods?labelSelector=app%20notin%20(db)", {"a", "c"}},
        {"/api/v1/pods?labelSelector=tier", {"a"}},
        {"/api/v1/pods?labelSelector=!tier", {"b", "c"}},
        {"/api/v1/pods?fieldSelector=metadata.name%3Db", {"b"}},
        {"/api/v1/pods?fieldSelector=metadata.namespace%3Dother", {"c"}},
        {"/api/v1/pods?fieldSelector=spec.nodeName%3Dn1", {"a"}},
        {"/api/v1/pods?fieldSelector=spec.nodeName%3D", {"b", "c"}},
        {"/api/v1/pods?fieldSelector=spec.schedulerName%3Dhami-scheduler", {"c"}},
        {"/api/v1/pods?fieldSelector=status.phase!%3DPending", {"a"}},
        {"/api/v1/pods?labelSelector=app%3Dweb&fieldSelector=status.phase%3DPending", {"c"}},
    };
    for (const auto& [target, want] : cases) {
      auto r = co_await c.Get(target);
      EXPECT_EQ(r.status, 200u) << target << ": " << r.body;
      EXPECT_EQ(Names(r.Json()), want) << target;
    }
    auto list = co_await c.Get("/api/v1/pods");
    EXPECT_EQ(Str(list.Json(), {"kind"}), "PodList");
    EXPECT_EQ(Str(list.Json(), {"metadata", "resourceVersion"}), Rv());
  }());
}

TEST_F(SimApiServer, PagesWithContinueTokensThatExpire) {
  for (const char* n : {"p1", "p2", "p3", "p4", "p5"}) ASSERT_TRUE(store().Create(json::value(PodObject(n))));
  Run([&]() -> asio::awaitable<void> {
    Client c(port_);
    auto first = co_await c.Get("/api/v1/namespaces/default/pods?limit=2");
    EXPECT_EQ(Names(first.Json()), (std::vector<std::string>{"p1", "p2"}));
    const std::string rv = Str(first.Json(), {"metadata", "resourceVersion"});
    const std::string token = Str(first.Json(), {"metadata", "continue"});
    EXPECT_EQ(Str(first.Json(), {"metadata", "remainingItemCount"}), "3");
    // Changes between pages do not show: every page is of the first page's version.
    EXPECT_EQ((co_await c.Post("/api/v1/namespaces/default/pods", Pod("p0"))).status, 201u);
    EXPECT_EQ((co_await c.Delete("/api/v1/namespaces/default/pods/p4")).status, 200u);
    auto second = co_await c.Get("/api/v1/namespaces/default/pods?limit=2&continue=" + token);
    EXPECT_EQ(Names(second.Json()), (std::vector<std::string>{"p3", "p4"}));
    EXPECT_EQ(Str(second.Json(), {"metadata", "resourceVersion"}), rv);
    const std::string second_token = Str(second.Json(), {"metadata", "continue"});
    auto last = co_await c.Get("/api/v1/namespaces/default/pods?limit=2&continue=" + second_token);
    EXPECT_EQ(Names(last.Json()), (std::vector<std::string>{"p5"}));
    EXPECT_EQ(At(last.Json(), {"metadata", "continue"}), nullptr);

    auto with_rv =
        co_await c.Get("/api/v1/namespaces/default/pods?limit=2&resourceVersion=5&continue=" + token);
    EXPECT_EQ(with_rv.status, 400u);
    auto garbage = co_await c.Get("/api/v1/namespaces/default/pods?limit=2&continue=%21%21%21");
    EXPECT_EQ(garbage.status, 400u);

    // Tokens expire with time (5 minutes) ...
    clock_.Advance(std::chrono::minutes(6));
    auto old = co_await c.Get("/api/v1/namespaces/default/pods?limit=2&continue=" + token);
    EXPECT_EQ(old.status, 410u);
    EXPECT_EQ(Str(old.Json(), {"reason"}), "Expired");
    // ... and on demand.
    auto fresh = co_await c.Get("/api/v1/namespaces/default/pods?limit=1");
    server_->ExpireContinueTokens();
    const std::string fresh_token = Str(fresh.Json(), {"metadata", "continue"});
    auto expired = co_await c.Get("/api/v1/namespaces/default/pods?limit=1&continue=" + fresh_token);
    EXPECT_EQ(expired.status, 410u);
  }());
}

TEST_F(SimApiServer, ServesTablesForKubectlGet) {
  ASSERT_TRUE(store().Create(json::value(PodObject("p1"))));
  Run([&]() -> asio::awaitable<void> {
    Client c(port_);
    auto table = co_await c.Get("/api/v1/namespaces/default/pods",
                                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json");
    EXPECT_EQ(Str(table.Json(), {"kind"}), "Table");
    EXPECT_EQ(Str(table.Json(), {"columnDefinitions", "2", "name"}), "Status");
    EXPECT_EQ(Str(table.Json(), {"rows", "0", "cells"}),
              R"(["p1","0/1","Pending","0","0s","<none>","<none>","<none>","<none>"])");
    EXPECT_EQ(Str(table.Json(), {"rows", "0", "object", "metadata", "name"}), "p1");
  }());
}

// ---------------------------------------------------------------------------------------------------------
// HTTP: watches

TEST_F(SimApiServer, WatchFromAVersionStreamsEveryLaterEventInOrder) {
  const std::string from = Rv();
  ASSERT_TRUE(store().Create(json::value(PodObject("a", "default", R"({"app":"web"})"))));
  const ResourceType& pods = *FindResource("", "v1", "pods");
  ASSERT_TRUE(
      store().Patch(pods, "default", "a", PatchType::kMerge, Parse(R"({"metadata":{"labels":{"v":"2"}}})")));
  ASSERT_TRUE(store().Delete(pods, "default", "a"));
  Run([&]() -> asio::awaitable<void> {
    WatchStream w;
    co_await w.Open(port_, "/api/v1/namespaces/default/pods?watch=true&resourceVersion=" + from);
    CO_ASSERT_TRUE(w.status() == 200u && w.chunked());
    std::vector<std::string> seen;
    for (int i = 0; i < 3; ++i) {
      auto e = co_await w.Next();
      CO_ASSERT_TRUE(e.has_value());
      seen.push_back(Str(*e, {"type"}) + ":" + Str(*e, {"object", "metadata", "name"}));
    }
    EXPECT_EQ(seen, (std::vector<std::string>{"ADDED:a", "MODIFIED:a", "DELETED:a"}));
    // Live events follow, each one JSON object per chunk, newline-terminated.
    auto created = store().Create(json::value(PodObject("b")));
    CO_ASSERT_TRUE(created.has_value());
    auto live = co_await w.Next();
    CO_ASSERT_TRUE(live.has_value());
    EXPECT_EQ(Str(*live, {"type"}), "ADDED");
    EXPECT_EQ(Str(*live, {"object", "metadata", "resourceVersion"}),
              Str(*created, {"metadata", "resourceVersion"}));
    auto other_ns = store().Create(json::value(PodObject("c", "elsewhere")));
    CO_ASSERT_TRUE(other_ns.has_value());
    CO_ASSERT_TRUE(store().Create(json::value(PodObject("d"))).has_value());
    auto next = co_await w.Next();
    CO_ASSERT_TRUE(next.has_value());
    EXPECT_EQ(Str(*next, {"object", "metadata", "name"}), "d") << "other namespaces are filtered out";
    EXPECT_EQ(w.chunks().size(), 5u);
    for (const auto& chunk : w.chunks()) {
      EXPECT_TRUE(chunk.ends_with("}\n")) << chunk;
      EXPECT_TRUE(Parse(chunk).is_object()) << "one event per chunk: " << chunk;
    }
    EXPECT_FALSE(w.parse_error());
    EXPECT_EQ(server_->open_watches(), 1u);
  }());
}

TEST_F(SimApiServer, WatchWithoutVersionStartsWithSyntheticAdds) {
  ASSERT_TRUE(store().Create(json::value(PodObject("a"))));
  ASSERT_TRUE(store().Create(json::value(PodObject("b"))));
  Run([&]() -> asio::awaitable<void> {
    for (const char* rv : {"", "&resourceVersion=0"}) {
      WatchStream w;
      co_await w.Open(port_, std::string("/api/v1/pods?watch=1") + rv);
      auto a = co_await w.Next();
      auto b = co_await w.Next();
      CO_ASSERT_TRUE(a && b);
      EXPECT_EQ(Str(*a, {"type"}) + Str(*a, {"object", "metadata", "name"}), "ADDEDa");
      EXPECT_EQ(Str(*b, {"type"}) + Str(*b, {"object", "metadata", "name"}), "ADDEDb");
    }
    // The legacy /watch/ path prefix works too.
    WatchStream legacy;
    co_await legacy.Open(port_, "/api/v1/watch/namespaces/default/pods");
    auto first = co_await legacy.Next();
    CO_ASSERT_TRUE(first.has_value());
    EXPECT_EQ(Str(*first, {"type"}), "ADDED");
  }());
}

TEST_F(SimApiServer, WatchSelectorTransitionsBecomeAddsAndDeletes) {
  ASSERT_TRUE(store().Create(json::value(PodObject("a", "default", R"({"app":"web"})"))));
  const ResourceType& pods = *FindResource("", "v1", "pods");
  Run([&]() -> asio::awaitable<void> {
    WatchStream w;
    co_await w.Open(port_, "/api/v1/pods?watch=true&labelSelector=app%3Dweb&resourceVersion=" + Rv());
    CO_ASSERT_TRUE(
        store()
            .Patch(pods, "default", "a", PatchType::kMerge, Parse(R"({"metadata":{"labels":{"app":"db"}}})"))
            .has_value());
    CO_ASSERT_TRUE(
        store()
            .Patch(pods, "default", "a", PatchType::kMerge, Parse(R"({"metadata":{"labels":{"app":"web"}}})"))
            .has_value());
    auto gone = co_await w.Next();
    auto back = co_await w.Next();
    CO_ASSERT_TRUE(gone && back);
    EXPECT_EQ(Str(*gone, {"type"}), "DELETED");
    EXPECT_EQ(Str(*back, {"type"}), "ADDED");
  }());
}

TEST_F(SimApiServer, BookmarksOnRequest) {
  Run([&]() -> asio::awaitable<void> {
    WatchStream plain;
    co_await plain.Open(port_, "/api/v1/pods?watch=true&resourceVersion=" + Rv());
    WatchStream w;
    co_await w.Open(port_, "/api/v1/pods?watch=true&allowWatchBookmarks=true&resourceVersion=" + Rv());
    CO_ASSERT_TRUE(store().Create(json::value(PodObject("a"))).has_value());
    auto added = co_await w.Next();
    CO_ASSERT_TRUE(added.has_value());
    server_->SendBookmarks();
    auto mark = co_await w.Next();
    CO_ASSERT_TRUE(mark.has_value());
    EXPECT_EQ(Str(*mark, {"type"}), "BOOKMARK");
    EXPECT_EQ(Str(*mark, {"object", "kind"}), "Pod");
    EXPECT_EQ(Str(*mark, {"object", "metadata", "resourceVersion"}), Rv());
    // A watch that did not ask for bookmarks gets none.
    auto plain_first = co_await plain.Next();
    CO_ASSERT_TRUE(plain_first.has_value());
    EXPECT_EQ(Str(*plain_first, {"type"}), "ADDED");
    CO_ASSERT_TRUE(store().Create(json::value(PodObject("b"))).has_value());
    auto plain_second = co_await plain.Next();
    CO_ASSERT_TRUE(plain_second.has_value());
    EXPECT_EQ(Str(*plain_second, {"type"}), "ADDED");
  }());
}

TEST_F(SimApiServer, BookmarksPeriodically) {
  ApiServerOptions options;
  options.bookmark_interval = 100ms;
  Restart(options);
  Run([&]() -> asio::awaitable<void> {
    WatchStream w;
    co_await w.Open(port_, "/api/v1/pods?watch=true&allowWatchBookmarks=true&resourceVersion=" + Rv());
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 2; ++i) {
      auto mark = co_await w.Next(2s);
      CO_ASSERT_TRUE(mark.has_value());
      EXPECT_EQ(Str(*mark, {"type"}), "BOOKMARK");
    }
    EXPECT_GE(std::chrono::steady_clock::now() - start, 190ms);
  }());
}

TEST_F(SimApiServer, StreamingListEndsInitialEventsWithAnAnnotatedBookmark) {
  ASSERT_TRUE(store().Create(json::value(PodObject("a"))));
  Run([&]() -> asio::awaitable<void> {
    WatchStream w;
    co_await w.Open(port_,
                    "/api/v1/pods?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&"
                    "resourceVersionMatch=NotOlderThan");
    auto added = co_await w.Next();
    auto mark = co_await w.Next();
    CO_ASSERT_TRUE(added && mark);
    EXPECT_EQ(Str(*added, {"type"}), "ADDED");
    EXPECT_EQ(Str(*mark, {"type"}), "BOOKMARK");
    EXPECT_EQ(Str(*mark, {"object", "metadata", "annotations", "k8s.io/initial-events-end"}), "true");
  }());
}

TEST_F(SimApiServer, CompactedVersionAnswers410AsHttpStatus) {
  ApiServerOptions options;
  options.expired_watch_mode = ExpiredWatchMode::kHttpStatus;
  Restart(options);
  const std::string old = Rv();
  ASSERT_TRUE(store().Create(json::value(PodObject("a"))));
  server_->CompactHistory();
  Run([&]() -> asio::awaitable<void> {
    WatchStream w;
    co_await w.Open(port_, "/api/v1/pods?watch=true&resourceVersion=" + old);
    EXPECT_EQ(w.status(), 410u);
    EXPECT_FALSE(w.chunked());
    EXPECT_EQ(Str(Parse(w.body()), {"reason"}), "Expired");
    EXPECT_EQ(Str(Parse(w.body()), {"code"}), "410");
    // The current version still works.
    WatchStream ok;
    co_await ok.Open(port_, "/api/v1/pods?watch=true&resourceVersion=" + Rv());
    EXPECT_EQ(ok.status(), 200u);
  }());
}

TEST_F(SimApiServer, CompactedVersionAnswers410AsErrorEvent) {
  const std::string old = Rv();
  ASSERT_TRUE(store().Create(json::value(PodObject("a"))));
  server_->CompactHistory();
  Run([&]() -> asio::awaitable<void> {
    WatchStream w;
    co_await w.Open(port_, "/api/v1/pods?watch=true&resourceVersion=" + old);
    EXPECT_EQ(w.status(), 200u);
    auto error = co_await w.Next();
    CO_ASSERT_TRUE(error.has_value());
    EXPECT_EQ(Str(*error, {"type"}), "ERROR");
    EXPECT_EQ(Str(*error, {"object", "kind"}), "Status");
    EXPECT_EQ(Str(*error, {"object", "code"}), "410");
    EXPECT_EQ(Str(*error, {"object", "reason"}), "Expired");
    EXPECT_NE(Str(*error, {"object", "message"}).find("too old resource version: " + old), std::string::npos);
    EXPECT_FALSE(co_await w.Next());
    EXPECT_TRUE(w.clean()) << "the stream ends with the final chunk";
  }());
}

TEST_F(SimApiServer, ForcedExpiryHitsTheNextWatchesAndLists) {
  Run([&]() -> asio::awaitable<void> {
    server_->ExpireNextWatches(1);
    server_->ExpireNextLists(1);
    server_->set_expired_watch_mode(ExpiredWatchMode::kHttpStatus);
    WatchStream w;
    co_await w.Open(port_, "/api/v1/pods?watch=true&resourceVersion=" + Rv());
    EXPECT_EQ(w.status(), 410u);
    WatchStream again;
    co_await again.Open(port_, "/api/v1/pods?watch=true&resourceVersion=" + Rv());
    EXPECT_EQ(again.status(), 200u) << "only the next one";
    Client c(port_);
    EXPECT_EQ((co_await c.Get("/api/v1/pods")).status, 410u);
    EXPECT_EQ((co_await c.Get("/api/v1/pods")).status, 200u);
  }());
}

TEST_F(SimApiServer, WatchTimeoutEndsTheStreamCleanlyAndKeepsTheConnection) {
  Run(
      [&]() -> asio::awaitable<void> {
        WatchStream w;
        co_await w.Open(port_, "/api/v1/nodes?watch=true&timeoutSeconds=1&resourceVersion=" + Rv());
        const auto start = std::chrono::steady_clock::now();
        EXPECT_FALSE(co_await w.Next(3s));
        EXPECT_TRUE(w.clean());
        EXPECT_GE(std::chrono::steady_clock::now() - start, 900ms);
        EXPECT_EQ(co_await w.Reuse("/version"), 200u);
        EXPECT_EQ(server_->open_watches(), 0u);
      }(),
      5s);
}

TEST_F(SimApiServer, DroppedWatchesEndAbruptly) {
  Run([&]() -> asio::awaitable<void> {
    WatchStream a;
    WatchStream b;
    co_await a.Open(port_, "/api/v1/pods?watch=true&resourceVersion=" + Rv());
    co_await b.Open(port_, "/api/v1/nodes?watch=true&resourceVersion=" + Rv());
    CO_ASSERT_TRUE(store().Create(json::value(PodObject("x"))).has_value());
    CO_ASSERT_TRUE((co_await a.Next()).has_value());
    EXPECT_EQ(server_->open_watches(), 2u);
    server_->DropWatches();
    EXPECT_FALSE(co_await a.Next());
    EXPECT_FALSE(co_await b.Next());
    EXPECT_FALSE(a.clean());
    EXPECT_FALSE(b.clean());
    EXPECT_EQ(server_->open_watches(), 0u);
    // New watches work again.
    WatchStream c;
    co_await c.Open(port_, "/api/v1/pods?watch=true");
    auto e = co_await c.Next();
    CO_ASSERT_TRUE(e.has_value());
    EXPECT_EQ(Str(*e, {"object", "metadata", "name"}), "x");
  }());
}

TEST_F(SimApiServer, AWatchWhoseClientLeavesIsClosed) {
  Run([&]() -> asio::awaitable<void> {
    WatchStream w;
    co_await w.Open(port_, "/api/v1/nodes?watch=true&resourceVersion=" + Rv());
    EXPECT_EQ(server_->open_watches(), 1u);
    w.Close();
    EXPECT_TRUE(co_await Eventually([&] {
      return server_->open_watches() == 0 && server_->open_connections() == 0;
    })) << "the server notices the closed connection without waiting for an event or the timeout";
  }());
}

TEST_F(SimApiServer, WatchesDeliverTablesWhenAsked) {
  Run([&]() -> asio::awaitable<void> {
    WatchStream w;
    co_await w.Open(port_, "/api/v1/namespaces/default/pods?watch=true&resourceVersion=" + Rv(),
                    "application/json;as=Table;v=v1;g=meta.k8s.io");
    CO_ASSERT_TRUE(store().Create(json::value(PodObject("t"))).has_value());
    auto e = co_await w.Next();
    CO_ASSERT_TRUE(e.has_value());
    EXPECT_EQ(Str(*e, {"object", "kind"}), "Table");
    EXPECT_EQ(Str(*e, {"object", "rows", "0", "cells", "0"}), "t");
  }());
}

// ---------------------------------------------------------------------------------------------------------
// HTTP: patches, status, binding

TEST_F(SimApiServer, MergePatchWithAndWithoutResourceVersionPrecondition) {
  ASSERT_TRUE(store().Create(json::value(Parse(R"({"apiVersion":"v1","kind":"Node","metadata":{"name":"n1",
      "annotations":{"hami.io/node-handshake":"Requesting_2026-11-29 12:00:00"}}})"))));
  Run([&]() -> asio::awaitable<void> {
    Client c(port_);
    const std::string rv = Rv();
    auto lock = co_await c.Patch("/api/v1/nodes/n1", fmt::format(R"({{"metadata":{{"annotations":{{
        "hami.io/mutex.lock":"2026-11-29T12:00:00Z,default,p1"}},"resourceVersion":"{}"}}}})",
                                                                 rv));
    EXPECT_EQ(lock.status, 200u) << lock.body;
    EXPECT_EQ(Str(lock.Json(), {"metadata", "annotations", "hami.io/mutex.lock"}),
              "2026-11-29T12:00:00Z,default,p1");
    EXPECT_EQ(Str(lock.Json(), {"metadata", "annotations", "hami.io/node-handshake"}),
              "Requesting_2026-11-29 12:00:00");
    // The same compare-and-swap with the now stale version loses.
    auto second = co_await c.Patch("/api/v1/nodes/n1", fmt::format(R"({{"metadata":{{"annotations":{{
        "hami.io/mutex.lock":"2026-11-29T12:00:01Z,default,p2"}},"resourceVersion":"{}"}}}})",
                                                                   rv));
    EXPECT_EQ(second.status, 409u);
    EXPECT_EQ(Str(second.Json(), {"reason"}), "Conflict");
    EXPECT_EQ(Str(second.Json(), {"details", "kind"}), "nodes");
    // Without a version it always applies; null deletes.
    auto unlock =
        co_await c.Patch("/api/v1/nodes/n1", R"({"metadata":{"annotations":{"hami.io/mutex.lock":null}}})");
    EXPECT_EQ(unlock.status, 200u);
    EXPECT_EQ(At(unlock.Json(), {"metadata", "annotations", "hami.io/mutex.lock"}), nullptr);
    // The main resource ignores status; the status subresource ignores everything else.
    auto status_on_main = co_await c.Patch("/api/v1/nodes/n1", R"({"status":{"allocatable":{"cpu":"4"}}})");
    EXPECT_EQ(At(status_on_main.Json(), {"status"}), nullptr);
    auto status = co_await c.Patch("/api/v1/nodes/n1/status", R"({"status":{"allocatable":{"cpu":"4"}},
                                                                  "metadata":{"labels":{"ignored":"yes"}}})");
    EXPECT_EQ(status.status, 200u);
    EXPECT_EQ(Str(status.Json(), {"status", "allocatable", "cpu"}), "4");
    EXPECT_EQ(At(status.Json(), {"metadata", "labels"}), nullptr);
    auto got_status = co_await c.Get("/api/v1/nodes/n1/status");
    EXPECT_EQ(Str(got_status.Json(), {"status", "allocatable", "cpu"}), "4");
    auto missing = co_await c.Patch("/api/v1/nodes/none", "{}");
    EXPECT_EQ(missing.status, 404u);
  }());
}

TEST_F(SimApiServer, JsonPatchTestOperationIsACompareAndSwap) {
  ASSERT_TRUE(store().Create(json::value(PodObject("p"))));
  Run([&]() -> asio::awaitable<void> {
    Client c(port_);
    const std::string type = "application/json-patch+json";
    auto add = co_await c.Patch("/api/v1/namespaces/default/pods/p",
                                R"([{"op":"add","path":"/metadata/annotations","value":{}},
                                    {"op":"add","path":"/metadata/annotations/hami.io~1bind-phase","value":"allocating"}])",
                                type);
    EXPECT_EQ(add.status, 200u) << add.body;
    EXPECT_EQ(Str(add.Json(), {"metadata", "annotations", "hami.io/bind-phase"}), "allocating");
    auto swap = co_await c.Patch(
        "/api/v1/namespaces/default/pods/p",
        R"([{"op":"test","path":"/metadata/annotations/hami.io~1bind-phase","value":"allocating"},
                                     {"op":"replace","path":"/metadata/annotations/hami.io~1bind-phase","value":"success"}])",
        type);
    EXPECT_EQ(swap.status, 200u);
    auto lost = co_await c.Patch(
        "/api/v1/namespaces/default/pods/p",
        R"([{"op":"test","path":"/metadata/annotations/hami.io~1bind-phase","value":"allocating"},
                                     {"op":"replace","path":"/metadata/annotations/hami.io~1bind-phase","value":"failed"}])",
        type);
    EXPECT_EQ(lost.status, 422u);
    EXPECT_EQ(Str(lost.Json(), {"reason"}), "Invalid");
    auto now = co_await c.Get("/api/v1/namespaces/default/pods/p");
    EXPECT_EQ(Str(now.Json(), {"metadata", "annotations", "hami.io/bind-phase"}), "success");
    auto rv_test =
        co_await c.Patch("/api/v1/namespaces/default/pods/p",
                         R"([{"op":"replace","path":"/metadata/resourceVersion","value":"1"}])", type);
    EXPECT_EQ(rv_test.status, 409u) << "a resourceVersion written by the patch is a precondition";
    auto malformed = co_await c.Patch("/api/v1/namespaces/default/pods/p", R"({"op":"add"})", type);
    EXPECT_EQ(malformed.status, 400u);
  }());
}

TEST_F(SimApiServer, StrategicMergePatchAndUnsupportedPatchTypes) {
  ASSERT_TRUE(store().Create(json::value(PodObject("p", "default", R"({"a":"1"})"))));
  Run([&]() -> asio::awaitable<void> {
    Client c(port_);
    auto smp = co_await c.Patch("/api/v1/namespaces/default/pods/p",
                                R"({"metadata":{"labels":{"b":"2","a":null}},
                                    "spec":{"$setElementOrder/containers":[{"name":"c"},{"name":"d"}],
                                            "containers":[{"name":"d","image":"x"}]}})",
                                "application/strategic-merge-patch+json");
    EXPECT_EQ(smp.status, 200u) << smp.body;
    EXPECT_EQ(Str(smp.Json(), {"metadata", "labels"}), R"({"b":"2"})");
    EXPECT_EQ(Str(smp.Json(), {"spec", "containers", "0", "name"}), "c");
    EXPECT_EQ(Str(smp.Json(), {"spec", "containers", "1", "name"}), "d");
    auto conditions = co_await c.Patch("/api/v1/namespaces/default/pods/p/status",
                                       R"({"status":{"conditions":[{"type":"Ready","status":"True"}]}})",
                                       "application/strategic-merge-patch+json");
    EXPECT_EQ(Str(conditions.Json(), {"status", "conditions", "0", "type"}), "Ready");
    auto apply = co_await c.Patch("/api/v1/namespaces/default/pods/p", "{}", "application/apply-patch+yaml");
    EXPECT_EQ(apply.status, 415u);
    EXPECT_EQ(Str(apply.Json(), {"reason"}), "UnsupportedMediaType");
    auto none = co_await c.Patch("/api/v1/namespaces/default/pods/p", "{}", "text/plain");
    EXPECT_EQ(none.status, 415u);
  }());
}

TEST_F(SimApiServer, StatusSubresourceUpdatesOnlyStatus) {
  ASSERT_TRUE(store().Create(json::value(PodObject("p"))));
  Run([&]() -> asio::awaitable<void> {
    Client c(port_);
    json::value pod = (co_await c.Get("/api/v1/namespaces/default/pods/p")).Json();
    pod.as_object()["status"].as_object()["phase"] = "Running";
    pod.as_object()["spec"].as_object()["nodeName"] = "sneaky";
    auto put = co_await c.Put("/api/v1/namespaces/default/pods/p/status", json::serialize(pod));
    EXPECT_EQ(put.status, 200u);
    EXPECT_EQ(Str(put.Json(), {"status", "phase"}), "Running");
    EXPECT_EQ(At(put.Json(), {"spec", "nodeName"}), nullptr);
    pod = put.Json();
    pod.as_object()["status"].as_object()["phase"] = "Failed";
    auto main = co_await c.Put("/api/v1/namespaces/default/pods/p", json::serialize(pod));
    EXPECT_EQ(main.status, 200u);
    EXPECT_EQ(Str(main.Json(), {"status", "phase"}), "Running") << "PUT on the pod ignores status";
    EXPECT_EQ((co_await c.Post("/api/v1/namespaces/default/pods/p/status", "{}")).status, 405u);
    EXPECT_EQ((co_await c.Get("/api/v1/namespaces/default/pods/p/log")).status, 404u);
  }());
}

TEST_F(SimApiServer, BindingSetsTheNodeOnceAndThenConflicts) {
  ASSERT_TRUE(store().Create(json::value(PodObject("p"))));
  const std::string uid = Str(store().Find("pods", "default", "p"), {"metadata", "uid"});
  Run([&]() -> asio::awaitable<void> {
    Client c(port_);
    auto wrong_uid = co_await c.Post("/api/v1/namespaces/default/pods/p/binding", R"({
        "apiVersion":"v1","kind":"Binding","metadata":{"name":"p","uid":"00000000-0000-4000-8000-000000000000"},
        "target":{"apiVersion":"v1","kind":"Node","name":"n1"}})");
    EXPECT_EQ(wrong_uid.status, 409u);
    EXPECT_NE(Str(wrong_uid.Json(), {"message"}).find("Precondition failed: UID"), std::string::npos);
    auto bound = co_await c.Post("/api/v1/namespaces/default/pods/p/binding", fmt::format(R"({{
        "apiVersion":"v1","kind":"Binding","metadata":{{"name":"p","uid":"{}","annotations":{{"x":"y"}}}},
        "target":{{"apiVersion":"v1","kind":"Node","name":"n1"}}}})",
                                                                                          uid));
    EXPECT_EQ(bound.status, 201u) << bound.body;
    EXPECT_EQ(Str(bound.Json(), {"kind"}), "Status");
    EXPECT_EQ(Str(bound.Json(), {"status"}), "Success");
    auto pod = (co_await c.Get("/api/v1/namespaces/default/pods/p")).Json();
    EXPECT_EQ(Str(pod, {"spec", "nodeName"}), "n1");
    EXPECT_EQ(Str(pod, {"metadata", "annotations", "x"}), "y");
    EXPECT_EQ(Str(pod, {"status", "conditions", "0", "type"}), "PodScheduled");
    EXPECT_EQ(Str(pod, {"status", "conditions", "0", "status"}), "True");
    auto again = co_await c.Post("/api/v1/namespaces/default/pods/p/binding",
                                 R"({"metadata":{"name":"p"},"target":{"name":"n2"}})");
    EXPECT_EQ(again.status, 409u);
    EXPECT_EQ(Str(again.Json(), {"reason"}), "Conflict");
    EXPECT_EQ(Str(again.Json(), {"message"}),
              R"(Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to node "n1")");
    auto missing =
        co_await c.Post("/api/v1/namespaces/default/pods/nope/binding", R"({"target":{"name":"n1"}})");
    EXPECT_EQ(missing.status, 404u);
    auto no_target = co_await c.Post("/api/v1/namespaces/default/pods/p/binding", R"({"target":{}})");
    EXPECT_EQ(no_target.status, 422u);
    // The legacy collection form, with the pod named in the body.
    EXPECT_EQ((co_await c.Post("/api/v1/namespaces/default/pods", Pod("q"))).status, 201u);
    auto legacy = co_await c.Post("/api/v1/namespaces/default/bindings",
                                  R"({"metadata":{"name":"q"},"target":{"name":"n3"}})");
    EXPECT_EQ(legacy.status, 201u);
    EXPECT_EQ(Str(store().Find("pods", "default", "q"), {"spec", "nodeName"}), "n3");
  }());
}

TEST_F(SimApiServer, FinalizersDelayDeletionAndBlockBinding) {
  ASSERT_TRUE(store().Create(json::value(Parse(R"({"apiVersion":"v1","kind":"Pod",
      "metadata":{"name":"f","namespace":"default","finalizers":["hami.io/cleanup"]}})"))));
  Run([&]() -> asio::awaitable<void> {
    Client c(port_);
    WatchStream w;
    co_await w.Open(port_, "/api/v1/namespaces/default/pods?watch=true&resourceVersion=" + Rv());
    auto marked = co_await c.Delete("/api/v1/namespaces/default/pods/f");
    EXPECT_EQ(marked.status, 200u);
    EXPECT_EQ(Str(marked.Json(), {"kind"}), "Pod");
    EXPECT_NE(At(marked.Json(), {"metadata", "deletionTimestamp"}), nullptr);
    auto bind = co_await c.Post("/api/v1/namespaces/default/pods/f/binding", R"({"target":{"name":"n1"}})");
    EXPECT_EQ(bind.status, 409u);
    EXPECT_NE(Str(bind.Json(), {"message"}).find("is being deleted"), std::string::npos);
    auto released =
        co_await c.Patch("/api/v1/namespaces/default/pods/f", R"({"metadata":{"finalizers":null}})");
    EXPECT_EQ(released.status, 200u);
    EXPECT_EQ((co_await c.Get("/api/v1/namespaces/default/pods/f")).status, 404u);
    auto modified = co_await w.Next();
    auto deleted = co_await w.Next();
    CO_ASSERT_TRUE(modified && deleted);
    EXPECT_EQ(Str(*modified, {"type"}), "MODIFIED");
    EXPECT_EQ(Str(*deleted, {"type"}), "DELETED");
  }());
}

// ---------------------------------------------------------------------------------------------------------
// HTTP: fault injection

TEST_F(SimApiServer, FailsTheNextMatchingRequestsWith500) {
  ASSERT_TRUE(store().Create(json::value(PodObject("p"))));
  Run([&]() -> asio::awaitable<void> {
    Client c(port_);
    FaultRule patches;
    patches.count = 2;
    patches.status = 500;
    patches.method = "PATCH";
    patches.path_prefix = "/api/v1/namespaces/default/pods";
    server_->FailNext(patches);
    EXPECT_EQ((co_await c.Get("/api/v1/namespaces/default/pods/p")).status, 200u) << "GET does not match";
    EXPECT_EQ((co_await c.Patch("/api/v1/nodes/x", "{}")).status, 404u) << "other paths do not match";
    auto first =
        co_await c.Patch("/api/v1/namespaces/default/pods/p", R"({"metadata":{"labels":{"a":"b"}}})");
    EXPECT_EQ(first.status, 500u);
    EXPECT_EQ(Str(first.Json(), {"reason"}), "InternalError");
    EXPECT_EQ((co_await c.Patch("/api/v1/namespaces/default/pods/p", "{}")).status, 500u);
    EXPECT_EQ((co_await c.Patch("/api/v1/namespaces/default/pods/p", "{}")).status, 200u) << "two only";
    EXPECT_EQ(Str(store().Find("pods", "default", "p"), {"metadata", "labels"}), "{}")
        << "a failed request changes nothing";
  }());
}

TEST_F(SimApiServer, FailsWith429AndRetryAfter) {
  Run([&]() -> asio::awaitable<void> {
    Client c(port_);
    FaultRule throttle;
    throttle.status = 429;
    throttle.retry_after_seconds = 3;
    server_->FailNext(throttle);
    auto throttled = co_await c.Get("/api/v1/pods");
    EXPECT_EQ(throttled.status, 429u);
    EXPECT_EQ(throttled.retry_after, "3");
    EXPECT_EQ(Str(throttled.Json(), {"reason"}), "TooManyRequests");
    EXPECT_EQ(Str(throttled.Json(), {"details", "retryAfterSeconds"}), "3");
    EXPECT_EQ((co_await c.Get("/api/v1/pods")).status, 200u);
    FaultRule unavailable;
    unavailable.count = 5;
    unavailable.status = 503;
    server_->FailNext(unavailable);
    server_->ClearFaults();
    EXPECT_EQ((co_await c.Get("/api/v1/pods")).status, 200u);
  }());
}

TEST_F(SimApiServer, AddsLatencyToMatchingResponses) {
  Run([&]() -> asio::awaitable<void> {
    Client c(port_);
    server_->SetLatency(300ms, "/api/v1/nodes");
    auto start = std::chrono::steady_clock::now();
    EXPECT_EQ((co_await c.Get("/api/v1/nodes")).status, 200u);
    EXPECT_GE(std::chrono::steady_clock::now() - start, 300ms);
    start = std::chrono::steady_clock::now();
    EXPECT_EQ((co_await c.Get("/api/v1/pods")).status, 200u);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 300ms);
    server_->SetLatency(0ms);
    start = std::chrono::steady_clock::now();
    EXPECT_EQ((co_await c.Get("/api/v1/nodes")).status, 200u);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 300ms);
  }());
}

TEST_F(SimApiServer, StopClosesEveryConnection) {
  Run([&]() -> asio::awaitable<void> {
    WatchStream w;
    co_await w.Open(port_, "/api/v1/pods?watch=true");
    Client c(port_);
    EXPECT_EQ((co_await c.Get("/version")).status, 200u);
    EXPECT_EQ(server_->open_connections(), 2u);
    server_->Stop();
    EXPECT_FALSE(co_await w.Next());
    EXPECT_FALSE(w.clean());
  }());
  Drain();
  EXPECT_EQ(server_->open_connections(), 0u);
  EXPECT_EQ(server_->failure(), nullptr);
}

// ---------------------------------------------------------------------------------------------------------
// TLS and authentication

// A keep-alive HTTPS client over one loopback connection that verifies the server against `ca_pem` (and its
// name, 127.0.0.1) and presents `cert` when given. Transport failures come back as status 0 with the error.
class TlsClient {
 public:
  TlsClient(std::uint16_t port, const std::string& ca_pem, const testing::CertifiedKey* cert = nullptr)
      : port_(port), ctx_(asio::ssl::context::tls_client) {
    ctx_.add_certificate_authority(asio::buffer(ca_pem));
    ctx_.set_verify_mode(asio::ssl::verify_peer);
    ctx_.set_verify_callback(asio::ssl::host_name_verification("127.0.0.1"));
    if (cert) {
      ctx_.use_certificate_chain(asio::buffer(cert->cert_pem));
      ctx_.use_private_key(asio::buffer(cert->key_pem), asio::ssl::context::pem);
    }
  }

  // TCP connect and TLS handshake; the error, if any.
  asio::awaitable<beast::error_code> Connect() {
    stream_.emplace(co_await asio::this_coro::executor, ctx_);
    auto& tcp_layer = beast::get_lowest_layer(*stream_);
    tcp_layer.expires_after(5s);
    auto [cec] = co_await tcp_layer.async_connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port_),
                                                  asio::as_tuple(asio::use_awaitable));
    if (cec) co_return cec;
    tcp_layer.socket().set_option(tcp::no_delay(true));
    auto [hec] = co_await stream_->async_handshake(asio::ssl::stream_base::client,
                                                   asio::as_tuple(asio::use_awaitable));
    if (!hec) ++connects_;
    co_return hec;
  }

  // `close`: ask the server to close the connection after answering (read its end with ReadEnd()).
  asio::awaitable<Response> Get(std::string target, std::string authorization = {}, bool close = false) {
    if (!stream_) {
      if (auto ec = co_await Connect()) co_return Response{0, ec.message(), {}, {}};
    }
    http::request<http::empty_body> req{http::verb::get, target, 11};
    req.set(http::field::host, fmt::format("127.0.0.1:{}", port_));
    req.set(http::field::accept, "application/json");
    if (!authorization.empty()) req.set(http::field::authorization, authorization);
    req.keep_alive(!close);
    beast::get_lowest_layer(*stream_).expires_after(5s);
    auto [wec, wn] = co_await http::async_write(*stream_, req, asio::as_tuple(asio::use_awaitable));
    if (wec) co_return Response{0, wec.message(), {}, {}};
    http::response<http::string_body> res;
    auto [rec, rn] = co_await http::async_read(*stream_, buffer_, res, asio::as_tuple(asio::use_awaitable));
    if (rec) {
      stream_.reset();
      co_return Response{0, rec.message(), {}, {}};
    }
    Response r{res.result_int(), res.body(), std::string(res[http::field::content_type]), {}};
    if (!res.keep_alive() && !close) stream_.reset();
    co_return r;
  }

  // After the server has said it closes: how the stream ends (eof after a close_notify, stream_truncated
  // when the TCP connection ends without one).
  asio::awaitable<beast::error_code> ReadEnd() {
    std::array<char, 64> sink;
    beast::get_lowest_layer(*stream_).expires_after(3s);
    for (;;) {
      auto [ec, n] =
          co_await stream_->async_read_some(asio::buffer(sink), asio::as_tuple(asio::use_awaitable));
      if (ec) co_return ec;
    }
  }

  // Starts a watch: sends the request and reads the response header; the status.
  asio::awaitable<unsigned> StartWatch(std::string target, std::string authorization = {}) {
    if (!stream_) {
      if (co_await Connect()) co_return 0;
    }
    http::request<http::empty_body> req{http::verb::get, target, 11};
    req.set(http::field::host, fmt::format("127.0.0.1:{}", port_));
    if (!authorization.empty()) req.set(http::field::authorization, authorization);
    beast::get_lowest_layer(*stream_).expires_after(5s);
    co_await http::async_write(*stream_, req, asio::use_awaitable);
    watch_.emplace();
    watch_->body_limit(boost::none);
    co_await http::async_read_header(*stream_, buffer_, *watch_, asio::use_awaitable);
    co_return watch_->get().result_int();
  }

  // Reads the watch body until it holds `text` (true) or the stream ends or times out (false).
  asio::awaitable<bool> WatchUntil(std::string_view text) {
    while (watch_->get().body().find(text) == std::string::npos) {
      if (watch_->is_done()) co_return false;
      beast::get_lowest_layer(*stream_).expires_after(3s);
      auto [ec, n] =
          co_await http::async_read_some(*stream_, buffer_, *watch_, asio::as_tuple(asio::use_awaitable));
      if (ec) co_return false;
    }
    co_return true;
  }

  // Leaves politely: TLS close_notify (not waiting for the server's), then closes the socket.
  asio::awaitable<void> Leave() {
    beast::get_lowest_layer(*stream_).expires_after(1s);
    SSL_shutdown(stream_->native_handle());  // queues close_notify in the TLS engine's output
    // Flush it: a zero-length write pushes the engine's pending output to the socket.
    co_await asio::async_write(*stream_, asio::const_buffer(), asio::as_tuple(asio::use_awaitable));
    beast::error_code ignored;
    beast::get_lowest_layer(*stream_).socket().close(ignored);
  }

  int connects() const { return connects_; }

 private:
  std::uint16_t port_;
  asio::ssl::context ctx_;
  std::optional<beast::ssl_stream<beast::tcp_stream>> stream_;
  beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::string_body>> watch_;
  int connects_ = 0;
};

constexpr std::string_view kToken = "s3cret-token";

// HTTPS with the shared test CA; `auth`: client certificates and the token are accepted and required.
ApiServerOptions TlsOptions(bool auth) {
  const auto& pki = testing::SharedTestPki();
  ApiServerOptions o;
  o.tls_cert_pem = pki.server.cert_pem;
  o.tls_key_pem = pki.server.key_pem;
  o.ca_pem = pki.ca.cert_pem;
  if (auth) {
    o.client_ca_pem = pki.ca.cert_pem;
    o.tokens = {"another-token", std::string(kToken)};
    o.require_auth = true;
  }
  return o;
}

std::string Bearer(std::string_view token) { return fmt::format("Bearer {}", token); }

TEST_F(SimApiServer, ServesHttpsWithKeepAliveAndWatches) {
  Restart(TlsOptions(false));
  EXPECT_TRUE(server_->tls());
  EXPECT_EQ(server_->url(), fmt::format("https://127.0.0.1:{}", port_));
  Run([&]() -> asio::awaitable<void> {
    TlsClient c(port_, testing::SharedTestPki().ca.cert_pem);
    for (int i = 0; i < 3; ++i) EXPECT_EQ((co_await c.Get("/api/v1/nodes")).status, 200u);
    EXPECT_EQ(c.connects(), 1) << "keep-alive over TLS";
    // A watch streams chunked events over TLS like over TCP.
    TlsClient w(port_, testing::SharedTestPki().ca.cert_pem);
    EXPECT_EQ(co_await w.StartWatch("/api/v1/namespaces/default/pods?watch=true&resourceVersion=" + Rv()),
              200u);
    CO_ASSERT_TRUE(store().Create(json::value(PodObject("over-tls"))).has_value());
    EXPECT_TRUE(co_await w.WatchUntil(R"("name":"over-tls")"));
    EXPECT_EQ(server_->open_watches(), 1u);
    // A client that leaves with a close_notify is noticed without waiting for an event or the timeout.
    co_await w.Leave();
    EXPECT_TRUE(co_await Eventually([&] { return server_->open_watches() == 0; }));
    // Plain HTTP to the HTTPS port gets no answer.
    Client plain(port_);
    bool answered = true;
    try {
      (void)co_await plain.Get("/version");
    } catch (const boost::system::system_error&) {
      answered = false;
    }
    EXPECT_FALSE(answered);
  }());
}

TEST_F(SimApiServer, ClosesTlsConnectionsWithCloseNotify) {
  Restart(TlsOptions(false));
  Run([&]() -> asio::awaitable<void> {
    TlsClient c(port_, testing::SharedTestPki().ca.cert_pem);
    EXPECT_EQ((co_await c.Get("/version", {}, /*close=*/true)).status, 200u);
    EXPECT_EQ(co_await c.ReadEnd(), asio::error::eof) << "a clean TLS end, not a truncated stream";
  }());
}

TEST_F(SimApiServer, TlsHandshakeHasADeadline) {
  ApiServerOptions o = TlsOptions(false);
  o.tls_handshake_timeout = 100ms;
  Restart(o);
  Run([&]() -> asio::awaitable<void> {
    // A client that connects and never says hello is dropped once the handshake deadline passes.
    beast::tcp_stream silent(co_await asio::this_coro::executor);
    silent.expires_after(3s);
    co_await silent.async_connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port_),
                                  asio::use_awaitable);
    EXPECT_TRUE(co_await Eventually([&] { return server_->open_connections() == 1; }));
    const auto start = std::chrono::steady_clock::now();
    std::array<char, 16> sink;
    auto [ec, n] = co_await silent.async_read_some(asio::buffer(sink), asio::as_tuple(asio::use_awaitable));
    EXPECT_TRUE(ec == asio::error::eof || ec == asio::error::connection_reset) << ec.message();
    EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
    EXPECT_TRUE(co_await Eventually([&] { return server_->open_connections() == 0; }));
  }());
}

TEST_F(SimApiServer, TlsClientMustTrustTheServingCa) {
  Restart(TlsOptions(false));
  Run([&]() -> asio::awaitable<void> {
    const auto other_ca = testing::MakeTestCa("some-other-ca");
    TlsClient c(port_, other_ca.cert_pem);
    EXPECT_TRUE(co_await c.Connect()) << "the handshake fails: the server's certificate is not from this CA";
  }());
}

TEST_F(SimApiServer, RequiresCredentialsAnswering401) {
  Restart(TlsOptions(true));
  Run([&]() -> asio::awaitable<void> {
    TlsClient c(port_, testing::SharedTestPki().ca.cert_pem);
    const Response r = co_await c.Get("/api/v1/namespaces/default/pods");
    EXPECT_EQ(r.status, 401u) << r.body;
    EXPECT_EQ(Str(r.Json(), {"kind"}), "Status");
    EXPECT_EQ(Str(r.Json(), {"reason"}), "Unauthorized");
    EXPECT_EQ(Str(r.Json(), {"code"}), "401");
    EXPECT_EQ((co_await c.Get("/api/v1/nodes", Bearer("wrong"))).status, 401u);
    EXPECT_EQ((co_await c.Get("/api/v1/nodes", "Basic YWRtaW46YWRtaW4=")).status, 401u);
    EXPECT_EQ((co_await c.Get("/apis")).status, 401u);
    // Discovery of the version and health stays open.
    EXPECT_EQ((co_await c.Get("/version")).status, 200u);
    EXPECT_EQ((co_await c.Get("/healthz")).status, 200u);
    EXPECT_EQ((co_await c.Get("/readyz")).status, 200u);
    EXPECT_EQ(c.connects(), 1) << "a 401 keeps the connection";
    // Watches are refused before streaming.
    TlsClient w(port_, testing::SharedTestPki().ca.cert_pem);
    EXPECT_EQ(co_await w.StartWatch("/api/v1/pods?watch=true"), 401u);
  }());
  EXPECT_EQ(store().Objects("pods").size(), 0u);
}

TEST_F(SimApiServer, AcceptsAConfiguredBearerToken) {
  Restart(TlsOptions(true));
  Run([&]() -> asio::awaitable<void> {
    TlsClient c(port_, testing::SharedTestPki().ca.cert_pem);
    EXPECT_EQ((co_await c.Get("/api/v1/nodes", Bearer(kToken))).status, 200u);
    EXPECT_EQ((co_await c.Get("/api/v1/nodes", "bearer " + std::string(kToken))).status, 200u);
    EXPECT_EQ((co_await c.Get("/api/v1/nodes", Bearer("another-token"))).status, 200u);
    EXPECT_EQ((co_await c.Get("/api/v1/nodes", Bearer(std::string(kToken) + "x"))).status, 401u);
    EXPECT_EQ((co_await c.Get("/api/v1/nodes", Bearer(kToken.substr(1)))).status, 401u);
    // Credentials are per request: the next one without a token is refused on the same connection.
    EXPECT_EQ((co_await c.Get("/api/v1/nodes")).status, 401u);
    TlsClient w(port_, testing::SharedTestPki().ca.cert_pem);
    EXPECT_EQ(co_await w.StartWatch("/api/v1/nodes?watch=true", Bearer(kToken)), 200u);
  }());
}

TEST_F(SimApiServer, TokensAuthenticateOverPlainHttpToo) {
  ApiServerOptions o;
  o.tokens = {std::string(kToken)};
  o.require_auth = true;
  Restart(o);
  EXPECT_FALSE(server_->tls());
  Run([&]() -> asio::awaitable<void> {
    Client c(port_);
    EXPECT_EQ((co_await c.Get("/api/v1/nodes")).status, 401u);
    EXPECT_EQ((co_await c.Send(http::verb::get, "/version")).status, 200u);
  }());
}

TEST_F(SimApiServer, AcceptsAClientCertificateFromTheClientCa) {
  Restart(TlsOptions(true));
  Run([&]() -> asio::awaitable<void> {
    const auto& pki = testing::SharedTestPki();
    TlsClient c(port_, pki.ca.cert_pem, &pki.client);
    EXPECT_EQ((co_await c.Get("/api/v1/nodes")).status, 200u);
    EXPECT_EQ((co_await c.Get("/api/v1/namespaces/default/pods")).status, 200u);
    // A wrong token does not undo a verified certificate (kube-apiserver takes the first authenticator
    // that succeeds).
    EXPECT_EQ((co_await c.Get("/api/v1/nodes", Bearer("wrong"))).status, 200u);
    TlsClient w(port_, pki.ca.cert_pem, &pki.client);
    EXPECT_EQ(co_await w.StartWatch("/api/v1/nodes?watch=true"), 200u);
  }());
}

TEST_F(SimApiServer, RefusesClientCertificatesFromAnotherCaOrForServers) {
  Restart(TlsOptions(true));
  Run([&]() -> asio::awaitable<void> {
    const auto& pki = testing::SharedTestPki();
    const auto other_ca = testing::MakeTestCa("not-the-client-ca");
    const auto stranger = testing::MakeClientCert(other_ca, "test-user", {"system:masters"});
    TlsClient c(port_, pki.ca.cert_pem, &stranger);
    const Response r = co_await c.Get("/api/v1/nodes");
    EXPECT_EQ(r.status, 401u) << "the handshake completes; the request is not authenticated: " << r.body;
    EXPECT_EQ(Str(r.Json(), {"reason"}), "Unauthorized");
    // A token still authenticates that connection's requests.
    EXPECT_EQ((co_await c.Get("/api/v1/nodes", Bearer(kToken))).status, 200u);
    // The serving certificate is from the right CA but not for client authentication.
    TlsClient s(port_, pki.ca.cert_pem, &pki.server);
    EXPECT_EQ((co_await s.Get("/api/v1/nodes")).status, 401u);
  }());
}

TEST_F(SimApiServer, ListenChecksTheTlsOptions) {
  const auto& pki = testing::SharedTestPki();
  const auto listen_error = [&](ApiServerOptions o) {
    ApiServer s(ioc_, std::move(o));
    auto port = s.Listen();
    return port ? std::string("listened") : port.error().message;
  };
  ApiServerOptions no_key;
  no_key.tls_cert_pem = pki.server.cert_pem;
  EXPECT_NE(listen_error(no_key).find("both a certificate and its private key"), std::string::npos);
  ApiServerOptions ca_without_tls;
  ca_without_tls.client_ca_pem = pki.ca.cert_pem;
  EXPECT_NE(listen_error(ca_without_tls).find("need TLS"), std::string::npos);
  ApiServerOptions wrong_key = TlsOptions(false);
  wrong_key.tls_key_pem = pki.client.key_pem;
  EXPECT_NE(listen_error(wrong_key).find("does not belong to the certificate"), std::string::npos)
      << listen_error(wrong_key);
  ApiServerOptions garbage = TlsOptions(false);
  garbage.tls_cert_pem = "not a certificate";
  EXPECT_NE(listen_error(garbage).find("TLS certificate: no PEM certificate"), std::string::npos);
  ApiServerOptions bad_ca = TlsOptions(true);
  bad_ca.client_ca_pem = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
  EXPECT_NE(listen_error(bad_ca).find("client CA"), std::string::npos);
}

TEST_F(SimApiServer, KubeconfigTrustsTheCaAndCarriesTheCredentials) {
  const auto& pki = testing::SharedTestPki();
  ApiServerOptions o = TlsOptions(true);
  o.kubeconfig_token = "tok\"en";
  o.kubeconfig_client_cert_pem = pki.client.cert_pem;
  o.kubeconfig_client_key_pem = pki.client.key_pem;
  Restart(o);
  auto cfg = k8s::ParseKubeconfig(server_->Kubeconfig(), "sim", k8s::ConfigEnv::System());
  ASSERT_TRUE(cfg) << cfg.error().message << "\n" << server_->Kubeconfig();
  EXPECT_EQ(cfg->scheme, "https");
  EXPECT_EQ(cfg->host, "127.0.0.1");
  EXPECT_EQ(cfg->port, std::to_string(port_));
  EXPECT_EQ(cfg->ca_pem, pki.ca.cert_pem);
  EXPECT_EQ(cfg->token, "tok\"en");
  EXPECT_EQ(cfg->client_cert_pem, pki.client.cert_pem);
  EXPECT_EQ(cfg->client_key_pem, pki.client.key_pem);
  // Without ca_pem it trusts the serving certificate itself (right for self-signed ones).
  ApiServerOptions self_signed = TlsOptions(false);
  self_signed.ca_pem.clear();
  Restart(self_signed);
  auto cfg2 = k8s::ParseKubeconfig(server_->Kubeconfig(), "sim", k8s::ConfigEnv::System());
  ASSERT_TRUE(cfg2) << cfg2.error().message;
  EXPECT_EQ(cfg2->ca_pem, pki.server.cert_pem);
  EXPECT_TRUE(cfg2->token.empty());
  // Plain HTTP: no CA, no credentials.
  Restart({});
  auto cfg3 = k8s::ParseKubeconfig(server_->Kubeconfig(), "sim", k8s::ConfigEnv::System());
  ASSERT_TRUE(cfg3) << cfg3.error().message;
  EXPECT_EQ(cfg3->scheme, "http");
  EXPECT_TRUE(cfg3->ca_pem.empty());
}

TEST(StaticTokens, ParsesKubeApiserverTokenFiles) {
  auto tokens = cmd::ParseStaticTokens(
      "t1,alice,uid-1\n"
      "\n"
      "t2, bob ,uid-2,\"system:masters,devs\"\r\n"
      "\"t,3\",carol,uid-3,\"a \"\"quoted\"\" group\"\n",
      "tokens.csv");
  ASSERT_TRUE(tokens) << tokens.error().message;
  ASSERT_EQ(tokens->size(), 3u);
  EXPECT_EQ((*tokens)[0].token, "t1");
  EXPECT_EQ((*tokens)[0].user, "alice");
  EXPECT_EQ((*tokens)[0].uid, "uid-1");
  EXPECT_TRUE((*tokens)[0].groups.empty());
  EXPECT_EQ((*tokens)[1].user, "bob ");
  EXPECT_EQ((*tokens)[1].groups, (std::vector<std::string>{"system:masters", "devs"}));
  EXPECT_EQ((*tokens)[2].token, "t,3");
  EXPECT_EQ((*tokens)[2].groups, (std::vector<std::string>{"a \"quoted\" group"}));
  auto short_line = cmd::ParseStaticTokens("t1,alice,uid-1\nt2,bob\n", "tokens.csv");
  ASSERT_FALSE(short_line);
  EXPECT_NE(short_line.error().message.find("tokens.csv:2:"), std::string::npos)
      << short_line.error().message;
  auto unterminated = cmd::ParseStaticTokens("t1,alice,uid,\"g1\n", "tokens.csv");
  ASSERT_FALSE(unterminated);
  EXPECT_NE(unterminated.error().message.find("unterminated"), std::string::npos);
  EXPECT_FALSE(cmd::ParseStaticTokens(",alice,uid\n", "tokens.csv"));
}

// A file in the temporary directory, removed at the end of the test.
class TempFile {
 public:
  explicit TempFile(std::string_view name, std::string_view content = {})
      : path_((std::filesystem::temp_directory_path() / fmt::format("hami-sim-test-{}-{}", ::getpid(), name))
                  .string()) {
    if (!content.empty()) {
      std::ofstream(path_, std::ios::binary) << content;
    }
  }
  ~TempFile() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs `sim-apiserver args` on its own io_context; `check` runs there once it serves (with the server and
// the command's io_context), then the server stops. Returns the exit code; the whole run has a deadline.
int RunCommandAndCheck(const std::vector<std::string>& args, std::ostringstream& out, std::ostringstream& err,
                       std::function<asio::awaitable<void>(ApiServer&, asio::io_context&)> check) {
  bool checked = false;
  cmd::SimApiServerHooks hooks;
  hooks.on_serving = [&](ApiServer& server, asio::io_context& ioc) {
    auto deadline = std::make_shared<asio::steady_timer>(ioc, 10s);
    deadline->async_wait([&server](const boost::system::error_code& ec) {
      if (ec) return;
      ADD_FAILURE() << "the check did not finish within 10 s";
      server.Stop();
    });
    asio::co_spawn(ioc, check(server, ioc), [&server, &checked, deadline](std::exception_ptr e) {
      checked = true;
      if (e) {
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& x) {
          ADD_FAILURE() << "the check threw: " << x.what();
        }
      }
      deadline->cancel();
      server.Stop();
    });
  };
  const int rc = cmd::SimApiServer(args, out, err, hooks);
  EXPECT_TRUE(checked) << "the server never served: " << err.str();
  return rc;
}

TEST(ApiServerCommand, GenerateTlsWritesAKubeconfigTheClientUses) {
  TempFile kubeconfig("generate-tls.kubeconfig");
  std::ostringstream out;
  std::ostringstream err;
  const int rc = RunCommandAndCheck(
      {"--generate-tls", "--kubeconfig-out", kubeconfig.path()}, out, err,
      [&](ApiServer& server, asio::io_context& ioc) -> asio::awaitable<void> {
        // (Executors and clients in named variables: GCC 12 mishandles temporaries in co_await expressions.)
        const asio::any_io_executor executor = ioc.get_executor();
        EXPECT_TRUE(server.url().starts_with("https://127.0.0.1:")) << server.url();
        struct stat st {};
        EXPECT_EQ(::stat(kubeconfig.path().c_str(), &st), 0);
        EXPECT_EQ(st.st_mode & 0777, 0600u) << "the kubeconfig holds a private key";
        auto cfg = k8s::ResolveRestConfig(kubeconfig.path(), k8s::ConfigEnv::System());
        CO_ASSERT_TRUE(cfg.has_value());
        EXPECT_EQ(cfg->scheme, "https");
        EXPECT_FALSE(cfg->ca_pem.empty());
        EXPECT_FALSE(cfg->client_cert_pem.empty());
        auto client = k8s::ApiClient::Create(executor, *cfg).value();
        const std::string nodes = "/api/v1/nodes";
        auto listed = co_await client->Get(nodes);
        EXPECT_TRUE(listed) << listed.error().message;
        // Without the client certificate: 401.
        k8s::RestConfig anonymous = *cfg;
        anonymous.client_cert_pem.clear();
        anonymous.client_key_pem.clear();
        k8s::ClientOptions once;
        once.max_attempts = 1;
        auto refused_client = k8s::ApiClient::Create(executor, anonymous, once).value();
        auto refused = co_await refused_client->Get(nodes);
        CO_ASSERT_TRUE(!refused);
        EXPECT_EQ(refused.error().kind, k8s::ApiErrorKind::kUnauthorized) << refused.error().message;
      });
  EXPECT_EQ(rc, 0) << err.str();
  EXPECT_NE(out.str().find("sim-apiserver: serving https://127.0.0.1:"), std::string::npos) << out.str();
}

TEST(ApiServerCommand, TokenAuthFileAndClientCaFile) {
  const auto& pki = testing::SharedTestPki();
  TempFile tokens("tokens.csv", "tok-1,alice,uid-1,\"system:masters\"\ntok-2,bob,uid-2\n");
  TempFile cert("server.crt", pki.server.cert_pem + pki.ca.cert_pem);
  TempFile key("server.key", pki.server.key_pem);
  TempFile client_ca("client-ca.crt", pki.ca.cert_pem);
  TempFile kubeconfig("token.kubeconfig");
  std::ostringstream out;
  std::ostringstream err;
  const int rc = RunCommandAndCheck(
      {"--tls-cert-file", cert.path(), "--tls-private-key-file", key.path(), "--client-ca-file",
       client_ca.path(), "--token-auth-file", tokens.path(), "--kubeconfig-out", kubeconfig.path()},
      out, err, [&](ApiServer& server, asio::io_context& ioc) -> asio::awaitable<void> {
        const asio::any_io_executor executor = ioc.get_executor();
        auto cfg = k8s::ResolveRestConfig(kubeconfig.path(), k8s::ConfigEnv::System());
        CO_ASSERT_TRUE(cfg.has_value());
        EXPECT_EQ(cfg->token, "tok-1") << "the kubeconfig uses the first token";
        auto client = k8s::ApiClient::Create(executor, *cfg).value();
        const std::string nodes = "/api/v1/nodes";
        auto listed = co_await client->Get(nodes);
        EXPECT_TRUE(listed) << listed.error().message;
        // A client certificate from --client-ca-file works too.
        k8s::RestConfig by_cert = *cfg;
        by_cert.token.clear();
        by_cert.client_cert_pem = pki.client.cert_pem;
        by_cert.client_key_pem = pki.client.key_pem;
        auto cert_client = k8s::ApiClient::Create(executor, by_cert).value();
        auto by_cert_listed = co_await cert_client->Get(nodes);
        EXPECT_TRUE(by_cert_listed) << by_cert_listed.error().message;
        EXPECT_EQ(server.store().Objects("nodes").size(), 0u);
      });
  EXPECT_EQ(rc, 0) << err.str();
  EXPECT_NE(out.str().find("2 token(s)"), std::string::npos) << out.str();
}

TEST(ApiServerCommand, RejectsInconsistentTlsFlags) {
  const auto& pki = testing::SharedTestPki();
  TempFile cert("flags.crt", pki.server.cert_pem);
  TempFile bad_tokens("bad-tokens.csv", "only-a-token\n");
  const auto run = [](const std::vector<std::string>& args) {
    std::ostringstream out;
    std::ostringstream err;
    const int rc = cmd::SimApiServer(args, out, err);
    return std::make_pair(rc, err.str());
  };
  auto [rc1, err1] = run({"--tls-cert-file", cert.path()});
  EXPECT_EQ(rc1, 2);
  EXPECT_NE(err1.find("must be given together"), std::string::npos) << err1;
  auto [rc2, err2] = run({"--client-ca-file", cert.path()});
  EXPECT_EQ(rc2, 2);
  EXPECT_NE(err2.find("--client-ca-file needs TLS"), std::string::npos) << err2;
  auto [rc3, err3] =
      run({"--generate-tls", "--tls-cert-file", cert.path(), "--tls-private-key-file", cert.path()});
  EXPECT_EQ(rc3, 2);
  EXPECT_NE(err3.find("alternatives"), std::string::npos) << err3;
  auto [rc4, err4] = run({"--token-auth-file", bad_tokens.path()});
  EXPECT_EQ(rc4, 2);
  EXPECT_NE(err4.find(":1: want token,user,uid"), std::string::npos) << err4;
  auto [rc5, err5] = run({"--tls-cert-file", "/nonexistent.crt", "--tls-private-key-file", cert.path()});
  EXPECT_EQ(rc5, 2);
  EXPECT_NE(err5.find("--tls-cert-file: cannot read '/nonexistent.crt'"), std::string::npos) << err5;
  auto [rc6, err6] = run({"--tls-cert-file", cert.path(), "--tls-private-key-file", cert.path()});
  EXPECT_EQ(rc6, 1) << "the key is not a key: Listen fails";
  EXPECT_NE(err6.find("TLS private key"), std::string::npos) << err6;
}

}  // namespace
}  // namespace hami::sim
