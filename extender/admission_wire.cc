#include "extender/admission_wire.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "k8s/json_patch.h"
#include "k8s/objects.h"

namespace hami::extender {
namespace {

// More containers than any real pod has: beyond it the review is refused rather than answered with a patch
// of hundreds of thousands of operations (a 1 MiB body of empty containers).
constexpr std::size_t kMaxContainers = 1024;

// "ns/name", or "ns/<generateName>*" for a pod the API server has not named yet.
std::string PodShown(const PodView& pod, const boost::json::value& object) {
  if (!pod.name.empty()) return pod.Key();
  const auto* md = object.is_object() ? object.get_object().if_contains("metadata") : nullptr;
  const auto* gen = md != nullptr && md->is_object() ? md->get_object().if_contains("generateName") : nullptr;
  return fmt::format("{}/{}*", pod.ns, gen != nullptr && gen->is_string() ? gen->get_string() : "");
}

}  // namespace

PreparedReview PrepareReview(const AdmissionService& service, const k8s::AdmissionRequest& request) {
  PreparedReview out;
  // The webhook configuration asks for pod CREATEs only; anything else passes untouched.
  if (request.operation != "CREATE" || (!request.kind.empty() && request.kind != "Pod")) return out;
  const auto invalid = [&](std::string message) {
    spdlog::warn("admission: refused review {}: {}", request.uid, message);
    out.decision = AdmissionService::Invalid(std::move(message));
    return std::move(out);
  };
  if (!request.object.is_object())
    return invalid("AdmissionReview: request.object: expected the Pod being created");
  auto parsed = k8s::PodBeingCreatedFromJson(request.object);
  if (!parsed) return invalid(parsed.error().message);
  PodView pod = std::move(*parsed);
  if (pod.ContainerCount() > kMaxContainers)
    return invalid(fmt::format("pod has {} containers and init containers, more than the {} this webhook "
                               "reads",
                               pod.ContainerCount(), kMaxContainers));
  if (!request.ns.empty()) pod.ns = request.ns;
  if (pod.name.empty()) pod.name = request.name;
  const PodView before = pod;
  out.decision = service.Prepare(pod, PodShown(pod, request.object));
  if (out.decision.kind != AdmissionDecision::Kind::kAdmitted) return out;
  // Another scheduler's pod changes only by the allocation annotations it was created with.
  boost::json::value mutated = request.object;
  k8s::WritePodChanges(before, pod, mutated);
  out.patch = k8s::JsonPatch(request.object, mutated);
  out.decision.changes = out.patch.size();
  return out;
}

k8s::AdmissionAnswer AnswerOf(const AdmissionDecision& decision) {
  k8s::AdmissionAnswer a;
  a.allowed = decision.allowed();
  a.message = decision.message;
  a.warnings = decision.warnings;
  if (!a.allowed) a.code = decision.code;
  return a;
}

k8s::AdmissionAnswer ConcludeReview(AdmissionService& service, PreparedReview prepared,
                                    std::chrono::steady_clock::time_point start) {
  const AdmissionDecision decision = service.Conclude(std::move(prepared.decision), start);
  k8s::AdmissionAnswer answer = AnswerOf(decision);
  if (decision.kind == AdmissionDecision::Kind::kAdmitted) answer.patch = std::move(prepared.patch);
  return answer;
}

k8s::AdmissionAnswer ReviewAdmission(AdmissionService& service, const k8s::AdmissionRequest& request) {
  const auto start = std::chrono::steady_clock::now();
  return ConcludeReview(service, PrepareReview(service, request), start);
}

}  // namespace hami::extender
