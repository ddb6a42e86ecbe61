#include "extender/filter_service.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/json.hpp>
#include <exception>

#include "core/codec/stamps.h"
#include "core/fit.h"
#include "core/keys.h"
#include "core/template_nodes.h"
#include "k8s/logging.h"
#include "k8s/reflector.h"

namespace hami::extender {
namespace asio = boost::asio;
namespace json = boost::json;
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

std::optional<std::string_view> ReasonOf(const std::optional<std::string>& value) {
  if (!value) return std::nullopt;
  return RefusalReason(*value);
}

}  // namespace

std::string RefusalAnnotation(TimePoint at, std::string_view reason) {
  // One line of `kubectl describe pod`: control characters and line breaks written as escapes.
  std::string out = codec::FormatRfc3339(at) + ": " + k8s::EscapeControlChars(reason);
  if (out.size() <= kRefusalAnnotationBytes) return out;
  constexpr std::string_view kCut = "\xE2\x80\xA6";  // "…"
  std::size_t end = kRefusalAnnotationBytes - kCut.size();
  // Back to the start of the character the cut would split (UTF-8 continuation bytes are 10xxxxxx).
  while (end > 0 && (static_cast<unsigned char>(out[end]) & 0xC0) == 0x80) --end;
  out.resize(end);
  out += kCut;
  return out;
}

std::string_view RefusalReason(std::string_view value) {
  const std::size_t stamp = value.find(": ");  // an RFC 3339 time has no ": "
  return stamp == std::string_view::npos ? value : value.substr(stamp + 2);
}

void RefusalAnnotations::Refused(const PodView& pod, std::string value,
                                 const asio::any_io_executor& executor) {
  Set(pod, std::move(value), executor);
}

void RefusalAnnotations::Scheduled(const PodView& pod, const asio::any_io_executor& executor) {
  Set(pod, std::nullopt, executor);
}

std::optional<std::string> RefusalAnnotations::Expected(const PodView& pod) const {
  const std::string id = pod.UidOrKey();
  if (sending_ && sending_->first == id) return sending_->second;
  // The later of kube-scheduler's copy (the request's) and the pod cache's: either may be behind the other.
  const PodView* latest = &pod;
  auto cached = pods_->find(pod.Key());
  if (cached != pods_->end() && cached->second.UidOrKey() == id &&
      k8s::LaterOrSame(cached->second.resource_version, pod.resource_version))
    latest = &cached->second;
  auto carried = latest->annotations.find(std::string(keys::kFilterRefusal));
  if (carried == latest->annotations.end()) return std::nullopt;
  return carried->second;
}

void RefusalAnnotations::Set(const PodView& pod, std::optional<std::string> value,
                             const asio::any_io_executor& executor) {
  const std::string id = pod.UidOrKey();
  // Only a change costs a request: every patch of a pod kube-scheduler holds as unschedulable makes it try
  // the pod again, and a pod refused again for the same reason would be tried (and patched) in a loop. The
  // time stamp alone is no change.
  if (ReasonOf(Expected(pod)) == ReasonOf(value)) {
    pending_.erase(id);  // a change queued before this one is undone by it
    return;
  }
  // An id still in order_ (its change undone since) keeps its place: order_ holds each pod once.
  if (pending_.insert_or_assign(id, Write{pod.ns, pod.name, pod.uid, std::move(value)}).second &&
      queued_.insert(id).second)
    order_.push_back(id);
  if (draining_) return;
  draining_ = true;
  // The completion runs only if Drain threw (it catches what a patch throws): Drain clears the flag itself,
  // before a change queued after its last patch could find it still set.
  asio::co_spawn(executor, Drain(), [this](std::exception_ptr e) {
    if (e) draining_ = false;
  });
}

asio::awaitable<void> RefusalAnnotations::Drain() {
  while (!order_.empty() && !readiness_->stopping()) {
    const std::string id = std::move(order_.front());
    order_.pop_front();
    queued_.erase(id);
    auto it = pending_.find(id);
    if (it == pending_.end()) continue;  // undone, or sent under an earlier place in the queue
    const Write write = std::move(it->second);
    pending_.erase(it);
    // Another pod under the name now (re-created while the patch waited): not patched. A pod the cache has
    // not seen yet is (its first filter often comes before the watch shows it).
    auto cached = pods_->find(write.ns + "/" + write.name);
    if (cached != pods_->end() && cached->second.UidOrKey() != id) continue;
    sending_.emplace(id, write.value);
    const ApiResult<void> done = co_await Send(write);
    sending_.reset();
    if (done) {
      ++(write.value ? written_ : removed_);
    } else if (done.error().kind != ApiErrorKind::kNotFound) {  // a pod deleted meanwhile needs nothing
      ++failed_;
      spdlog::warn("filter: could not {} {} on pod {}/{}: {}", write.value ? "write" : "remove",
                   keys::kFilterRefusal, write.ns, write.name, done.error().message);
    }
  }
  if (readiness_->stopping()) {
    pending_.clear();
    order_.clear();
    queued_.clear();
  }
  draining_ = false;
}

asio::awaitable<ApiResult<void>> RefusalAnnotations::Send(const Write& write) {
  json::object annotations;
  annotations[keys::kFilterRefusal] = write.value ? json::value(*write.value) : json::value(nullptr);
  json::object metadata;
  metadata["annotations"] = std::move(annotations);
  // The API server refuses a patch that would change metadata.uid: a pod re-created under the name since is
  // left alone.
  if (!write.uid.empty()) metadata["uid"] = write.uid;
  json::object patch;
  patch["metadata"] = std::move(metadata);
  const json::value body = std::move(patch);
  try {
    co_return co_await writer_->PatchPod(write.ns, write.name, body, Budget::kBackground);
  } catch (const std::exception& e) {
    co_return ApiError{ApiErrorKind::kOther, 0, "", e.what()};
  }
}

void RefusalAnnotations::WriteMetrics(k8s::prom::TextWriter& w) const {
  w.Family("hami_scheduler_refusal_annotations_total",
           "Patches of the hami.io/filter-refusal pod annotation (--refusal-annotation) by result: written "
           "on a refused pod, removed once a node was found, failed.",
           "counter");
  for (const auto& [result, n] : {std::pair{"written", written_}, {"removed", removed_}, {"failed", failed_}})
    w.Sample("hami_scheduler_refusal_annotations_total", {{"result", result}}, static_cast<double>(n));
}

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
      latency_(k8s::prom::Histogram::LatencyBuckets()),
      refusals_(pods, writer, readiness) {}

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

asio::awaitable<FilterOutcome> FilterService::FilterOnTemplates(const PodView& pod,
                                                               const std::vector<std::string>& candidates,
                                                               const std::vector<NodeView>& templates) {
  const auto start = steady_clock::now();
  ++stats_.filters;
  ++template_filters_;
  FilterOutcome out;
  // The registry's nodes among the candidates are judged as they are: wait for it as any filter does.
  if (!co_await WaitReady()) {
    out = Fail("hami-scheduler is not ready: " + readiness_->NotReadyReason());
  } else {
    // A question, not a decision: no identity check, reservation, expectation, requeue, event or
    // annotation, since the pod will not be bound on a node that does not exist.
    out = hami::FilterWithTemplates(*state_, options_.policies, pod, CollectRequests(pod, state_->backends()),
                                    candidates, templates, clock_->Now());
    if (out.kind == FilterOutcome::Kind::kError) {
      out = Fail(fmt::format("pod {}: {}", pod.Key(), out.error));
    } else {
      ++results_[out.kind == FilterOutcome::Kind::kFitting         ? "fitting"
                 : out.kind == FilterOutcome::Kind::kUnschedulable ? "unschedulable"
                                                                   : "passthrough"];
    }
  }
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
  const asio::any_io_executor executor = co_await asio::this_coro::executor;
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
      RecordRefusal(pod, outcome, candidates.empty(), executor);
      co_return outcome;
    case FilterOutcome::Kind::kFitting:
      // Nothing is reserved: kube-scheduler scores these nodes and /bind fits the pod where it chose.
      requeue_->Forget(uid);
      refusals_.Scheduled(pod, executor);
      scores_->Expect(pod, outcome);
      ++results_["fitting"];
      RecordFilterEvent(pod, outcome);
      co_return outcome;
    case FilterOutcome::Kind::kScheduled:
      requeue_->Forget(uid);
      refusals_.Scheduled(pod, executor);
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

void FilterService::RecordRefusal(const PodView& pod, const FilterOutcome& outcome, bool no_candidates,
                                  const asio::any_io_executor& executor) {
  std::string message =
      fmt::format("no node fits the pod's device request; {}",
                  no_candidates ? "no candidate nodes" : SummarizeFailures(outcome.failed_nodes));
  // Events age out after an hour; the annotation stays until the pod is scheduled.
  if (options_.refusal_annotation)
    refusals_.Refused(pod, RefusalAnnotation(clock_->Now(), message), executor);
  writer_->Event(k8s::InvolvedObject::Of(pod), "Warning", "FilteringFailed", std::move(message));
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
  w.Counter("hami_scheduler_filter_template_requests_total",
            "/filter requests answered over nodes not in the registry (Cluster Autoscaler's template nodes).",
            static_cast<double>(template_filters_));
  w.Counter("hami_scheduler_filters_held_total",
            "Filters held back while the binds in flight needed too much of the --kube-qps budget.",
            static_cast<double>(stats_.filters_held));
  w.Counter("hami_scheduler_filter_held_seconds_total",
            "Time filters were held back for the binds in flight (backpressure on kube-scheduler's queue).",
            held_seconds_);
  refusals_.WriteMetrics(w);
}

}  // namespace hami::extender
