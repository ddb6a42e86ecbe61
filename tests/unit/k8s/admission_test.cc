// The admission webhook's wire: AdmissionReview in and out (v1 and v1beta1), RFC 6902 patches, and the pod's
// changes written back onto the object as sent.
#include "k8s/admission.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "core/base64.h"
#include "k8s/json_patch.h"
#include "k8s/objects.h"

namespace hami::k8s {
namespace {

namespace json = boost::json;

std::string Review(std::string_view version, std::string_view object) {
  return fmt::format(R"({{"apiVersion":"{}","kind":"AdmissionReview","request":{{"uid":"u-1",
    "kind":{{"group":"","version":"v1","kind":"Pod"}},"namespace":"team","operation":"CREATE",
    "object":{}}}}})",
                     version, object);
}

TEST(AdmissionWire, ReadsV1AndV1beta1Reviews) {
  for (std::string_view version : {"admission.k8s.io/v1", "admission.k8s.io/v1beta1"}) {
    auto r = ParseAdmissionReview(Review(version, R"({"metadata":{"generateName":"job-"}})"));
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->api_version, version);
    EXPECT_EQ(r->uid, "u-1");
    EXPECT_EQ(r->operation, "CREATE");
    EXPECT_EQ(r->kind, "Pod");
    EXPECT_EQ(r->ns, "team");
    EXPECT_TRUE(r->object.is_object());
  }
}

TEST(AdmissionWire, UnreadableReviewsNameWhatIsWrong) {
  const std::pair<std::string, std::string> cases[] = {
      {"not json", "AdmissionReview: the body is not JSON"},
      {"[]", "AdmissionReview: (document): expected a JSON object"},
      {R"({"apiVersion":"admission.k8s.io/v2","kind":"AdmissionReview","request":{}})",
       R"(AdmissionReview: apiVersion: expected admission.k8s.io/v1 or admission.k8s.io/v1beta1, got "admission.k8s.io/v2")"},
      {R"({"apiVersion":"admission.k8s.io/v1","kind":"Pod"})",
       R"(AdmissionReview: kind: expected AdmissionReview, got "Pod")"},
      {R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"})",
       "AdmissionReview: request: expected an object"},
      {R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":""}})",
       "AdmissionReview: request.uid: missing"},
      {R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":7}})",
       "AdmissionReview: request.uid: expected a string, got 7"},
  };
  for (const auto& [body, want] : cases) {
    auto r = ParseAdmissionReview(body);
    ASSERT_FALSE(r) << body;
    EXPECT_EQ(r.error().message.substr(0, want.size()), want) << body;
  }
}

TEST(AdmissionWire, AnswersInTheReviewsVersionWithAPatchOnlyWhenThereAreOperations) {
  AdmissionAnswer allow;
  json::value plain = json::parse(AdmissionReviewJson("admission.k8s.io/v1beta1", "u-1", allow));
  EXPECT_EQ(plain, json::parse(R"({"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview",
                                   "response":{"uid":"u-1","allowed":true}})"));
  AdmissionAnswer patched;
  patched.patch.push_back(json::parse(R"({"op":"add","path":"/a","value":1})"));
  json::value p = json::parse(AdmissionReviewJson("admission.k8s.io/v1", "u-2", patched));
  EXPECT_EQ(p.at("response").at("patchType"), "JSONPatch");
  EXPECT_EQ(Base64Decode(p.at("response").at("patch").as_string()).value(),
            R"([{"op":"add","path":"/a","value":1}])");
  AdmissionAnswer denied;
  denied.allowed = false;
  denied.code = 403;
  denied.message = "container app is privileged";
  json::value d = json::parse(AdmissionReviewJson("", "u-3", denied));
  EXPECT_EQ(d, json::parse(R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",
      "response":{"uid":"u-3","allowed":false,"status":{"code":403,"status":"Failure","reason":"Forbidden",
      "message":"container app is privileged"}}})"));
}

TEST(AdmissionWire, PatchPathsEscapeSlashesAndTildes) {
  EXPECT_EQ(JsonPointerToken("nvidia.com/gpumem"), "nvidia.com~1gpumem");
  EXPECT_EQ(JsonPointerToken("a~b/c"), "a~0b~1c");
  json::value from = json::parse(R"({"limits":{"cpu":"1"}})");
  json::value to = json::parse(R"({"limits":{"cpu":"1","nvidia.com/gpu":"1"}})");
  EXPECT_EQ(JsonPatch(from, to),
            json::parse(R"([{"op":"add","path":"/limits/nvidia.com~1gpu","value":"1"}])").as_array());
}

TEST(AdmissionWire, PatchesTurnAnyDocumentIntoAnyOther) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"a":1,"b":[1,2,3],"c":{"d":"x"}})", R"({"a":2,"b":[1,5],"c":{"e":"y"},"f":null})"},
      {R"({"list":[]})", R"({"list":[{"n":1},{"n":2}]})"},
      {R"({"list":[{"n":1},{"n":2},{"n":3}]})", R"({"list":[]})"},
      {R"({"x":{"y":1}})", R"({"x":[1]})"},
      {R"([1,2])", R"({"k":"v"})"},
      {R"({"same":true})", R"({"same":true})"},
      {R"({"limits":{"nvidia.com/gpu":"1","a~b":1}})",
       R"({"limits":{"nvidia.com/gpumem":"2","a~b":2,"~/":[]}})"},
  };
  for (const auto& [a, b] : cases) {
    json::value from = json::parse(a);
    json::value to = json::parse(b);
    json::array ops = JsonPatch(from, to);
    json::value patched = from;
    auto applied = ApplyJsonPatch(patched, ops);  // as the API server applies it
    ASSERT_TRUE(applied) << applied.error().message;
    EXPECT_EQ(patched, to) << a << " -> " << b << ": " << json::serialize(ops);
  }
  EXPECT_TRUE(JsonPatch(json::parse(R"({"same":true})"), json::parse(R"({"same":true})")).empty());
}

TEST(AdmissionWire, PodChangesAreWrittenOntoTheObjectAsSent) {
  json::value object = json::parse(R"({"metadata":{"name":"p","labels":{"l":"1"}},
    "spec":{"initContainers":[{"name":"init","image":"busybox"}],
            "containers":[{"name":"app","image":"cuda","env":[{"name":"KEEP","value":"1"},
              {"name":"CUDA_TASK_PRIORITY","valueFrom":{"fieldRef":{"fieldPath":"metadata.name"}}}],
              "resources":{"limits":{"nvidia.com/gpumem":"3000"},"requests":{"cpu":"1"}}}]}})");
  PodView before = PodFromJson(object).value();
  PodView after = before;
  after.scheduler_name = "hami-scheduler";
  after.runtime_class_name = "nvidia";
  after.annotations["mthreads.com/request-gpu-num"] = "2";
  after.containers[0].limits["nvidia.com/gpu"] = "1";
  after.containers[0].env[1] = EnvVar{"CUDA_TASK_PRIORITY", "5"};  // a literal now
  after.containers[0].env.push_back(EnvVar{"GPU_CORE_UTILIZATION_POLICY", "force"});
  after.init_containers[0].env.push_back(EnvVar{"GPU_CORE_UTILIZATION_POLICY", "force"});
  json::value mutated = object;
  WritePodChanges(before, after, mutated);
  EXPECT_EQ(mutated, json::parse(R"({"metadata":{"name":"p","labels":{"l":"1"},
      "annotations":{"mthreads.com/request-gpu-num":"2"}},
    "spec":{"initContainers":[{"name":"init","image":"busybox",
              "env":[{"name":"GPU_CORE_UTILIZATION_POLICY","value":"force"}]}],
            "containers":[{"name":"app","image":"cuda","env":[{"name":"KEEP","value":"1"},
              {"name":"CUDA_TASK_PRIORITY","value":"5"},{"name":"GPU_CORE_UTILIZATION_POLICY","value":"force"}],
              "resources":{"limits":{"nvidia.com/gpumem":"3000","nvidia.com/gpu":"1"},"requests":{"cpu":"1"}}}],
            "schedulerName":"hami-scheduler","runtimeClassName":"nvidia"}})"));
  // Read back, the object says what the view said.
  PodView reread = PodFromJson(mutated).value();
  EXPECT_EQ(reread.containers[0].limits, after.containers[0].limits);
  EXPECT_EQ(reread.containers[0].env, after.containers[0].env);
  EXPECT_EQ(reread.scheduler_name, "hami-scheduler");
}

// The kubelet applies the last of two entries with one name: the views keep both, and so does the object.
TEST(AdmissionWire, EnvEntriesAreWrittenBackByPosition) {
  json::value object = json::parse(R"({"metadata":{"name":"p"},"spec":{"containers":[{"name":"app","env":[
      {"name":"NVIDIA_VISIBLE_DEVICES","value":"all"},{"name":"NVIDIA_VISIBLE_DEVICES","value":"all"}]}]}})");
  PodView before = PodFromJson(object).value();
  PodView after = before;
  after.containers[0].env[1].value = "none";
  json::value mutated = object;
  WritePodChanges(before, after, mutated);
  EXPECT_EQ(PodFromJson(mutated).value().containers[0].env, after.containers[0].env);
  EXPECT_EQ(
      JsonPatch(object, mutated),
      json::parse(R"([{"op":"replace","path":"/spec/containers/0/env/1/value","value":"none"}])").as_array());
}

TEST(AdmissionWire, AContainerWithoutResourcesGetsThem) {
  json::value object = json::parse(R"({"metadata":{"name":"p"},"spec":{"containers":[{"name":"app"}]}})");
  PodView before = PodFromJson(object).value();
  PodView after = before;
  after.containers[0].limits["nvidia.com/gpucores"] = "100";
  json::value mutated = object;
  WritePodChanges(before, after, mutated);
  EXPECT_EQ(JsonPatch(object, mutated), json::parse(R"([{"op":"add","path":"/spec/containers/0/resources",
                             "value":{"limits":{"nvidia.com/gpucores":"100"}}}])")
                                            .as_array());
}

TEST(AdmissionWire, APodBeingCreatedNeedsNoName) {
  json::value object =
      json::parse(R"({"metadata":{"generateName":"job-"},"spec":{"containers":[{"name":"a"}]}})");
  EXPECT_FALSE(PodFromJson(object));
  auto pod = PodBeingCreatedFromJson(object);
  ASSERT_TRUE(pod) << pod.error().message;
  EXPECT_EQ(pod->name, "");
}

// What admission appends (remote GPUs' library delivery) lands after the pod's own entries, and an env var
// read through the downward API is written as a fieldRef.
TEST(AdmissionWire, AppendedVolumesInitContainersMountsAndFieldRefs) {
  json::value object = json::parse(R"({"metadata":{"name":"p"},"spec":{
      "initContainers":[{"name":"setup"}],
      "containers":[{"name":"app","volumeMounts":[{"name":"data","mountPath":"/data"}],
                     "env":[{"name":"FROM","valueFrom":{"secretKeyRef":{"name":"s","key":"k"}}}]}],
      "volumes":[{"name":"data","emptyDir":{}}]}})");
  PodView before = PodFromJson(object).value();
  EXPECT_EQ(before.volumes, std::vector<std::string>{"data"});
  EXPECT_EQ(before.containers[0].volume_mounts, std::vector<std::string>{"data"});
  ASSERT_EQ(before.containers[0].env.size(), 1u);
  EXPECT_TRUE(before.containers[0].env[0].other_source);
  PodView after = before;
  after.containers[0].env.push_back(EnvVar{"ID", "", "metadata.uid"});
  after.containers[0].added_mounts.push_back(VolumeMount{"lib", "/lib-here"});
  after.added_empty_dirs.push_back("lib");
  after.added_init_containers.push_back(
      AddedContainer{"lib", "img:1", {"sh", "-c", "cp a b"}, {{"lib", "/lib-here"}}});
  json::value mutated = object;
  WritePodChanges(before, after, mutated);
  EXPECT_EQ(mutated, json::parse(R"({"metadata":{"name":"p"},"spec":{
      "initContainers":[{"name":"setup"},
        {"name":"lib","image":"img:1","command":["sh","-c","cp a b"],
         "volumeMounts":[{"name":"lib","mountPath":"/lib-here"}]}],
      "containers":[{"name":"app","volumeMounts":[{"name":"data","mountPath":"/data"},
                       {"name":"lib","mountPath":"/lib-here"}],
                     "env":[{"name":"FROM","valueFrom":{"secretKeyRef":{"name":"s","key":"k"}}},
                            {"name":"ID",
                             "valueFrom":{"fieldRef":{"apiVersion":"v1","fieldPath":"metadata.uid"}}}]}],
      "volumes":[{"name":"data","emptyDir":{}},{"name":"lib","emptyDir":{}}]}})"));
  // Read back, the downward API entry is what the view said.
  const PodView reread = PodFromJson(mutated).value();
  EXPECT_EQ(reread.containers[0].env[1].field_path, "metadata.uid");
  EXPECT_EQ(reread.init_containers.size(), 2u);
}

}  // namespace
}  // namespace hami::k8s
