#pragma once
// Makes kube-scheduler try again, at once, a pod our /filter refused when the ledger can now take it.
// kube-scheduler moves a pod an extender refused back to its active queue only on a cluster event it sees
// itself: the event that frees a card reaches it and us through two watches (it often retries before our
// ledger has applied it), and our own changes (a reservation expired, a device healthy again, a quota
// raised) are none of its events. Without a nudge such a pod waits for the unschedulable queue's flush
// (5 minutes). The nudge is a merge patch of one annotation of ours (keys::kRequeue, the time in ms): a
// change of an unscheduled pod's metadata, for which kube-scheduler requeues it (docs/DECISIONS.md
// "Requeue"). The rules:
// - a pod our filter refused is a candidate for the nodes it was refused on: those where pods leaving could
//   make room, and those where only a change of the node itself could (devices added or healthy again);
// - when a hold is released on a node, the candidates that could fit there once pods leave are fitted on
//   it against the ledger, one after another (priority, then the order of their first refusal), each against
//   the usage the ones before it would take: only those that fit are nudged, so a card freed nudges the pods
//   it can take; when a node's devices change, every candidate refused on it is fitted the same way (a pod
//   that fits no node however idle, a GPU type the node lacks, never fits and is never nudged);
// - a namespace whose quota was raised or whose use fell: its candidates refused for the quota are fitted
//   on the nodes they were refused on;
// - a pod whose bind timed out on a node lock is nudged when the node shows the lock released;
// - once per refusal (again only after renudge_after without a filter of it), at most `qps` a second, and
//   only while the pod is ours, not bound, not gated, not finished and not being deleted. A nudge that
//   finds its pod gone or fails gives the node's room back to the next pass.
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/clock.h"
#include "core/scheduler.h"
#include "extender/cluster_writer.h"
#include "k8s/metrics.h"
#include "k8s/waits.h"

namespace hami::extender {

struct RequeueOptions {
  double qps = 2.5;  // nudges a second at most (at least one every 1,000 s); 0: none are sent
  std::string scheduler_name;  // pods naming it are ours
  SchedulerOptions policies;   // the filter's (a fit reads the GPU policy)
  // Events that come together (a node's pods deleted at once) make one pass.
  std::chrono::milliseconds settle{20};
  // A nudged pod that was not filtered again within this long may be nudged once more.
  std::chrono::milliseconds renudge_after{30000};
};

class Requeue {
 public:
  // `pods`: the pod cache ("ns/name" -> pod), alive as long as this.
  Requeue(ClusterState& state, const std::map<std::string, PodView>& pods, ClusterWriter& writer,
          const Clock& clock, RequeueOptions options);

  // Our /filter found no node for `pod`: it waits for the nodes `outcome` refused it on (a quota refusal
  // among them makes its namespace's quota matter).
  void Refused(const PodView& pod, const FilterOutcome& outcome);
  // The pod was decided, bound, or is gone: nothing to nudge (a nudge queued for it is not sent).
  void Forget(const std::string& uid);
  // A bind of the pod timed out waiting for `node`'s lock: nudged once the node shows the lock released.
  void WaitsForLock(const PodView& pod, const std::string& node);
  // The node as the watch shows it: a lock released wakes the pods waiting for it.
  void NodeSeen(const NodeView& node);
  // A namespace's ResourceQuota changed.
  void QuotaChanged(const std::string& ns);
  // The ledger may have grown (ClusterState::HasGrown): a pass runs soon. Cheap; call after every change.
  void Poke();

  // Passes and nudges until cancelled.
  boost::asio::awaitable<void> Run();
  // One pass over what grew since the last one: the pods to nudge, queued; then the queue sent, paced
  // (Run's steps, public for tests).
  void Pass();
  boost::asio::awaitable<void> SendQueued();

  std::size_t candidates() const { return candidates_.size(); }
  // A pod's last refusal, as the metrics listener's /api/pods shows it: when, on how many nodes, and the
  // reasons of the first kShownReasons of them by name (the rest are counted, not kept).
  static constexpr std::size_t kShownReasons = 32;
  struct LastRefusal {
    TimePoint at;
    std::size_t nodes = 0;
    std::vector<std::pair<std::string, std::string>> reasons;  // node -> reason
  };
  // Visits every pod refused for want of room and not decided, bound or gone since: f(uid, "ns/name", last).
  template <class F>
  void ForEachRefused(F&& visit) const {
    for (const auto& [uid, c] : candidates_) visit(uid, c.key, c.last);
  }
  // Grows with every refusal recorded or forgotten: a reader that saw the same count has nothing new.
  std::uint64_t changes() const { return changes_; }
  std::size_t queued() const { return queue_.size(); }
  struct Stats {
    std::uint64_t passes = 0;
    std::uint64_t nudges = 0;         // patches answered success
    std::uint64_t nudge_errors = 0;   // patches that failed (the pod stays a candidate)
    std::uint64_t skipped = 0;        // queued pods found bound, gone or gated when their turn came
  };
  const Stats& stats() const { return stats_; }
  void WriteMetrics(k8s::prom::TextWriter& w) const;

 private:
  struct Candidate {
    std::string key;  // "ns/name"
    std::string ns;
    std::int32_t priority = 0;
    std::uint64_t order = 0;              // its first refusal, in refusals
    std::vector<std::string> freeable;    // sorted: refused where pods leaving could make room
    std::vector<std::string> unfit_idle;  // sorted: refused where it does not fit even idle
    bool quota = false;                   // some node refused it for the namespace's quota
    std::optional<TimePoint> nudged;
    LastRefusal last;
  };
  struct Nudge {
    std::string uid, key;
    std::string node;  // whose room it was for ("" for a quota's): handed back when the nudge is not sent
    bool lock = false;  // a bind that waited for the node's lock (no candidate)
  };
  bool MayNudge(const Candidate& c, TimePoint now) const;
  // The pod as the cache shows it, if it still waits for kube-scheduler (ours, unbound, not gated, live).
  const PodView* Pending(const std::string& uid, const std::string& key) const;
  void Enqueue(Nudge nudge);
  // Fits the candidates of `order` that `take` selects on `node`, one after another; marks those that fit.
  template <typename Take>
  void FitOn(const std::string& node, const std::vector<std::pair<const std::string*, Candidate*>>& order,
             Take&& take, std::unordered_map<const Candidate*, std::string>& fitted);

  ClusterState* state_;
  const std::map<std::string, PodView>* pods_;
  ClusterWriter* writer_;
  const Clock* clock_;
  RequeueOptions options_;
  Scheduler scheduler_;
  std::unordered_map<std::string, Candidate> candidates_;            // by uid
  std::map<std::string, std::map<std::string, std::string>> locks_;  // node -> uid -> key
  std::set<std::string> quota_changed_;                              // namespaces
  std::set<std::string> given_back_;  // nodes whose room a nudge not sent leaves for the next pass
  std::deque<Nudge> queue_;                             // to send, in order
  std::unordered_set<std::string> queued_;              // their uids
  std::chrono::steady_clock::time_point next_send_{};  // the pace: no nudge before it
  std::uint64_t refusals_ = 0;
  std::uint64_t changes_ = 0;
  k8s::Signal wake_;
  bool pending_ = false;  // a pass is due
  Stats stats_;
};

}  // namespace hami::extender
