#include "core/base64.h"

#include <fmt/format.h>

#include <cstdint>

namespace hami {

std::string Base64Encode(std::string_view in, Base64Alphabet alphabet) {
  const char* digits = alphabet == Base64Alphabet::kUrl
                           ? "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
                           : "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  std::uint32_t buf = 0;
  int bits = 0;
  for (unsigned char c : in) {
    buf = (buf << 8) | c;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out += digits[(buf >> bits) & 0x3f];
    }
  }
  if (bits > 0) out += digits[(buf << (6 - bits)) & 0x3f];
  if (alphabet == Base64Alphabet::kStandard) {
    while (out.size() % 4 != 0) out += '=';
  }
  return out;
}

Result<std::string> Base64Decode(std::string_view in) {
  const auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
  };
  std::string out;
  int bits = 0;
  std::uint32_t acc = 0;
  for (char c : in) {
    if (c == '=' || c == '\n' || c == '\r' || c == ' ' || c == '\t') continue;
    const int v = value(c);
    if (v < 0) {
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f)
        return Error{fmt::format("invalid base64 character 0x{:02x}", static_cast<unsigned char>(c))};
      return Error{fmt::format("invalid base64 character '{}'", c)};
    }
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return Ok(std::move(out));
}

}  // namespace hami
