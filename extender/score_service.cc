#include "extender/score_service.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace hami::extender {

namespace {
// kube-scheduler binds a pod milliseconds after scoring it (seconds when a PreBind plugin waits for a
// volume); an expectation this old is a guess that went wrong.
constexpr std::chrono::seconds kExpectationLifetime{30};
// At most this many pods are expected at once (the oldest go first): kube-scheduler scores one pod at a time.
constexpr std::size_t kMaxExpected = 10000;
}  // namespace

ScoreService::ScoreService(ClusterState& state, PodLedger& ledger, const std::map<std::string, PodView>& pods,
                           const Clock& clock, const Readiness& readiness, SchedulerOptions options)
    : state_(&state),
      ledger_(&ledger),
      pods_(&pods),
      clock_(&clock),
      readiness_(&readiness),
      options_(options),
      scheduler_(state, std::move(options)) {}

void ScoreService::Remember(const PodView& pod, PodAllocation devices) {
  const TimePoint now = clock_->Now();
  DropStale(now);
  if (expected_.size() >= kMaxExpected && !expected_.contains(pod.UidOrKey())) {
    auto oldest = std::min_element(expected_.begin(), expected_.end(), [](const auto& a, const auto& b) {
      return a.second.since < b.second.since;
    });
    expected_.erase(oldest);
  }
  expected_[pod.UidOrKey()] = Expected{pod.Key(), std::move(devices), now};
}

void ScoreService::DropStale(TimePoint now) {
  std::erase_if(expected_, [&](const auto& e) { return now - e.second.since > kExpectationLifetime; });
}

void ScoreService::Expect(const PodView& pod, const FilterOutcome& outcome) {
  if (outcome.kind != FilterOutcome::Kind::kFitting) return;
  Remember(pod, scheduler_.Decision(pod, outcome));
}

std::vector<std::pair<std::string, int>> ScoreService::Prioritize(
    const PodView& pod, const std::vector<std::string>& candidates) {
  ++prioritized_;
  DropStale(clock_->Now());
  const std::string uid = pod.UidOrKey();
  const std::string key = pod.Key();
  // Only a pod the cache has with this uid, waiting for a node, is expected anywhere, with the requests the
  // cache shows: a made-up body is answered, not kept (it could otherwise make the cards it names look taken
  // to every pod scored after it), and a pod bound, or being bound, is charged in the ledger already.
  const auto cached = pods_->find(key);
  const bool known = cached != pods_->end() && cached->second.UidOrKey() == uid;
  const bool waiting = known && cached->second.node_name.empty() && ledger_->BoundTo(uid) == nullptr &&
                       !ledger_->Binding(key, uid);
  const PodView& subject = known ? cached->second : pod;
  PendingFits pending;
  for (const auto& [other, e] : expected_) {
    if (other != uid) pending[e.devices.node].push_back(&e.devices);
  }
  Scheduler::Scores scores =
      scheduler_.Prioritize(subject, CollectRequests(subject, state_->backends()), candidates, pending);
  if (!scores.error.empty()) spdlog::debug("prioritize {}: every node scores 0: {}", key, scores.error);
  if (!scores.best.empty() && waiting && all_fitting()) {
    FilterOutcome expected;
    expected.node = scores.best;
    expected.devices = std::move(scores.devices);
    Remember(subject, scheduler_.Decision(subject, expected));
  }
  return std::move(scores.scores);
}

std::string ScoreService::PlaceAtBind(const PodView& pod, const Result<PodRequests>& requests,
                                      const std::string& node) {
  const std::string uid = pod.UidOrKey();
  const std::string key = pod.Key();
  // The ledger and the caches must show what the nodes hold before anything is decided on them (after a
  // restart kube-scheduler may bind pods it scored before it).
  if (!readiness_->ready())
    return fmt::format("hami-scheduler is not ready ({}); pod {} must be scheduled again",
                       readiness_->NotReadyReason(), key);
  if (auto other = ledger_->OtherHolder(uid, key))
    return fmt::format("bind of pod {} refused: uid {} is pod {}'s", key, uid, *other);
  // Bound by a bind of ours a moment ago, the watch not there yet: its devices there stay charged.
  if (const std::string* bound = ledger_->BoundTo(uid); bound != nullptr && *bound != node)
    return fmt::format("pod {} is bound to node {} already, cannot bind it to {}", key, *bound, node);
  expected_.erase(uid);  // the bind decides now, whatever the outcome
  // A bind retried after its Binding failed finds the devices it reserved still held.
  if (const Reservation* held = ledger_->HeldFor(uid, key); held != nullptr && held->node == node) return {};
  ledger_->Redecide(uid);  // an earlier attempt's devices elsewhere go back first
  const TimePoint now = clock_->Now();
  FilterOutcome outcome = scheduler_.PlaceOn(pod, requests, node, now);
  if (outcome.kind == FilterOutcome::Kind::kError) return fmt::format("pod {}: {}", key, outcome.error);
  if (outcome.kind != FilterOutcome::Kind::kScheduled) {
    ++refused_;
    auto why = outcome.failed_nodes.find(node);
    return fmt::format("pod {} no longer fits node {}: {}; it must be scheduled again", key, node,
                       why == outcome.failed_nodes.end() ? "no device request fits" : why->second);
  }
  ++placed_;
  // The condition and nomination the pod shows now: kube-scheduler writing others means this attempt ended
  // without a bind here (WatchRoutes releases the devices then).
  const auto cached = pods_->find(key);
  const bool seen = cached != pods_->end();
  ledger_->Reserve(scheduler_.Decision(pod, outcome),
                   Reservation{key, node, now, std::move(outcome.annotations), pod.scheduled,
                               seen ? cached->second.scheduled : pod.scheduled, pod.nominated_node_name,
                               seen ? cached->second.nominated_node_name : pod.nominated_node_name});
  return {};
}

void ScoreService::WriteMetrics(k8s::prom::TextWriter& w) const {
  w.Counter("hami_scheduler_prioritize_total",
            "/prioritize answers (in one-node filter mode only pods asking for no device of ours are scored).",
            static_cast<double>(prioritized_));
  if (!all_fitting()) return;
  w.Family("hami_scheduler_bind_placements_total",
           "Binds in all-fitting filter mode by whether the pod still fitted the node kube-scheduler chose.",
           "counter");
  w.Sample("hami_scheduler_bind_placements_total", {{"result", "placed"}}, static_cast<double>(placed_));
  w.Sample("hami_scheduler_bind_placements_total", {{"result", "no_longer_fits"}},
           static_cast<double>(refused_));
  w.Gauge("hami_scheduler_pods_expected",
          "Pods filtered in all-fitting mode and not bound yet, counted in /prioritize where they are "
          "expected.",
          static_cast<double>(expected_.size()));
}

}  // namespace hami::extender
