#pragma once
// The PATCH flavours kube-apiserver accepts for built-in types besides JSON patch (RFC 6902, which is
// k8s/json_patch's), applied to boost::json values: JSON merge patch (RFC 7386) and Kubernetes' strategic
// merge patch. Pure functions.
#include <boost/json/value.hpp>

#include "core/result.h"

namespace hami::sim {

// RFC 7386: objects merge recursively, null deletes a key, anything else (arrays too) replaces.
boost::json::value ApplyMergePatch(const boost::json::value& target, const boost::json::value& patch);

// application/strategic-merge-patch+json for the built-in kinds served here: maps merge; lists with a known
// patch strategy merge by their merge key (containers by name, conditions by type, ...) or as a set
// (finalizers); other lists are replaced. Directives: `$patch` (merge|replace|delete, on maps and list
// items), `$retainKeys`, `$setElementOrder/<list>` and `$deleteFromPrimitiveList/<list>`.
Result<boost::json::value> ApplyStrategicMergePatch(const boost::json::value& target,
                                                    const boost::json::value& patch);

}  // namespace hami::sim
