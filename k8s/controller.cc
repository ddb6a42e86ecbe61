#include "k8s/controller.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <charconv>

#include "core/codec/stamps.h"
#include "core/fit.h"
#include "core/keys.h"
#include "core/strings.h"
#include "k8s/objects.h"

namespace hami::k8s {
namespace asio = boost::asio;
namespace json = boost::json;
using std::chrono::steady_clock;

namespace {

std::string UidOf(const PodView& pod) { return pod.uid.empty() ? pod.Key() : pod.uid; }

// The device plugin is there: it answered a handshake, or kubelet counts its devices.
bool Finished(const PodView& pod) { return pod.phase == "Succeeded" || pod.phase == "Failed"; }

bool AllInitContainersSucceeded(const PodView& pod) {
  if (pod.init_containers.empty() || pod.init_container_statuses.size() < pod.init_containers.size())
    return false;
  for (const auto& s : pod.init_container_statuses) {
    if (!s.terminated || s.exit_code != 0) return false;
  }
  return true;
}

asio::awaitable<void> Sleep(std::chrono::milliseconds d) {
  asio::steady_timer t(co_await asio::this_coro::executor, d);
  co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
}

// "3 nodes: CardInsufficientMemory (a, b, c); 1 node: node unregistered (d)"
std::string SummarizeFailures(const std::map<std::string, std::string>& failed) {
  std::map<std::string, std::vector<std::string>> by_reason;
  for (const auto& [node, reason] : failed) by_reason[reason].push_back(node);
  std::string out;
  for (const auto& [reason, nodes] : by_reason) {
    if (!out.empty()) out += "; ";
    std::string names;
    for (std::size_t i = 0; i < nodes.size() && i < 5; ++i) names += (i ? ", " : "") + nodes[i];
    if (nodes.size() > 5) names += fmt::format(", and {} more", nodes.size() - 5);
    out += fmt::format("{} node{}: {} ({})", nodes.size(), nodes.size() == 1 ? "" : "s", reason, names);
  }
  return out;
}

}  // namespace

Controller::Controller(asio::any_io_executor executor, Clients clients, const Backends& backends,
                       ControllerOptions options, const Clock& clock)
    : executor_(executor),
      client_(clients.decisions),
      background_client_(clients.background),
      event_client_(clients.events),
      backends_(&backends),
      options_(std::move(options)),
      clock_(&clock),
      state_(backends),
      scheduler_(state_, options_.policies),
      events_(executor, *clients.events, clock,
              EventRecorderOptions{options_.scheduler_name, options_.hostname}),
      locker_(*clients.decisions, clock, options_.node_lock_timeout),
      filter_latency_(prom::Histogram::LatencyBuckets()),
      bind_latency_(prom::Histogram::LatencyBuckets()) {
  Reflector::Options node_watch = options_.reflector_defaults;
  node_watch.path = "/api/v1/nodes";
  node_watch.label_selector = options_.node_label_selector;
  nodes_ = std::make_unique<Informer<NodeView>>(
      *client_, node_watch, NodeFromJson,
      Informer<NodeView>::Handlers{.on_add = [this](const NodeView& n) { OnNode(n); },
                                   .on_update =
                                       [this](const NodeView& old_node, const NodeView& n) {
                                         // Re-created under the same name while we were not watching (a
                                         // relist shows it as an update).
                                         if (old_node.uid != n.uid) OnNodeDeleted(old_node);
                                         OnNode(n);
                                       },
                                   .on_delete = [this](const NodeView& n) { OnNodeDeleted(n); },
                                   .on_synced = {}});
  Reflector::Options pod_watch = options_.reflector_defaults;
  pod_watch.path = "/api/v1/pods";
  pods_ = std::make_unique<Informer<PodView>>(
      *client_, pod_watch, PodFromJson,
      Informer<PodView>::Handlers{.on_add = [this](const PodView& p) { OnPod(p); },
                                  .on_update =
                                      [this](const PodView& old_pod, const PodView& p) {
                                        if (old_pod.uid != p.uid) OnPodDeleted(old_pod);
                                        OnPod(p);
                                      },
                                  .on_delete = [this](const PodView& p) { OnPodDeleted(p); },
                                  .on_synced = {}});
  Reflector::Options quota_watch = options_.reflector_defaults;
  quota_watch.path = "/api/v1/resourcequotas";
  quotas_ = std::make_unique<Informer<ResourceQuotaView>>(
      *client_, quota_watch, ResourceQuotaFromJson,
      Informer<ResourceQuotaView>::Handlers{
          .on_add = [this](const ResourceQuotaView& q) { state_.quotas().UpsertQuota(q); },
          .on_update = [this](const ResourceQuotaView&,
                              const ResourceQuotaView& q) { state_.quotas().UpsertQuota(q); },
          .on_delete = [this](const ResourceQuotaView& q) { state_.quotas().RemoveQuota(q.ns, q.name); },
          .on_synced = {}});
}

Controller::~Controller() = default;

std::size_t Controller::unreadable_registrations() const {
  std::size_t n = 0;
  for (const auto& [node, errors] : registration_errors_)
    n += static_cast<std::size_t>(
        std::count_if(errors.begin(), errors.end(), [](const auto& e) { return !e.empty(); }));
  return n;
}

bool Controller::BindInFlight(const std::string& key, const std::string& uid) const {
  auto [b, e] = binds_in_flight_.equal_range(key);
  return std::any_of(b, e, [&](const auto& kv) { return kv.second == uid; });
}

bool Controller::synced() const { return nodes_->synced() && pods_->synced() && quotas_->synced(); }

std::string Controller::NotReadyReason() const {
  if (!nodes_->synced()) return "the node cache is not synced yet";
  if (!pods_->synced()) return "the pod cache is not synced yet";
  if (!quotas_->synced()) return "the resource quota cache is not synced yet";
  if (health_passes_ == 0) return "the first health pass has not run yet";
  return "";
}

asio::awaitable<void> Controller::Run() {
  using namespace asio::experimental::awaitable_operators;
  co_await (nodes_->Run() && pods_->Run() && quotas_->Run() && HealthLoop());
}

// ---------------------------------------------------------------------------------------------------------
// Watches -> registry and ledger

void Controller::OnNode(const NodeView& node) {
  state_.UpsertNode(node);
  ReportRegistrationErrors(node);
  ApplyHealthMask(node.name);
  ForgetReleasedLocks(node);
  WakeLockWaiters(node.name);
}

void Controller::OnNodeDeleted(const NodeView& node) {
  state_.RemoveNode(node.name);
  registration_errors_.erase(node.name);
  held_locks_.erase(node.name);
  health_.erase(node.name);  // a node re-created under the same name starts clean
  WakeLockWaiters(node.name);
}

void Controller::ReportRegistrationErrors(const NodeView& node) {
  const NodeEntry* entry = state_.FindNode(node.name);
  if (entry == nullptr) return;
  auto& reported = registration_errors_[node.name];
  reported.resize(backends_->size());
  for (std::size_t b = 0; b < backends_->size(); ++b) {
    const std::string& error = entry->discovery_error[b];
    if (error == reported[b]) continue;  // once per node, vendor and value: every later event says the same
    reported[b] = error;
    if (error.empty()) {
      spdlog::info("node {}: {} devices readable again", node.name, backends_->at(b).Spec().vendor);
      continue;
    }
    ++stats_.registration_errors;
    const std::string message =
        fmt::format("{} device registration ignored (the devices read before stay): {}",
                    backends_->at(b).Spec().vendor, error);
    spdlog::warn("node {}: {}", node.name, message);
    events_.Record(InvolvedObject::Of(node), "Warning", "InvalidDeviceRegistration", message);
  }
  if (std::all_of(reported.begin(), reported.end(), [](const std::string& e) { return e.empty(); }))
    registration_errors_.erase(node.name);
}

void Controller::ApplyHealthMask(const std::string& node) {
  auto it = health_.find(node);
  if (it == health_.end()) return;
  for (std::size_t b : it->second.unhealthy) state_.RemoveVendorDevices(node, b);
}

void Controller::OnPod(const PodView& pod) {
  const std::string uid = UidOf(pod);
  if (Finished(pod)) {
    ReleasePod(uid);
    ReleaseLeftoverLocks(uid);
    if (!lock_waiters_.empty()) WakeAllLockWaiters();  // it may own a lock someone waits for
    return;
  }
  // A pod without hami.io/vgpu-node holds nothing (our reservation, if any, is written by its Binding).
  if (!pod.annotations.contains(keys::kAssignedNode)) return;
  if (auto res = reservations_.find(uid); res != reservations_.end()) {
    // Our filter decided for this pod and the Binding writes the decision: until the pod shows bound,
    // annotations it carries are an earlier decision's.
    if (pod.node_name.empty()) return;
    reservations_.erase(res);
  }
  auto decoded = AllocationFromAnnotations(pod, *backends_);
  if (!decoded) {
    ++stats_.annotation_errors;
    // Once per pod: every later event of the pod would say the same.
    if (annotation_warned_.insert(uid).second)
      spdlog::warn("pod {}: allocation annotations ignored: {}", pod.Key(), decoded.error().message);
    return;
  }
  if (!*decoded) return;
  state_.AddPod(std::move(**decoded));
  if (AllInitContainersSucceeded(pod)) state_.ReleaseInitContainers(uid);
}

void Controller::OnPodDeleted(const PodView& pod) {
  ReleasePod(UidOf(pod));
  ReleaseLeftoverLocks(UidOf(pod));
  if (!lock_waiters_.empty()) WakeAllLockWaiters();
}

void Controller::ReleaseLeftoverLocks(const std::string& uid) {
  for (auto& [node, locks] : held_locks_) {
    for (auto it = locks.begin(); it != locks.end();) {
      if (it->uid != uid) {
        ++it;
        continue;
      }
      // Owners are named by namespace/name: a new pod of the same name may have re-entered this lock.
      if (auto now = pods_->views().find(it->target.pod_ns + "/" + it->target.pod_name);
          now != pods_->views().end() && now->second.uid != uid) {
        it = locks.erase(it);
        continue;
      }
      // The pod went away before its device plugin finished: nobody else would release this lock (a bare
      // timestamp, as Cambricon's, names no owner that could be found gone).
      spdlog::info("pod {}/{} is gone: releasing {} on node {}", it->target.pod_ns, it->target.pod_name,
                   it->target.key, node);
      ++background_;
      // The coroutine owns its copy: the entry is erased before the coroutine first runs.
      const auto release = [](NodeLocker& locker, HeldLock lock) -> asio::awaitable<void> {
        co_await locker.Release(lock.target, lock.value);
      };
      asio::co_spawn(executor_, release(locker_, *it), [this](std::exception_ptr) { --background_; });
      it = locks.erase(it);
    }
  }
  std::erase_if(held_locks_, [](const auto& kv) { return kv.second.empty(); });
}

void Controller::ForgetReleasedLocks(const NodeView& node) {
  auto it = held_locks_.find(node.name);
  if (it == held_locks_.end()) return;
  std::erase_if(it->second, [&](const HeldLock& h) {
    // Only a node state from after our lock patch tells: an older event still lacks our value.
    if (!LaterOrSame(node.resource_version, h.resource_version)) return false;
    auto a = node.annotations.find(h.target.key);
    return a == node.annotations.end() || a->second != h.value;
  });
  if (it->second.empty()) held_locks_.erase(it);
}

void Controller::ReleasePod(const std::string& uid) {
  state_.RemovePod(uid);
  reservations_.erase(uid);
  annotation_warned_.erase(uid);
  undated_.erase(uid);
}

// ---------------------------------------------------------------------------------------------------------
// Health

asio::awaitable<void> Controller::HealthLoop() {
  while (!synced()) co_await Sleep(std::chrono::milliseconds(20));
  for (;;) {
    co_await HealthPass();
    co_await ExpireReservations();
    co_await Sleep(options_.health_interval);
  }
}

asio::awaitable<void> Controller::PatchNodeAnnotation(const std::string& node, const std::string& key,
                                                      const json::value& value) {
  const std::string path = PathFor("v1", "nodes", "", node);
  const json::value patch = {{"metadata", {{"annotations", {{key, value}}}}}};
  auto r = co_await background_client_->MergePatch(path, patch);
  if (!r && r.error().kind != ApiErrorKind::kNotFound)
    spdlog::warn("node {}: could not write {}: {}", node, key, r.error().message);
}

asio::awaitable<void> Controller::HealthPass() {
  const TimePoint now = clock_->Now();
  struct Write {
    std::string node, key;
    json::value value;
  };
  std::vector<Write> writes;
  // Decide for every node first (synchronously: the caches cannot change under us), then write. The decision
  // is core's (`simulate` runs the same one); here are its effects.
  for (const auto& [name_key, node] : nodes_->views()) {
    NodeHealthRecord& h = health_[node.name];
    for (const NodeHealthStep& step :
         NodeHealthPass(*backends_, node, state_.FindNode(node.name), h, now, options_.handshake_timeout)) {
      const BackendSpec& spec = backends_->at(step.backend).Spec();
      const HealthVerdict& v = step.verdict;
      if (v.handshake_patch && !spec.keys.handshake.empty()) {
        writes.push_back({node.name, spec.keys.handshake, json::value(*v.handshake_patch)});
        ++stats_.handshake_patches;
      }
      if (step.withhold) {
        spdlog::warn("node {}: {} devices withheld: {}", node.name, spec.vendor, v.why);
        state_.RemoveVendorDevices(node.name, step.backend);
        // Removing the handshake lets the device plugin register again on a later pass.
        if (!spec.keys.handshake.empty())
          writes.push_back({node.name, spec.keys.handshake, json::value(nullptr)});
        ++stats_.cleanups;
      } else if (step.restore) {
        spdlog::info("node {}: {} devices healthy again: {}", node.name, spec.vendor, v.why);
        state_.UpsertNode(node);
        ApplyHealthMask(node.name);
      }
    }
  }
  ++health_passes_;
  ++stats_.health_passes;
  for (const auto& w : writes) co_await PatchNodeAnnotation(w.node, w.key, w.value);
}

// ---------------------------------------------------------------------------------------------------------
// Reservation expiry

namespace {

// Unix seconds as the filter and bind write them; nullopt if absent or unreadable.
std::optional<TimePoint> UnixSeconds(const Annotations& a, std::string_view key) {
  auto it = a.find(std::string(key));
  if (it == a.end()) return std::nullopt;
  std::int64_t s = 0;
  const std::string& v = it->second;
  const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), s);
  // Beyond a few centuries the nanosecond clock would overflow.
  if (ec != std::errc() || ptr != v.data() + v.size() || s < 0 || s > (std::int64_t{1} << 33))
    return std::nullopt;
  return TimePoint(std::chrono::seconds(s));
}

}  // namespace

std::vector<std::string_view> Controller::AllocationKeys() const {
  std::vector<std::string_view> out{keys::kAssignedNode, keys::kDecisionTime, keys::kMigAllocations};
  for (const auto& backend : *backends_) {
    const BackendKeys& k = backend->Spec().keys;
    if (!k.allocated.empty()) out.push_back(k.allocated);
    if (!k.to_allocate.empty()) out.push_back(k.to_allocate);
  }
  return out;
}

asio::awaitable<void> Controller::ExpireReservations() {
  // One sweep at a time (a test's call may meet the loop's): each decides from what the last one left.
  while (expiring_) co_await Sleep(std::chrono::milliseconds(5));
  expiring_ = true;
  struct Done {
    bool* flag;
    ~Done() { *flag = false; }
  } done{&expiring_};
  const TimePoint now = clock_->Now();
  // Pods carrying an allocation without spec.nodeName (an earlier decision's, or HAMi's: its filter writes
  // the pod before the bind).
  struct Expiry {
    std::string uid, ns, name, resource_version;
  };
  std::vector<Expiry> due;
  std::unordered_set<std::string> dated;
  for (const auto& [key, pod] : pods_->views()) {
    if (!pod.node_name.empty() || Finished(pod) || !pod.annotations.contains(keys::kAssignedNode)) continue;
    const std::string uid = UidOf(pod);
    if (reservations_.contains(uid)) continue;  // ours, in memory: expired below
    if (BindInFlight(key, uid)) continue;       // a bind is using it
    // The latest of filter and bind; a stamp far in the future is no stamp (it would never expire).
    std::optional<TimePoint> since = UnixSeconds(pod.annotations, keys::kDecisionTime);
    if (auto bound = UnixSeconds(pod.annotations, keys::kBindTime); bound && (!since || *bound > *since))
      since = bound;
    if (since && *since > now + std::chrono::minutes(5)) since.reset();
    if (!since) since = undated_.try_emplace(uid, now).first->second;
    dated.insert(uid);
    if (now - *since < options_.reservation_timeout) continue;
    due.push_back({uid, pod.ns, pod.name, pod.resource_version});
  }
  // Our own decisions never bound: nothing was written on the pod, so freeing them is all there is to do.
  std::vector<std::string> stale;
  for (const auto& [uid, r] : reservations_) {
    if (now - r.decided >= options_.reservation_timeout && !BindInFlight(r.key, uid)) stale.push_back(uid);
  }
  for (const auto& uid : stale) {
    spdlog::warn("pod {}: not bound {}s after its filter: reservation freed", reservations_.at(uid).key,
                 options_.reservation_timeout.count());
    ++stats_.expired;
    ReleasePod(uid);
  }
  std::erase_if(undated_, [&](const auto& kv) { return !dated.contains(kv.first); });

  // Ledger entries the annotations no longer back (removed by someone, or by an expiry that raced a filter).
  std::vector<std::string> orphans;
  state_.ForEachPod([&](const PodAllocation& a, const auto&) {
    if (reservations_.contains(a.uid)) return;
    auto it = pods_->views().find(a.ns + "/" + a.name);
    if (it == pods_->views().end() || UidOf(it->second) != a.uid ||
        !it->second.annotations.contains(keys::kAssignedNode))
      orphans.push_back(a.uid);
  });
  for (const auto& uid : orphans) {
    spdlog::info("ledger: pod uid {} no longer carries an allocation: released", uid);
    ReleasePod(uid);
  }

  // Node locks left by a bind that never completed (the process was killed between lock and binding, or
  // the pod was bound elsewhere afterwards): nobody would release them before the lock timeout, and every
  // bind to the node waits meanwhile.
  std::vector<std::pair<LockTarget, std::string>> abandoned;
  for (const auto& [name, node] : nodes_->views()) {
    for (std::size_t b = 0; b < backends_->size(); ++b) {
      const BackendSpec& spec = backends_->at(b).Spec();
      if (spec.keys.node_lock.empty() || !spec.lock.owner_aware) continue;
      auto value = node.annotations.find(spec.keys.node_lock);
      if (value == node.annotations.end()) continue;
      if (std::any_of(abandoned.begin(), abandoned.end(), [&](const auto& a) {
            return a.first.node == node.name && a.first.key == spec.keys.node_lock;
          }))
        continue;
      auto lock = codec::ParseNodeLock(value->second);
      if (!lock || lock->legacy) continue;
      const std::string owner_key = lock->ns + "/" + lock->pod;
      if (binds_in_flight_.contains(owner_key)) continue;  // a bind of ours is using it right now
      auto it = pods_->views().find(owner_key);
      const PodView* owner = it == pods_->views().end() ? nullptr : &it->second;
      // Held by us for another pod of that name than the cache shows (re-created, the cache behind).
      if (auto held = held_locks_.find(node.name);
          held != held_locks_.end() && owner != nullptr &&
          std::any_of(held->second.begin(), held->second.end(),
                      [&](const HeldLock& h) { return h.value == value->second && h.uid != UidOf(*owner); }))
        continue;
      const bool elsewhere = owner != nullptr && !owner->node_name.empty() && owner->node_name != node.name;
      // Unbound, gone, or allocated already (the device plugin's release was lost): nobody needs it now.
      bool idle = owner == nullptr || owner->node_name.empty();
      if (owner != nullptr) {
        auto phase = owner->annotations.find(std::string(keys::kBindPhase));
        idle |= phase != owner->annotations.end() &&
                (phase->second == keys::kBindPhaseSuccess || phase->second == keys::kBindPhaseFailed);
      }
      if (elsewhere || (idle && now - lock->taken_at >= options_.reservation_timeout))
        abandoned.push_back(
            {LockTarget{node.name, spec.keys.node_lock, spec.lock, lock->ns, lock->pod}, value->second});
    }
  }
  for (const auto& [target, value] : abandoned) {
    spdlog::warn(
        "node {}: lock {} of pod {}/{} is needed no more (its bind did not complete, or the device "
        "plugin's release was lost): releasing it",
        target.node, target.key, target.pod_ns, target.pod_name);
    ++stats_.abandoned_locks;
    co_await locker_.Release(target, value);  // only if it still holds that value
  }

  for (const Expiry& e : due) {
    json::object annotations{{keys::kBindPhase, nullptr}, {keys::kBindTime, nullptr}};
    for (const std::string_view k : AllocationKeys()) annotations[k] = nullptr;
    // Compare-and-swap: a re-filter or a bind that wrote the pod since we looked wins.
    const json::value patch = {{"metadata",
                                {{"annotations", std::move(annotations)},
                                 {"labels", {{keys::kAssignedNode, nullptr}}},
                                 {"resourceVersion", e.resource_version}}}};
    const std::string path = PathFor("v1", "pods", e.ns, e.name);
    auto patched = co_await background_client_->MergePatch(path, patch);
    if (!patched) {
      if (patched.error().kind != ApiErrorKind::kConflict && patched.error().kind != ApiErrorKind::kNotFound)
        spdlog::warn("pod {}/{}: could not remove an expired reservation: {}", e.ns, e.name,
                     patched.error().message);
      continue;
    }
    ++stats_.expired;
    spdlog::warn(
        "pod {}/{}: not bound {}s after its filter: reservation freed, allocation annotations "
        "removed",
        e.ns, e.name, options_.reservation_timeout.count());
    // A filter that decided while the patch was out holds a reservation of its own: it stays.
    if (!reservations_.contains(e.uid)) ReleasePod(e.uid);
  }
}

// ---------------------------------------------------------------------------------------------------------
// Filter

asio::awaitable<bool> Controller::WaitReady() {
  const auto deadline = steady_clock::now() + options_.ready_wait;
  while (!ready()) {
    if (steady_clock::now() >= deadline || stopping_) co_return false;
    co_await Sleep(std::chrono::milliseconds(20));
  }
  co_return true;
}

asio::awaitable<void> Controller::AwaitBindBacklog() {
  // Backpressure: kube-scheduler filters pod after pod and hands each bind over at once, so with a small
  // --kube-qps a burst queues binds for longer than its 30 s httpTimeout (each bind needs two requests of
  // the budget), they fail, and the pods come back after a backoff. Holding the next decision while the
  // binds in flight need more than kBindBacklog of the budget paces kube-scheduler's queue to the budget
  // instead: the same throughput, no failed binds. Bounded, so a stuck bind cannot stall every filter.
  constexpr double kRequestsPerBind = 2;  // the lock's compare-and-swap and the Binding
  constexpr std::chrono::seconds kMaxHold{20};
  const std::chrono::duration<double> kBindBacklog = options_.bind_backlog;
  const double qps = client_->options().qps;
  if (qps <= 0 || options_.bind_backlog.count() == 0) co_return;
  // Binds parked in a lock queue behind its head wait for a device plugin, not for the budget.
  const auto backlog = [&] {
    std::size_t parked = 0;
    for (const auto& [node, waiters] : lock_waiters_) {
      std::set<std::string_view> keys;
      for (const auto& w : waiters) parked += keys.insert(w.key).second ? 0 : 1;
    }
    const std::size_t using_budget = binds_in_flight_.size() - std::min(parked, binds_in_flight_.size());
    return std::chrono::duration<double>(static_cast<double>(using_budget) * kRequestsPerBind / qps);
  };
  if (backlog() <= kBindBacklog) co_return;
  const auto start = steady_clock::now();
  ++stats_.filters_held;
  while (backlog() > kBindBacklog && steady_clock::now() - start < kMaxHold && !stopping_)
    co_await Sleep(std::chrono::milliseconds(50));
  filter_held_seconds_ += std::chrono::duration<double>(steady_clock::now() - start).count();
}

asio::awaitable<std::string> Controller::Filter(const std::string& body, bool body_too_large) {
  const auto start = steady_clock::now();
  ++stats_.filters;
  std::string out;
  auto args = body_too_large ? Result<ExtenderArgs>(Error{"request body is larger than the 1 MiB limit"})
                             : ParseExtenderArgs(body);
  if (!args) {
    ++filter_results_["error"];
    ExtenderFilterResult r;
    r.error = args.error().message;
    out = ToJson(r);
  } else {
    out = co_await FilterParsed(*args);
  }
  filter_latency_.Observe(std::chrono::duration<double>(steady_clock::now() - start).count());
  co_return out;
}

asio::awaitable<std::string> Controller::FilterParsed(ExtenderArgs& args) {
  const auto fail = [&](std::string message) {
    ++filter_results_["error"];
    ExtenderFilterResult r;
    r.error = std::move(message);
    return ToJson(r);
  };
  if (!co_await WaitReady()) co_return fail("hami-scheduler is not ready: " + NotReadyReason());
  const PodView& pod = args.pod;
  const std::string uid = UidOf(pod);
  // A bind of this pod still running (kube-scheduler gave up waiting for it and filters again) may yet bind
  // it with the devices reserved now: deciding again would hand those devices to another pod.
  if (BindInFlight(pod.Key(), uid))
    co_return fail(fmt::format("pod {} is being bound (an earlier bind of it is still running)", pod.Key()));
  if (auto requests = CollectRequests(pod, *backends_); requests && requests->Any())
    co_await AwaitBindBacklog();
  std::vector<std::string> candidates;
  if (args.node_names) {
    candidates = *args.node_names;
  } else if (args.nodes) {
    for (const auto& n : *args.nodes) candidates.push_back(n.name);
  }
  // A re-filter decides without the pod's earlier reservation (and its quota). An earlier decision written
  // on the pod (by HAMi, or an earlier version of ours) is what its annotations say until a Binding writes
  // a new one, so it is put back whenever no new one is made; an earlier reservation of ours was never
  // written, and goes.
  const bool previous_written = !reservations_.contains(uid);
  std::optional<PodAllocation> previous = state_.RemovePod(uid);
  if (!previous_written) previous.reset();
  reservations_.erase(uid);
  const auto keep_previous = [&] {
    if (previous) state_.AddPod(std::move(*previous));
  };
  const TimePoint now = clock_->Now();
  FilterOutcome outcome = scheduler_.Filter(pod, candidates, now);
  if (outcome.kind != FilterOutcome::Kind::kScheduled) keep_previous();
  switch (outcome.kind) {
    case FilterOutcome::Kind::kPassThrough:
      ++filter_results_["passthrough"];
      co_return ToJson(ToFilterResult(outcome, args));
    case FilterOutcome::Kind::kError:
      outcome.error = fmt::format("pod {}: {}", pod.Key(), outcome.error);
      events_.Record(pod, "Warning", "FilteringFailed", outcome.error);
      co_return fail(outcome.error);
    case FilterOutcome::Kind::kUnschedulable:
      ++filter_results_["unschedulable"];
      events_.Record(
          pod, "Warning", "FilteringFailed",
          fmt::format("no node fits the pod's device request; {}",
                      candidates.empty() ? "no candidate nodes" : SummarizeFailures(outcome.failed_nodes)));
      co_return ToJson(ToFilterResult(outcome, args));
    case FilterOutcome::Kind::kScheduled:
      break;
  }

  // The decision is held in memory and written on the pod by its Binding (BindParsed), in the same update
  // that sets spec.nodeName: one request per pod less than HAMi's filter patch, and the device plugin never
  // sees a half-written pod. A restart between filter and bind loses the reservation; the bind then fails
  // and kube-scheduler filters the pod again.
  scheduler_.Reserve(pod, outcome);
  reservations_[uid] = Reservation{pod.Key(), outcome.node, now, outcome.annotations};
  ++filter_results_["scheduled"];
  RecordFilterEvent(pod, outcome);
  co_return ToJson(ToFilterResult(outcome, args));
}

void Controller::RecordFilterEvent(const PodView& pod, const FilterOutcome& outcome) {
  std::string fits;
  for (const auto& [node, score] : outcome.best)
    fits += fmt::format("{}{}:{:.2f}", fits.empty() ? "" : ",", node, score);
  events_.Record(pod, "Normal", "FilteringSucceed",
                 fmt::format("find fit node({}), {} nodes not fit, {} nodes fit({})", outcome.node,
                             outcome.failed_nodes.size(), outcome.fitting_count, fits));
}

// ---------------------------------------------------------------------------------------------------------
// Bind

asio::awaitable<ApiResult<PodView>> Controller::LookupPod(const std::string& ns, const std::string& name,
                                                          const std::string& uid) {
  if (auto it = pods_->views().find(ns + "/" + name); it != pods_->views().end()) {
    if (uid.empty() || it->second.uid == uid) co_return it->second;
  }
  // Not watched yet (just created), or the cache still has an earlier pod of that name: ask the API server.
  const std::string path = PathFor("v1", "pods", ns, name);
  auto got = co_await client_->Get(path);
  if (!got) co_return got.error();
  auto view = PodFromJson(*got);
  if (!view) co_return ApiError{ApiErrorKind::kOther, 0, "", view.error().message};
  co_return std::move(*view);
}

const PodView* Controller::CachedPod(const std::string& key) const {
  auto it = pods_->views().find(key);
  return it == pods_->views().end() ? nullptr : &it->second;
}

LockView Controller::CachedLock(const LockTarget& target) {
  const NodeEntry* entry = state_.FindNode(target.node);
  if (entry == nullptr) return locker_.Current(target, "", std::nullopt);
  auto a = entry->node.annotations.find(target.key);
  return locker_.Current(target, entry->node.resource_version,
                         a == entry->node.annotations.end() ? std::nullopt : std::optional(a->second));
}

void Controller::Stop() {
  stopping_ = true;
  for (auto& [node, waiters] : lock_waiters_) {
    for (auto& w : waiters) w.timer->cancel();
  }
}

void Controller::WakeLockWaiters(const std::string& node) {
  ++lock_wakeups_[node];
  auto it = lock_waiters_.find(node);
  if (it == lock_waiters_.end()) return;
  // Only the longest-waiting bind per lock looks (at the caches); the others keep their turn.
  std::vector<std::string> keys;
  for (auto& w : it->second) {
    if (std::find(keys.begin(), keys.end(), w.key) != keys.end()) continue;
    keys.push_back(w.key);
    w.timer->cancel();
  }
}

void Controller::WakeAllLockWaiters() {
  std::vector<std::string> nodes;
  for (const auto& [node, waiters] : lock_waiters_) nodes.push_back(node);
  for (const auto& node : nodes) WakeLockWaiters(node);
}

asio::awaitable<LockOutcome> Controller::AcquireWaiting(const LockTarget& target,
                                                        steady_clock::time_point deadline) {
  // First come, first served, driven by the watches: only the bind at the head of a lock's queue may ask the
  // API server, and only once the caches show the lock free (or stale, or its owner gone); the others wait
  // without a request. (Every waiting bind re-reading the node and the owner pod each second spent the whole
  // client budget on polls: at --kube-qps 50 with 40 binds queued on one node, each lock hand-over waited
  // about a second for a token.) The node watch wakes the head; its timer re-checks the caches for expiry.
  const PodCached cached = [this](const std::string& ns, const std::string& name) {
    return pods_->views().contains(ns + "/" + name);
  };
  asio::steady_timer timer(executor_);
  const LockWaiter me{&timer, target.key};
  // Queued from the start: a bind taking the lock right now is the head, so one arriving meanwhile waits
  // for its outcome instead of racing it (a compare-and-swap bound to conflict, then a read).
  lock_waiters_[target.node].push_back(me);
  struct Leave {  // however the wait ends, the queue forgets us and the next bind gets its turn
    Controller* c;
    const LockTarget* target;
    const asio::steady_timer* timer;
    ~Leave() {
      auto it = c->lock_waiters_.find(target->node);
      if (it == c->lock_waiters_.end()) return;
      std::erase_if(it->second, [&](const LockWaiter& w) { return w.timer == timer; });
      if (it->second.empty()) {
        c->lock_waiters_.erase(it);
      } else {
        c->WakeLockWaiters(target->node);
      }
    }
  } leave{this, &target, &timer};
  const auto my_turn = [&] {
    for (const auto& w : lock_waiters_[target.node]) {
      if (w.key == target.key) return w.timer == &timer;  // the first waiter for this lock
    }
    return false;
  };
  bool waited = false;
  std::string busy;
  for (;;) {
    bool missed_wakeup = false;
    if (my_turn() && !stopping_) {
      const LockView seen = CachedLock(target);
      std::optional<std::string> reason = locker_.BusyReason(target, seen, cached);
      if (!reason) {
        const std::uint64_t wakeups = lock_wakeups_[target.node];
        LockOutcome out = co_await locker_.Acquire(target, &seen, cached);
        if (out.acquired || !out.contention) co_return out;
        reason = out.message;
        // A wake-up while we asked (the release we lost to?) found no timer waiting: look again now.
        missed_wakeup = lock_wakeups_[target.node] != wakeups;
      }
      busy = std::move(*reason);
    }
    const auto now = steady_clock::now();
    if (options_.node_lock_retry_timeout.count() == 0 || now >= deadline || stopping_) {
      LockOutcome out;
      out.contention = true;
      if (stopping_) {
        out.message =
            fmt::format("scheduler shutting down while waiting for node {} to be unlocked", target.node);
      } else if (!waited && !busy.empty()) {
        out.message = busy;
      } else {
        out.message = fmt::format("timed out after {}ms waiting for node {} to be unlocked{}{}",
                                  options_.node_lock_retry_timeout.count(), target.node,
                                  busy.empty() ? "" : ": ", busy);
      }
      co_return out;
    }
    if (!waited) ++stats_.lock_waits;
    waited = true;
    if (missed_wakeup) continue;
    timer.expires_after(std::min<steady_clock::duration>(deadline - now, std::chrono::seconds(1)));
    co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
  }
}

asio::awaitable<std::string> Controller::Bind(const std::string& body, bool body_too_large) {
  const auto start = steady_clock::now();
  ++stats_.binds;
  std::string error;
  auto args = body_too_large
                  ? Result<ExtenderBindingArgs>(Error{"request body is larger than the 1 MiB limit"})
                  : ParseBindingArgs(body);
  if (!args) {
    error = args.error().message;
  } else {
    error = co_await BindParsed(*args);
  }
  ++bind_results_[error.empty() ? "success" : "failure"];
  bind_latency_.Observe(std::chrono::duration<double>(steady_clock::now() - start).count());
  co_return BindingResultJson(error);
}

std::string Controller::AlreadyBound(const PodView& pod, const std::string& node) {
  // A retried /bind (its first answer lost): the binding is done, and the node lock and bind-phase belong to
  // that first bind and the device plugin; neither is touched.
  if (pod.node_name == node) {
    ++stats_.rebinds;
    spdlog::info("bind: pod {} is already bound to node {}; nothing to do", pod.Key(), node);
    return std::string();
  }
  std::string message =
      fmt::format("pod {} is already bound to node {}, cannot bind it to {}", pod.Key(), pod.node_name, node);
  events_.Record(pod, "Warning", "BindingFailed", message);
  return message;
}

asio::awaitable<std::string> Controller::BindParsed(const ExtenderBindingArgs& args) {
  const std::string key = args.pod_namespace + "/" + args.pod_name;
  auto pod = co_await LookupPod(args.pod_namespace, args.pod_name, args.pod_uid);
  if (!pod) {
    // Only a pod known to be gone loses its reservation; a failed read changes nothing.
    if (pod.error().kind != ApiErrorKind::kNotFound)
      co_return fmt::format("cannot read pod {}: {}", key, pod.error().message);
    ReleasePod(args.pod_uid.empty() ? key : args.pod_uid);
    co_return fmt::format("pod \"{}\" not found", key);
  }
  const std::string uid = UidOf(*pod);
  if (!args.pod_uid.empty() && args.pod_uid != pod->uid) {
    ReleasePod(args.pod_uid);
    co_return fmt::format("pod {} was re-created (uid {}, bind asked for {})", key, pod->uid, args.pod_uid);
  }
  const auto failed = [&](std::string message) {
    events_.Record(*pod, "Warning", "BindingFailed", message);
    return message;
  };
  if (!pod->node_name.empty()) co_return AlreadyBound(*pod, args.node);
  // kube-scheduler retries a bind it gave up waiting for while the first still runs: two binds of one pod
  // would share (and one could release) the other's lock.
  if (BindInFlight(key, uid))
    co_return fmt::format("pod {} is being bound already (an earlier bind of it is still running)", key);
  // While this bind runs, the expiry sweep leaves the pod's reservation and its node locks alone.
  binds_in_flight_.emplace(key, uid);
  struct InFlight {
    std::unordered_multimap<std::string, std::string>& binds;
    std::string key, uid;
    ~InFlight() {
      auto [b, e] = binds.equal_range(key);
      for (auto it = b; it != e; ++it) {
        if (it->second == uid) {
          binds.erase(it);
          break;
        }
      }
    }
  } in_flight{binds_in_flight_, key, uid};
  if (state_.FindNode(args.node) == nullptr) {
    ReleasePod(uid);
    co_return failed(fmt::format("failed to get node {}: not found", args.node));
  }
  auto requests = CollectRequests(*pod, *backends_);
  if (!requests) co_return failed(fmt::format("pod {}: {}", key, requests.error().message));

  std::vector<std::pair<LockTarget, LockOutcome>> held;  // in the order taken
  if (requests->Any()) {
    const PodAllocation* reservation = state_.FindPod(uid);
    if (reservation == nullptr)
      co_return failed(
          fmt::format("pod {} holds no device reservation (it was not filtered by this scheduler, "
                      "or the reservation was released); it must be filtered again",
                      key));
    if (reservation->node != args.node)
      co_return failed(fmt::format("pod {} has devices reserved on node {}, not on {}", key,
                                   reservation->node, args.node));
    // Locks of the vendors the regular containers use, in vendor order (the same order everywhere, so two
    // binds never wait on each other crosswise); a key shared by two vendors is taken once.
    const auto deadline = steady_clock::now() + options_.node_lock_retry_timeout;
    for (std::size_t b = 0; b < backends_->size(); ++b) {
      const BackendSpec& spec = backends_->at(b).Spec();
      if (spec.keys.node_lock.empty()) continue;
      bool used = false;
      for (std::size_t c = requests->num_init; c < requests->containers.size() && !used; ++c) {
        for (const auto& [backend, request] : requests->containers[c]) used |= backend == static_cast<int>(b);
      }
      if (!used) continue;
      if (std::any_of(held.begin(), held.end(),
                      [&](const auto& h) { return h.first.key == spec.keys.node_lock; }))
        continue;
      LockTarget target{args.node, spec.keys.node_lock, spec.lock, pod->ns, pod->name};
      LockOutcome lock = co_await AcquireWaiting(target, deadline);
      if (!lock.acquired) {
        for (auto h = held.rbegin(); h != held.rend(); ++h)
          co_await locker_.Release(h->first, h->second.value);
        co_return failed(lock.message);
      }
      held.emplace_back(std::move(target), std::move(lock));
    }
  }
  const auto release_all = [&]() -> asio::awaitable<void> {
    for (auto h = held.rbegin(); h != held.rend(); ++h) co_await locker_.Release(h->first, h->second.value);
  };

  const std::string pod_path = PathFor("v1", "pods", pod->ns, pod->name);
  if (requests->Any()) {
    // Waiting for the lock took time: the devices must still be reserved for this pod on this node.
    const PodAllocation* still = state_.FindPod(uid);
    if (still == nullptr || still->node != args.node) {
      co_await release_all();
      co_return failed(fmt::format(
          "pod {} lost its device reservation on node {} while binding; it must be filtered again", key,
          args.node));
    }
  }
  // The decision (our filter's, held since) and bind-phase `allocating` travel in the Binding: the API
  // server writes them in the same update as spec.nodeName. HAMi patches the pod at filter and again before
  // binding: two requests more, and a failed binding leaves the pod `allocating`. A pod bound already is
  // refused, so a stale cache cannot turn a finished pod back to `allocating`.
  std::map<std::string, std::string> bind_annotations, bind_labels;
  if (requests->Any()) {
    if (auto res = reservations_.find(uid); res != reservations_.end()) {
      for (const auto& [k, v] : res->second.annotations) bind_annotations[k] = v;
      // The label lets selectors find a node's pods (a node name too long for a label value is named by the
      // annotation alone). The API server copies a Binding's labels from Kubernetes 1.35 on.
      if (IsLabelValue(args.node)) bind_labels[std::string(keys::kAssignedNode)] = args.node;
      // A Binding only sets keys: allocation keys an earlier decision left that this one does not replace are
      // removed first (a pod HAMi filtered before, or a MIG list no longer wanted).
      json::object stale;
      for (const std::string_view k : AllocationKeys()) {
        if (pod->annotations.contains(k) && !bind_annotations.contains(std::string(k))) stale[k] = nullptr;
      }
      // The label too: API servers before 1.35 do not copy a Binding's labels.
      json::object labels;
      if (auto l = pod->labels.find(keys::kAssignedNode); l != pod->labels.end() && l->second != args.node)
        labels[keys::kAssignedNode] = nullptr;
      if (!stale.empty() || !labels.empty()) {
        json::object metadata{{"annotations", std::move(stale)}};
        if (!labels.empty()) metadata["labels"] = std::move(labels);
        const json::value patch = {{"metadata", std::move(metadata)}};
        if (auto cleared = co_await client_->MergePatch(pod_path, patch); !cleared) {
          co_await release_all();
          co_return failed(
              fmt::format("could not clear pod {}'s earlier allocation: {}", key, cleared.error().message));
        }
      }
    }
    bind_annotations[std::string(keys::kBindPhase)] = std::string(keys::kBindPhaseAllocating);
    bind_annotations[std::string(keys::kBindTime)] = std::to_string(
        std::chrono::duration_cast<std::chrono::seconds>(clock_->Now().time_since_epoch()).count());
  }
  const std::string ns = pod->ns, name = pod->name, node = args.node, pod_uid = pod->uid;
  auto bound = co_await client_->Bind(ns, name, pod_uid, node, bind_annotations, bind_labels);
  bool outcome_unknown = false;
  // A conflict, a lost answer or a 5xx: the Binding may have been applied (nodeName, devices and
  // `allocating` in one update), or the pod was bound before (an earlier bind whose answer was lost); the pod
  // is read back before any lock is released.
  if (!bound &&
      (bound.error().kind == ApiErrorKind::kConflict || bound.error().kind == ApiErrorKind::kTransport ||
       bound.error().kind == ApiErrorKind::kServer)) {
    auto now_pod = co_await client_->Get(pod_path);
    if (now_pod) {
      auto view = PodFromJson(*now_pod);
      if (view && view->uid == pod->uid && !view->node_name.empty()) {
        auto phase = view->annotations.find(std::string(keys::kBindPhase));
        const bool settled = phase != view->annotations.end() && phase->second != keys::kBindPhaseAllocating;
        if (view->node_name != node || settled) {
          // Bound elsewhere, or its device plugin is done already: the locks taken just now are not needed
          // (one re-entered belongs to that earlier bind).
          for (auto h = held.rbegin(); h != held.rend(); ++h) {
            if (!h->second.reentered) co_await locker_.Release(h->first, h->second.value);
          }
          co_return AlreadyBound(*view, node);
        }
        bound = ApiResult<void>{};  // bound here and allocating: the device plugin releases the locks
      }
    } else {
      outcome_unknown = bound.error().kind != ApiErrorKind::kConflict;
    }
  }
  if (!bound && outcome_unknown) {
    // Perhaps bound and allocating: releasing the lock could put two pods in allocating on one node. The
    // locks stay held as after a success; the device plugin, the retried bind or the sweep clears them.
    for (auto& [target, lock] : held)
      held_locks_[target.node].push_back(HeldLock{target, lock.value, lock.resource_version, uid});
    co_return failed(fmt::format("could not tell whether pod {} was bound to node {}: {}", key, node,
                                 bound.error().message));
  }
  if (!bound) {
    co_await release_all();
    co_return failed(fmt::format("could not bind pod {} to node {}: {}", key, node, bound.error().message));
  }
  // The locks stay held: the device plugin releases them once it has set the devices up. They are remembered
  // until the node shows them gone, so that a pod deleted before its allocation does not leave one behind.
  const bool pod_still_there = [&] {
    auto it = pods_->views().find(key);
    return it == pods_->views().end() || it->second.uid == pod->uid;  // not yet watched counts as there
  }();
  for (auto& [target, lock] : held)
    held_locks_[target.node].push_back(HeldLock{target, lock.value, lock.resource_version, uid});
  if (!pod_still_there) ReleaseLeftoverLocks(uid);  // deleted while we were binding it
  events_.Record(*pod, "Normal", "BindingSucceed",
                 fmt::format("Successfully binding node [{}] to {}", node, key));
  co_return std::string();
}

}  // namespace hami::k8s
