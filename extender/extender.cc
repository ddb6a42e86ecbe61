#include "extender/extender.h"

#include <fmt/format.h>

#include <boost/asio/experimental/awaitable_operators.hpp>

#include "k8s/metrics.h"

namespace hami::extender {
namespace asio = boost::asio;

namespace {

CacheOptions CachesOf(const ExtenderOptions& o, const ExtenderSite& site) {
  const bool follow = o.leadership.enabled && o.leadership.mode == LeaderElectMode::kFollow;
  return CacheOptions{.reflector = site.reflector,
                      .node_label_selector = o.node_label_selector,
                      .watch_lease = follow,
                      .lease_namespace = o.leadership.ns,
                      .lease_name = o.leadership.name};
}

// --leader-elect-identity, or else the host name.
LeadershipOptions IdentifiedOn(LeadershipOptions o, const ExtenderSite& site) {
  if (o.identity.empty()) o.identity = site.hostname;
  return o;
}

}  // namespace

Extender::Extender(asio::any_io_executor executor, Clients clients, const Backends& backends,
                   ExtenderOptions options, const ExtenderSite& site, const Clock& clock)
    : clients_(clients),
      options_(std::move(options)),
      leadership_(IdentifiedOn(options_.leadership, site)),
      readiness_(leadership_),
      events_(executor, *clients.events, clock,
              k8s::EventRecorderOptions{options_.admission.scheduler_name, site.hostname}),
      writer_(*clients.decisions, *clients.background, events_, clients.reviews),
      fenced_(writer_, leadership_),
      feed_(backends, fenced_),
      health_(backends, fenced_, clock, options_.handshake_timeout, &readiness_.changed()),
      ledger_(feed_),
      expiry_(ledger_, fenced_, backends, clock, options_.bind.reservation_timeout),
      locker_(fenced_, clock, options_.node_lock_timeout),
      caches_(*clients.decisions, CachesOf(options_, site)),
      requeue_(feed_.state(), caches_.pods.views(), fenced_, clock,
               RequeueOptions{.qps = options_.requeue_qps.value_or(clients.background->options().qps / 2),
                              .scheduler_name = options_.admission.scheduler_name,
                              .policies = options_.filter.policies}),
      view_(feed_.state(), caches_.pods.views(), requeue_, options_.filter.policies,
            options_.capacity_shapes),
      lock_queue_(executor, feed_.state(), caches_.pods.views(), locker_,
                  options_.bind.node_lock_retry_timeout),
      plugin_locks_(executor, feed_.state(), ledger_, caches_.pods.views(), locker_, clock,
                    options_.bind.reservation_timeout),
      scores_(feed_.state(), ledger_, caches_.pods.views(), clock, readiness_, options_.filter.policies),
      binder_(feed_.state(), ledger_, caches_.pods.views(), lock_queue_, plugin_locks_, locker_, fenced_,
              clock, options_.bind, requeue_, &scores_),
      filter_(feed_.state(), ledger_, binder_, caches_.pods.views(), fenced_, clock, options_.filter,
              clients.decisions->options().qps, readiness_, requeue_, scores_),
      preempt_(
          feed_.state(), caches_.pods.views(), caches_.budgets.views(),
          [this] { return caches_.budgets.synced(); }, readiness_,
          PreemptOptions{.policies = options_.filter.policies,
                         .scheduler_name = options_.admission.scheduler_name}),
      admission_(backends, feed_.state(), options_.admission),
      refit_(feed_, ledger_, caches_.pods.views(), lock_queue_, locker_, fenced_, clock, options_.refit,
             options_.filter.policies),
      routes_(WatchRoutes::Targets{.feed = feed_,
                                   .health = health_,
                                   .ledger = ledger_,
                                   .lock_queue = lock_queue_,
                                   .plugin_locks = plugin_locks_,
                                   .leadership = leadership_,
                                   .readiness = readiness_,
                                   .requeue = requeue_,
                                   .preempt = preempt_,
                                   .scores = scores_,
                                   .scheduler_name = options_.admission.scheduler_name}),
      housekeeping_(Housekeeping::Parts{.caches = caches_,
                                        .feed = feed_,
                                        .health = health_,
                                        .ledger = ledger_,
                                        .expiry = expiry_,
                                        .plugin_locks = plugin_locks_,
                                        .leadership = leadership_,
                                        .readiness = readiness_,
                                        .writer = fenced_,
                                        .requeue = requeue_},
                    HousekeepingOptions{.interval = options_.health_interval,
                                        .pod_name = site.pod_name,
                                        .pod_namespace = site.pod_namespace}) {
  readiness_.RequireSynced("node", caches_.nodes.reflector());
  readiness_.RequireSynced("pod", caches_.pods.reflector());
  readiness_.RequireSynced("resource quota", caches_.quotas.reflector());
  if (caches_.lease) readiness_.RequireSynced("leader Lease", caches_.lease->reflector());
  readiness_.RequireHealthPass(health_);
  routes_.Attach(caches_);
  if (options_.leadership.enabled && options_.leadership.mode == LeaderElectMode::kAcquire) {
    lease_client_ =
        std::make_unique<ApiLeaseClient>(clients.leases != nullptr ? *clients.leases : *clients.decisions,
                                         options_.leadership.ns, options_.leadership.name);
    elector_ = std::make_unique<LeaseElector>(*lease_client_, leadership_, clock);
  }
}

Extender::~Extender() = default;

asio::awaitable<void> Extender::Run() {
  using namespace asio::experimental::awaitable_operators;
  if (elector_) {
    co_await (caches_.Run() && elector_->Run() && housekeeping_.Run() && requeue_.Run());
  } else {
    co_await (caches_.Run() && housekeeping_.Run() && requeue_.Run());
  }
}

const PodView* Extender::CachedPod(const std::string& key) const {
  auto it = caches_.pods.views().find(key);
  return it == caches_.pods.views().end() ? nullptr : &it->second;
}

asio::awaitable<void> Extender::ReleaseLeadership() {
  if (elector_) co_await elector_->Release();
}

void Extender::Stop() {
  readiness_.Stop();
  lock_queue_.Stop();
  lock_queue_.progress().Notify();
}

// ---------------------------------------------------------------------------------------------------------
// Metrics

Extender::Stats Extender::stats() const {
  Stats s;
  s.filters = filter_.stats().filters;
  s.filters_held = filter_.stats().filters_held;
  s.binds = binder_.stats().binds;
  s.lock_waits = lock_queue_.waits();
  s.rebinds = binder_.stats().rebinds;
  s.abandoned_locks = plugin_locks_.abandoned();
  s.health_passes = health_.stats().passes;
  s.handshake_patches = health_.stats().handshake_patches;
  s.cleanups = health_.stats().cleanups;
  s.annotation_errors = feed_.stats().annotation_errors;
  s.registration_errors = feed_.stats().registration_errors;
  s.expired = expiry_.expired();
  return s;
}

std::string Extender::Metrics() const {
  k8s::prom::TextWriter w;
  w.Family("hami_build_info", "Build information of hami-scheduler (C++).", "gauge");
  w.Sample("hami_build_info", {{"version", HAMI_VERSION}, {"compiler", "gcc"}}, 1);
  w.Gauge("hami_scheduler_ready",
          "1 once the caches are synced and the first health pass ran (a follower: once synced), as /readyz.",
          readiness_.reports_ready() ? 1 : 0);
  filter_.WriteMetrics(w);
  preempt_.WriteMetrics(w);
  scores_.WriteMetrics(w);
  admission_.WriteMetrics(w);
  binder_.WriteMetrics(w);
  refit_.WriteMetrics(w);
  health_.WriteMetrics(w);
  requeue_.WriteMetrics(w);
  w.Counter("hami_scheduler_reservations_expired_total",
            "Reservations of pods never bound within --reservation-timeout: freed, annotations removed.",
            static_cast<double>(expiry_.expired()));
  w.Counter("hami_scheduler_events_dropped_total", "Pod events dropped because too many were queued.",
            static_cast<double>(events_.stats().dropped));
  // What the API budget (--kube-qps/--kube-burst, one bucket per client) is spent on.
  std::vector<std::pair<const char*, const k8s::ApiClient*>> clients{{"scheduler", clients_.decisions}};
  if (clients_.background != clients_.decisions) clients.emplace_back("background", clients_.background);
  if (clients_.events != clients_.decisions) clients.emplace_back("events", clients_.events);
  w.Family("hami_kube_requests_total",
           "API requests sent (every attempt), by client, verb and resource (pods/binding: the binding).",
           "counter");
  for (const auto& [name, client] : clients) {
    for (const auto& [kind, n] : client->requests_by_kind())
      w.Sample("hami_kube_requests_total",
               {{"client", name}, {"verb", kind.first}, {"resource", kind.second}}, static_cast<double>(n));
  }
  w.Family("hami_kube_rate_limiter_wait_seconds_total",
           "Time requests waited for the client-side rate limit (--kube-qps, --kube-burst), summed.",
           "counter");
  for (const auto& [name, client] : clients)
    w.Sample("hami_kube_rate_limiter_wait_seconds_total", {{"client", name}}, client->throttled_seconds());
  w.Gauge(
      "hami_scheduler_leader",
      "1 on the leader (always without --leader-elect); a follower exports no device, quota or pod gauges, "
      "so dashboards summing over replicas count each device once.",
      leadership_.leader() ? 1 : 0);
  if (leadership_.leader())
    feed_.WriteMetrics(w, options_.legacy_metrics, options_.capacity_shapes,
                       options_.filter.policies.gpu_policy);
  return w.Take();
}

}  // namespace hami::extender
