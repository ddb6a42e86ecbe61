#pragma once
// YAML -> JSON value conversion with Kubernetes' reading of plain scalars (null, booleans, numbers).
#include <boost/json/value.hpp>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace hami::k8s {

// Every document of a YAML stream as a JSON value. Quoted scalars stay strings.
Result<std::vector<boost::json::value>> YamlToJson(std::string_view text, std::string_view source);

}  // namespace hami::k8s
