// One client conformance suite, run against the embedded API server and, when HAMI_E2E_KUBECONFIG names a
// kubeconfig of a running kube-apiserver (tests/e2e/run-conformance.sh starts one), against the real thing.
// Same cases, same expectations. The embedded server runs three ways: plain HTTP without authentication,
// and HTTPS requiring authentication by client certificate or by bearer token (the client verifies the
// server against the CA in the kubeconfig the server writes); run-conformance.sh runs the real server with
// both kinds of credentials.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>

#include "k8s/api_client.h"
#include "k8s/reflector.h"
#include "k8s/rest_config.h"
#include "sim/apiserver/api_server.h"
#include "tests/support/run_coro.h"
#include "tests/support/test_certs.h"

namespace hami {
namespace {
namespace asio = boost::asio;
namespace json = boost::json;
using namespace std::chrono_literals;
using k8s::ApiClient;
using k8s::ApiErrorKind;
using testing::RunCoro;

std::string Unique(std::string_view base) {
  static int counter = 0;
  return fmt::format("{}-{}-{}", base, ::getpid(), ++counter);
}

// The servers the suite runs against (the test parameter).
constexpr std::string_view kEmbedded = "sim";
constexpr std::string_view kEmbeddedTlsClientCert = "sim-tls-client-cert";
constexpr std::string_view kEmbeddedTlsToken = "sim-tls-token";
constexpr std::string_view kReal = "kube-apiserver";
constexpr std::string_view kSimToken = "conformance-token";

class Conformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == kEmbedded) {
      server_ = std::make_unique<sim::ApiServer>(ioc_);
      const auto port = server_->Start().value();
      k8s::RestConfig cfg = k8s::LoopbackHttp(port);
      cfg_ = cfg;
    } else if (GetParam() == kEmbeddedTlsClientCert || GetParam() == kEmbeddedTlsToken) {
      // Like kube-apiserver: HTTPS only, client certificates requested (not required), tokens accepted,
      // nothing anonymous. The client gets one kind of credential, through the kubeconfig the server writes.
      const auto& pki = testing::SharedTestPki();
      sim::ApiServerOptions o;
      o.tls_cert_pem = pki.server.cert_pem;
      o.tls_key_pem = pki.server.key_pem;
      o.ca_pem = pki.ca.cert_pem;
      o.client_ca_pem = pki.ca.cert_pem;
      o.tokens = {std::string(kSimToken)};
      o.require_auth = true;
      if (GetParam() == kEmbeddedTlsClientCert) {
        o.kubeconfig_client_cert_pem = pki.client.cert_pem;
        o.kubeconfig_client_key_pem = pki.client.key_pem;
      } else {
        o.kubeconfig_token = std::string(kSimToken);
      }
      server_ = std::make_unique<sim::ApiServer>(ioc_, o);
      (void)server_->Start().value();
      cfg_ =
          k8s::ParseKubeconfig(server_->Kubeconfig(), "embedded server kubeconfig", k8s::ConfigEnv::System())
              .value();
      ASSERT_EQ(cfg_.scheme, "https");
      ASSERT_EQ(cfg_.ca_pem, pki.ca.cert_pem);
      ASSERT_FALSE(cfg_.insecure_skip_tls_verify);
      ASSERT_EQ(cfg_.token.empty(), GetParam() == kEmbeddedTlsClientCert);
      ASSERT_EQ(cfg_.client_cert_pem.empty(), GetParam() == kEmbeddedTlsToken);
    } else {
      const char* kc = std::getenv("HAMI_E2E_KUBECONFIG");
      if (kc == nullptr || *kc == '\0')
        GTEST_SKIP() << "HAMI_E2E_KUBECONFIG not set (run tests/e2e/run-conformance.sh)";
      cfg_ = k8s::ResolveRestConfig(kc, k8s::ConfigEnv::System()).value();
    }
    k8s::ClientOptions o;
    o.qps = 0;
    o.backoff_initial = 5ms;
    client_ = ApiClient::Create(ioc_.get_executor(), cfg_, o).value();
    ns_ = "default";
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }
  bool Authenticates() const { return GetParam() != kEmbedded; }
  template <class T>
  T Run(asio::awaitable<T> body) {
    std::optional<T> out;
    RunCoro(
        ioc_, [&]() -> asio::awaitable<void> { out = co_await std::move(body); }(), 20s);
    return std::move(*out);
  }
  json::value CreatePod(const std::string& name, const std::string& extra_labels = "{}") {
    const std::string path = k8s::PathFor("v1", "pods", ns_);
    const json::value pod = json::parse(fmt::format(
        R"({{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{}","labels":{}}},)"
        R"("spec":{{"schedulerName":"hami-scheduler","containers":[{{"name":"c","image":"busybox"}}]}}}})",
        name, extra_labels));
    return Run(client_->Create(path, pod)).value();
  }
  void DeletePod(const std::string& name) {
    const std::string path = k8s::PathFor("v1", "pods", ns_, name) + "?gracePeriodSeconds=0";
    (void)Run(client_->Delete(path));
  }

  asio::io_context ioc_;
  std::unique_ptr<sim::ApiServer> server_;
  k8s::RestConfig cfg_;
  std::unique_ptr<ApiClient> client_;
  std::string ns_;
};

TEST_P(Conformance, GetVersionAndNotFound) {
  const std::string version = "/version";
  auto v = Run(client_->Get(version));
  ASSERT_TRUE(v) << v.error().message;
  EXPECT_TRUE(v->as_object().contains("gitVersion"));
  const std::string missing = k8s::PathFor("v1", "pods", ns_, "does-not-exist");
  auto nf = Run(client_->Get(missing));
  ASSERT_FALSE(nf);
  EXPECT_EQ(nf.error().kind, ApiErrorKind::kNotFound);
  EXPECT_EQ(nf.error().reason, "NotFound");
}

TEST_P(Conformance, WrongTokenIsUnauthorized) {
  if (!Authenticates()) GTEST_SKIP() << "the plain-HTTP embedded server lets everyone in";
  // The same server and CA, but only a bad token: no client certificate (the Real kubeconfig may carry one).
  k8s::RestConfig wrong = cfg_;
  wrong.token = "wrong";
  wrong.token_file.clear();
  wrong.client_cert_pem.clear();
  wrong.client_key_pem.clear();
  k8s::ClientOptions o;
  o.qps = 0;
  o.backoff_initial = 5ms;
  auto client = ApiClient::Create(ioc_.get_executor(), wrong, o).value();
  const std::string pods = k8s::PathFor("v1", "pods", ns_);
  auto refused = Run(client->Get(pods));
  ASSERT_FALSE(refused) << "a wrong token must not read pods";
  EXPECT_EQ(refused.error().kind, ApiErrorKind::kUnauthorized) << refused.error().message;
  EXPECT_EQ(refused.error().status, 401u) << refused.error().message;
  EXPECT_EQ(refused.error().reason, "Unauthorized") << refused.error().message;
  // The right credentials on the same server still work.
  auto allowed = Run(client_->Get(pods));
  EXPECT_TRUE(allowed) << allowed.error().message;
}

TEST_P(Conformance, ListWithPages) {
  const std::string label = Unique("page");
  std::vector<std::string> names;
  for (int i = 0; i < 7; ++i) {
    names.push_back(Unique("pg"));
    CreatePod(names.back(), fmt::format(R"({{"suite":"{}"}})", label));
  }
  const std::string path = k8s::PathFor("v1", "pods", ns_);
  k8s::ListOptions o;
  o.label_selector = "suite=" + label;
  o.limit = 3;
  std::vector<std::string> seen;
  std::string rv;
  int pages = 0;
  do {
    auto page = Run(client_->List(path, o));
    ASSERT_TRUE(page) << page.error().message;
    ++pages;
    if (rv.empty()) rv = page->resource_version;
    for (const auto& item : page->list.at("items").as_array()) {
      seen.push_back(std::string(item.at("metadata").at("name").as_string()));
    }
    o.continue_token = page->continue_token;
  } while (!o.continue_token.empty());
  EXPECT_EQ(pages, 3);
  std::sort(seen.begin(), seen.end());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(seen, names);
  // A field selector on a pod field.
  k8s::ListOptions by_name;
  by_name.field_selector = "metadata.name=" + names[0];
  auto one = Run(client_->List(path, by_name));
  ASSERT_TRUE(one);
  EXPECT_EQ(one->list.at("items").as_array().size(), 1u);
  for (const auto& n : names) DeletePod(n);
}

TEST_P(Conformance, WatchSeesChangesInOrder) {
  const std::string name = Unique("w");
  const std::string path = k8s::PathFor("v1", "pods", ns_);
  k8s::ListOptions lo;
  lo.field_selector = "metadata.name=" + name;
  auto list = Run(client_->List(path, lo));
  ASSERT_TRUE(list);
  std::vector<std::string> events;
  bool watching = true;
  asio::co_spawn(
      ioc_,
      [&]() -> asio::awaitable<void> {
        k8s::WatchOptions w;
        w.resource_version = list->resource_version;
        w.field_selector = "metadata.name=" + name;
        w.timeout = 60s;
        const std::function<void(k8s::WatchEvent&&)> record = [&](k8s::WatchEvent&& ev) {
          if (ev.type == "BOOKMARK") {
            EXPECT_FALSE(k8s::ResourceVersionOf(ev.object).empty());
            return;
          }
          events.push_back(ev.type);
        };
        auto r = co_await client_->Watch(path, w, record);
        EXPECT_TRUE(r) << (r ? "" : r.error().message);
        watching = false;
      },
      asio::detached);
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        // No need to wait for the watch to be established: it resumes from the list's resourceVersion.
        const std::string pods = k8s::PathFor("v1", "pods", ns_);
        const json::value pod = json::parse(fmt::format(
            R"({{"metadata":{{"name":"{}"}},"spec":{{"containers":[{{"name":"c","image":"busybox"}}]}}}})",
            name));
        EXPECT_TRUE(co_await client_->Create(pods, pod));
        const std::string one = k8s::PathFor("v1", "pods", ns_, name);
        const json::value patch = json::parse(R"({"metadata":{"annotations":{"hami.io/vgpu-node":"n1"}}})");
        EXPECT_TRUE(co_await client_->MergePatch(one, patch));
        const std::string del = one + "?gracePeriodSeconds=0";
        EXPECT_TRUE(co_await client_->Delete(del));
        const std::function<bool()> deleted = [&] { return !events.empty() && events.back() == "DELETED"; };
        EXPECT_TRUE(co_await testing::WaitUntil(deleted, 5s));
        EXPECT_TRUE(watching) << "events must stream while the watch is open, not arrive when it ends";
      }(),
      20s);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.front(), "ADDED");
  EXPECT_EQ(events.back(), "DELETED");
  EXPECT_NE(std::find(events.begin(), events.end(), "MODIFIED"), events.end());
}

TEST_P(Conformance, MergePatchWithResourceVersionPrecondition) {
  const std::string name = Unique("node");
  const std::string nodes = k8s::PathFor("v1", "nodes");
  const json::value node =
      json::parse(fmt::format(R"({{"apiVersion":"v1","kind":"Node","metadata":{{"name":"{}"}}}})", name));
  auto created = Run(client_->Create(nodes, node));
  ASSERT_TRUE(created) << created.error().message;
  const std::string rv = k8s::ResourceVersionOf(*created);
  const std::string path = k8s::PathFor("v1", "nodes", "", name);
  // Without a precondition: applies. With the current version: applies. With a stale one: 409.
  const json::value p1 = json::parse(R"({"metadata":{"annotations":{"a":"1"}}})");
  auto r1 = Run(client_->MergePatch(path, p1));
  ASSERT_TRUE(r1);
  json::value p2 =
      json::parse(R"({"metadata":{"annotations":{"hami.io/mutex.lock":"2026-08-21T06:20:39Z,default,p"}}})");
  p2.at("metadata").as_object()["resourceVersion"] = k8s::ResourceVersionOf(*r1);
  auto r2 = Run(client_->MergePatch(path, p2));
  ASSERT_TRUE(r2) << r2.error().message;
  EXPECT_EQ(r2->at("metadata").at("annotations").at("hami.io/mutex.lock").as_string(),
            "2026-08-21T06:20:39Z,default,p");
  json::value stale = json::parse(R"({"metadata":{"annotations":{"hami.io/mutex.lock":null}}})");
  stale.at("metadata").as_object()["resourceVersion"] = rv;
  auto r3 = Run(client_->MergePatch(path, stale));
  ASSERT_FALSE(r3);
  EXPECT_EQ(r3.error().kind, ApiErrorKind::kConflict);
  // null deletes the key.
  const json::value del = json::parse(R"({"metadata":{"annotations":{"hami.io/mutex.lock":null}}})");
  auto r4 = Run(client_->MergePatch(path, del));
  ASSERT_TRUE(r4);
  EXPECT_FALSE(r4->at("metadata").at("annotations").as_object().contains("hami.io/mutex.lock"));
  (void)Run(client_->Delete(path));
}

TEST_P(Conformance, BindingOnceThenConflict) {
  const std::string name = Unique("bind");
  auto pod = CreatePod(name);
  const std::string uid(pod.at("metadata").at("uid").as_string());
  const std::string node = "node-a";
  auto bound = Run(client_->Bind(ns_, name, uid, node));
  ASSERT_TRUE(bound) << bound.error().message;
  const std::string path = k8s::PathFor("v1", "pods", ns_, name);
  auto got = Run(client_->Get(path));
  ASSERT_TRUE(got);
  EXPECT_EQ(got->at("spec").at("nodeName").as_string(), "node-a");
  const std::string other = "node-b";
  auto again = Run(client_->Bind(ns_, name, uid, other));
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().kind, ApiErrorKind::kConflict);
  DeletePod(name);
}

TEST_P(Conformance, EventsAndLeases) {
  const std::string events = k8s::PathFor("v1", "events", ns_);
  const json::value ev = json::parse(fmt::format(
      R"({{"apiVersion":"v1","kind":"Event","metadata":{{"name":"{}"}},"involvedObject":{{"kind":"Pod","namespace":"default","name":"p"}},)"
      R"("reason":"FilteringSucceed","message":"find fit node n1","type":"Normal","source":{{"component":"hami-scheduler"}},"count":1}})",
      Unique("ev")));
  auto created = Run(client_->Create(events, ev));
  ASSERT_TRUE(created) << created.error().message;
  EXPECT_EQ(created->at("reason").as_string(), "FilteringSucceed");

  const std::string name = Unique("lease");
  const std::string leases = k8s::PathFor("coordination.k8s.io/v1", "leases", ns_);
  const json::value lease = json::parse(fmt::format(
      R"({{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{{"name":"{}"}},"spec":{{"holderIdentity":"a","leaseDurationSeconds":15}}}})",
      name));
  auto l = Run(client_->Create(leases, lease));
  ASSERT_TRUE(l) << l.error().message;
  const std::string path = k8s::PathFor("coordination.k8s.io/v1", "leases", ns_, name);
  json::value update = *l;
  update.at("spec").as_object()["holderIdentity"] = "b";
  auto u = Run(client_->Update(path, update));
  ASSERT_TRUE(u) << u.error().message;
  EXPECT_EQ(u->at("spec").at("holderIdentity").as_string(), "b");
  auto stale = Run(client_->Update(path, update));  // the old resourceVersion again
  ASSERT_FALSE(stale);
  EXPECT_EQ(stale.error().kind, ApiErrorKind::kConflict);
  auto dup = Run(client_->Create(leases, lease));
  ASSERT_FALSE(dup);
  EXPECT_EQ(dup.error().kind, ApiErrorKind::kConflict);
  EXPECT_EQ(dup.error().reason, "AlreadyExists");
  (void)Run(client_->Delete(path));
}

TEST_P(Conformance, ReflectorSyncsAndFollows) {
  const std::string label = Unique("refl");
  for (int i = 0; i < 5; ++i) CreatePod(Unique("r"), fmt::format(R"({{"suite":"{}"}})", label));
  k8s::Reflector::Options o;
  o.path = k8s::PathFor("v1", "pods");
  o.label_selector = "suite=" + label;
  o.page_size = 2;
  int adds = 0, deletes = 0;
  k8s::Reflector::Handlers h;
  h.on_add = [&](const json::value&) { ++adds; };
  h.on_delete = [&](const json::value&) { ++deletes; };
  k8s::Reflector reflector(*client_, o, h);
  asio::cancellation_signal stop;
  asio::co_spawn(ioc_, reflector.Run(), asio::bind_cancellation_slot(stop.slot(), asio::detached));
  std::string extra = Unique("r");
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        const std::function<bool()> synced = [&] { return reflector.synced(); };
        EXPECT_TRUE(co_await testing::WaitUntil(synced, 5s));
        EXPECT_EQ(reflector.items().size(), 5u);
        const std::string pods = k8s::PathFor("v1", "pods", ns_);
        const json::value pod = json::parse(fmt::format(
            R"({{"metadata":{{"name":"{}","labels":{{"suite":"{}"}}}},"spec":{{"containers":[{{"name":"c","image":"busybox"}}]}}}})",
            extra, label));
        EXPECT_TRUE(co_await client_->Create(pods, pod));
        const std::function<bool()> followed = [&] { return reflector.items().size() >= 6; };
        EXPECT_TRUE(co_await testing::WaitUntil(followed, 5s));
        EXPECT_EQ(reflector.items().size(), 6u);
      }(),
      20s);
  stop.emit(asio::cancellation_type::terminal);
  EXPECT_EQ(adds, 6) << "lists=" << reflector.stats().lists << " watches=" << reflector.stats().watches
                     << " errors=" << reflector.stats().errors << " events=" << reflector.stats().events
                     << " rv=" << reflector.resource_version();
  EXPECT_EQ(deletes, 0);
  for (const auto& [key, obj] : reflector.items())
    DeletePod(std::string(obj.at("metadata").at("name").as_string()));
}

std::string ServerName(const ::testing::TestParamInfo<std::string>& p) {
  if (p.param == kEmbedded) return "Embedded";
  if (p.param == kEmbeddedTlsClientCert) return "EmbeddedTlsClientCert";
  if (p.param == kEmbeddedTlsToken) return "EmbeddedTlsToken";
  return "Real";  // tests/e2e/run-conformance.sh filters on Servers/Conformance.*/Real
}

INSTANTIATE_TEST_SUITE_P(Servers, Conformance,
                         ::testing::Values(std::string(kEmbedded), std::string(kEmbeddedTlsClientCert),
                                           std::string(kEmbeddedTlsToken), std::string(kReal)),
                         ServerName);

}  // namespace
}  // namespace hami
