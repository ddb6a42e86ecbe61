#include "extender/admission_service.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>

namespace hami::extender {
namespace {

AdmissionDecision NotAllowed(int code, std::string message) {
  AdmissionDecision d;
  d.kind = AdmissionDecision::Kind::kDenied;
  d.code = code;
  d.message = std::move(message);
  return d;
}

// Refused by a rule or by a quota: the verdict says why, and its code and message answer the review.
AdmissionDecision Denied(AdmissionVerdict verdict, std::string ns, std::string shown) {
  AdmissionDecision d = NotAllowed(verdict.code, verdict.message);
  d.verdict = std::move(verdict);
  d.ns = std::move(ns);
  d.shown = std::move(shown);
  return d;
}

}  // namespace

AdmissionService::AdmissionService(const Backends& backends, const ClusterState& state,
                                   AdmissionOptions options)
    : backends_(&backends),
      state_(&state),
      options_(std::move(options)),
      latency_(k8s::prom::Histogram::LatencyBuckets()) {}

AdmissionDecision AdmissionService::Invalid(std::string message) {
  AdmissionDecision d = NotAllowed(400, std::move(message));
  d.kind = AdmissionDecision::Kind::kInvalid;
  return d;
}

AdmissionDecision AdmissionService::Refuse(int code, std::string message) {
  ++stats_.invalid;
  latency_.Observe(0);
  spdlog::warn("admission: refused an unreadable review: {}", message);
  AdmissionDecision d = Invalid(std::move(message));
  d.code = code;
  return d;
}

AdmissionDecision AdmissionService::Prepare(PodView& pod, std::string shown) const {
  AdmissionDecision out;
  out.ns = pod.ns;
  out.shown = std::move(shown);
  out.verdict = AdmitPodRules(pod, *backends_, options_);
  if (!out.verdict.allowed()) return Denied(std::move(out.verdict), std::move(out.ns), std::move(out.shown));
  out.kind = AdmissionDecision::Kind::kAdmitted;
  out.message = out.verdict.message;  // HAMi's "pod already has different scheduler assigned"
  return out;
}

AdmissionDecision AdmissionService::Conclude(AdmissionDecision decision,
                                             std::chrono::steady_clock::time_point start) {
  using Kind = AdmissionDecision::Kind;
  if (decision.kind == Kind::kAdmitted) {
    if (auto denied = QuotaDenial(decision.ns, decision.verdict, *backends_, state_->quotas()))
      decision = Denied(std::move(*denied), std::move(decision.ns), std::move(decision.shown));
  }
  switch (decision.kind) {
    case Kind::kPassed:
      ++stats_.allowed;
      break;
    case Kind::kInvalid:
      ++stats_.invalid;
      break;
    case Kind::kDenied:
      ++stats_.denied;
      spdlog::warn("admission: denied pod {}: {}", decision.shown, decision.verdict.message);
      break;
    case Kind::kAdmitted:
      if (decision.changes == 0) {
        ++stats_.allowed;
      } else {
        ++stats_.patched;
        spdlog::debug("admission: pod {}: {} change(s)", decision.shown, decision.changes);
      }
      break;
  }
  latency_.Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return decision;
}

void AdmissionService::WriteMetrics(k8s::prom::TextWriter& w) const {
  w.Family("hami_scheduler_admission_duration_seconds", "Time to answer /webhook.", "histogram");
  latency_.Write(w, "hami_scheduler_admission_duration_seconds", {});
  w.Family("hami_scheduler_admission_requests_total",
           "/webhook answers by result: patched, allowed (unchanged), denied, invalid (unreadable review).",
           "counter");
  for (auto [result, n] : {std::pair<const char*, std::uint64_t>{"patched", stats_.patched},
                           {"allowed", stats_.allowed},
                           {"denied", stats_.denied},
                           {"invalid", stats_.invalid}}) {
    w.Sample("hami_scheduler_admission_requests_total", {{"result", result}}, static_cast<double>(n));
  }
}

}  // namespace hami::extender
