#include "extender/extender.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/json.hpp>

#include "core/keys.h"
#include "k8s/metrics.h"
#include "k8s/objects.h"

namespace hami::extender {
namespace asio = boost::asio;
using std::chrono::steady_clock;

namespace {

template <class View>
std::unique_ptr<k8s::Informer<View>> Watch(k8s::ApiClient& client, k8s::Reflector::Options options,
                                           std::string path, typename k8s::Informer<View>::Convert convert,
                                           typename k8s::Informer<View>::Handlers handlers) {
  options.path = std::move(path);
  return std::make_unique<k8s::Informer<View>>(client, std::move(options), std::move(convert),
                                               std::move(handlers));
}

}  // namespace

Extender::Extender(asio::any_io_executor executor, Clients clients, const Backends& backends,
                   ExtenderOptions options, const Clock& clock)
    : executor_(executor),
      clients_(clients),
      options_(std::move(options)),
      leadership_(options_.leadership),
      events_(executor, *clients.events, clock,
              k8s::EventRecorderOptions{options_.scheduler_name, options_.hostname}),
      writer_(*clients.decisions, *clients.background, events_),
      fenced_(writer_, leadership_),
      feed_(backends, fenced_),
      health_(backends, fenced_, clock, options_.handshake_timeout, &ready_changed_),
      reservations_(fenced_, backends, clock, options_.reservation_timeout),
      locker_(fenced_, clock, options_.node_lock_timeout),
      nodes_(Watch<NodeView>(*clients.decisions,
                             [&] {
                               k8s::Reflector::Options o = options_.reflector_defaults;
                               o.label_selector = options_.node_label_selector;
                               return o;
                             }(),
                             "/api/v1/nodes", k8s::NodeFromJson,
                             {.on_add = [this](const NodeView& n) { OnNode(n); },
                              .on_update =
                                  [this](const NodeView& old_node, const NodeView& n) {
                                    // Re-created under the same name while we were not watching (a relist
                                    // shows an update).
                                    if (old_node.uid != n.uid) OnNodeDeleted(old_node);
                                    OnNode(n);
                                  },
                              .on_delete = [this](const NodeView& n) { OnNodeDeleted(n); },
                              .on_synced = [this] { ready_changed_.Notify(); }})),
      pods_(Watch<PodView>(*clients.decisions, options_.reflector_defaults, "/api/v1/pods", k8s::PodFromJson,
                           {.on_add = [this](const PodView& p) { OnPod(p); },
                            .on_update =
                                [this](const PodView& old_pod, const PodView& p) {
                                  if (old_pod.uid != p.uid) OnPodDeleted(old_pod);
                                  OnPod(p);
                                },
                            .on_delete = [this](const PodView& p) { OnPodDeleted(p); },
                            .on_synced = [this] { ready_changed_.Notify(); }})),
      quotas_(Watch<ResourceQuotaView>(
          *clients.decisions, options_.reflector_defaults, "/api/v1/resourcequotas",
          k8s::ResourceQuotaFromJson,
          {.on_add = [this](const ResourceQuotaView& q) { feed_.state().quotas().UpsertQuota(q); },
           .on_update = [this](const ResourceQuotaView&,
                               const ResourceQuotaView& q) { feed_.state().quotas().UpsertQuota(q); },
           .on_delete =
               [this](const ResourceQuotaView& q) { feed_.state().quotas().RemoveQuota(q.ns, q.name); },
           .on_synced = [this] { ready_changed_.Notify(); }})),
      binder_(executor, feed_.state(), reservations_, pods_->views(), locker_, fenced_, clock,
              BindOptions{options_.node_lock_retry_timeout, options_.reservation_timeout},
              [this](const std::string& uid) { ReleasePod(uid); }),
      filter_(feed_.state(), reservations_, binder_, pods_->views(), fenced_, clock,
              FilterOptions{options_.policies, options_.ready_wait, options_.bind_backlog,
                            clients.decisions->options().qps},
              Readiness{[this] { return ready(); }, [this] { return NotReadyReason(); }, &ready_changed_,
                        &stopping_}),
      admission_(backends, feed_.state(),
                 AdmissionOptions{options_.scheduler_name, options_.force_overwrite_default_scheduler}) {
  if (options_.leadership.enabled && options_.leadership.mode == LeaderElectMode::kAcquire) {
    lease_client_ =
        std::make_unique<ApiLeaseClient>(clients.leases != nullptr ? *clients.leases : *clients.decisions,
                                         options_.leadership.ns, options_.leadership.name);
    elector_ = std::make_unique<LeaseElector>(*lease_client_, leadership_, clock);
  } else if (options_.leadership.enabled) {
    k8s::Reflector::Options o = options_.reflector_defaults;
    o.field_selector = "metadata.name=" + options_.leadership.name;
    // A watch that backs off longer than the Lease lasts would end a term kube-scheduler still holds.
    o.backoff_max = std::min<std::chrono::milliseconds>(o.backoff_max, std::chrono::seconds(2));
    leases_ = Watch<LeaseView>(
        *clients.decisions, std::move(o),
        fmt::format("/apis/coordination.k8s.io/v1/namespaces/{}/leases", options_.leadership.ns),
        k8s::LeaseFromJson,
        {.on_add = [this](const LeaseView& l) { leadership_.Observe(&l); },
         .on_update = [this](const LeaseView&, const LeaseView& l) { leadership_.Observe(&l); },
         .on_delete = [this](const LeaseView&) { leadership_.Observe(nullptr); },
         .on_synced = [this] { ready_changed_.Notify(); }});
  }
}

Extender::~Extender() = default;

bool Extender::synced() const {
  return nodes_->synced() && pods_->synced() && quotas_->synced() && (!leases_ || leases_->synced());
}

std::string Extender::NotReadyReason() const {
  if (!nodes_->synced()) return "the node cache is not synced yet";
  if (!pods_->synced()) return "the pod cache is not synced yet";
  if (!quotas_->synced()) return "the resource quota cache is not synced yet";
  if (leases_ && !leases_->synced()) return "the leader Lease cache is not synced yet";
  if (health_.stats().passes == 0) return "the first health pass has not run yet";
  return "";
}

asio::awaitable<void> Extender::Run() {
  using namespace asio::experimental::awaitable_operators;
  if (leases_) {
    co_await (nodes_->Run() && pods_->Run() && quotas_->Run() && leases_->Run() && HealthLoop());
  } else if (elector_) {
    co_await (nodes_->Run() && pods_->Run() && quotas_->Run() && elector_->Run() && HealthLoop());
  } else {
    co_await (nodes_->Run() && pods_->Run() && quotas_->Run() && HealthLoop());
  }
}

const PodView* Extender::CachedPod(const std::string& key) const {
  auto it = pods_->views().find(key);
  return it == pods_->views().end() ? nullptr : &it->second;
}

asio::awaitable<void> Extender::ReleaseLeadership() {
  if (elector_) co_await elector_->Release();
}

void Extender::Stop() {
  stopping_ = true;
  binder_.Stop();
  ready_changed_.Notify();
  binder_.progress().Notify();
}

// ---------------------------------------------------------------------------------------------------------
// Watch events, routed to the services

void Extender::OnNode(const NodeView& node) {
  feed_.UpsertNode(node);
  health_.ApplyMask(node.name, feed_.state());
  binder_.OnNodeSeen(node);
}

void Extender::OnNodeDeleted(const NodeView& node) {
  feed_.RemoveNode(node.name);
  health_.Forget(node.name);  // a node re-created under the same name starts clean
  binder_.OnNodeDeleted(node.name);
}

void Extender::OnPod(const PodView& pod) {
  const std::string uid = UidOf(pod);
  feed_.TrackWaiting(pod, pod.scheduler_name == options_.scheduler_name);
  if (Finished(pod)) {
    ReleasePod(uid);
    binder_.OnPodGone(uid);
    return;
  }
  if (!pod.node_name.empty()) binder_.OnPodBound(uid);
  // A pod without hami.io/vgpu-node holds nothing new (our reservation, if any, is written by its Binding).
  // A bound one whose annotations were removed keeps what it held, and a block it caused (fail closed).
  if (!pod.annotations.contains(keys::kAssignedNode)) {
    if (pod.node_name.empty()) feed_.ClearUnreadable(uid);
    return;
  }
  if (reservations_.contains(uid)) {
    // Our filter decided for this pod and the Binding writes the decision: until the pod shows bound,
    // annotations it carries are an earlier decision's.
    if (pod.node_name.empty()) return;
    reservations_.Drop(uid);
  }
  feed_.RecordAllocation(pod);
}

void Extender::OnPodDeleted(const PodView& pod) {
  const std::string uid = UidOf(pod);
  feed_.StopWaiting(uid);
  ReleasePod(uid);
  binder_.OnPodGone(uid);
}

void Extender::ReleasePod(const std::string& uid) {
  feed_.Forget(uid);
  reservations_.Forget(uid);
}

// ---------------------------------------------------------------------------------------------------------
// The health loop

asio::awaitable<void> Extender::HealthLoop() {
  while (!synced()) co_await ready_changed_.WaitUntil(steady_clock::now() + std::chrono::hours(1));
  bool was_leader = !options_.leadership.enabled;
  for (;;) {
    const bool leader = leadership_.leader();
    // The elector logs its own turns (acquire mode); a followed Lease's are logged here.
    if (leader != was_leader && options_.leadership.mode == LeaderElectMode::kFollow)
      spdlog::info("leader election: {}",
                   leader ? "leading (the Lease names our host)" : leadership_.Describe());
    was_leader = leader;
    // A follower writes nothing: the leader's pass and sweep keep the cluster; its caches stay warm.
    if (leader) {
      // The labels first: the chart's Service (the webhook's way in) selects the leader's pod by them.
      if (options_.leadership.enabled) co_await LabelSchedulerPods();
      co_await HealthPass();
      co_await ExpireReservations();
    }
    // Becoming the leader starts a pass at once.
    co_await leadership_.changed().WaitUntil(steady_clock::now() + options_.health_interval);
    co_await k8s::ThrowIfCancelled();
  }
}

asio::awaitable<void> Extender::LabelSchedulerPods() {
  if (options_.pod_name.empty() || options_.pod_namespace.empty()) co_return;
  constexpr std::string_view kRole = "hami.io/scheduler-role";
  std::vector<std::pair<std::string, std::string>> changes;  // pod, role
  const std::string prefix = options_.pod_namespace + "/";   // the cache is keyed "ns/name", sorted
  const auto& pods = pods_->views();
  // Only the pods of our own release (its app.kubernetes.io/instance, when our pod has one): two releases in
  // one namespace, or HAMi's chart beside ours while switching, would otherwise relabel each other's pods.
  constexpr std::string_view kInstance = "app.kubernetes.io/instance";
  std::optional<std::string> instance;
  if (auto self = pods.find(prefix + options_.pod_name); self != pods.end()) {
    if (auto i = self->second.labels.find(std::string(kInstance)); i != self->second.labels.end())
      instance = i->second;
  }
  for (auto it = pods.lower_bound(prefix); it != pods.end() && it->first.starts_with(prefix); ++it) {
    const PodView& pod = it->second;
    auto component = pod.labels.find("app.kubernetes.io/component");
    if (component == pod.labels.end() || component->second != "hami-scheduler") continue;
    if (instance) {
      auto i = pod.labels.find(std::string(kInstance));
      if (i == pod.labels.end() || i->second != *instance) continue;
    }
    const std::string role = pod.name == options_.pod_name ? "leader" : "follower";
    auto current = pod.labels.find(std::string(kRole));
    if (current == pod.labels.end() || current->second != role) changes.emplace_back(pod.name, role);
  }
  for (const auto& [name, role] : changes) {
    const boost::json::value patch = {{"metadata", {{"labels", {{kRole, role}}}}}};
    auto r = co_await fenced_.PatchPod(options_.pod_namespace, name, patch, Budget::kBackground);
    if (!r)
      spdlog::warn("leader: labelling pod {}/{} {}={}: {}", options_.pod_namespace, name, kRole, role,
                   r.error().message);
  }
}

asio::awaitable<void> Extender::HealthPass() { co_await health_.Pass(nodes_->views(), feed_.state()); }

asio::awaitable<void> Extender::ExpireReservations() {
  // One sweep at a time (a test's call may meet the loop's): each decides from what the last one left.
  while (sweeping_) co_await sweep_done_.WaitUntil(steady_clock::now() + std::chrono::hours(1));
  sweeping_ = true;
  struct Done {
    Extender* e;
    ~Done() {
      e->sweeping_ = false;
      e->sweep_done_.Notify();
    }
  } done{this};
  // Named: a temporary std::function bound to a coroutine's reference parameter is what GCC 12 mishandles.
  const Reservations::Release release = [this](const std::string& uid) { ReleasePod(uid); };
  const Reservations::BindRunning running = [this](const std::string& key, const std::string& uid) {
    return binder_.InFlight(key, uid);
  };
  const auto due = reservations_.Expire(pods_->views(), running, release);
  // Ledger entries the annotations no longer back (removed by someone, or by an expiry that raced a filter).
  for (const auto& uid : feed_.Orphans(
           pods_->views(), [this](const std::string& uid) { return reservations_.contains(uid); })) {
    spdlog::info("ledger: pod uid {} no longer carries an allocation: released", uid);
    ReleasePod(uid);
  }
  co_await binder_.ReleaseAbandonedLocks(nodes_->views());
  co_await reservations_.Clear(due, release);
}

// ---------------------------------------------------------------------------------------------------------
// Metrics

Extender::Stats Extender::stats() const {
  Stats s;
  s.filters = filter_.stats().filters;
  s.filters_held = filter_.stats().filters_held;
  s.binds = binder_.stats().binds;
  s.lock_waits = binder_.stats().lock_waits;
  s.rebinds = binder_.stats().rebinds;
  s.abandoned_locks = binder_.stats().abandoned_locks;
  s.health_passes = health_.stats().passes;
  s.handshake_patches = health_.stats().handshake_patches;
  s.cleanups = health_.stats().cleanups;
  s.annotation_errors = feed_.stats().annotation_errors;
  s.registration_errors = feed_.stats().registration_errors;
  s.expired = reservations_.expired();
  return s;
}

std::string Extender::Metrics() const {
  k8s::prom::TextWriter w;
  w.Family("hami_build_info", "Build information of hami-scheduler (C++).", "gauge");
  w.Sample("hami_build_info", {{"version", HAMI_VERSION}, {"compiler", "gcc"}}, 1);
  w.Gauge("hami_scheduler_ready",
          "1 once the caches are synced and the first health pass ran (a follower: once synced), as /readyz.",
          reports_ready() ? 1 : 0);
  filter_.WriteMetrics(w);
  admission_.WriteMetrics(w);
  binder_.WriteMetrics(w);
  health_.WriteMetrics(w);
  w.Counter("hami_scheduler_reservations_expired_total",
            "Reservations of pods never bound within --reservation-timeout: freed, annotations removed.",
            static_cast<double>(reservations_.expired()));
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
  if (leadership_.leader()) feed_.WriteMetrics(w, options_.legacy_metrics);
  return w.Take();
}

}  // namespace hami::extender
