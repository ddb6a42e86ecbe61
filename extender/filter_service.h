#pragma once
// POST /filter: decides where a pod's devices go (core's Scheduler over the registry and ledger), holds the
// decision in the pod ledger as a reservation until its Binding writes it, and answers which node fits. In
// all-fitting mode it answers every node that fits and reserves nothing (ScoreService takes over).
// Waits for the caches and the first health pass before its first answer, and holds a decision while the
// binds in flight need more of the API budget than kube-scheduler's timeout leaves them.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "core/scheduler.h"
#include "extender/bind_service.h"
#include "extender/cluster_writer.h"
#include "extender/options.h"
#include "extender/pod_ledger.h"
#include "extender/readiness.h"
#include "extender/requeue.h"
#include "extender/score_service.h"
#include "k8s/metrics.h"
#include "k8s/waits.h"

namespace hami::extender {

// The refusal annotation (keys::kFilterRefusal, --refusal-annotation) is at most this long: it is one line of
// `kubectl describe pod`, not a report.
inline constexpr std::size_t kRefusalAnnotationBytes = 1024;
// Its value for a refusal at `at` for `reason`: "<RFC 3339 time>: <reason>" on one line (control characters
// escaped), cut at a UTF-8 boundary and ended with "…" when longer than kRefusalAnnotationBytes.
std::string RefusalAnnotation(TimePoint at, std::string_view reason);
// What follows a value's time stamp: the part two refusals compare.
std::string_view RefusalReason(std::string_view value);

// The refusal annotation's patches (docs/DECISIONS.md, "The refusal annotation"): written when the reason
// differs from what the pod carries or is about to carry, removed when our filter finds the pod a node. One
// patch at a time on the background budget, never awaited by an answer; a pod's newest change replaces one
// still queued. Runs on the event loop, as the filter.
class RefusalAnnotations {
 public:
  // `pods`: the pod cache ("ns/name" -> pod), alive as long as this. Once `readiness` is stopping, what is
  // still queued is dropped (a stop does not wait for diagnostics).
  RefusalAnnotations(const std::map<std::string, PodView>& pods, ClusterWriter& writer,
                     const Readiness& readiness)
      : pods_(&pods), writer_(&writer), readiness_(&readiness) {}

  // Our filter refused `pod`; `value` is RefusalAnnotation's. Patches go out on `executor`.
  void Refused(const PodView& pod, std::string value, const boost::asio::any_io_executor& executor);
  // Our filter found `pod` a node.
  void Scheduled(const PodView& pod, const boost::asio::any_io_executor& executor);

  bool busy() const { return draining_; }  // patches queued or in flight: this must outlive them
  std::size_t queued() const { return pending_.size(); }
  void WriteMetrics(k8s::prom::TextWriter& w) const;

 private:
  struct Write {
    std::string ns, name, uid;         // uid: the pod's metadata.uid ("" for a pod without one)
    std::optional<std::string> value;  // none: the annotation removed
  };
  // The value the pod will carry once the patch in flight for it lands (as it carries it, if none is).
  std::optional<std::string> Expected(const PodView& pod) const;
  void Set(const PodView& pod, std::optional<std::string> value,
           const boost::asio::any_io_executor& executor);
  boost::asio::awaitable<void> Drain();
  boost::asio::awaitable<ApiResult<void>> Send(const Write& write);  // what a throw says, as an error

  const std::map<std::string, PodView>* pods_;
  ClusterWriter* writer_;
  const Readiness* readiness_;
  std::unordered_map<std::string, Write> pending_;  // by PodView::UidOrKey
  std::deque<std::string> order_;                   // their ids, oldest first (one not pending: skipped)
  std::unordered_set<std::string> queued_;          // the ids in order_
  // The patch in flight: the pod's UidOrKey and the value it writes.
  std::optional<std::pair<std::string, std::optional<std::string>>> sending_;
  bool draining_ = false;
  std::uint64_t written_ = 0, removed_ = 0, failed_ = 0;
};

class FilterService {
 public:
  // `pods`: the pod cache ("ns/name" -> pod), alive as long as the service. `decision_qps`: the decisions'
  // client's --kube-qps, the budget the binds in flight share (0: no limit, no backpressure).
  FilterService(ClusterState& state, PodLedger& ledger, const BindService& binds,
                const std::map<std::string, PodView>& pods, ClusterWriter& writer, const Clock& clock,
                FilterOptions options, double decision_qps, Readiness& readiness, Requeue& requeue,
                ScoreService& scores);

  // The decision for `pod` among `candidates` (node names), as kube-scheduler is to hear it: a failure is
  // an outcome of kind kError with its message.
  boost::asio::awaitable<FilterOutcome> Filter(const PodView& pod,
                                               const std::vector<std::string>& candidates);
  // Whether the registry has `node`: a posted node it lacks is a template node (FilterOnTemplates).
  bool Registered(std::string_view node) const { return state_->FindNode(node) != nullptr; }
  // /filter over Cluster Autoscaler's template nodes (`templates`, posted whole, none of them in the
  // registry) and the registry's nodes among `candidates`: every node that fits, a template judged by the
  // devices it publishes with nothing used; nothing is reserved, recorded or written (docs/DECISIONS.md,
  // "Cluster Autoscaler's template nodes").
  boost::asio::awaitable<FilterOutcome> FilterOnTemplates(const PodView& pod,
                                                          const std::vector<std::string>& candidates,
                                                          const std::vector<NodeView>& templates);
  // A request that could not be read: counted, answered with `error`.
  FilterOutcome Refuse(std::string error);

  struct Stats {
    std::size_t filters = 0;
    std::size_t filters_held = 0;  // filters that waited for the binds in flight
  };
  const Stats& stats() const { return stats_; }
  // Refusal annotations queued or being written: the service must outlive them.
  bool busy() const { return refusals_.busy(); }
  const RefusalAnnotations& refusals() const { return refusals_; }
  void WriteMetrics(k8s::prom::TextWriter& w) const;

 private:
  boost::asio::awaitable<FilterOutcome> Decide(const PodView& pod,
                                               const std::vector<std::string>& candidates);
  // Who the request speaks for.
  struct Identity {
    std::string refusal;  // the pod's uid is another pod's (in the cache, a read, the ledger, a reservation)
    std::string bound;    // else: the node the pod is bound to already ("" when it is not)
  };
  boost::asio::awaitable<Identity> Identify(const PodView& pod);
  // The answer for a pod bound already: its node fits (if a candidate), nothing is decided or released.
  FilterOutcome AnswerBound(const std::string& node, const std::vector<std::string>& candidates);
  boost::asio::awaitable<bool> WaitReady();
  boost::asio::awaitable<void> AwaitBindBacklog();
  // A one-node decision: held in the pod ledger as a reservation (its annotations too) until the Binding.
  void HoldDecision(const PodView& pod, FilterOutcome& outcome, TimePoint now, std::size_t candidates);
  FilterOutcome Fail(std::string message);
  void RecordFilterEvent(const PodView& pod, const FilterOutcome& outcome);
  // The refusal's event, and with --refusal-annotation the annotation.
  void RecordRefusal(const PodView& pod, const FilterOutcome& outcome, bool no_candidates,
                     const boost::asio::any_io_executor& executor);

  ClusterState* state_;
  PodLedger* ledger_;
  const BindService* binds_;
  const std::map<std::string, PodView>* pods_;
  ClusterWriter* writer_;
  const Clock* clock_;
  FilterOptions options_;
  double decision_qps_;
  Readiness* readiness_;
  Requeue* requeue_;
  ScoreService* scores_;
  Scheduler scheduler_;
  Stats stats_;
  double held_seconds_ = 0;
  k8s::prom::Histogram latency_;
  std::map<std::string, std::uint64_t> results_;  // scheduled, fitting, unschedulable, error, passthrough
  std::uint64_t template_filters_ = 0;  // answered over template nodes (FilterOnTemplates)
  RefusalAnnotations refusals_;
};

}  // namespace hami::extender
