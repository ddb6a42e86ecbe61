#pragma once
// All-fitting mode (--filter-mode=all-fitting; docs/DECISIONS.md "Filter modes"): kube-scheduler weighs
// every node our filter lets through with its own soft constraints and our device policy's score, and
// binds where it chose. This service keeps where each pod filtered and not yet bound is expected to go,
// answers POST /prioritize with those pods' devices counted as taken (a burst does not pile onto one card),
// and makes the decision at /bind: the pod fitted on kube-scheduler's node against the ledger as it is then,
// its devices reserved as the one-node filter reserves them, or the bind refused with the reason.
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "core/scheduler.h"
#include "extender/pod_ledger.h"
#include "extender/readiness.h"
#include "k8s/metrics.h"

namespace hami::extender {

class ScoreService {
 public:
  // `pods`: the pod cache ("ns/name" -> pod), alive as long as the service. `readiness`: a bind decides only
  // once the caches are synced and the first health pass ran, as a filter does.
  ScoreService(ClusterState& state, PodLedger& ledger, const std::map<std::string, PodView>& pods,
               const Clock& clock, const Readiness& readiness, SchedulerOptions options);

  bool all_fitting() const { return options_.filter_mode == FilterMode::kAllFitting; }

  // An all-fitting filter found where `pod` fits: it is expected where the device policy alone puts it
  // (outcome.node) until /prioritize scores it, /bind names its node, or it goes.
  void Expect(const PodView& pod, const FilterOutcome& outcome);
  // POST /prioritize: the device policy's score per candidate (Scheduler::Prioritize), the pods expected
  // elsewhere counted. A pod the cache has with that uid, not bound nor being bound, is scored as the cache
  // has it and, in all-fitting mode, expected on its best node from then on.
  std::vector<std::pair<std::string, int>> Prioritize(const PodView& pod,
                                                      const std::vector<std::string>& candidates);
  // /bind of `pod` (as the API server or the cache has it, not bound) on `node`: "" when its devices are
  // reserved there (now, or by an earlier attempt of this bind), else why they cannot be.
  std::string PlaceAtBind(const PodView& pod, const Result<PodRequests>& requests, const std::string& node);
  // The pod is bound or gone: no longer expected anywhere.
  void Forget(const std::string& uid) { expected_.erase(uid); }

  std::size_t expected() const { return expected_.size(); }
  void WriteMetrics(k8s::prom::TextWriter& w) const;

 private:
  struct Expected {
    std::string key;  // "ns/name"
    PodAllocation devices;
    TimePoint since;
  };
  void Remember(const PodView& pod, PodAllocation devices);
  // Expectations older than kube-scheduler's scheduling cycle plus its bind's start can be are wrong guesses
  // (the pod went elsewhere without a bind of ours, or was given up): they stop counting.
  void DropStale(TimePoint now);

  ClusterState* state_;
  PodLedger* ledger_;
  const std::map<std::string, PodView>* pods_;
  const Clock* clock_;
  const Readiness* readiness_;
  SchedulerOptions options_;
  Scheduler scheduler_;
  std::unordered_map<std::string, Expected> expected_;  // by uid
  std::uint64_t prioritized_ = 0;
  std::uint64_t placed_ = 0;
  std::uint64_t refused_ = 0;  // binds whose node no longer fit the pod
};

}  // namespace hami::extender
