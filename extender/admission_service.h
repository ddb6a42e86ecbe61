#pragma once
// POST /webhook: HAMi's mutating admission webhook. The decision is core's AdmitPod on the pod being
// created; this service counts and times every answer and logs every denial with its reason. It never waits
// for the API server: it answers from the caches it has (the quota accounting). The wire (the
// AdmissionReview, the pod read out of it and the JSON patch written back) is extender/admission_wire's.
//
// A review is decided in two steps so that its cost (a body of several MiB, hundreds of thousands of
// annotations) never lands on the event loop: Prepare decides everything but the quota, reading only the
// pod, the backends and the options, so it may run on another thread (the webhook's worker); Conclude, on
// the event loop, checks the namespace quota the ledger keeps and counts the answer.
#include <chrono>
#include <cstdint>
#include <cstddef>
#include <string>
#include <vector>

#include "core/admission.h"
#include "core/cluster_state.h"
#include "k8s/metrics.h"

namespace hami::extender {

// The webhook's answer for one pod.
struct AdmissionDecision {
  enum class Kind { kPassed, kInvalid, kDenied, kAdmitted } kind = Kind::kPassed;
  int code = 200;        // the status code when refused
  std::string message;   // why refused; or a note for an admitted pod ("" = none)
  std::vector<std::string> warnings;  // shown to the client that created the pod (kubectl prints them)
  AdmissionVerdict verdict;           // kAdmitted, kDenied: the rules' verdict (its quota demands)
  std::string ns;                     // the pod's namespace
  std::string shown;                  // the pod as logs name it
  std::size_t changes = 0;            // kAdmitted: the changes written back on the pod (the patch's size)
  bool allowed() const { return kind == Kind::kPassed || kind == Kind::kAdmitted; }
};

class AdmissionService {
 public:
  AdmissionService(const Backends& backends, const ClusterState& state, AdmissionOptions options);

  // Decides for `pod` (named `shown` in logs) and changes it as admission does: everything but the quota.
  // Thread-safe: reads only the pod, the backends and the options (never the ledger or the counters).
  AdmissionDecision Prepare(PodView& pod, std::string shown) const;
  // A pod that cannot be read (counted as "invalid" by Conclude): refused with `message`.
  static AdmissionDecision Invalid(std::string message);
  // On the event loop: the quota check, the counters and the latency since `start`.
  AdmissionDecision Conclude(AdmissionDecision decision, std::chrono::steady_clock::time_point start);
  // The answer to a review that could not be read (counted as "invalid").
  AdmissionDecision Refuse(int code, std::string message);

  struct Stats {
    std::uint64_t patched = 0;  // admitted with changes
    std::uint64_t allowed = 0;  // admitted unchanged (no device, another scheduler's pod, not a CREATE)
    std::uint64_t denied = 0;
    std::uint64_t invalid = 0;  // unreadable review or pod
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
