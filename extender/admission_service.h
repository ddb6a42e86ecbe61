#pragma once
// POST /webhook: HAMi's mutating admission webhook. The decision is core's AdmitPod; this service reads
// the pod out of the AdmissionReview, turns the decision into a JSON patch against the object as sent,
// counts and times every answer, and logs every denial with its reason. It never waits: it answers from the
// caches it has (the quota accounting), so it stays far inside the API server's timeoutSeconds.
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

  k8s::AdmissionAnswer Review(const k8s::AdmissionRequest& request);
  // The answer to a review that could not be read (counted as "invalid").
  k8s::AdmissionAnswer Refuse(int code, std::string message);

  struct Stats {
    std::uint64_t patched = 0;  // admitted with changes
    std::uint64_t allowed = 0;  // admitted unchanged (no device, another scheduler's pod, not a CREATE)
    std::uint64_t denied = 0;
    std::uint64_t invalid = 0;  // unreadable review or pod
  };
  const Stats& stats() const { return stats_; }
  void WriteMetrics(k8s::prom::TextWriter& w) const;

 private:
  k8s::AdmissionAnswer Decide(const k8s::AdmissionRequest& request);

  const Backends* backends_;
  const ClusterState* state_;
  AdmissionOptions options_;
  Stats stats_;
  k8s::prom::Histogram latency_;
};

}  // namespace hami::extender
