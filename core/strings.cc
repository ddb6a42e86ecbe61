#include "core/strings.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <limits>

namespace hami {

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t pos = s.find(sep, start);
    if (pos == std::string_view::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, pos - start));
    start = pos + 1;
  }
}

std::string_view Trim(std::string_view s) {
  const auto is_space = [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
  };
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::string ToLower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

std::string ToUpper(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::toupper(c); });
  return out;
}

bool ContainsIgnoreCase(std::string_view haystack, std::string_view needle) {
  if (needle.empty()) return true;
  return ToLower(haystack).find(ToLower(needle)) != std::string::npos;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(),
                    [](unsigned char x, unsigned char y) { return std::tolower(x) == std::tolower(y); });
}

Result<std::int64_t> ParseInt64(std::string_view input, std::string_view field) {
  std::string_view digits = input;
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
  std::int64_t v = 0;
  const char* end = digits.data() + digits.size();
  const auto [ptr, ec] = std::from_chars(digits.data(), end, v);
  if (digits.empty() || ec == std::errc::invalid_argument || ptr != end) {
    return Error{fmt::format("{} '{}' is not an integer", field, input)};
  }
  if (ec == std::errc::result_out_of_range) {
    return Error{fmt::format("{} '{}' is out of range for a 64-bit integer", field, input)};
  }
  return v;
}

Result<std::int64_t> ParseIntInRange(std::string_view input, std::string_view field, std::int64_t lo,
                                     std::int64_t hi) {
  auto v = ParseInt64(input, field);
  if (!v) return v;
  if (*v < lo || *v > hi) {
    return Error{fmt::format("{} '{}' is out of range [{}, {}]", field, input, lo, hi)};
  }
  return v;
}

Result<bool> ParseGoBool(std::string_view input, std::string_view field) {
  if (input == "1" || input == "t" || input == "T" || input == "TRUE" || input == "true" || input == "True")
    return true;
  if (input == "0" || input == "f" || input == "F" || input == "FALSE" || input == "false" ||
      input == "False")
    return false;
  return Error{fmt::format("{} '{}' is not a boolean (want true or false)", field, input)};
}

std::string Join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

std::string FoldName(std::string_view s) {
  std::string out;
  for (char c : ToLower(s)) {
    if (c != '_' && c != '-') out += c;
  }
  return out;
}

std::size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

bool LooksLikeName(std::string_view typed, std::string_view known) {
  const std::string a = FoldName(typed);
  const std::string b = FoldName(known);
  if (a == b) return true;
  return b.size() >= 4 && EditDistance(a, b) <= (b.size() >= 8 ? 2u : 1u);
}

bool IsLabelValue(std::string_view s) {
  const auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  if (s.empty()) return true;
  if (s.size() > 63 || !alnum(s.front()) || !alnum(s.back())) return false;
  return std::all_of(s.begin(), s.end(),
                     [&](char c) { return alnum(c) || c == '-' || c == '_' || c == '.'; });
}

std::string ExceptionMessage(const std::exception_ptr& e) {
  if (!e) return "";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "a non-standard exception";
  }
}

}  // namespace hami
