#include "k8s/logging.h"

#include <fmt/format.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace hami::k8s {
namespace {

bool IsControl(unsigned char c) { return c < 0x20 || c == 0x7f; }

// The length (2 or 3) of a UTF-8 line break other than LF/CR at the start of `s`, else 0.
std::size_t UnicodeBreak(std::string_view s) {
  if (s.size() >= 2 && s[0] == '\xc2' && s[1] == '\x85') return 2;  // NEL
  if (s.size() >= 3 && s[0] == '\xe2' && s[1] == '\x80' && (s[2] == '\xa8' || s[2] == '\xa9')) return 3;
  return 0;
}

bool NeedsEscape(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return IsControl(u) || u == 0xc2 || u == 0xe2;  // the lead bytes of the Unicode breaks
  });
}

}  // namespace

std::string EscapeControlChars(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (const std::size_t n = UnicodeBreak(s.substr(i)); n > 0) {
      out += n == 2 ? "\\u0085" : s[i + 2] == '\xa8' ? "\\u2028" : "\\u2029";
      i += n - 1;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (IsControl(c)) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

EscapingFormatter::EscapingFormatter(std::unique_ptr<spdlog::formatter> inner)
    : inner_(inner ? std::move(inner) : std::make_unique<spdlog::pattern_formatter>()) {}

void EscapingFormatter::format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) {
  const std::string_view payload(msg.payload.data(), msg.payload.size());
  if (!NeedsEscape(payload)) {
    inner_->format(msg, dest);
    return;
  }
  const std::string escaped = EscapeControlChars(payload);
  if (escaped.size() == msg.payload.size()) {  // only lead bytes of other characters: nothing to change
    inner_->format(msg, dest);
    return;
  }
  spdlog::details::log_msg copy = msg;
  copy.payload = spdlog::string_view_t(escaped.data(), escaped.size());
  inner_->format(copy, dest);
  // The colour sinks read the range the pattern formatter marked on the record they hold.
  msg.color_range_start = copy.color_range_start;
  msg.color_range_end = copy.color_range_end;
}

std::unique_ptr<spdlog::formatter> EscapingFormatter::clone() const {
  return std::make_unique<EscapingFormatter>(inner_->clone());
}

void InstallLogEscaping() { spdlog::set_formatter(std::make_unique<EscapingFormatter>()); }

}  // namespace hami::k8s
