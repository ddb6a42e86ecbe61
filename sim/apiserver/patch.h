#pragma once
// The three PATCH flavours kube-apiserver accepts for built-in types, applied to boost::json values:
// JSON merge patch (RFC 7386), JSON patch (RFC 6902) and Kubernetes' strategic merge patch. Pure functions.
#include <boost/json/value.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace hami::sim {

// Structural equality with numbers compared by value (1 == 1.0 == 1u), as JSON patch `test` requires.
bool JsonEqual(const boost::json::value& a, const boost::json::value& b);

// RFC 6901: "/metadata/annotations/hami.io~1lock" -> {"metadata", "annotations", "hami.io/lock"}.
Result<std::vector<std::string>> ParseJsonPointer(std::string_view pointer);
// (The other way: k8s::JsonPointerToken.)

// RFC 7386: objects merge recursively, null deletes a key, anything else (arrays too) replaces.
boost::json::value ApplyMergePatch(const boost::json::value& target, const boost::json::value& patch);

// RFC 6902. Validate first (a malformed patch document: HTTP 400), then apply (a failing operation such as a
// `test` mismatch or a missing path: HTTP 422). Apply is atomic: on error `doc` is left unchanged.
Result<void> ValidateJsonPatch(const boost::json::value& ops);
Result<void> ApplyJsonPatch(boost::json::value& doc, const boost::json::value& ops);

// application/strategic-merge-patch+json for the built-in kinds served here: maps merge; lists with a known
// patch strategy merge by their merge key (containers by name, conditions by type, ...) or as a set
// (finalizers); other lists are replaced. Directives: `$patch` (merge|replace|delete, on maps and list
// items), `$retainKeys`, `$setElementOrder/<list>` and `$deleteFromPrimitiveList/<list>`.
Result<boost::json::value> ApplyStrategicMergePatch(const boost::json::value& target,
                                                    const boost::json::value& patch);

}  // namespace hami::sim
