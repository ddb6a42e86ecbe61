#pragma once
// Base64 (RFC 4648), the one implementation: kubeconfig certificate data, the embedded API server's
// kubeconfig and its list continue tokens.
#include <string>
#include <string_view>

#include "core/result.h"

namespace hami {

enum class Base64Alphabet {
  kStandard,  // + and /, padded with '='
  kUrl,       // - and _, unpadded (continue tokens)
};

std::string Base64Encode(std::string_view in, Base64Alphabet alphabet = Base64Alphabet::kStandard);
// Either alphabet; '=' padding and whitespace (line breaks in kubeconfig data) are skipped. An error names
// the first character that is not base64.
Result<std::string> Base64Decode(std::string_view in);

}  // namespace hami
