#pragma once
// YAML -> JSON value conversion with Kubernetes' reading of plain scalars (null, booleans, numbers).
#include <boost/json/value.hpp>
#include <cstddef>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace hami::k8s {

// Bounds on what a YAML text may expand to, checked while converting: nesting depth (a Kubernetes object
// needs a few dozen levels; an alias of its own parent, `&a [*a]`, is endless), and the expanded size
// (scalar bytes plus one per node) at most kYamlExpansionFactor times the text plus kYamlExpansionSlack
// (an alias bomb, "billion laughs", grows exponentially).
inline constexpr int kYamlMaxDepth = 128;
inline constexpr std::size_t kYamlExpansionFactor = 4;
inline constexpr std::size_t kYamlExpansionSlack = std::size_t{1} << 20;

// Every document of a YAML stream as a JSON value. Quoted scalars stay strings. Beyond the bounds above,
// an error that names the limit.
Result<std::vector<boost::json::value>> YamlToJson(std::string_view text, std::string_view source);

}  // namespace hami::k8s
