#pragma once
// What a fuzz target does when a property fails: print it with the input's rendering and abort, which
// libFuzzer reports as a crash and saves the input (crash-<sha1>).
#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace hami::fuzz {

[[noreturn]] inline void Violated(const char* what, std::string_view detail) {
  fmt::print(stderr, "\nproperty violated: {}\n{}\n", what, detail);
  std::abort();
}

// Well-formed UTF-8 (what every string that comes through the Kubernetes API is).
inline bool IsUtf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
                                      : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    std::uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (std::size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    const bool overlong = (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000);
    if (overlong || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

inline std::string_view AsText(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace hami::fuzz

#define FUZZ_CHECK(cond, detail)                              \
  do {                                                        \
    if (!(cond)) ::hami::fuzz::Violated(#cond, (detail));     \
  } while (0)
