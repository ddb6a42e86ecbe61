#pragma once
// RFC 6902 JSON patches: computing one (the webhook's answer) and JSON Pointer tokens (also used by the
// embedded API server, which applies them: sim/apiserver/patch).
#include <boost/json/array.hpp>
#include <boost/json/value.hpp>
#include <string>
#include <string_view>

namespace hami::k8s {

// The operations turning `from` into `to`: objects member by member, arrays element by element (a longer
// or shorter array adds or removes at its end), anything else replaced.
boost::json::array JsonPatch(const boost::json::value& from, const boost::json::value& to);
// `s` as one JSON Pointer reference token ("~" -> "~0", "/" -> "~1").
std::string JsonPointerToken(std::string_view s);

}  // namespace hami::k8s
