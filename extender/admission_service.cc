#include "extender/admission_service.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>

#include "k8s/json_patch.h"
#include "k8s/objects.h"

namespace hami::extender {
namespace {

// More containers than any real pod has: beyond it the review is refused rather than answered with a patch
// of hundreds of thousands of operations (a 1 MiB body of empty containers).
constexpr std::size_t kMaxContainers = 1024;

k8s::AdmissionAnswer NotAllowed(int code, std::string message) {
  k8s::AdmissionAnswer a;
  a.allowed = false;
  a.code = code;
  a.message = std::move(message);
  return a;
}

// "ns/name", or "ns/<generateName>*" for a pod the API server has not named yet.
std::string PodShown(const PodView& pod, const boost::json::value& object) {
  if (!pod.name.empty()) return pod.Key();
  const auto* md = object.is_object() ? object.get_object().if_contains("metadata") : nullptr;
  const auto* gen = md != nullptr && md->is_object() ? md->get_object().if_contains("generateName") : nullptr;
  return fmt::format("{}/{}*", pod.ns, gen != nullptr && gen->is_string() ? gen->get_string() : "");
}

}  // namespace

AdmissionService::AdmissionService(const Backends& backends, const ClusterState& state,
                                   AdmissionOptions options)
    : backends_(&backends),
      state_(&state),
      options_(std::move(options)),
      latency_(k8s::prom::Histogram::LatencyBuckets()) {}

k8s::AdmissionAnswer AdmissionService::Review(const k8s::AdmissionRequest& request) {
  const auto start = std::chrono::steady_clock::now();
  k8s::AdmissionAnswer answer = Decide(request);
  latency_.Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return answer;
}

k8s::AdmissionAnswer AdmissionService::Refuse(int code, std::string message) {
  ++stats_.invalid;
  latency_.Observe(0);
  spdlog::warn("admission: refused an unreadable review: {}", message);
  return NotAllowed(code, std::move(message));
}

k8s::AdmissionAnswer AdmissionService::Decide(const k8s::AdmissionRequest& request) {
  // The webhook configuration asks for pod CREATEs only; anything else passes untouched.
  if (request.operation != "CREATE" || (!request.kind.empty() && request.kind != "Pod")) {
    ++stats_.allowed;
    return {};
  }
  if (!request.object.is_object()) {
    ++stats_.invalid;
    spdlog::warn("admission: refused review {}: request.object is not a Pod object", request.uid);
    return NotAllowed(400, "AdmissionReview: request.object: expected the Pod being created");
  }
  auto parsed = k8s::PodBeingCreatedFromJson(request.object);
  if (!parsed) {
    ++stats_.invalid;
    spdlog::warn("admission: refused review {}: {}", request.uid, parsed.error().message);
    return NotAllowed(400, parsed.error().message);
  }
  PodView pod = std::move(*parsed);
  if (pod.ContainerCount() > kMaxContainers) {
    ++stats_.invalid;
    spdlog::warn("admission: refused review {}: {} containers", request.uid, pod.ContainerCount());
    return NotAllowed(400, fmt::format("pod has {} containers and init containers, more than the {} this "
                                       "webhook reads",
                                       pod.ContainerCount(), kMaxContainers));
  }
  if (!request.ns.empty()) pod.ns = request.ns;
  if (pod.name.empty()) pod.name = request.name;
  const PodView before = pod;
  const AdmissionVerdict verdict = AdmitPod(pod, *backends_, state_->quotas(), options_);
  if (!verdict.allowed()) {
    ++stats_.denied;
    spdlog::warn("admission: denied pod {}: {}", PodShown(pod, request.object), verdict.message);
    return NotAllowed(verdict.code, verdict.message);
  }
  k8s::AdmissionAnswer answer;
  answer.message = verdict.message;  // HAMi's "pod already has different scheduler assigned"
  if (verdict.kind == AdmissionVerdict::Kind::kAllowed) {
    boost::json::value mutated = request.object;
    k8s::WritePodChanges(before, pod, mutated);
    answer.patch = k8s::JsonPatch(request.object, mutated);
  }
  if (answer.patch.empty()) {
    ++stats_.allowed;
  } else {
    ++stats_.patched;
    spdlog::debug("admission: pod {}: {} change(s), scheduler {}", PodShown(pod, request.object),
                  answer.patch.size(), pod.scheduler_name);
  }
  return answer;
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
