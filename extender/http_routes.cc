#include "extender/http_routes.h"

#include <fmt/format.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cctype>
#include <chrono>

#include "core/names.h"
#include "extender/admission_wire.h"
#include "extender/cluster_view.h"
#include "extender/explain_wire.h"
#include "extender/ui_assets.h"
#include "k8s/admission.h"
#include "k8s/extender.h"
#include "k8s/logging.h"
#include "k8s/metrics.h"

namespace hami::extender {
namespace asio = boost::asio;
namespace http = boost::beast::http;

namespace {

// Built field by field: GCC 12 destroys members of a braced aggregate twice when the braces hold a co_await.
k8s::ServerResponse Respond(unsigned status, std::string_view content_type, std::string body) {
  k8s::ServerResponse r;
  r.status = status;
  r.content_type = std::string(content_type);
  r.body = std::move(body);
  return r;
}
constexpr std::string_view kText = "text/plain; charset=utf-8";
constexpr std::string_view kJson = "application/json";

// HttpServerOptions::body_limit, HAMi's limit.
constexpr std::string_view kTooLarge = "request body is larger than the 1 MiB limit";

// The media type without parameters, lower-cased: "application/json".
std::string MediaType(std::string_view content_type) {
  std::string out(content_type.substr(0, content_type.find(';')));
  while (!out.empty() && out.back() == ' ') out.pop_back();
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

BindRequest BindRequestOf(const k8s::ExtenderBindingArgs& args) {
  BindRequest r;
  r.ns = args.pod_namespace;
  r.name = args.pod_name;
  r.uid = args.pod_uid;
  r.node = args.node;
  return r;
}

// The AdmissionReview answering `r`. The API server expects HTTP 200 and the review's own apiVersion; a
// review that cannot be read is answered as refused (as controller-runtime does), with the reason. Reading
// and deciding run on `worker`; the quota check and the counters on the loop.
asio::awaitable<std::string> Webhook(AdmissionService& admission, asio::thread_pool& worker,
                                     std::shared_ptr<const bool> alive, const k8s::ServerRequest& r) {
  if (r.body_too_large)
    co_return k8s::AdmissionReviewJson(
        "", "",
        AnswerOf(admission.Refuse(413, fmt::format("the AdmissionReview is larger than the {} MiB limit",
                                                   kWebhookBodyLimit >> 20))));
  if (MediaType(r.content_type) != kJson) {
    co_return k8s::AdmissionReviewJson(
        "", "",
        AnswerOf(admission.Refuse(400, fmt::format("Content-Type \"{}\" is not application/json",
                                                   k8s::EscapeControlChars(r.content_type)))));
  }
  const auto start = std::chrono::steady_clock::now();
  struct Read {
    bool parsed = false;
    std::string api_version, uid, error;
    PreparedReview prepared;
  };
  // The worker owns its copy of the body: it outlives this frame if the server is torn down meanwhile. What
  // it parses is freed there too; only the answer comes back.
  auto read = [&admission, body = r.body]() -> asio::awaitable<Read> {
    Read out;
    auto review = k8s::ParseAdmissionReview(body);
    if (!review) {
      out.error = std::move(review.error().message);
      co_return out;
    }
    out.parsed = true;
    out.api_version = review->api_version;
    out.uid = review->uid;
    out.prepared = PrepareReview(admission, *review);
    co_return out;
  };
  Read done = co_await asio::co_spawn(worker, std::move(read), asio::use_awaitable);
  if (!*alive) co_return std::string();  // torn down while the review was on the worker
  if (!done.parsed) co_return k8s::AdmissionReviewJson("", "", AnswerOf(admission.Refuse(400, done.error)));
  co_return k8s::AdmissionReviewJson(done.api_version, done.uid,
                                     ConcludeReview(admission, std::move(done.prepared), start));
}

// What every answer of the page and its /api/ carries: scripts and styles from this listener only (no
// inline script, so a name that slipped through as markup could run nothing), no framing, no sniffing.
void Harden(k8s::ServerResponse& r) {
  r.headers.emplace_back("Content-Security-Policy",
                         "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                         "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  r.headers.emplace_back("Referrer-Policy", "no-referrer");
  r.headers.emplace_back("Cache-Control", "no-cache");
}

k8s::ServerResponse Hardened(k8s::ServerResponse r) {
  Harden(r);
  return r;
}

// `body` at `generation`, or 304 with no body when the request's If-None-Match names that generation. The
// tag names this process too: a generation counted again from 0 after a restart is another tag.
k8s::ServerResponse Versioned(const k8s::ServerRequest& r, std::uint64_t generation,
                              const std::function<std::string()>& body) {
  static const auto kStarted = std::chrono::system_clock::now().time_since_epoch().count();
  const std::string tag = fmt::format("\"{:x}-{}\"", kStarted, generation);
  k8s::ServerResponse out;
  if (r.headers[http::field::if_none_match] == tag) {
    out = Respond(304, kJson, "");
  } else {
    out = Respond(200, kJson, body());
  }
  out.headers.emplace_back("ETag", tag);
  Harden(out);
  return out;
}

// /filter's answer to a request read as `args`: a refusal, or the filter's decision.
asio::awaitable<FilterOutcome> FilterAnswer(FilterService& filter, const Readiness& readiness,
                                            const Result<k8s::ExtenderArgs>& args) {
  if (const std::string follower = readiness.NotLeaderReason(); !follower.empty())
    co_return filter.Refuse("hami-scheduler is not the leader (" + follower + "); retry");
  if (!args) co_return filter.Refuse(args.error().message);
  // Named before the co_await (GCC 12 mishandles temporaries in a co_await's full-expression); a reference
  // to the request's own list, not a copy of up to thousands of names.
  const std::vector<std::string>& candidates = k8s::CandidatesOf(*args);
  // Posted nodes the registry lacks are Cluster Autoscaler's template nodes (or a node our watch has not
  // shown yet): the answer comes from the objects themselves and reserves nothing.
  const auto templates =
      k8s::UnregisteredNodes(*args, [&filter](std::string_view node) { return filter.Registered(node); });
  if (!templates) co_return filter.Refuse(templates.error().message);
  if (!templates->empty()) co_return co_await filter.FilterOnTemplates(args->pod, candidates, *templates);
  co_return co_await filter.Filter(args->pod, candidates);
}

}  // namespace

void HttpRoutes::Install(k8s::HttpServer& server, std::string listener, Serves serves) {
  using k8s::ServerRequest;
  using k8s::ServerResponse;
  listeners_.emplace_back(std::move(listener), &server);
  if (serves.metrics) {
    server.Route(http::verb::get, "/metrics",
                 [this](const ServerRequest&) -> asio::awaitable<ServerResponse> {
                   co_return Respond(200, k8s::prom::kContentType, Metrics());
                 });
  }
  server.Route(http::verb::get, "/healthz", [](const ServerRequest&) -> asio::awaitable<ServerResponse> {
    co_return Respond(200, kText, "ok\n");
  });
  const Readiness* readiness = &s_.readiness;
  server.Route(http::verb::get, "/readyz",
               [readiness](const ServerRequest&) -> asio::awaitable<ServerResponse> {
                 // With --leader-elect the body says which this replica is.
                 const std::string role = readiness->Role();
                 const std::string shown = role.empty() ? role : " (" + role + ")";
                 if (readiness->reports_ready()) co_return Respond(200, kText, "ok" + shown + "\n");
                 co_return Respond(503, kText, "not ready: " + readiness->NotReadyReason() + "\n");
               });
  if (serves.webhook) {
    server.Route(http::verb::post, "/webhook",
                 [this](const ServerRequest& r) -> asio::awaitable<ServerResponse> {
                   std::string review = co_await Webhook(s_.admission, reviews_, alive_, r);
                   co_return Respond(200, kJson, std::move(review));
                 });
  }
  if (serves.extender) InstallDecisions(server);
  // HAMi's device plugin reaches the scheduler through its Service, which fronts the webhook's listener.
  if (serves.extender || serves.webhook) InstallRefit(server);
  if (serves.api) InstallApi(server);
}

void HttpRoutes::InstallApi(k8s::HttpServer& server) {
  using k8s::ServerRequest;
  using k8s::ServerResponse;
  const auto json_of = [this](std::string (ClusterView::*view)() const) {
    auto kept = std::make_shared<KeptView>();
    return [this, view, kept](const ServerRequest& r) -> asio::awaitable<ServerResponse> {
      if (!s_.readiness.ready())
        co_return Hardened(Respond(503, kText, "not ready: " + s_.readiness.NotReadyReason() + "\n"));
      // Computed again only when the view changed, and at most once per kViewRefresh: any number of
      // pages polling a busy cluster cost one computation per endpoint and period.
      const auto now = std::chrono::steady_clock::now();
      const std::uint64_t generation = s_.view.Generation();
      if (kept->body.empty() || (kept->generation != generation && now - kept->at >= kViewRefresh)) {
        kept->body = (s_.view.*view)();
        kept->generation = generation;
        kept->at = now;
      }
      co_return Versioned(r, kept->generation, [&] { return kept->body; });
    };
  };
  server.Route(http::verb::get, "/api/overview", json_of(&ClusterView::Overview));
  server.Route(http::verb::get, "/api/nodes", json_of(&ClusterView::Nodes));
  server.Route(http::verb::get, "/api/pods", json_of(&ClusterView::Pods));
  server.Route(http::verb::get, "/api/quotas", json_of(&ClusterView::Quotas));
  server.Route(http::verb::get, "/api/capacity", json_of(&ClusterView::Capacity));
  InstallUi(server);
  // Paths with names in them: /api/explain/<namespace>/<pod>. Every other path is not found.
  server.Fallback([this](const ServerRequest& r) -> asio::awaitable<ServerResponse> {
    ServerResponse answer = ExplainRoute(r);
    if (answer.status != 200 && answer.status != 304) Harden(answer);  // Versioned hardened the others
    co_return answer;
  });
}

k8s::ServerResponse HttpRoutes::ExplainRoute(const k8s::ServerRequest& r) {
  constexpr std::string_view kExplain = "/api/explain/";
  const std::string_view path = r.path;
  if (!path.starts_with(kExplain)) return Respond(404, kText, "not found\n");
  if (r.method != http::verb::get) return Respond(405, kText, "only GET\n");
  const std::string_view names = path.substr(kExplain.size());
  const auto slash = names.find('/');
  if (slash == std::string_view::npos)
    return Respond(400, kText, "expected /api/explain/<namespace>/<pod>\n");
  const std::string ns(names.substr(0, slash)), name(names.substr(slash + 1));
  if (auto ok = ValidateName("the namespace", ns, NameKind::kNamespace); !ok)
    return Respond(400, kText, ok.error().message + "\n");
  if (auto ok = ValidateName("the pod name", name, NameKind::kPod); !ok)
    return Respond(400, kText, ok.error().message + "\n");
  if (!s_.readiness.ready()) return Respond(503, kText, "not ready: " + s_.readiness.NotReadyReason() + "\n");
  // Kept while neither the view nor the pod changed.
  const std::uint64_t generation = s_.view.Generation();
  const std::string key = ns + "/" + name;
  const PodView* pod = s_.view.CachedPod(key);
  const std::string version = pod == nullptr ? "" : pod->resource_version;
  if (auto kept = explained_.find(key); kept != explained_.end() && kept->second.generation == generation &&
                                        kept->second.pod_version == version && pod != nullptr) {
    return Versioned(r, generation, [&] { return kept->second.json; });
  }
  // A fit on every node each: a page (or anyone) asking for many pods in a row is slowed, not the loop.
  const auto now = std::chrono::steady_clock::now();
  if (now - explain_window_ >= std::chrono::seconds(1)) {
    explain_window_ = now;
    explains_in_window_ = 0;
  }
  if (++explains_in_window_ > kExplainsPerSecond) {
    k8s::ServerResponse busy = Respond(429, kText, "too many explanations asked this second; retry\n");
    busy.headers.emplace_back("Retry-After", "1");
    return busy;
  }
  auto explained = s_.view.Explain(ns, name);
  if (!explained) return Respond(404, kText, explained.error().message + "\n");
  if (explained_.size() >= kExplainedKept) explained_.clear();
  const std::string& json =
      (explained_[key] = Explained{generation, version, ExplanationJson(*explained)}).json;
  return Versioned(r, generation, [&] { return json; });
}

void HttpRoutes::InstallUi(k8s::HttpServer& server) {
  using k8s::ServerRequest;
  using k8s::ServerResponse;
  server.Route(http::verb::get, "/ui", [](const ServerRequest&) -> asio::awaitable<ServerResponse> {
    ServerResponse r = Hardened(Respond(301, kText, "see /ui/\n"));
    r.headers.emplace_back("Location", "/ui/");
    co_return r;
  });
  for (const UiAsset& asset : UiAssets()) {
    server.Route(http::verb::get, std::string(asset.path),
                 [&asset](const ServerRequest&) -> asio::awaitable<ServerResponse> {
                   ServerResponse r = Respond(200, asset.content_type, std::string(asset.body));
                   Harden(r);
                   co_return r;
                 });
  }
}

void HttpRoutes::InstallDecisions(k8s::HttpServer& server) {
  using k8s::ServerRequest;
  using k8s::ServerResponse;
  const Services* e = &s_;
  server.Route(http::verb::post, "/filter", [e](const ServerRequest& r) -> asio::awaitable<ServerResponse> {
    auto args = r.body_too_large ? Result<k8s::ExtenderArgs>(Error{std::string(kTooLarge)})
                                 : k8s::ParseExtenderArgs(r.body);
    const FilterOutcome outcome = co_await FilterAnswer(e->filter, e->readiness, args);
    static const k8s::ExtenderArgs kUnread;  // an error's answer echoes nothing of the request
    co_return Respond(200, kJson, k8s::ToJson(k8s::ToFilterResult(outcome, args ? *args : kUnread)));
  });
  // kube-scheduler reads any status but 200 as the extender's error (it logs the status, and we the reason);
  // the body says why for anyone else who asks. A /prioritize error only costs the pod our scores.
  server.Route(http::verb::post, "/prioritize",
               [e](const ServerRequest& r) -> asio::awaitable<ServerResponse> {
                 const auto refused = [](unsigned status, const std::string& why) {
                   return Respond(status, kText, k8s::EscapeControlChars(why) + "\n");
                 };
                 if (const std::string follower = e->readiness.NotLeaderReason(); !follower.empty())
                   co_return refused(503, "hami-scheduler is not the leader (" + follower + "); retry");
                 // Before the first health pass the ledger may not show what the nodes hold.
                 if (!e->readiness.ready())
                   co_return refused(503, "hami-scheduler is not ready: " + e->readiness.NotReadyReason());
                 if (r.body_too_large) co_return refused(413, std::string(kTooLarge));
                 auto args = k8s::ParseExtenderArgs(r.body);
                 if (!args) co_return refused(400, args.error().message);
                 // In one-node mode only a pod asking for no device of ours reaches kube-scheduler's scoring
                 // (every node passes it): every node scores 0.
                 const auto scores = e->scores.Prioritize(args->pod, k8s::CandidatesOf(*args));
                 co_return Respond(200, kJson, k8s::HostPriorityListJson(scores));
               });
  server.Route(http::verb::post, "/preempt", [e](const ServerRequest& r) -> asio::awaitable<ServerResponse> {
    // The reason echoes the request's names: printable in the body whatever they hold.
    const auto refused = [&](unsigned status, const std::string& why) {
      return Respond(status, kText, k8s::EscapeControlChars(e->preempt.Refuse(why).message) + "\n");
    };
    if (const std::string follower = e->readiness.NotLeaderReason(); !follower.empty())
      co_return refused(503, "hami-scheduler is not the leader (" + follower + "); retry");
    if (const std::string why = e->preempt.NotReady(); !why.empty()) co_return refused(503, why);
    if (r.body_too_large) co_return refused(413, std::string(kTooLarge));
    auto args = k8s::ParsePreemptionArgs(r.body);
    if (!args) co_return refused(400, args.error().message);
    auto victims = e->preempt.Preempt(*args);
    if (!victims) co_return Respond(400, kText, k8s::EscapeControlChars(victims.error().message) + "\n");
    co_return Respond(200, kJson, k8s::ToJson(*victims));
  });
  server.Route(http::verb::post, "/bind", [e](const ServerRequest& r) -> asio::awaitable<ServerResponse> {
    auto args = r.body_too_large ? Result<k8s::ExtenderBindingArgs>(Error{std::string(kTooLarge)})
                                 : k8s::ParseBindingArgs(r.body);
    std::string error;
    if (const std::string follower = e->readiness.NotLeaderReason(); !follower.empty()) {
      e->binder.Refuse();
      error = "hami-scheduler is not the leader (" + follower + "); retry";
    } else if (args) {
      const BindRequest request = BindRequestOf(*args);  // named: see /filter
      error = co_await e->binder.Bind(request);
    } else {
      e->binder.Refuse();
      error = args.error().message;
    }
    co_return Respond(200, kJson, k8s::BindingResultJson(error));
  });
}

void HttpRoutes::InstallRefit(k8s::HttpServer& server) {
  using k8s::ServerRequest;
  using k8s::ServerResponse;
  const Services* e = &s_;
  // HAMi's device plugin reads any status but 200 as a failed refit, as it reads succeeded=false: the
  // statuses tell an operator's curl what kind of refusal it is; the body says why, always as JSON.
  server.Route(http::verb::post, "/refit", [e](const ServerRequest& r) -> asio::awaitable<ServerResponse> {
    RefitAnswer answer;
    if (const std::string follower = e->readiness.NotLeaderReason(); !follower.empty()) {
      answer = e->refit.Refuse(503, "hami-scheduler is not the leader (" + follower + "); retry");
    } else if (!e->readiness.ready()) {
      answer = e->refit.Refuse(503, "hami-scheduler is not ready: " + e->readiness.NotReadyReason());
    } else if (r.body_too_large) {
      answer = e->refit.Refuse(413, std::string(kTooLarge));
    } else if (auto request = ParseRefitRequest(r.body); !request) {
      answer = e->refit.Refuse(400, std::move(request.error().message));
    } else {
      const std::string authorization(r.headers[http::field::authorization]);  // named: see /filter
      answer = co_await e->refit.Refit(*request, authorization);
    }
    k8s::ServerResponse out = Respond(answer.status, kJson, RefitAnswerJson(answer));
    if (answer.retry_after) out.headers.emplace_back("Retry-After", "1");
    co_return out;
  });
}

std::string HttpRoutes::Metrics() const { return s_.metrics.Metrics() + ServerMetrics(); }

std::string HttpRoutes::ServerMetrics() const {
  k8s::prom::TextWriter w;
  struct Family {
    const char* name;
    const char* help;
    const char* type;
    std::uint64_t (*value)(const k8s::HttpServer&);
  };
  const Family families[] = {
      {"hami_http_open_connections", "Open connections, per listener.", "gauge",
       [](const k8s::HttpServer& s) -> std::uint64_t { return s.open_connections(); }},
      {"hami_http_connection_failures_total",
       "Connections ended by an exception in their coroutine (a bug, logged; the server went on).", "counter",
       [](const k8s::HttpServer& s) { return s.connection_failures(); }},
      {"hami_http_connections_evicted_total",
       "Idle connections closed at the connection cap to make room for a new one.", "counter",
       [](const k8s::HttpServer& s) { return s.connections_evicted(); }},
      {"hami_http_connections_refused_total",
       "Connections refused with 503 at the connection cap (every connection busy).", "counter",
       [](const k8s::HttpServer& s) { return s.connections_refused(); }},
      {"hami_http_request_timeouts_total", "Requests whose head or body did not arrive in time.", "counter",
       [](const k8s::HttpServer& s) { return s.timeouts(); }},
  };
  for (const auto& f : families) {
    w.Family(f.name, f.help, f.type);
    for (const auto& [listener, server] : listeners_) {
      w.Sample(f.name, {{"listener", listener}}, static_cast<double>(f.value(*server)));
    }
  }
  if (!budgets_.empty()) {
    struct BudgetFamily {
      const char* name;
      const char* help;
      const char* type;
      double (*value)(const k8s::BodyBudget&);
    };
    const BudgetFamily budget_families[] = {
        {"hami_http_body_budget_bytes", "Request bodies a pool may hold at once (--request-body-budget).",
         "gauge", [](const k8s::BodyBudget& b) { return static_cast<double>(b.bytes()); }},
        {"hami_http_body_bytes_in_flight",
         "Bytes of request bodies held now (taken before each body is read).", "gauge",
         [](const k8s::BodyBudget& b) { return static_cast<double>(b.in_use()); }},
        {"hami_http_body_budget_waits_total", "Requests whose body waited, unread, for room in its pool.",
         "counter", [](const k8s::BodyBudget& b) { return static_cast<double>(b.waits()); }},
    };
    for (const auto& f : budget_families) {
      w.Family(f.name, f.help, f.type);
      for (const auto& [pool, budget] : budgets_) w.Sample(f.name, {{"pool", pool}}, f.value(*budget));
    }
  }
  w.Family("hami_event_loop_exceptions_total",
           "Exceptions that escaped the event loop (a bug, logged; the loop went on).", "counter");
  w.Sample("hami_event_loop_exceptions_total", {}, static_cast<double>(*loop_exceptions_));
  return w.Take();
}

}  // namespace hami::extender
