#pragma once
// Kubernetes object names as the API server validates them, for names that come from outside (extender
// request bodies, lock annotations) before they reach a request path, an annotation or a log line.
#include <string>
#include <string_view>

#include "core/result.h"

namespace hami {

// RFC 1123 label: at most 63 of [a-z0-9-], starting and ending alphanumeric (namespaces).
bool IsDns1123Label(std::string_view s);
// RFC 1123 subdomain as Kubernetes checks it: at most 253 characters, dot-separated parts of [a-z0-9-] that
// start and end alphanumeric (no limit per part) - pods, nodes and most other objects.
bool IsDns1123Subdomain(std::string_view s);

// A label key: a name as a label value (core/strings.h's IsLabelValue) but not empty, after an optional DNS
// subdomain prefix and '/'.
bool IsLabelKey(std::string_view s);

enum class NameKind { kNamespace, kPod, kNode };

// Ok when `value` is a valid name of that kind; otherwise an error naming `what` (e.g.
// "ExtenderBindingArgs.Node"), the value (escaped) and the rule it breaks.
Result<void> ValidateName(std::string_view what, std::string_view value, NameKind kind);

// `s` in double quotes with control characters, DEL, '"' and '\' escaped (\r, \n, \t, \xNN) and at most
// `max` bytes shown: safe to put any outside value into an error message or a log line.
std::string Quoted(std::string_view s, std::size_t max = 256);

}  // namespace hami
