#pragma once
// POST /webhook: HAMi's mutating admission webhook. The decision is core's AdmitPod; this service reads
// the pod out of the AdmissionReview, turns the decision into a JSON patch against the object as sent,
// counts and times every answer, and logs every denial with its reason. It never waits for the API server:
// it answers from the caches it has (the quota accounting).
//
// A review is decided in two steps so that its cost (a body of several MiB, hundreds of thousands of
// annotations) never lands on the event loop: Prepare reads and decides everything but the quota, reading
// only the review, the backends and the options, so it may run on another thread (the webhook's worker);
// Conclude, on the event loop, checks the namespace quota the ledger keeps and counts the answer.
#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include "core/admission.h"
#include "core/cluster_state.h"
#include "k8s/admission.h"
#include "k8s/metrics.h"

namespace hami::extender {

class AdmissionService {
 public:
  AdmissionService(const Backends& backends, const ClusterState& state, AdmissionOptions options);

  // The review decided, off the event loop: the answer but for the quota, and what the quota must allow.
  struct Prepared {
    enum class Kind { kPassed, kInvalid, kDenied, kAdmitted } kind = Kind::kPassed;
    k8s::AdmissionAnswer answer;
    AdmissionVerdict verdict;  // kAdmitted: the rules' verdict (its quota demands)
    std::string ns;            // the pod's namespace
    std::string shown;         // the pod as logs name it
  };
  // Thread-safe: reads only `request`, the backends and the options (never the ledger or the counters).
  Prepared Prepare(const k8s::AdmissionRequest& request) const;
  // On the event loop: the quota check, the counters and the latency since `start`.
  k8s::AdmissionAnswer Conclude(Prepared prepared, std::chrono::steady_clock::time_point start);
  // Both at once, on the calling thread.
  k8s::AdmissionAnswer Review(const k8s::AdmissionRequest& request);
  // The answer to a review that could not be read (counted as "invalid").
  k8s::AdmissionAnswer Refuse(int code, std::string message);

  struct Stats {
    std::uint64_t patched = 0;  // admitted with changes
    std::uint64_t allowed = 0;  // admitted unchanged (no device, another scheduler's pod, not a CREATE)
    std::uint64_t denied = 0;
    std::uint64_t invalid = 0;  // unreadable review or pod
    std::uint64_t stripped = 0;  // admitted with their allocation annotations removed
  };
  const Stats& stats() const { return stats_; }
  void WriteMetrics(k8s::prom::TextWriter& w) const;

 private:
  const Backends* backends_;
  const ClusterState* state_;
  AdmissionOptions options_;
  Stats stats_;
  k8s::prom::Histogram latency_;
};

}  // namespace hami::extender
