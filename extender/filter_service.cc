#include "extender/filter_service.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/fit.h"

namespace hami::extender {
namespace asio = boost::asio;
using std::chrono::steady_clock;

namespace {

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

FilterService::FilterService(ClusterState& state, PodLedger& ledger, const BindService& binds,
                             const std::map<std::string, PodView>& pods, ClusterWriter& writer,
                             const Clock& clock, FilterOptions options, double decision_qps,
                             Readiness& readiness, Requeue& requeue, ScoreService& scores)
    : state_(&state),
      ledger_(&ledger),
      binds_(&binds),
      pods_(&pods),
      writer_(&writer),
      clock_(&clock),
      options_(std::move(options)),
      decision_qps_(decision_qps),
      readiness_(&readiness),
      requeue_(&requeue),
      scores_(&scores),
      scheduler_(state, options_.policies),
      latency_(k8s::prom::Histogram::LatencyBuckets()) {}

FilterOutcome FilterService::Fail(std::string message) {
  ++results_["error"];
  FilterOutcome r;
  r.kind = FilterOutcome::Kind::kError;
  r.error = std::move(message);
  return r;
}

FilterOutcome FilterService::Refuse(std::string error) {
  ++stats_.filters;
  latency_.Observe(0);
  return Fail(std::move(error));
}

asio::awaitable<FilterOutcome> FilterService::Filter(const PodView& pod,
                                                    const std::vector<std::string>& candidates) {
  const auto start = steady_clock::now();
  ++stats_.filters;
  FilterOutcome out = co_await Decide(pod, candidates);
  latency_.Observe(std::chrono::duration<double>(steady_clock::now() - start).count());
  co_return out;
}

asio::awaitable<bool> FilterService::WaitReady() {
  const auto deadline = steady_clock::now() + options_.ready_wait;
  // Woken when a cache syncs or a health pass ends (and by Stop), not by polling.
  while (!readiness_->ready()) {
    if (steady_clock::now() >= deadline || readiness_->stopping()) co_return false;
    co_await readiness_->changed().WaitUntil(deadline);
  }
  co_return true;
}

asio::awaitable<void> FilterService::AwaitBindBacklog() {
  // Backpressure: kube-scheduler filters pod after pod and hands each bind over at once, so with a small
  // --kube-qps a burst queues binds for longer than its 30 s httpTimeout (each bind needs two requests of
  // the budget), they fail, and the pods come back after a backoff. Holding the next decision while the
  // binds in flight need more than the backlog of the budget paces kube-scheduler's queue to the budget
  // instead: the same throughput, no failed binds. Bounded, so a stuck bind cannot stall every filter.
  constexpr double kRequestsPerBind = 2;  // the lock's compare-and-swap and the Binding
  constexpr std::chrono::seconds kMaxHold{20};
  const std::chrono::duration<double> limit = options_.bind_backlog;
  const double qps = decision_qps_;
  if (qps <= 0 || options_.bind_backlog.count() == 0) co_return;
  const auto backlog = [&] {
    return std::chrono::duration<double>(static_cast<double>(binds_->BindsUsingBudget()) * kRequestsPerBind /
                                         qps);
  };
  if (backlog() <= limit) co_return;
  const auto start = steady_clock::now();
  const auto deadline = start + kMaxHold;
  ++stats_.filters_held;
  // Woken whenever a bind ends or a lock queue moves.
  while (backlog() > limit && steady_clock::now() < deadline && !readiness_->stopping())
    co_await binds_->progress().WaitUntil(deadline);
  held_seconds_ += std::chrono::duration<double>(steady_clock::now() - start).count();
}

asio::awaitable<FilterService::Identity> FilterService::Identify(const PodView& pod) {
  const std::string uid = pod.UidOrKey();
  const std::string key = pod.Key();
  std::string bound = pod.node_name;  // the body's spec.nodeName
  auto it = pods_->find(key);
  if (it == pods_->end() || it->second.UidOrKey() != uid) {
    // Not watched yet (just created), re-created under this name with the cache behind, or a request naming
    // a pod that does not exist or another pod's uid: the API server tells which. Devices are reserved only
    // for a pod that exists with this uid.
    auto got = co_await writer_->ReadPod(pod.ns, pod.name);
    if (!got) {
      co_return Identity{got.error().kind == ApiErrorKind::kNotFound
                             ? fmt::format("pod {} does not exist", key)
                             : fmt::format("cannot read pod {}: {}", key, got.error().message),
                         ""};
    }
    if (got->UidOrKey() != uid)
      co_return Identity{fmt::format("pod {} has uid {}, not the request's {}", key, got->UidOrKey(), uid), ""};
    if (bound.empty()) bound = got->node_name;
  } else if (bound.empty()) {
    bound = it->second.node_name;
  }
  // Bound by a bind of ours a moment ago, the watch not there yet (kube-scheduler gave up waiting for it).
  if (const std::string* node = ledger_->BoundTo(uid); bound.empty() && node != nullptr) bound = *node;
  // Whatever the caches know of the pod, a hold in the ledger is only ever released for the pod it was made
  // for: a made-up pod carrying a running pod's uid changes nothing.
  if (auto other = ledger_->OtherHolder(uid, key))
    co_return Identity{fmt::format("uid {} is pod {}'s, not {}'s", uid, *other, key), ""};
  co_return Identity{"", bound};
}

FilterOutcome FilterService::AnswerBound(const std::string& node,
                                         const std::vector<std::string>& candidates) {
  // kube-scheduler filters a pod again when it gave up on a bind that succeeded here: the pod keeps its node
  // and its devices. Its node passes, so the bind that follows finds it bound there and answers success.
  ++results_["passthrough"];
  FilterOutcome outcome;
  outcome.kind = FilterOutcome::Kind::kUnschedulable;
  for (const std::string& c : candidates) {
    if (c == node) {
      outcome.kind = FilterOutcome::Kind::kScheduled;
      outcome.node = node;
    } else {
      outcome.failed_nodes[c] = fmt::format("pod is bound to node {} already", node);
    }
  }
  return outcome;
}

asio::awaitable<FilterOutcome> FilterService::Decide(const PodView& pod,
                                                    const std::vector<std::string>& candidates) {
  if (!co_await WaitReady())
    co_return Fail("hami-scheduler is not ready: " + readiness_->NotReadyReason());
  const std::string uid = pod.UidOrKey();
  const std::string key = pod.Key();
  // Collected once: the backlog check and the decision both read them.
  const Result<PodRequests> requests = CollectRequests(pod, state_->backends());
  if (requests && requests->Any()) co_await AwaitBindBacklog();
  // From here to the decision nothing waits but the identity's read: what it checked still holds when the
  // ledger changes.
  const Identity identity = co_await Identify(pod);
  if (!identity.refusal.empty()) {
    spdlog::warn("filter refused, nothing changed: {}", identity.refusal);
    co_return Fail(fmt::format("filter of pod {} refused: {}", key, identity.refusal));
  }
  if (!identity.bound.empty()) {
    requeue_->Forget(uid);
    co_return AnswerBound(identity.bound, candidates);
  }
  // A bind of this pod still running (kube-scheduler gave up waiting for it and filters again) may yet bind
  // it with the devices reserved now: deciding again would hand those devices to another pod.
  if (ledger_->Binding(key, uid))
    co_return Fail(fmt::format("pod {} is being bound (an earlier bind of it is still running)", key));
  // A re-filter decides without the pod's earlier reservation (and its quota), which goes. Nothing else can
  // be held for a pod not bound yet: annotations charge only bound pods (docs/DECISIONS.md, "The ledger").
  ledger_->Redecide(uid);
  scores_->Forget(uid);  // where an earlier filter expected it (a fitting answer below expects it anew)
  const TimePoint now = clock_->Now();
  FilterOutcome outcome = scheduler_.Filter(pod, requests, candidates, now);
  requeue_->Poke();  // the earlier decision's devices, if any, are free for others
  switch (outcome.kind) {
    case FilterOutcome::Kind::kPassThrough:
      ++results_["passthrough"];
      co_return outcome;
    case FilterOutcome::Kind::kError:
      outcome.error = fmt::format("pod {}: {}", key, outcome.error);
      writer_->Event(k8s::InvolvedObject::Of(pod), "Warning", "FilteringFailed", outcome.error);
      co_return Fail(outcome.error);
    case FilterOutcome::Kind::kUnschedulable:
      ++results_["unschedulable"];
      state_->SetUnplaceable(uid);  // not part of a burst the nodes can take now
      requeue_->Refused(pod, outcome);  // nudged when the ledger can take it
      writer_->Event(
          k8s::InvolvedObject::Of(pod), "Warning", "FilteringFailed",
          fmt::format("no node fits the pod's device request; {}",
                      candidates.empty() ? "no candidate nodes" : SummarizeFailures(outcome.failed_nodes)));
      co_return outcome;
    case FilterOutcome::Kind::kFitting:
      // Nothing is reserved: kube-scheduler scores these nodes and /bind fits the pod where it chose.
      requeue_->Forget(uid);
      scores_->Expect(pod, outcome);
      ++results_["fitting"];
      RecordFilterEvent(pod, outcome);
      co_return outcome;
    case FilterOutcome::Kind::kScheduled:
      requeue_->Forget(uid);
      break;
  }
  HoldDecision(pod, outcome, now, candidates.size());
  co_return outcome;
}

void FilterService::HoldDecision(const PodView& pod, FilterOutcome& outcome, TimePoint now,
                                 std::size_t candidates) {
  const std::string key = pod.Key();
  // The decision is held in the pod ledger and written on the pod by its Binding (BindService), in the
  // same update that sets spec.nodeName: one request per pod less than HAMi's filter patch, and the device
  // plugin never sees a half-written pod. A restart between filter and bind loses the reservation; the bind
  // then fails and kube-scheduler filters the pod again.
  if (!outcome.busy_best.empty() && spdlog::should_log(spdlog::level::debug)) {
    spdlog::debug(
        "filter {}: binpack's best node {} is busy; {} pods of the burst for these {} candidates: {}", key,
        outcome.busy_best, outcome.burst, candidates,
        outcome.node == outcome.busy_best ? "they fit the busy nodes, it queues there"
                                          : "it goes to " + outcome.node);
  }
  // The annotations move into the reservation: kube-scheduler's answer names only the node.
  // What kube-scheduler last reported of the pod, as it sent it and as our cache has it: a report after
  // this one means the attempt ended without our bind (WatchRoutes drops the reservation then).
  const auto cached = pods_->find(key);
  const bool seen = cached != pods_->end();
  ledger_->Reserve(scheduler_.Decision(pod, outcome),
                   Reservation{key, outcome.node, now, std::move(outcome.annotations), pod.scheduled,
                                    seen ? cached->second.scheduled : SchedulingCondition{},
                                    pod.nominated_node_name, seen ? cached->second.nominated_node_name : ""});
  ++results_["scheduled"];
  RecordFilterEvent(pod, outcome);
}

void FilterService::RecordFilterEvent(const PodView& pod, const FilterOutcome& outcome) {
  std::string fits;
  for (const auto& [node, score] : outcome.best)
    fits += fmt::format("{}{}:{:.2f}", fits.empty() ? "" : ",", node, score);
  if (outcome.kind == FilterOutcome::Kind::kFitting) {
    writer_->Event(k8s::InvolvedObject::Of(pod), "Normal", "FilteringSucceed",
                   fmt::format("{} nodes fit({}), {} nodes not fit; kube-scheduler chooses among them",
                               outcome.fitting_count, fits, outcome.failed_nodes.size()));
    return;
  }
  writer_->Event(k8s::InvolvedObject::Of(pod), "Normal", "FilteringSucceed",
                 fmt::format("find fit node({}), {} nodes not fit, {} nodes fit({})", outcome.node,
                             outcome.failed_nodes.size(), outcome.fitting_count, fits));
}

void FilterService::WriteMetrics(k8s::prom::TextWriter& w) const {
  w.Family("hami_scheduler_filter_duration_seconds", "Time to answer /filter.", "histogram");
  latency_.Write(w, "hami_scheduler_filter_duration_seconds", {});
  w.Family("hami_scheduler_filter_decisions_total", "/filter answers by result.", "counter");
  for (const char* result : {"scheduled", "fitting", "unschedulable", "passthrough", "error"}) {
    auto it = results_.find(result);
    w.Sample("hami_scheduler_filter_decisions_total", {{"result", result}},
             static_cast<double>(it == results_.end() ? 0 : it->second));
  }
  w.Counter("hami_scheduler_filters_held_total",
            "Filters held back while the binds in flight needed too much of the --kube-qps budget.",
            static_cast<double>(stats_.filters_held));
  w.Counter("hami_scheduler_filter_held_seconds_total",
            "Time filters were held back for the binds in flight (backpressure on kube-scheduler's queue).",
            held_seconds_);
}

}  // namespace hami::extender
