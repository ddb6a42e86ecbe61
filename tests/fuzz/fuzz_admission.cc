// The admission webhook's wire, end to end without HTTP: whatever the AdmissionReview holds, the answer is a
// valid AdmissionReview for its uid, and a patch applied to the object as sent (as the API server applies it)
// gives exactly the pod the decision produced, read back to the same view.
#include <boost/json.hpp>

#include "core/admission.h"
#include "k8s/admission.h"
#include "k8s/json_patch.h"
#include "k8s/objects.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/support/builders.h"

namespace {

namespace json = boost::json;

// Every mutation on: defaults, env vars, runtimeClassName (and a quota, so the quota path runs).
const hami::Backends& FuzzBackends() {
  static const hami::Backends backends = [] {
    hami::VendorSettings nvidia;
    nvidia.Set("gpuCorePolicy", "force").Set("overwriteEnv", true).Set("runtimeClassName", "nvidia");
    return hami::testing::BuiltinBackends({{"nvidia", nvidia}});
  }();
  return backends;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = hami::fuzz::AsText(data, size);
  auto review = hami::k8s::ParseAdmissionReview(text);
  if (!review) {
    const json::value answer =
        json::parse(hami::k8s::AdmissionReviewJson("", "", {false, 400, review.error().message, {}, {}}));
    FUZZ_CHECK(answer.at("response").at("allowed") == false, "an unreadable review was allowed");
    return 0;
  }
  auto parsed = hami::k8s::PodBeingCreatedFromJson(review->object);
  if (!parsed) return 0;
  hami::PodView pod = std::move(*parsed);
  const hami::PodView before = pod;
  hami::QuotaBook quotas(FuzzBackends());
  hami::ResourceQuotaView q;
  q.ns = pod.ns;
  q.name = "q";
  q.hard["limits.nvidia.com/gpumem"] = "100000";
  quotas.UpsertQuota(q);
  const hami::AdmissionVerdict verdict =
      hami::AdmitPod(pod, FuzzBackends(), quotas, hami::AdmissionOptions{"hami-scheduler", true});

  hami::k8s::AdmissionAnswer answer;
  answer.allowed = verdict.allowed();
  answer.code = verdict.code;
  answer.message = verdict.message;
  if (verdict.kind == hami::AdmissionVerdict::Kind::kAllowed) {
    json::value mutated = review->object;
    hami::k8s::WritePodChanges(before, pod, mutated);
    answer.patch = hami::k8s::JsonPatch(review->object, mutated);
    json::value patched = review->object;
    auto applied = hami::k8s::ApplyJsonPatch(patched, answer.patch);
    FUZZ_CHECK(applied.has_value(), "the patch does not apply: " + json::serialize(answer.patch));
    FUZZ_CHECK(patched == mutated, "the patch gives another pod: " + json::serialize(answer.patch));
    auto reread = hami::k8s::PodBeingCreatedFromJson(patched);
    FUZZ_CHECK(reread.has_value(), "the patched pod does not read back: " + json::serialize(patched));
    FUZZ_CHECK(reread->scheduler_name == pod.scheduler_name &&
                   reread->runtime_class_name == pod.runtime_class_name &&
                   reread->annotations == pod.annotations,
               "the patched pod's spec or annotations differ from the decision");
    for (std::size_t i = 0; i < pod.ContainerCount(); ++i) {
      const auto& want = pod.ContainerAt(i);
      const auto& got = reread->ContainerAt(i);
      FUZZ_CHECK(got.limits == want.limits && got.requests == want.requests && got.env == want.env,
                 "container " + want.name + " reads back otherwise than decided");
    }
  } else {
    FUZZ_CHECK(
        pod.scheduler_name == before.scheduler_name || verdict.kind == hami::AdmissionVerdict::Kind::kDenied,
        "a skipped pod was changed");
  }
  const json::value out =
      json::parse(hami::k8s::AdmissionReviewJson(review->api_version, review->uid, answer));
  FUZZ_CHECK(out.at("response").at("uid").as_string() == review->uid, "the answer names another review");
  FUZZ_CHECK(out.at("apiVersion").as_string() == review->api_version, "the answer is in another version");
  return 0;
}
