#pragma once
// The admission webhook's wire (admission.k8s.io v1 and v1beta1): the
// AdmissionReview in and out, and writing a pod's admission changes back onto the object the API server sent
// (k8s/json_patch turns that into the answer's patch).
#include <boost/json/array.hpp>
#include <boost/json/value.hpp>
#include <string>
#include <vector>
#include <string_view>

#include "core/model.h"
#include "core/result.h"

namespace hami::k8s {

struct AdmissionRequest {
  std::string api_version;  // admission.k8s.io/v1 or admission.k8s.io/v1beta1: the answer uses the same
  std::string uid;
  std::string operation;  // CREATE, UPDATE...
  std::string kind;       // request.kind.kind: Pod
  std::string ns;         // request.namespace
  std::string name;       // request.name ("" while the pod has only a generateName)
  boost::json::value object;
};

// Errors name the field and what was expected.
Result<AdmissionRequest> ParseAdmissionReview(std::string_view body);

struct AdmissionAnswer {
  bool allowed = true;
  int code = 200;            // status.code when not allowed (or when a message is given)
  std::string message;       // status.message ("" = no status)
  boost::json::array patch;  // RFC 6902 operations; empty = none
  std::vector<std::string> warnings;  // shown to the client that created the pod (kubectl prints them)
};
// The AdmissionReview answering request `uid`, in `api_version` ("" = admission.k8s.io/v1).
std::string AdmissionReviewJson(std::string_view api_version, std::string_view uid,
                                const AdmissionAnswer& answer);

// Writes onto `object` (the pod as sent) what admission changed between `before` and `after` (views of it):
// schedulerName, runtimeClassName, annotations, and each container's limits, requests and env. An env var
// whose value changed is replaced as a whole ({name, value}, dropping a valueFrom); a new one is appended (a
// fieldRef when it reads a pod field). The volumes, init containers and volume mounts admission added
// (PodView::added_*, ContainerView::added_mounts) are appended after the pod's own.
void WritePodChanges(const PodView& before, const PodView& after, boost::json::value& object);

}  // namespace hami::k8s
