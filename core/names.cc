#include "core/names.h"

#include <fmt/format.h>

#include "core/strings.h"

namespace hami {
namespace {

bool LowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// One dot-separated part: Kubernetes' subdomain rule limits the whole name (253), not each part.
bool IsPartOfSubdomain(std::string_view s) {
  if (s.empty() || !LowerAlnum(s.front()) || !LowerAlnum(s.back())) return false;
  for (char c : s) {
    if (!LowerAlnum(c) && c != '-') return false;
  }
  return true;
}

}  // namespace

bool IsDns1123Label(std::string_view s) { return s.size() <= 63 && IsPartOfSubdomain(s); }

bool IsDns1123Subdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  for (std::size_t start = 0;;) {
    const std::size_t dot = s.find('.', start);
    if (!IsPartOfSubdomain(s.substr(start, dot == std::string_view::npos ? dot : dot - start))) return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

bool IsLabelKey(std::string_view s) {
  const std::size_t slash = s.find('/');
  if (slash != std::string_view::npos && !IsDns1123Subdomain(s.substr(0, slash))) return false;
  const std::string_view name = slash == std::string_view::npos ? s : s.substr(slash + 1);
  return !name.empty() && IsLabelValue(name);
}

Result<void> ValidateName(std::string_view what, std::string_view value, NameKind kind) {
  const bool label = kind == NameKind::kNamespace;
  if (label ? IsDns1123Label(value) : IsDns1123Subdomain(value)) return {};
  const std::string_view object = kind == NameKind::kNamespace ? "namespace"
                                  : kind == NameKind::kPod     ? "pod"
                                                               : "node";
  return Error{fmt::format(
      "{}: {} is not a valid {} name: want a lowercase RFC 1123 {} (at most {} characters of a-z, 0-9, "
      "'-'{}, starting and ending with a letter or digit)",
      what, Quoted(value), object, label ? "label" : "subdomain", label ? 63 : 253, label ? "" : " and '.'")};
}

namespace {

// Length of the well-formed UTF-8 sequence at s[i] (as JSON parsers accept it: no overlong forms, no
// surrogates, nothing past U+10FFFF), or 0 when the bytes there are not one.
std::size_t Utf8SequenceAt(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // allowed range of the second byte
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (i + n > s.size() || b(1) < lo || b(1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k) {
    if ((b(k) & 0xc0) != 0x80) return 0;
  }
  return n;
}

}  // namespace

std::string Quoted(std::string_view s, std::size_t max) {
  std::string out = "\"";
  std::size_t shown = std::min(s.size(), max);
  for (std::size_t i = 0; i < shown; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      // Whole characters only, so that the text stays valid UTF-8 wherever it goes (a JSON answer): a
      // character the cut would split is left out, a byte that is not part of one is escaped.
      if (const std::size_t n = Utf8SequenceAt(s, i); n > 0) {
        if (i + n > shown) {
          shown = i;
          break;
        }
        out.append(s.substr(i, n));
        i += n - 1;
      } else {
        out += fmt::format("\\x{:02x}", c);
      }
      continue;
    }
    switch (c) {
      case '\r':
        out += "\\r";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += fmt::format("\\x{:02x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
  if (shown < s.size()) out += fmt::format(" (and {} more bytes)", s.size() - shown);
  return out;
}

}  // namespace hami
