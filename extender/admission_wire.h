#pragma once
// The webhook's wire around AdmissionService: the pod read out of an AdmissionReview, the service's
// decision, and what admission changed on the pod written back onto the object as sent and diffed into the
// answer's JSON patch (k8s/admission, k8s/json_patch). The service sees the pod as a PodView only.
#include <boost/json/array.hpp>
#include <chrono>
#include <string>

#include "extender/admission_service.h"
#include "k8s/admission.h"

namespace hami::extender {

// A review read and decided but for the quota (PrepareReview), and its answer's patch.
struct PreparedReview {
  AdmissionDecision decision;
  boost::json::array patch;  // RFC 6902 operations against the object as sent; empty = none
};

// Reads the pod being created out of `request` and decides for it: a review that is not a pod CREATE
// passes untouched; a pod that cannot be read is refused as invalid. Thread-safe as
// AdmissionService::Prepare is (the webhook's worker runs it).
PreparedReview PrepareReview(const AdmissionService& service, const k8s::AdmissionRequest& request);
// On the event loop: the service's quota check and counters, and the answer (a refused pod gets no patch).
k8s::AdmissionAnswer ConcludeReview(AdmissionService& service, PreparedReview prepared,
                                    std::chrono::steady_clock::time_point start);
// Both at once, on the calling thread.
k8s::AdmissionAnswer ReviewAdmission(AdmissionService& service, const k8s::AdmissionRequest& request);
// The answer for a decision (no patch).
k8s::AdmissionAnswer AnswerOf(const AdmissionDecision& decision);

}  // namespace hami::extender
