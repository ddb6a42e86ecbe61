#pragma once
// Request bodies in Kubernetes' protobuf encoding (application/vnd.kubernetes.protobuf), which kubectl's
// typed clients send for a few imperative commands (`kubectl create namespace`, `kubectl create quota`). Only
// the kinds those commands create are understood; answers are always JSON (kubectl also accepts it). Pure.
#include <boost/json/object.hpp>
#include <string_view>

#include "core/result.h"

namespace hami::sim {

// Decodes the "k8s\0" envelope (runtime.Unknown) and its Namespace or ResourceQuota into the JSON the API
// would have received. Errors name what is wrong (not protobuf, a kind that is not supported, a malformed
// field).
Result<boost::json::object> DecodeKubernetesProtobuf(std::string_view body);

}  // namespace hami::sim
