#include <fmt/format.h>
#include <gtest/gtest.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <boost/json.hpp>
#include <map>
#include <random>

#include "k8s/api_client.h"
#include "k8s/reflector.h"
#include "k8s/rest_config.h"
#include "tests/support/raw_http_server.h"
#include "tests/support/run_coro.h"

namespace hami::k8s {
namespace {
namespace asio = boost::asio;
namespace json = boost::json;
namespace http = boost::beast::http;
using namespace std::chrono_literals;
using testing::RawHttpServer;
using testing::RunCoro;

ConfigEnv FakeEnv(std::map<std::string, std::string> env, std::map<std::string, std::string> files) {
  ConfigEnv e;
  e.getenv = [env](const std::string& k) -> std::optional<std::string> {
    auto it = env.find(k);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  e.read_file = [files](const std::string& p) -> Result<std::string> {
    auto it = files.find(p);
    if (it == files.end()) return Error{"cannot read '" + p + "'"};
    return Ok(it->second);
  };
  return e;
}

constexpr const char* kKubeconfig = R"(
apiVersion: v1
kind: Config
current-context: dev
contexts:
- name: dev
  context: {cluster: c1, user: u1, namespace: team}
- name: ops
  context: {cluster: c2, user: u2}
clusters:
- name: c1
  cluster:
    server: https://[fd00::1]:6443
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t
- name: c2
  cluster:
    server: http://127.0.0.1:8080
    insecure-skip-tls-verify: true
users:
- name: u1
  user:
    client-certificate: certs/admin.crt
    client-key: certs/admin.key
- name: u2
  user:
    tokenFile: token
)";

TEST(RestConfig, KubeconfigCurrentContext) {
  auto env =
      FakeEnv({}, {{"/home/me/.kube/certs/admin.crt", "CERT"}, {"/home/me/.kube/certs/admin.key", "KEY"}});
  auto cfg = ParseKubeconfig(kKubeconfig, "/home/me/.kube/config", env).value();
  EXPECT_EQ(cfg.scheme, "https");
  EXPECT_EQ(cfg.host, "fd00::1");
  EXPECT_EQ(cfg.port, "6443");
  EXPECT_EQ(cfg.HostHeader(), "[fd00::1]:6443");
  EXPECT_EQ(cfg.ca_pem, "-----BEGIN CERTIFICATE-----");  // decoded in memory
  EXPECT_EQ(cfg.client_cert_pem, "CERT");                // relative paths resolve next to the kubeconfig
  EXPECT_EQ(cfg.client_key_pem, "KEY");
  EXPECT_EQ(cfg.ns, "team");
}

TEST(RestConfig, KubeconfigOtherContextAndErrors) {
  auto env = FakeEnv({}, {});
  auto cfg = ParseKubeconfig(kKubeconfig, "/etc/kc", env, "ops").value();
  EXPECT_EQ(cfg.scheme, "http");
  EXPECT_EQ(cfg.token_file, "/etc/token");
  EXPECT_TRUE(cfg.insecure_skip_tls_verify);
  auto missing_ctx = ParseKubeconfig(kKubeconfig, "/etc/kc", env, "nope");
  ASSERT_FALSE(missing_ctx);
  EXPECT_NE(missing_ctx.error().message.find("context 'nope' not found"), std::string::npos);
  auto missing_file = ParseKubeconfig(kKubeconfig, "/etc/kc", env);
  ASSERT_FALSE(missing_file);
  EXPECT_NE(missing_file.error().message.find("client-certificate"), std::string::npos);
  EXPECT_FALSE(ParseKubeconfig("a: [", "/etc/kc", env));
}

TEST(RestConfig, InClusterAndResolutionOrder) {
  const std::string dir = "/var/run/secrets/kubernetes.io/serviceaccount/";
  auto env =
      FakeEnv({{"KUBERNETES_SERVICE_HOST", "10.0.0.1"}, {"KUBERNETES_SERVICE_PORT", "443"}},
              {{dir + "token", "tok\n"}, {dir + "ca.crt", "CA"}, {dir + "namespace", "hami-system\n"}});
  auto cfg = InClusterConfig(env).value();
  EXPECT_EQ(cfg.host, "10.0.0.1");
  EXPECT_EQ(cfg.token_file, dir + "token");
  EXPECT_EQ(cfg.ca_pem, "CA");
  EXPECT_EQ(cfg.ns, "hami-system");
  EXPECT_EQ(ResolveRestConfig("", env).value().source, "in-cluster service account");
  auto none = ResolveRestConfig("", FakeEnv({}, {}));
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("KUBERNETES_SERVICE_HOST"), std::string::npos);
  // $KUBECONFIG is a list: the first file that exists wins.
  auto listed =
      FakeEnv({{"KUBECONFIG", "/missing:/etc/kc"}}, {{"/etc/kc", kKubeconfig}, {"/etc/token", "t"}});
  EXPECT_EQ(ResolveRestConfig("", listed).error().message.find("context"), std::string::npos);
}

TEST(RestConfig, ServerUrlsAndBase64) {
  RestConfig c;
  ASSERT_TRUE(SetServer("https://api.example.com", c));
  EXPECT_EQ(c.port, "443");
  ASSERT_TRUE(SetServer("http://localhost:8001/base", c));
  EXPECT_EQ(c.host, "localhost");
  EXPECT_EQ(c.port, "8001");
  EXPECT_FALSE(SetServer("localhost:8001", c));
  EXPECT_FALSE(SetServer("ftp://x", c));
  EXPECT_EQ(Base64Decode("aGFtaQ==").value(), "hami");
  EXPECT_FALSE(Base64Decode("**"));
}

TEST(RateLimiter, BurstThenQps) {
  RateLimiter limiter(10, 3);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(limiter.Reserve(t0), std::chrono::steady_clock::duration::zero());
  EXPECT_EQ(limiter.Reserve(t0), std::chrono::steady_clock::duration::zero());
  EXPECT_EQ(limiter.Reserve(t0), std::chrono::steady_clock::duration::zero());
  const auto wait = limiter.Reserve(t0);
  EXPECT_NEAR(std::chrono::duration<double>(wait).count(), 0.1, 1e-6);
  const auto wait2 = limiter.Reserve(t0);
  EXPECT_NEAR(std::chrono::duration<double>(wait2).count(), 0.2, 1e-6);
  // After a second, tokens are back (capped at the burst).
  EXPECT_EQ(limiter.Reserve(t0 + 2s), std::chrono::steady_clock::duration::zero());
}

TEST(RateLimiter, BackgroundRequestsOnlyUseTokensNoDecisionBooked) {
  RateLimiter limiter(10, 2);
  const auto t0 = std::chrono::steady_clock::now();
  const auto seconds = [](std::chrono::steady_clock::duration d) {
    return std::chrono::duration<double>(d).count();
  };
  EXPECT_FALSE(limiter.TryTake(t0));  // a free token: taken
  EXPECT_EQ(limiter.Reserve(t0), std::chrono::steady_clock::duration::zero());
  // Empty: a background request is told to come back when a token would be free...
  auto again = limiter.TryTake(t0);
  ASSERT_TRUE(again);
  EXPECT_NEAR(seconds(*again), 0.1, 1e-6);
  // ...but a decision books that token first, and the next one too.
  EXPECT_NEAR(seconds(limiter.Reserve(t0 + 50ms)), 0.05, 1e-6);
  EXPECT_NEAR(seconds(limiter.Reserve(t0 + 50ms)), 0.15, 1e-6);
  EXPECT_TRUE(limiter.TryTake(t0 + 100ms));
  EXPECT_TRUE(limiter.TryTake(t0 + 200ms));
  // Once the decisions' bookings are paid back, the background request goes.
  EXPECT_FALSE(limiter.TryTake(t0 + 300ms));
  RateLimiter unlimited(0, 1);
  EXPECT_FALSE(unlimited.TryTake(t0));
}

TEST(Backoff, CappedExponentialWithJitter) {
  std::mt19937 rng(7);
  for (int attempt = 0; attempt < 12; ++attempt) {
    const auto d = Backoff(attempt, 800ms, 30000ms, rng);
    const std::int64_t full = std::min<std::int64_t>(800LL << attempt, 30000);
    EXPECT_GE(d.count(), full / 2) << attempt;
    EXPECT_LE(d.count(), full) << attempt;
  }
}

TEST(ApiError, FromStatusBody) {
  HttpResponse r{
      409,
      R"({"kind":"Status","status":"Failure","reason":"Conflict","message":"the object has been modified","code":409})",
      "application/json", std::nullopt};
  auto e = ErrorFromResponse(r, "PATCH /api/v1/nodes/n1");
  EXPECT_EQ(e.kind, ApiErrorKind::kConflict);
  EXPECT_EQ(e.reason, "Conflict");
  EXPECT_NE(e.message.find("PATCH /api/v1/nodes/n1: HTTP 409 Conflict: the object has been modified"),
            std::string::npos);
  EXPECT_EQ(ErrorFromResponse({404, "not json", "", std::nullopt}, "GET x").kind, ApiErrorKind::kNotFound);
  EXPECT_EQ(ErrorFromResponse({410, "", "", std::nullopt}, "x").kind, ApiErrorKind::kGone);
  EXPECT_EQ(ErrorFromResponse({503, "", "", std::nullopt}, "x").kind, ApiErrorKind::kServer);
}

TEST(Paths, CoreAndGroups) {
  EXPECT_EQ(PathFor("v1", "pods", "default", "p"), "/api/v1/namespaces/default/pods/p");
  EXPECT_EQ(PathFor("v1", "nodes"), "/api/v1/nodes");
  EXPECT_EQ(PathFor("coordination.k8s.io/v1", "leases", "kube-system", "l"),
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l");
  EXPECT_EQ(UrlEncode("app in (a,b)"), "app%20in%20%28a%2Cb%29");
}

// A name can neither add segments, a query nor a second request to a path.
TEST(Paths, NamesAreEscapedSegments) {
  EXPECT_EQ(PathFor("v1", "pods", "default", "../../nodes/n2"),
            "/api/v1/namespaces/default/pods/..%2F..%2Fnodes%2Fn2");
  EXPECT_EQ(PathFor("v1", "pods", "default", "p?dryRun=All"),
            "/api/v1/namespaces/default/pods/p%3FdryRun%3DAll");
  EXPECT_EQ(PathFor("v1", "pods", "default", "p HTTP/1.1\r\nX: y"),
            "/api/v1/namespaces/default/pods/p%20HTTP%2F1.1%0D%0AX%3A%20y");
  EXPECT_EQ(PathFor("v1", "nodes", "", ".."), "/api/v1/nodes/%2E%2E");
  EXPECT_EQ(PathFor("v1", "pods", ".", "p"), "/api/v1/namespaces/%2E/pods/p");
  EXPECT_EQ(PathFor("v1", "nodes", "", "a..b"), "/api/v1/nodes/a..b");
}

TEST(ValidateRequest, RefusesWhatCouldSplitOrRedirectARequest) {
  const auto refused = [](std::string target, std::string authorization = "") {
    HttpRequest r;
    r.target = std::move(target);
    r.authorization = std::move(authorization);
    auto v = ValidateRequest(r);
    return v ? std::string() : v.error().message;
  };
  EXPECT_EQ(refused("/api/v1/nodes/n1"), "");
  EXPECT_EQ(refused("/api/v1/pods?labelSelector=a%3Db&watch=1"), "");
  EXPECT_EQ(refused("/api/v1/nodes/a..b"), "");
  EXPECT_NE(refused("/api/v1/nodes/n1 HTTP/1.1\r\nHost: x\r\n\r\nDELETE /api/v1/nodes/n2"), "");
  EXPECT_NE(refused(std::string("/api/v1/nodes/n\0", 16)), "");
  EXPECT_NE(refused("/api/v1/nodes/n\x7f"), "");
  EXPECT_NE(refused("/api/v1/nodes/\xc3\xa9"), "");
  EXPECT_NE(refused("/api/v1/namespaces/default/pods/../../nodes/n2"), "");
  EXPECT_NE(refused("/api/v1/nodes/%2e%2E"), "");
  EXPECT_NE(refused("/api/v1/nodes/.%2E/x"), "");
  EXPECT_NE(refused("/api/v1/nodes/./x"), "");
  EXPECT_NE(refused("api/v1/nodes"), "");
  EXPECT_NE(refused("/api/v1/nodes", "Bearer x\r\nX-Forged: 1"), "");
  EXPECT_NE(refused("/api/v1/nodes/n1 x").find("percent-escaped"), std::string::npos);
}

// --- over loopback, against scripted answers
// -------------------------------------------------------------------

class ScriptedServer : public ::testing::Test {
 protected:
  ScriptedServer() : server_(ioc_) {}
  std::unique_ptr<ApiClient> Client(ClientOptions o = {}) {
    RestConfig cfg = LoopbackHttp(server_.port());
    cfg.token = "secret";
    o.qps = 0;  // unlimited
    o.backoff_initial = 1ms;
    o.backoff_max = 5ms;
    return ApiClient::Create(ioc_.get_executor(), cfg, o).value();
  }
  asio::io_context ioc_;
  RawHttpServer server_;
};

TEST_F(ScriptedServer, RetriesServerErrorsAndHonoursRetryAfterZero) {
  server_.Add(RawHttpServer::Json(503, R"({"kind":"Status","reason":"ServiceUnavailable","code":503})"));
  server_.Add(RawHttpServer::Json(429, R"({"kind":"Status","reason":"TooManyRequests","code":429})",
                                  "Retry-After: 0\r\n"));
  server_.Add(RawHttpServer::Json(200, R"({"kind":"Node","metadata":{"name":"n1"}})"));
  auto client = Client();
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    const std::string path = "/api/v1/nodes/n1";
    auto node = co_await client->Get(path);
    EXPECT_TRUE(node) << (node ? "" : node.error().message);
    if (node) {
      EXPECT_EQ(node->at("metadata").at("name").as_string(), "n1");
    }
  }());
  ASSERT_EQ(server_.requests().size(), 3u);
  EXPECT_NE(server_.requests()[0].find("Authorization: Bearer secret"), std::string::npos);
  EXPECT_NE(server_.requests()[0].find("GET /api/v1/nodes/n1 HTTP/1.1"), std::string::npos);
  // Keep-alive: the three requests went over one connection.
  EXPECT_EQ(client->http().connections_opened(), 1u);
}

// A request the client refuses is never sent, never retried, and says why.
TEST_F(ScriptedServer, MalformedRequestIsRefusedNotSent) {
  server_.Add(RawHttpServer::Json(200, R"({"kind":"Node","metadata":{"name":"n1"}})"));
  auto client = Client();
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    const std::string path = "/api/v1/nodes/n1\r\nDELETE /api/v1/nodes/n2";
    auto r = co_await client->Delete(path);
    EXPECT_FALSE(r);
    if (!r) {
      EXPECT_EQ(r.error().kind, ApiErrorKind::kRefused);
      EXPECT_NE(r.error().message.find("refused to send"), std::string::npos) << r.error().message;
    }
  }());
  EXPECT_TRUE(server_.requests().empty());
}

// The write gate (leader election's last fence) is asked before every attempt of a write, retries included:
// leadership lost during a retry's backoff stops the retry unsent; reads pass.
TEST_F(ScriptedServer, TheWriteGateIsAskedBeforeEveryAttemptOfAWrite) {
  server_.Add(RawHttpServer::Json(503, R"({"kind":"Status","reason":"ServiceUnavailable","code":503})",
                                  "Retry-After: 0\r\n"));
  server_.Add(RawHttpServer::Json(200, R"({"kind":"Node","metadata":{"name":"n1"}})"));
  auto client = Client();
  int asked = 0;
  client->SetWriteGate([&asked] { return ++asked == 1 ? "" : "this replica is not the leader (follower)"; });
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    const std::string path = "/api/v1/nodes/n1";
    const boost::json::value patch = {{"metadata", {{"labels", {{"a", "b"}}}}}};
    auto r = co_await client->MergePatch(path, patch);
    EXPECT_FALSE(r);
    if (!r) {
      EXPECT_EQ(r.error().kind, ApiErrorKind::kRefused);
      EXPECT_EQ(r.error().reason, "NotLeader");
      EXPECT_NE(r.error().message.find("not sent: this replica is not the leader"), std::string::npos)
          << r.error().message;
    }
    auto read = co_await client->Get(path);  // reads are not gated
    EXPECT_TRUE(read);
  }());
  EXPECT_EQ(asked, 2);
  ASSERT_EQ(server_.requests().size(), 2u);  // the first attempt of the patch, then the read
  EXPECT_NE(server_.requests()[1].find("GET /api/v1/nodes/n1"), std::string::npos);
}

// A server that answers one request twice (as one that read a split request does) leaves an answer too many
// on the connection: it is closed, so the next request gets its own answer and not the stale one.
TEST_F(ScriptedServer, AnswerTooManyClosesTheConnection) {
  RawHttpServer::Answer twice = RawHttpServer::Json(200, R"({"kind":"Node","metadata":{"name":"n1"}})");
  twice.pieces[0] +=
      RawHttpServer::Json(404, R"({"kind":"Status","reason":"NotFound","code":404})").pieces[0];
  server_.Add(twice);
  server_.Add(RawHttpServer::Json(200, R"({"kind":"Node","metadata":{"name":"n3"}})"));
  auto client = Client();
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    const std::string first = "/api/v1/nodes/n1", second = "/api/v1/nodes/n3";
    auto a = co_await client->Get(first);
    EXPECT_TRUE(a);
    auto b = co_await client->Get(second);
    EXPECT_TRUE(b) << (b ? "" : b.error().message);
    if (b) {
      EXPECT_EQ(b->at("metadata").at("name").as_string(), "n3");
    }
  }());
  EXPECT_EQ(client->http().desynced_connections(), 1u);
  EXPECT_EQ(client->http().connections_opened(), 2u);
}

// An API server closes a connection that sat idle (kube-apiserver after about 5 minutes): the client sees
// the close before reusing the connection, and the write goes on a fresh one instead of being lost.
TEST_F(ScriptedServer, AConnectionClosedWhileIdleIsNotReused) {
  RawHttpServer::Answer first = RawHttpServer::Json(200, R"({"kind":"Node","metadata":{"name":"n1"}})");
  first.close_after = true;  // kept alive by its headers, closed by the server once answered
  server_.Add(first);
  server_.Add(RawHttpServer::Json(200, R"({"kind":"Pod","metadata":{"name":"p"}})"));
  auto client = Client();
  const HttpRequest patch{http::verb::patch, "/api/v1/namespaces/d/pods/p", R"({"metadata":{}})",
                          "application/merge-patch+json", "", ""};
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    const std::string path = "/api/v1/nodes/n1";
    EXPECT_TRUE(co_await client->Get(path));
    // The server closes the connection once it has answered: the client's next request comes after that.
    while (server_.sessions_ended() < 1)
      co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
    auto r = co_await client->http().Send(patch, std::chrono::seconds(5));
    EXPECT_TRUE(r) << (r ? "" : r.error().message);
    if (r) {
      EXPECT_EQ(r->status, 200u);
    }
  }());
  EXPECT_EQ(client->http().closed_while_idle(), 1u);
  EXPECT_EQ(client->http().connections_opened(), 2u);
  EXPECT_EQ(server_.requests().size(), 2u) << "the patch was sent once";
}

// The server closes a kept-alive connection as a request arrives on it, with no byte of answer: the request
// is sent once more on a fresh connection, whatever its verb (every write of ours may be repeated), and
// only once.
TEST_F(ScriptedServer, ARequestThatGotNoByteOfAnswerOnAReusedConnectionIsSentOnceMore) {
  server_.Add(RawHttpServer::Json(200, R"({"kind":"Node","metadata":{"name":"n1"}})"));
  server_.Add(RawHttpServer::Answer{{}, true});  // reads the patch, closes without a word
  server_.Add(RawHttpServer::Json(200, R"({"kind":"Pod","metadata":{"name":"p"}})"));
  server_.Add(RawHttpServer::Answer{{}, true});
  server_.Add(RawHttpServer::Answer{{}, true});
  auto client = Client();
  const HttpRequest patch{http::verb::patch, "/api/v1/namespaces/d/pods/p", R"({"metadata":{}})",
                          "application/merge-patch+json", "", ""};
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    const std::string path = "/api/v1/nodes/n1";
    EXPECT_TRUE(co_await client->Get(path));
    auto r = co_await client->http().Send(patch, std::chrono::seconds(5));
    EXPECT_TRUE(r) << (r ? "" : r.error().message);
    // On a fresh connection a request with no answer is not sent again: the server may have acted on it.
    auto lost = co_await client->http().Send(patch, std::chrono::seconds(5));
    EXPECT_FALSE(lost);
    if (!lost) {
      EXPECT_TRUE(lost.error().request_sent);
      EXPECT_FALSE(lost.error().answer_started);
    }
  }());
  EXPECT_EQ(server_.requests().size(), 5u)
      << "get, patch, patch again on a fresh connection; then the reused connection's patch and one retry";
}

TEST_F(ScriptedServer, TypedErrorsAreNotRetried) {
  server_.Add(
      RawHttpServer::Json(409, R"({"kind":"Status","reason":"Conflict","message":"modified","code":409})"));
  auto client = Client();
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    const std::string path = "/api/v1/nodes/n1";
    const json::value patch = json::parse(R"({"metadata":{"resourceVersion":"1","annotations":{"a":null}}})");
    auto r = co_await client->MergePatch(path, patch);
    EXPECT_FALSE(r);
    if (!r) {
      EXPECT_EQ(r.error().kind, ApiErrorKind::kConflict);
    }
  }());
  ASSERT_EQ(server_.requests().size(), 1u);
  EXPECT_NE(server_.requests()[0].find("Content-Type: application/merge-patch+json"), std::string::npos);
}

TEST_F(ScriptedServer, WatchParsesEventsSplitAnywhere) {
  // Two events and a bookmark, cut in the middle of values and across chunk boundaries, no newlines in one
  // place.
  const std::string events =
      R"({"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"a","namespace":"d","resourceVersion":"5"}}})"
      "\n"
      R"({"type":"MODIFIED","object":{"kind":"Pod","metadata":{"name":"a","namespace":"d","resourceVersion":"6"}}})"
      R"({"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"9"}}})";
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < events.size(); i += 17) parts.push_back(events.substr(i, 17));
  server_.Add(RawHttpServer::Chunked(parts));
  auto client = Client();
  std::vector<std::string> seen;
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    WatchOptions o;
    o.resource_version = "4";
    const std::string path = "/api/v1/pods";
    const std::function<void(WatchEvent&&)> record = [&](WatchEvent&& ev) {
      seen.push_back(ev.type + ":" + ResourceVersionOf(ev.object));
    };
    auto r = co_await client->Watch(path, o, record);
    EXPECT_TRUE(r) << (r ? "" : r.error().message);
  }());
  EXPECT_EQ(seen, (std::vector<std::string>{"ADDED:5", "MODIFIED:6", "BOOKMARK:9"}));
  ASSERT_EQ(server_.requests().size(), 1u);
  EXPECT_NE(
      server_.requests()[0].find("watch=1&resourceVersion=4&allowWatchBookmarks=true&timeoutSeconds=300"),
      std::string::npos);
}

TEST_F(ScriptedServer, WatchErrorEventExpiredIsGone) {
  server_.Add(RawHttpServer::Chunked(
      {R"json({"type":"ERROR","object":{"kind":"Status","status":"Failure","message":"too old resource version: 1 (50)","reason":"Expired","code":410}})json"}));
  server_.Add(RawHttpServer::Json(410, R"({"kind":"Status","reason":"Gone","code":410})"));
  auto client = Client();
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    const std::string path = "/api/v1/pods";
    const WatchOptions o;
    const std::function<void(WatchEvent&&)> ignore = [](WatchEvent&&) {};
    auto r = co_await client->Watch(path, o, ignore);
    EXPECT_FALSE(r);
    if (!r) {
      EXPECT_EQ(r.error().kind, ApiErrorKind::kGone);
    }
    auto r2 = co_await client->Watch(path, o, ignore);
    EXPECT_FALSE(r2);
    if (!r2) {
      EXPECT_EQ(r2.error().kind, ApiErrorKind::kGone);
    }
  }());
}

// Beast's HTTP read is a chain of socket reads, and a per-operation cancellation reaches only the link in
// flight. Here the next link finds its bytes already in the socket, so it completes at once and waits in the
// queue behind the cancellation: the cancellation found nothing to cancel, and the following link waited for
// bytes that never came (until the watch's idle timeout, minutes). A cancellation closes the connection now.
TEST(WatchCancellation, EndsAtOnceWhenTheCancellationMeetsAReadStepWaitingInTheQueue) {
  asio::io_context ioc;
  asio::ip::tcp::acceptor acceptor(ioc, {asio::ip::make_address("127.0.0.1"), 0});
  ClientOptions co;
  co.qps = 0;
  auto client =
      ApiClient::Create(ioc.get_executor(), LoopbackHttp(acceptor.local_endpoint().port()), co).value();
  asio::ip::tcp::socket peer(ioc);
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        peer = co_await acceptor.async_accept(asio::use_awaitable);
        asio::streambuf request;
        co_await asio::async_read_until(peer, request, "\r\n\r\n", asio::use_awaitable);
        const std::string event = R"({"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"a"}}})";
        asio::write(peer, asio::buffer(fmt::format("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                                   "Transfer-Encoding: chunked\r\n\r\n{:x}\r\n{}\r\n",
                                                   event.size(), event)));
      },
      asio::detached);
  asio::cancellation_signal cancel;
  int events = 0;
  const std::function<void(WatchEvent&&)> on_event = [&](WatchEvent&&) {
    ++events;
    // The first byte of the next chunk's size line, before the client's next read starts; the cancellation
    // is queued first.
    boost::system::error_code written;
    asio::write(peer, asio::buffer(std::string_view("1")), written);
    EXPECT_FALSE(written) << written.message();
    asio::post(ioc, [&] { cancel.emit(asio::cancellation_type::terminal); });
  };
  bool ended = false;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        const WatchOptions o;
        const std::string path = "/api/v1/pods";
        auto watched = co_await client->Watch(path, o, on_event);
        EXPECT_FALSE(watched) << "a cancelled watch ended as if the server had closed it";
      },
      asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr thrown) {
        ended = true;
        EXPECT_FALSE(thrown) << "the watch threw instead of answering with an error";
      }));
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!ended && std::chrono::steady_clock::now() < deadline) ioc.run_one_for(10ms);
  EXPECT_EQ(events, 1);
  EXPECT_TRUE(ended) << "the cancelled watch still waits for the rest of the chunk";
  EXPECT_EQ(client->http().connections_opened(), 1u);
}

TEST_F(ScriptedServer, ListPagesCarryContinueTokens) {
  server_.Add(RawHttpServer::Json(
      200,
      R"({"kind":"PodList","metadata":{"resourceVersion":"7","continue":"tok"},"items":[{"metadata":{"name":"a"}}]})"));
  auto client = Client();
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    ListOptions o;
    o.limit = 1;
    o.label_selector = "app=x";
    const std::string path = "/api/v1/pods";
    auto page = co_await client->List(path, o);
    EXPECT_TRUE(page);
    if (page) {
      EXPECT_EQ(page->resource_version, "7");
      EXPECT_EQ(page->continue_token, "tok");
    }
  }());
  EXPECT_NE(server_.requests()[0].find("GET /api/v1/pods?labelSelector=app%3Dx&limit=1 HTTP/1.1"),
            std::string::npos);
}

TEST_F(ScriptedServer, TransportErrorWhenNothingListens) {
  RestConfig cfg = LoopbackHttp(1);  // nothing listens there
  ClientOptions o;
  o.max_attempts = 2;
  o.backoff_initial = 1ms;
  auto client = ApiClient::Create(ioc_.get_executor(), cfg, o).value();
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    const std::string path = "/version";
    auto r = co_await client->Get(path);
    EXPECT_FALSE(r);
    if (!r) {
      EXPECT_EQ(r.error().kind, ApiErrorKind::kTransport);
      EXPECT_NE(r.error().message.find("connecting to 127.0.0.1:1"), std::string::npos) << r.error().message;
    }
  }());
}

}  // namespace
}  // namespace hami::k8s
