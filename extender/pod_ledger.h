#pragma once
// One record per pod the extender has a hand in, by uid: what its filter decided, whether a /bind of it
// runs, the node our Binding put it on, and when an allocation written on it without a node was first seen
// undated. The phases, each read from the record's facts (a pod keeps its reservation while it is bound,
// and after, until the watch shows the Binding's write):
//
//   (none) --filter decides--> reserved --/bind begins--> binding --Binding applied--> bound
//     ^                         |   ^                       |                            |
//     |                         |   +-- the bind fails -----+                            |
//     +-- Release: expiry, -----+                                   the watch shows it --+-> (none)
//         pod gone; Redecide: a re-filter                           (LedgerFeed charges it from then on)
//
// A decision lives in two stores: its devices are charged in core's ClusterState (LedgerFeed owns it), and
// this ledger holds what the Binding writes (the decision's annotations) and the bind's progress. This
// ledger is their one owner for a decision: Reserve() writes both, HeldFor() reads both as one answer, and
// Release() ends a pod's hold in both at once: every release (a pod finished or gone, a reservation
// expired, a failed bind of a pod gone, an orphaned ledger entry) goes through it.
#include <cstddef>
#include <optional>
#include <string>
#include <unordered_map>

#include "core/clock.h"
#include "core/cluster_state.h"
#include "core/model.h"

namespace hami::extender {

class LedgerFeed;

struct Reservation {
  std::string key;  // "ns/name"
  std::string node;
  TimePoint decided;
  Annotations annotations;  // the allocation, as the Binding writes it
  // The pod's PodScheduled condition and nominated node when the filter decided, as the request carried
  // them and as the watch had shown them: kube-scheduler writing others ends the attempt the reservation was
  // made for (a nomination left from an earlier preemption does not).
  SchedulingCondition condition_sent, condition_seen;
  std::string nominated_sent, nominated_seen;
  // Whether `pod` shows that kube-scheduler's attempt for this reservation ended without a bind of it
  // here: it reported the pod unschedulable since, or nominated another node since.
  bool AbandonedBy(const PodView& pod) const {
    if (!pod.node_name.empty()) return false;
    const std::string& nominated = pod.nominated_node_name;
    if (!nominated.empty() && nominated != node && nominated != nominated_sent && nominated != nominated_seen)
      return true;
    return pod.scheduled.Refused() && pod.scheduled != condition_sent && pod.scheduled != condition_seen;
  }
};

class PodLedger {
 public:
  explicit PodLedger(LedgerFeed& feed) : feed_(&feed) {}
  PodLedger(const PodLedger&) = delete;
  PodLedger& operator=(const PodLedger&) = delete;

  enum class Phase { kNone, kReserved, kBinding, kBound };
  // The furthest phase the pod's record shows (a pod being bound holds its reservation too).
  Phase PhaseOf(const std::string& uid) const;

  // Reserved: our filter's decision, its devices charged in the usage ledger (`charge`, whose uid names the
  // pod) and the rest held here until the watch shows the Binding wrote it (DropReservation).
  void Reserve(PodAllocation charge, Reservation r);
  const Reservation* FindReservation(const std::string& uid) const;
  // The decision held for pod `key` with `uid`: its reservation, when the usage ledger charges that same
  // pod on the same node; null when either store lacks it or they disagree (it must be filtered again).
  const Reservation* HeldFor(const std::string& uid, const std::string& key) const;
  // The pod ("ns/name") other than `key` that either store holds `uid` for; nullopt when none does: a hold
  // is only ever released, or answered for, by the pod it was made for.
  std::optional<std::string> OtherHolder(const std::string& uid, const std::string& key) const;
  // Whether either store holds anything for `uid`.
  bool Holds(const std::string& uid) const;
  bool reserved(const std::string& uid) const { return FindReservation(uid) != nullptr; }
  // The decision no longer needs holding here: the pod shows it bound (its annotations charge it now). The
  // devices stay charged.
  void DropReservation(const std::string& uid);
  // A re-filter decides again: the earlier decision's charge and reservation go, and nothing else (what was
  // reported of the pod stays reported; a pod not bound yet holds nothing more).
  void Redecide(const std::string& uid);
  template <typename F>  // f(uid, reservation) for each reservation
  void ForEachReservation(F&& f) const {
    for (const auto& [uid, r] : records_) {
      if (r.reservation) f(uid, *r.reservation);
    }
  }

  // Binding: a /bind of pod `key` with `uid` runs from BeginBind until its Binding ends it (or it fails).
  // False (nothing changes) when a bind of that uid runs already: a second one would share, and could
  // release, the first one's locks.
  [[nodiscard]] bool BeginBind(const std::string& key, const std::string& uid);
  void EndBind(const std::string& uid);
  bool Binding(const std::string& key, const std::string& uid) const;
  bool AnyBindOf(const std::string& key) const { return binding_keys_.contains(key); }
  std::size_t binds_running() const { return binds_running_; }

  // Bound: our Binding put the pod on `node`; until the pod cache shows spec.nodeName (ShownBound), a filter
  // of the pod answers that node instead of deciding again.
  void MarkBound(const std::string& uid, const std::string& node);
  const std::string* BoundTo(const std::string& uid) const;
  void ShownBound(const std::string& uid);

  // Written: an allocation on a pod without a node whose decision time cannot be read is dated from when it
  // was first seen here (the reservation sweep's clock for it).
  TimePoint FirstSeenUndated(const std::string& uid, TimePoint now);
  template <typename Keep>  // keep(uid): whether the pod still carries such an allocation
  void ForgetUndatedUnless(Keep&& keep) {
    for (auto it = records_.begin(); it != records_.end();) {
      if (it->second.undated_since && !keep(it->first)) it->second.undated_since.reset();
      it = EraseIfEmpty(it);
    }
  }

  // Released: the pod's hold on devices ends, in the usage ledger (and what was reported of it) and here.
  // A bind running or a bound record stays: they end with the bind, or with the pod (Gone).
  void Release(const std::string& uid);
  // The pod is gone (deleted, finished): released, and its bound record forgotten.
  void Gone(const std::string& uid);

  std::size_t size() const { return records_.size(); }

 private:
  struct Record {
    std::optional<Reservation> reservation;
    std::string binding;  // "ns/name" the running /bind names ("" when none runs)
    std::string bound_to;
    std::optional<TimePoint> undated_since;
    bool empty() const {
      return !reservation && binding.empty() && bound_to.empty() && !undated_since;
    }
  };
  using Records = std::unordered_map<std::string, Record>;
  // The record, or the next one when this one held nothing more and was erased.
  Records::iterator EraseIfEmpty(Records::iterator it);

  LedgerFeed* feed_;
  Records records_;
  std::unordered_map<std::string, std::size_t> binding_keys_;  // "ns/name" -> binds of it running
  std::size_t binds_running_ = 0;
};

}  // namespace hami::extender
