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
  return Conclude(Prepare(request), start);
}

k8s::AdmissionAnswer AdmissionService::Refuse(int code, std::string message) {
  ++stats_.invalid;
  latency_.Observe(0);
  spdlog::warn("admission: refused an unreadable review: {}", message);
  return NotAllowed(code, std::move(message));
}

AdmissionService::Prepared AdmissionService::Prepare(const k8s::AdmissionRequest& request) const {
  using Kind = Prepared::Kind;
  Prepared out;
  // The webhook configuration asks for pod CREATEs only; anything else passes untouched.
  if (request.operation != "CREATE" || (!request.kind.empty() && request.kind != "Pod")) return out;
  const auto invalid = [&](std::string message) {
    spdlog::warn("admission: refused review {}: {}", request.uid, message);
    out.kind = Kind::kInvalid;
    out.answer = NotAllowed(400, std::move(message));
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
  out.ns = pod.ns;
  out.shown = PodShown(pod, request.object);
  const PodView before = pod;
  out.verdict = AdmitPodRules(pod, *backends_, options_);
  if (!out.verdict.allowed()) {
    out.kind = Kind::kDenied;
    out.answer = NotAllowed(out.verdict.code, out.verdict.message);
    return out;
  }
  out.kind = Kind::kAdmitted;
  out.answer.message = out.verdict.message;  // HAMi's "pod already has different scheduler assigned"
  // Another scheduler's pod changes only by the allocation annotations it was created with.
  boost::json::value mutated = request.object;
  k8s::WritePodChanges(before, pod, mutated);
  out.answer.patch = k8s::JsonPatch(request.object, mutated);
  if (!out.verdict.stripped.empty()) {
    std::string keys;
    for (const auto& k : out.verdict.stripped) keys += (keys.empty() ? "" : ", ") + k;
    spdlog::warn("admission: pod {} was created with allocation annotations ({}): removed", out.shown, keys);
    out.answer.warnings.push_back(fmt::format(
        "removed {}: allocation annotations are written by the scheduler when it binds the pod", keys));
  }
  return out;
}

k8s::AdmissionAnswer AdmissionService::Conclude(Prepared prepared,
                                               std::chrono::steady_clock::time_point start) {
  using Kind = Prepared::Kind;
  if (prepared.kind == Kind::kAdmitted) {
    if (auto denied = QuotaDenial(prepared.ns, prepared.verdict, *backends_, state_->quotas())) {
      prepared.kind = Kind::kDenied;
      prepared.verdict = std::move(*denied);
      prepared.answer = NotAllowed(prepared.verdict.code, prepared.verdict.message);
    }
  }
  switch (prepared.kind) {
    case Kind::kPassed:
      ++stats_.allowed;
      break;
    case Kind::kInvalid:
      ++stats_.invalid;
      break;
    case Kind::kDenied:
      ++stats_.denied;
      spdlog::warn("admission: denied pod {}: {}", prepared.shown, prepared.verdict.message);
      break;
    case Kind::kAdmitted:
      if (!prepared.verdict.stripped.empty()) ++stats_.stripped;
      if (prepared.answer.patch.empty()) {
        ++stats_.allowed;
      } else {
        ++stats_.patched;
        spdlog::debug("admission: pod {}: {} change(s)", prepared.shown, prepared.answer.patch.size());
      }
      break;
  }
  latency_.Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return std::move(prepared.answer);
}

void AdmissionService::WriteMetrics(k8s::prom::TextWriter& w) const {
  w.Counter("hami_scheduler_admission_stripped_total",
            "Pods created with allocation annotations (hami.io/vgpu-node, bind-phase, devices), which the "
            "webhook removed.",
            static_cast<double>(stats_.stripped));
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
