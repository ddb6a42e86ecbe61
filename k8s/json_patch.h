#pragma once
// RFC 6902 JSON patches in one place: computing one (the webhook's answer) and applying one (the embedded API
// server's PATCH; the tests apply the webhook's answer as the API server would), with RFC 6901 JSON Pointers
// both ways.
#include <boost/json/array.hpp>
#include <boost/json/value.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace hami::k8s {

// The operations turning `from` into `to`: objects member by member, arrays element by element (a longer
// or shorter array adds or removes at its end), anything else replaced.
boost::json::array JsonPatch(const boost::json::value& from, const boost::json::value& to);
// `s` as one JSON Pointer reference token ("~" -> "~0", "/" -> "~1").
std::string JsonPointerToken(std::string_view s);
// RFC 6901: "/metadata/annotations/hami.io~1lock" -> {"metadata", "annotations", "hami.io/lock"}.
Result<std::vector<std::string>> ParseJsonPointer(std::string_view pointer);

// Structural equality with numbers compared by value (1 == 1.0 == 1u), as JSON patch `test` requires.
bool JsonEqual(const boost::json::value& a, const boost::json::value& b);

// Validate first (a malformed patch document: HTTP 400), then apply (a failing operation such as a `test`
// mismatch or a missing path: HTTP 422). Apply is atomic: on error `doc` is left unchanged.
Result<void> ValidateJsonPatch(const boost::json::value& ops);
Result<void> ApplyJsonPatch(boost::json::value& doc, const boost::json::value& ops);

}  // namespace hami::k8s
