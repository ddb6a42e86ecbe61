#include "cmd/service.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstdlib>
#include <ostream>

#include "cmd/app.h"
#include "config/flags.h"
#include "core/strings.h"
#include "k8s/event_loop.h"
#include "k8s/metrics.h"
#include "k8s/waits.h"

namespace hami::cmd {
namespace asio = boost::asio;
namespace http = boost::beast::http;
using namespace std::chrono_literals;

namespace {

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

}  // namespace

SchedulerService::SchedulerService(asio::io_context& ioc) : ioc_(&ioc) {}

SchedulerService::~SchedulerService() { *alive_ = false; }

Result<std::unique_ptr<SchedulerService>> SchedulerService::Create(
    asio::io_context& ioc, const config::Config& cfg, const Backends& backends, const k8s::RestConfig& rest,
    const Clock& clock, ServiceOptions options) {
  std::unique_ptr<SchedulerService> s(new SchedulerService(ioc));
  k8s::ClientOptions co;
  co.qps = cfg.kube.qps;
  co.burst = cfg.kube.burst;
  if (cfg.kube.timeout.count() > 0) co.timeout = cfg.kube.timeout;
  auto event_client = k8s::ApiClient::Create(ioc.get_executor(), rest, co);
  if (!event_client) return event_client.error();
  s->event_client_ = std::move(*event_client);
  co.shared_limiter = std::make_shared<k8s::RateLimiter>(co.qps, co.burst);
  auto client = k8s::ApiClient::Create(ioc.get_executor(), rest, co);
  if (!client) return client.error();
  s->client_ = std::move(*client);
  co.background = true;
  auto background = k8s::ApiClient::Create(ioc.get_executor(), rest, co);
  if (!background) return background.error();
  s->background_client_ = std::move(*background);
  {
    // /refit's TokenReviews: a limiter of their own, one attempt of 1 s (half the device plugin's 2 s), so
    // that junk tokens never queue in front of a bind (docs/DECISIONS.md, "NUMA refit").
    k8s::ClientOptions ro;
    ro.qps = 10;
    ro.burst = 10;
    ro.timeout = std::chrono::milliseconds(1000);
    ro.max_attempts = 1;
    auto reviews = k8s::ApiClient::Create(ioc.get_executor(), rest, ro);
    if (!reviews) return reviews.error();
    s->review_client_ = std::move(*reviews);
  }
  const extender::LeadershipOptions& election = cfg.extender.leadership;
  if (election.enabled && election.mode == extender::LeaderElectMode::kAcquire) {
    // One attempt per request, bounded by half the renew deadline (at least the retry period): the rounds are
    // the retries, and one hung request must not use up the whole term.
    k8s::ClientOptions lo;
    lo.timeout = std::min(std::max(election.renew_deadline / 2, election.retry_period), co.timeout);
    lo.max_attempts = 1;
    auto leases = k8s::ApiClient::Create(ioc.get_executor(), rest, lo);
    if (!leases) return leases.error();
    s->lease_client_ = std::move(*leases);
  }

  extender::ExtenderOptions settings = cfg.extender;
  if (options.health_interval) settings.health_interval = *options.health_interval;
  if (options.bind_backlog) settings.filter.bind_backlog = *options.bind_backlog;
  extender::ExtenderSite site;
  site.hostname = options.hostname.empty() ? HostName() : options.hostname;
  for (auto [var, field] : {std::pair<const char*, std::string*>{"POD_NAME", &site.pod_name},
                            {"POD_NAMESPACE", &site.pod_namespace}}) {
    if (const char* v = std::getenv(var)) *field = v;
  }
  if (options.reflector_backoff) site.reflector.backoff_initial = *options.reflector_backoff;
  s->extender_ = std::make_unique<extender::Extender>(
      ioc.get_executor(),
      extender::Extender::Clients{s->client_.get(), s->background_client_.get(), s->event_client_.get(),
                                  s->lease_client_.get(), s->review_client_.get()},
      backends, std::move(settings), std::move(site), clock);
  if (election.enabled) {
    // The last fence: every attempt of every write (retries included) asks whether we still lead.
    const extender::Leadership* leadership = &s->extender_->leadership();
    const k8s::ApiClient::WriteGate gate = [leadership] {
      return leadership->leader() ? std::string()
                                  : "this replica is not the leader (" + leadership->Describe() + ")";
    };
    for (k8s::ApiClient* c :
         {s->client_.get(), s->background_client_.get(), s->event_client_.get(), s->review_client_.get()})
      c->SetWriteGate(gate);
  }
  extender::Extender& e = *s->extender_;
  s->routes_ = std::make_unique<extender::HttpRoutes>(
      extender::HttpRoutes::Services{e.filter(), e.binder(), e.preempt(), e.scores(), e.view(), e.admission(),
                                     e.readiness(), e, e.refit()},
      s->loop_exceptions_);

  using Serves = extender::HttpRoutes::Serves;
  // The memory request bodies can hold at once, in two pools shared by every listener: reviews, and the
  // extender's requests (and the probes'), so that neither can starve the other.
  const std::size_t pool_bytes = static_cast<std::size_t>(cfg.serving.request_body_budget_mib) << 20;
  const auto extender_bodies = std::make_shared<k8s::BodyBudget>(pool_bytes);
  const auto review_bodies = std::make_shared<k8s::BodyBudget>(pool_bytes);
  s->routes_->ShowBodyBudget("extender", extender_bodies);
  s->routes_->ShowBodyBudget("webhook", review_bodies);
  const auto add = [&](k8s::HttpServerOptions server, std::string listener, Serves serves) {
    server.max_connections = static_cast<std::size_t>(cfg.serving.max_connections);
    server.body_budget = extender_bodies;
    server.path_body_budgets["/webhook"] = review_bodies;
    // A pod's AdmissionReview may be larger than an extender request: the API server sends up to its 3 MiB
    // request limit for the object (HAMi's webhook reads 7 MiB). /filter and /bind keep HAMi's 1 MiB.
    if (serves.webhook) server.path_body_limits["/webhook"] = extender::kWebhookBodyLimit;
    s->servers_.push_back(std::make_unique<k8s::HttpServer>(ioc.get_executor(), server));
    s->routes_->Install(*s->servers_.back(), std::move(listener), serves);
    return s->servers_.back().get();
  };
  k8s::HttpServerOptions main;
  main.address = cfg.serving.http_bind;
  main.cert_file = cfg.serving.cert_file;
  main.key_file = cfg.serving.key_file;
  main.client_ca_file = cfg.serving.client_ca_file;
  s->server_ = add(main, "extender", Serves{.extender = true, .webhook = cfg.serving.webhook_bind.empty()});
  // The same address is the same listener, except port 0, which each listener picks anew (the demo's).
  const std::string& metrics_bind = cfg.serving.metrics_bind_address;
  if (!metrics_bind.empty() && (metrics_bind != cfg.serving.http_bind || metrics_bind.ends_with(":0"))) {
    k8s::HttpServerOptions m;
    m.address = cfg.serving.metrics_bind_address;
    m.address_flag = "--metrics-bind-address";
    s->metrics_ = add(m, "metrics", Serves{.api = true});
  }
  if (!cfg.serving.webhook_bind.empty()) {
    k8s::HttpServerOptions w;
    w.address = cfg.serving.webhook_bind;
    w.address_flag = "--webhook-bind";
    w.cert_file = cfg.serving.webhook_cert_file;
    w.key_file = cfg.serving.webhook_key_file;
    w.body_limit = extender::kWebhookBodyLimit;
    s->webhook_ = add(w, "webhook", Serves{.webhook = true, .metrics = false});
  }
  return s;
}

Result<void> SchedulerService::Listen() {
  for (auto& server : servers_) {
    if (auto p = server->Listen(); !p) return p.error();
  }
  return {};
}

std::string SchedulerService::url() const {
  return fmt::format("{}://127.0.0.1:{}", server_->tls() ? "https" : "http", server_->port());
}

void SchedulerService::Spawn(asio::awaitable<void> task, const char* what, asio::cancellation_slot slot) {
  ++running_;
  auto alive = alive_;
  asio::co_spawn(*ioc_, std::move(task),
                 asio::bind_cancellation_slot(slot, [this, alive, what](std::exception_ptr e) {
                   if (!*alive) return;
                   --running_;
                   if (!e || stopping_) return;
                   spdlog::error("{} stopped: {}", what, ExceptionMessage(e));
                   failure_ = e;
                   if (on_failure) on_failure();
                 }));
}

void SchedulerService::Start() {
  Spawn(extender_->Run(), "the extender", stop_.slot());
  Spawn(server_->Serve(), "the extender server");
  if (metrics_) Spawn(metrics_->Serve(), "the metrics server");
  if (webhook_) Spawn(webhook_->Serve(), "the webhook server");
}

void SchedulerService::Shutdown(std::chrono::milliseconds grace) {
  if (stopping_) return;
  stopping_ = true;
  for (auto& server : servers_) server->Shutdown();
  extender_->Stop();
  // Requests in flight finish (their API calls need the controller), then the watches stop.
  auto drain = [](SchedulerService* s,
                  std::chrono::steady_clock::time_point deadline) -> asio::awaitable<void> {
    for (auto& server : s->servers_) co_await server->Drained(deadline);
    // After the last answer's writes: a successor takes over within its retry period.
    co_await s->extender_->ReleaseLeadership();
    s->stop_.emit(asio::cancellation_type::terminal);
    // Events still queued when the grace ends are dropped: a stop takes the grace, not as long as the
    // events' own rate limit needs (a burst of refusals queues hundreds).
    while (s->extender_->busy() && std::chrono::steady_clock::now() < deadline)
      co_await k8s::SleepFor(std::chrono::milliseconds(50));
    if (const std::size_t queued = s->extender_->events().queued(); queued > 0) {
      spdlog::warn("shutdown: {} queued events dropped at the end of the grace period", queued);
      s->extender_->DropQueuedEvents();
    }
  };
  Spawn(drain(this, std::chrono::steady_clock::now() + grace), "the drain");
}

void SchedulerService::Kill() {
  if (stopping_) return;
  stopping_ = true;
  for (auto& server : servers_) server->Shutdown();
  extender_->Stop();
  extender_->DropQueuedEvents();  // a killed process loses what it had not sent
  stop_.emit(asio::cancellation_type::terminal);
  auto close = [](SchedulerService* s) -> asio::awaitable<void> {
    const auto now = std::chrono::steady_clock::now();
    for (auto& server : s->servers_) co_await server->Drained(now);
  };
  Spawn(close(this), "the connection close");
}

bool SchedulerService::stopped() const {
  return running_ == 0 && !extender_->busy() &&
         std::all_of(servers_.begin(), servers_.end(), [](const auto& server) {
           return server->in_flight() == 0 && server->open_connections() == 0;
         });
}

void RunUntilDoneOrSignal(asio::io_context& ioc, bool& done) {
  asio::signal_set signals(ioc, SIGINT, SIGTERM);
  signals.async_wait([&done](const boost::system::error_code& ec, int) {
    if (!ec) done = true;
  });
  while (!done) ioc.run_one_for(100ms);
  signals.cancel();
}

// ---------------------------------------------------------------------------------------------------------

int Serve(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::vector<std::string> flag_args{"hami-scheduler serve"};
  flag_args.insert(flag_args.end(), args.begin(), args.end());
  auto loaded = config::LoadConfig(flag_args, Vendors());
  if (!loaded) {
    err << "hami-scheduler serve: " << loaded.error().message << "\n";
    return kExitUsage;
  }
  if (loaded->help) {
    out << loaded->help_text;
    return kExitOk;
  }
  const config::Config& cfg = loaded->config;
  std::vector<std::string> warnings = cfg.warnings;
  auto backends = BuildBackends(cfg, &warnings);
  if (!backends) {
    err << "hami-scheduler serve: " << backends.error().message << "\n";
    return kExitUsage;
  }
  if (loaded->print_config) {
    out << config::ToYaml(cfg, Vendors());
    return kExitOk;
  }
  spdlog::set_level(spdlog::level::from_str(cfg.log_level));
  for (const auto& w : warnings) spdlog::warn("{}", w);
  const extender::LeadershipOptions& election = cfg.extender.leadership;
  if (election.enabled && election.mode == extender::LeaderElectMode::kAcquire) {
    spdlog::info(
        "--leader-elect: acquiring Lease {}/{} (lease duration {}, renew deadline {}, retry period {})",
        election.ns, election.name, config::FormatDuration(election.lease_duration),
        config::FormatDuration(election.renew_deadline), config::FormatDuration(election.retry_period));
  } else if (election.enabled) {
    spdlog::info(
        "--leader-elect: following Lease {}/{}; this replica leads while its holder identity starts "
        "with {}_",
        election.ns, election.name, election.identity.empty() ? HostName() : election.identity);
  }
  auto rest = k8s::ResolveRestConfig(cfg.kube.kubeconfig, k8s::ConfigEnv::System());
  if (!rest) {
    err << "hami-scheduler serve: cannot find the Kubernetes API server: " << rest.error().message << "\n";
    return kExitFailure;
  }
  asio::io_context ioc(1);
  SystemClock clock;
  auto service = SchedulerService::Create(ioc, cfg, *backends, *rest, clock);
  if (!service) {
    err << "hami-scheduler serve: " << service.error().message << "\n";
    return kExitFailure;
  }
  if (auto listening = (*service)->Listen(); !listening) {
    err << "hami-scheduler serve: " << listening.error().message << "\n";
    return kExitFailure;
  }
  SchedulerService& s = **service;
  spdlog::info("{} serving the extender on {} (webhook on port {}, metrics on port {}), API server {} ({})",
               VersionString(), s.url(), s.webhook_port(), s.metrics_port(), rest->HostHeader(),
               rest->source);
  asio::signal_set signals(ioc, SIGINT, SIGTERM);
  // Once a stop has begun (a signal or a failure), the loop ends when everything has stopped: checked every
  // 50 ms during the drain only, never while serving.
  asio::steady_timer watch(ioc);
  bool watching = false;
  std::function<void()> check = [&] {
    if (s.stopped()) {
      signals.cancel();
      ioc.stop();
      return;
    }
    watch.expires_after(50ms);
    watch.async_wait([&](const boost::system::error_code&) { check(); });
  };
  const auto stop_when_done = [&] {
    if (watching) return;
    watching = true;
    check();
  };
  signals.async_wait([&](const boost::system::error_code& ec, int signo) {
    if (ec) return;
    spdlog::info("signal {}: draining requests in flight, then exiting", signo);
    s.Shutdown(10s);
    stop_when_done();
  });
  s.on_failure = [&] {
    s.Kill();
    signals.cancel();
    stop_when_done();
  };
  s.Start();
  k8s::RunLoop(ioc, s.loop_exceptions(), "serve");
  if (s.failure()) {
    err << "hami-scheduler serve: stopped after a failure (see the log above)\n";
    return kExitFailure;
  }
  spdlog::info("stopped cleanly");
  return kExitOk;
}

}  // namespace hami::cmd
