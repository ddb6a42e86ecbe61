#pragma once
// The extender's HTTP adapter: it owns the wire. Routes (/filter, /prioritize, /preempt, /bind and /webhook
// on the extender listener, /webhook on a listener of its own with --webhook-bind; /metrics, /healthz and
// /readyz on every listener; the /ui/ page and its /api/ on the metrics listener of its own), the request
// body limits, and the extender v1 and AdmissionReview JSON in and out (k8s/extender, k8s/admission). It is
// handed the services it serves and the readiness that gates them; kube-scheduler expects HTTP 200 with
// failures in the JSON's Error.
//
// An AdmissionReview is read and decided on the webhook's worker thread (PrepareReview), never
// on the event loop: a review of several MiB costs seconds of parsing, and the loop must keep renewing the
// Lease, answering probes and deciding filters meanwhile. Only the quota check returns to the loop.
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "extender/admission_service.h"
#include "extender/bind_service.h"
#include "extender/cluster_view.h"
#include "extender/filter_service.h"
#include "extender/preempt_service.h"
#include "extender/readiness.h"
#include "extender/refit_service.h"
#include "k8s/http_server.h"
#include "k8s/metrics.h"

namespace hami::extender {

// The largest AdmissionReview read (HAMi's webhook reads 7 MiB; the API server sends up to 3 MiB of pod).
inline constexpr std::size_t kWebhookBodyLimit = 7 << 20;

class HttpRoutes {
 public:
  struct Services {
    FilterService& filter;
    BindService& binder;
    PreemptService& preempt;
    ScoreService& scores;
    const ClusterView& view;  // GET /api/... and the /ui/ page that reads them
    AdmissionService& admission;
    const Readiness& readiness;
    const k8s::prom::Source& metrics;  // every service's families
    RefitService& refit;               // POST /refit, on the extender's listener
  };
  // `loop_exceptions`: the event loop's counter (k8s::RunLoop), shown in /metrics.
  HttpRoutes(Services services, const std::uint64_t& loop_exceptions)
      : s_(services), loop_exceptions_(&loop_exceptions) {}

  // What a listener serves besides /healthz and /readyz.
  struct Serves {
    bool extender = false;  // /filter, /prioritize, /bind, /preempt (and /refit)
    bool webhook = false;   // /webhook (and /refit)
    bool metrics = true;  // /metrics (names of nodes, pods, namespaces: not on a webhook listener of its own)
    // /ui/ and /api/ (read-only, about pods and devices): the metrics listener of its own only
    bool api = false;
  };
  ~HttpRoutes() { *alive_ = false; }
  HttpRoutes(const HttpRoutes&) = delete;
  HttpRoutes& operator=(const HttpRoutes&) = delete;

  // Adds the routes to `server`, known in /metrics as `listener` ("extender", "webhook", "metrics").
  void Install(k8s::HttpServer& server, std::string listener, Serves serves);
  // Shows a body budget's use in /metrics as `pool` ("webhook", "extender").
  void ShowBodyBudget(std::string pool, std::shared_ptr<const k8s::BodyBudget> budget) {
    budgets_.emplace_back(std::move(pool), std::move(budget));
  }

  // /metrics: the extender's families, every listener's connection counters, the event loop's exceptions.
  std::string Metrics() const;

 private:
  // /filter, /preempt and /bind.
  void InstallDecisions(k8s::HttpServer& server);
  void InstallRefit(k8s::HttpServer& server);  // POST /refit (docs/DECISIONS.md, "NUMA refit")
  void InstallApi(k8s::HttpServer& server);
  void InstallUi(k8s::HttpServer& server);
  // GET /api/explain/<ns>/<pod>, answered from `explained_` while the view's generation is the same.
  k8s::ServerResponse ExplainRoute(const k8s::ServerRequest& r);
  std::string ServerMetrics() const;

  Services s_;
  const std::uint64_t* loop_exceptions_;
  // Reviews one at a time, in arrival order: a flood of reviews queues here and costs the loop nothing.
  // Destroyed (joined) before the admission service it calls.
  boost::asio::thread_pool reviews_{1};
  std::vector<std::pair<std::string, const k8s::HttpServer*>> listeners_;
  std::vector<std::pair<std::string, std::shared_ptr<const k8s::BodyBudget>>> budgets_;
  // The last explanations ("ns/name" -> generation, JSON): an explain costs a fit on every node, a page
  // asking again while nothing changed costs none. At most kExplainedKept.
  static constexpr std::size_t kExplainedKept = 64;
  // The last answer of one /api/ view, and the view's generation it was computed at.
  struct KeptView {
    std::uint64_t generation = 0;
    std::chrono::steady_clock::time_point at;
    std::string body;
  };
  static constexpr std::chrono::seconds kViewRefresh{1};
  struct Explained {
    std::uint64_t generation = 0;
    std::string pod_version;  // the pod's resourceVersion
    std::string json;
  };
  std::map<std::string, Explained> explained_;
  // Explanations computed (not answered from explained_) in the second that began at explain_window_.
  static constexpr int kExplainsPerSecond = 10;
  std::chrono::steady_clock::time_point explain_window_;
  int explains_in_window_ = 0;
  // False once the routes are gone: a review the worker finishes after that touches nothing of theirs.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace hami::extender
