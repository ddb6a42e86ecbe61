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

// resourceVersions are opaque, but etcd's (and the embedded server's) are increasing integers: when both
// read as integers, a larger one is a later state.
bool LaterOrSame(const std::string& rv, const std::string& reference) {
  if (rv == reference) return true;
  std::uint64_t a = 0, b = 0;
  const auto pa = std::from_chars(rv.data(), rv.data() + rv.size(), a);
  const auto pb = std::from_chars(reference.data(), reference.data() + reference.size(), b);
  return pa.ec == std::errc() && pb.ec == std::errc() && a > b;
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

Controller::Controller(asio::any_io_executor executor, ApiClient& client, const Backends& backends,
                       ControllerOptions options, const Clock& clock)
    : executor_(executor),
      client_(&client),
      backends_(&backends),
      options_(std::move(options)),
      clock_(&clock),
      state_(backends),
      scheduler_(state_, options_.policies),
      events_(executor, client, clock, EventRecorderOptions{options_.scheduler_name, options_.hostname}),
      locker_(client, clock, options_.node_lock_timeout),
      filter_latency_(prom::Histogram::LatencyBuckets()),
      bind_latency_(prom::Histogram::LatencyBuckets()) {
  Reflector::Options node_watch = options_.reflector_defaults;
  node_watch.path = "/api/v1/nodes";
  node_watch.label_selector = options_.node_label_selector;
  nodes_ = std::make_unique<Informer<NodeView>>(
      client, node_watch, NodeFromJson,
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
      client, pod_watch, PodFromJson,
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
      client, quota_watch, ResourceQuotaFromJson,
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
    return;
  }
  // A pod without hami.io/vgpu-node is not ours (yet): a reservation whose patch is on its way stays.
  if (!pod.annotations.contains(keys::kAssignedNode)) return;
  if (auto res = reservations_.find(uid); res != reservations_.end()) {
    // Our filter decided for this pod: events older than its patch must not undo the decision.
    if (res->second.patched_rv.empty() || !LaterOrSame(pod.resource_version, res->second.patched_rv)) return;
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
  auto r = co_await client_->MergePatch(path, patch);
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

asio::awaitable<void> Controller::ExpireReservations() {
  // One sweep at a time (a test's call may meet the loop's): each decides from what the last one left.
  while (expiring_) co_await Sleep(std::chrono::milliseconds(5));
  expiring_ = true;
  struct Done {
    bool* flag;
    ~Done() { *flag = false; }
  } done{&expiring_};
  const TimePoint now = clock_->Now();
  struct Expiry {
    std::string uid, ns, name, resource_version;
    std::uint64_t generation;  // of the reservation when decided (0: none)
  };
  std::vector<Expiry> due;
  std::unordered_set<std::string> dated;
  for (const auto& [key, pod] : pods_->views()) {
    if (!pod.node_name.empty() || Finished(pod) || !pod.annotations.contains(keys::kAssignedNode)) continue;
    const std::string uid = UidOf(pod);
    auto res = reservations_.find(uid);
    if (res != reservations_.end() && res->second.patched_rv.empty()) continue;  // a filter is writing it
    if (BindInFlight(key, uid)) continue;                                        // a bind is using it
    // The latest of filter and bind; a stamp far in the future is no stamp (it would never expire).
    std::optional<TimePoint> since = UnixSeconds(pod.annotations, keys::kDecisionTime);
    if (auto bound = UnixSeconds(pod.annotations, keys::kBindTime); bound && (!since || *bound > *since))
      since = bound;
    if (since && *since > now + std::chrono::minutes(5)) since.reset();
    if (!since) since = undated_.try_emplace(uid, now).first->second;
    dated.insert(uid);
    if (now - *since < options_.reservation_timeout) continue;
    due.push_back({uid, pod.ns, pod.name, pod.resource_version,
                   res == reservations_.end() ? 0 : res->second.generation});
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
    json::object annotations{{keys::kAssignedNode, nullptr},
                             {keys::kDecisionTime, nullptr},
                             {keys::kBindPhase, nullptr},
                             {keys::kBindTime, nullptr},
                             {keys::kMigAllocations, nullptr}};
    for (std::size_t b = 0; b < backends_->size(); ++b) {
      const BackendKeys& k = backends_->at(b).Spec().keys;
      if (!k.allocated.empty()) annotations[k.allocated] = nullptr;
      if (!k.to_allocate.empty()) annotations[k.to_allocate] = nullptr;
    }
    // Compare-and-swap: a re-filter or a bind that wrote the pod since we looked wins.
    const json::value patch = {{"metadata",
                                {{"annotations", std::move(annotations)},
                                 {"labels", {{keys::kAssignedNode, nullptr}}},
                                 {"resourceVersion", e.resource_version}}}};
    const std::string path = PathFor("v1", "pods", e.ns, e.name);
    auto patched = co_await client_->MergePatch(path, patch);
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
    // A filter that began while the patch was out decides again; its reservation stays.
    auto res = reservations_.find(e.uid);
    if (res == reservations_.end() || res->second.generation == e.generation) ReleasePod(e.uid);
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
  std::vector<std::string> candidates;
  if (args.node_names) {
    candidates = *args.node_names;
  } else if (args.nodes) {
    for (const auto& n : *args.nodes) candidates.push_back(n.name);
  }
  // A re-filter decides without the pod's earlier reservation (and its quota). Until a new decision is
  // written on the pod, the earlier one is what its annotations say, so it is put back whenever none is.
  // A reservation whose patch is still in flight is no annotation yet: it is not put back.
  const auto in_flight = reservations_.find(uid);
  const bool previous_written = in_flight == reservations_.end() || !in_flight->second.patched_rv.empty();
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

  // Reserve before the patch goes out, so a concurrent filter cannot hand out the same devices.
  scheduler_.Reserve(pod, outcome);
  const std::uint64_t generation = ++generation_;
  reservations_[uid] = Reservation{generation, ""};
  json::object annotations;
  for (const auto& [k, v] : outcome.annotations) annotations[k] = v;
  // A merge patch only sets keys: clear a MIG list an earlier decision left that this one does not replace.
  if (!outcome.annotations.contains(keys::kMigAllocations) && pod.annotations.contains(keys::kMigAllocations))
    annotations[keys::kMigAllocations] = nullptr;
  json::object metadata{{"annotations", std::move(annotations)}};
  // The label lets selectors find a node's pods; a node name longer than a label value may be (63) would make
  // the API server refuse the whole patch, so such a node is named by the annotation alone.
  if (IsLabelValue(outcome.node)) metadata["labels"] = {{keys::kAssignedNode, outcome.node}};
  const json::value patch = {{"metadata", std::move(metadata)}};
  const std::string path = PathFor("v1", "pods", pod.ns, pod.name);
  auto patched = co_await client_->MergePatch(path, patch);
  auto res = reservations_.find(uid);
  const bool still_ours = res != reservations_.end() && res->second.generation == generation;
  if (!patched) {
    if (still_ours) {
      ReleasePod(uid);
      keep_previous();
      ++stats_.rollbacks;
    }
    std::string message = fmt::format("could not write the allocation on node {} to pod {}: {}", outcome.node,
                                      pod.Key(), patched.error().message);
    events_.Record(pod, "Warning", "FilteringFailed", message);
    co_return fail(std::move(message));
  }
  if (still_ours) res->second.patched_rv = ResourceVersionOf(*patched);
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

std::string Controller::CachedResourceVersion(const std::string& node) const {
  const NodeEntry* entry = state_.FindNode(node);
  return entry == nullptr ? std::string() : entry->node.resource_version;
}

void Controller::Stop() {
  stopping_ = true;
  for (auto& [node, waiters] : lock_waiters_) {
    for (auto& w : waiters) w.timer->cancel();
  }
  lock_waiters_.clear();
}

void Controller::WakeLockWaiters(const std::string& node) {
  auto it = lock_waiters_.find(node);
  if (it == lock_waiters_.end()) return;
  const NodeEntry* entry = state_.FindNode(node);
  auto& waiters = it->second;
  for (auto w = waiters.begin(); w != waiters.end(); ++w) {
    // Wake the longest-waiting bind whose lock is free now; the others keep waiting their turn.
    if (entry != nullptr && entry->node.annotations.contains(w->key)) continue;
    w->timer->cancel();
    waiters.erase(w);
    break;
  }
  if (waiters.empty()) lock_waiters_.erase(it);
}

asio::awaitable<LockOutcome> Controller::AcquireWaiting(const LockTarget& target,
                                                        steady_clock::time_point deadline) {
  // First come, first served: a bind arriving while others wait for this node queues behind them instead of
  // taking the lock the moment it is released under their noses.
  bool waited = false;
  bool queue_first =
      lock_waiters_.contains(target.node) && options_.node_lock_retry_timeout.count() > 0 && !stopping_;
  bool at_front = false;  // a woken waiter that loses the race keeps its place
  for (;;) {
    LockOutcome out;
    if (!queue_first) {
      const std::string seen = CachedResourceVersion(target.node);
      out = co_await locker_.Acquire(target);
      if (out.acquired || !out.contention) co_return out;
      // The node changed while we asked (perhaps the release we would wait for): ask again rather than wait
      // for a wake-up that has already gone by.
      if (CachedResourceVersion(target.node) != seen && steady_clock::now() < deadline && !stopping_)
        continue;
    }
    queue_first = false;
    const auto now = steady_clock::now();
    if (options_.node_lock_retry_timeout.count() == 0 || now >= deadline || stopping_) {
      if (waited || out.message.empty())
        out.message = fmt::format("timed out after {}ms waiting for node {} to be unlocked{}{}",
                                  options_.node_lock_retry_timeout.count(), target.node,
                                  out.message.empty() ? "" : ": ", out.message);
      out.contention = true;
      co_return out;
    }
    if (!waited) ++stats_.lock_waits;
    waited = true;
    // Woken by the node watch when the lock goes away; the timer also re-checks expiry now and then.
    asio::steady_timer timer(executor_,
                             std::min<steady_clock::duration>(deadline - now, std::chrono::seconds(1)));
    auto& queue = lock_waiters_[target.node];
    const LockWaiter me{&timer, target.key};
    if (at_front) {
      queue.insert(queue.begin(), me);
    } else {
      queue.push_back(me);
    }
    co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (auto it = lock_waiters_.find(target.node); it != lock_waiters_.end()) {
      std::erase_if(it->second, [&](const LockWaiter& w) { return w.timer == &timer; });
      if (it->second.empty()) lock_waiters_.erase(it);
    }
    if (stopping_) {
      out.acquired = false;
      out.contention = true;
      out.message =
          fmt::format("scheduler shutting down while waiting for node {} to be unlocked", target.node);
      co_return out;
    }
    at_front = true;
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
  const std::string bind_time = std::to_string(
      std::chrono::duration_cast<std::chrono::seconds>(clock_->Now().time_since_epoch()).count());
  if (requests->Any()) {
    // Compare-and-swap on the state we decided from: a cache that has not seen an earlier bind of this pod
    // (its answer lost, a retry now) must not turn its bind-phase back to allocating.
    std::string rv = pod->resource_version;
    for (int attempt = 0;; ++attempt) {
      json::object meta{
          {"annotations", {{keys::kBindPhase, keys::kBindPhaseAllocating}, {keys::kBindTime, bind_time}}}};
      if (!rv.empty()) meta["resourceVersion"] = rv;
      const json::value phase = {{"metadata", std::move(meta)}};
      auto patched = co_await client_->MergePatch(pod_path, phase);
      if (patched) break;
      if (patched.error().kind == ApiErrorKind::kConflict && attempt < 3) {
        auto fresh = co_await client_->Get(pod_path);
        auto view = fresh ? PodFromJson(*fresh) : Result<PodView>(Error{fresh.error().message});
        if (view && view->uid == pod->uid) {
          const PodAllocation* still = state_.FindPod(uid);
          auto assigned = view->annotations.find(std::string(keys::kAssignedNode));
          if (view->node_name.empty() && still != nullptr && still->node == args.node &&
              assigned != view->annotations.end() && assigned->second == args.node) {
            rv = view->resource_version;
            continue;
          }
          if (!view->node_name.empty()) {
            // Bound meanwhile: the locks taken just now are not needed (one re-entered belongs to that bind).
            for (auto h = held.rbegin(); h != held.rend(); ++h) {
              if (!h->second.reentered) co_await locker_.Release(h->first, h->second.value);
            }
            co_return AlreadyBound(*view, args.node);
          }
          // The reservation went (expired or re-filtered elsewhere) while we waited: binding now would bind
          // the pod without its devices.
          co_await release_all();
          co_return failed(
              fmt::format("pod {} lost its device reservation on node {} while binding; it must be "
                          "filtered again",
                          key, args.node));
        }
      }
      co_await release_all();
      co_return failed(fmt::format("could not mark pod {} allocating: {}", key, patched.error().message));
    }
  }
  const std::string ns = pod->ns, name = pod->name, node = args.node, pod_uid = pod->uid;
  auto bound = co_await client_->Bind(ns, name, pod_uid, node);
  bool outcome_unknown = false;
  if (!bound &&
      (bound.error().kind == ApiErrorKind::kConflict || bound.error().kind == ApiErrorKind::kTransport)) {
    // The binding may have gone through with its answer lost (or a retry of ours met our own binding).
    auto now_pod = co_await client_->Get(pod_path);
    if (now_pod) {
      auto view = PodFromJson(*now_pod);
      if (view && view->uid == pod->uid && view->node_name == node) bound = ApiResult<void>{};
    } else {
      outcome_unknown = bound.error().kind == ApiErrorKind::kTransport;
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
