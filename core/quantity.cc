#include "core/quantity.h"

#include <fmt/format.h>

#include <limits>

namespace hami {
namespace {

using u128 = Uint128;
constexpr u128 kMaxMantissa = (static_cast<u128>(1) << 120);

bool MulOverflows(u128 a, u128 b, u128& out) {
  if (a != 0 && b > (~static_cast<u128>(0)) / a) return true;
  out = a * b;
  return false;
}

Error BadQuantity(std::string_view text, std::string_view why) {
  return Error{
      fmt::format("quantity '{}' is invalid: {} (expected a number with an optional suffix such as "
                  "1, 1.5, 500m, 16Gi or 2e3)",
                  text, why)};
}

}  // namespace

Quantity Quantity::FromInt(std::int64_t v) {
  Quantity q;
  q.negative_ = v < 0;
  q.mantissa_ = v < 0 ? static_cast<u128>(-(v + 1)) + 1 : static_cast<u128>(v);
  q.text_ = std::to_string(v);
  return q;
}

Result<Quantity> Quantity::Parse(std::string_view text) {
  Quantity q;
  q.text_ = std::string(text);
  std::string_view s = text;
  if (s.empty()) return BadQuantity(text, "empty");
  if (s.front() == '+' || s.front() == '-') {
    q.negative_ = s.front() == '-';
    s.remove_prefix(1);
  }
  int digits = 0;
  bool seen_point = false;
  std::size_t i = 0;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '.') {
      if (seen_point) return BadQuantity(text, "more than one decimal point");
      seen_point = true;
      continue;
    }
    if (c < '0' || c > '9') break;
    ++digits;
    if (q.mantissa_ > kMaxMantissa / 10) return BadQuantity(text, "too many digits");
    q.mantissa_ = q.mantissa_ * 10 + static_cast<unsigned>(c - '0');
    if (seen_point) --q.exp10_;
  }
  if (digits == 0) return BadQuantity(text, "no digits");
  const std::string_view suffix = s.substr(i);
  if (suffix.empty()) {
  } else if (suffix == "n") {
    q.exp10_ -= 9;
  } else if (suffix == "u") {
    q.exp10_ -= 6;
  } else if (suffix == "m") {
    q.exp10_ -= 3;
  } else if (suffix == "k") {
    q.exp10_ += 3;
  } else if (suffix == "M") {
    q.exp10_ += 6;
  } else if (suffix == "G") {
    q.exp10_ += 9;
  } else if (suffix == "T") {
    q.exp10_ += 12;
  } else if (suffix == "P") {
    q.exp10_ += 15;
  } else if (suffix == "E") {
    q.exp10_ += 18;
  } else if (suffix == "Ki") {
    q.exp2_ = 10;
  } else if (suffix == "Mi") {
    q.exp2_ = 20;
  } else if (suffix == "Gi") {
    q.exp2_ = 30;
  } else if (suffix == "Ti") {
    q.exp2_ = 40;
  } else if (suffix == "Pi") {
    q.exp2_ = 50;
  } else if (suffix == "Ei") {
    q.exp2_ = 60;
  } else if (suffix[0] == 'e' || suffix[0] == 'E') {
    std::string_view e = suffix.substr(1);
    bool neg = false;
    if (!e.empty() && (e[0] == '+' || e[0] == '-')) {
      neg = e[0] == '-';
      e.remove_prefix(1);
    }
    if (e.empty() || e.size() > 4) return BadQuantity(text, fmt::format("bad exponent '{}'", suffix));
    int v = 0;
    for (char c : e) {
      if (c < '0' || c > '9') return BadQuantity(text, fmt::format("bad exponent '{}'", suffix));
      v = v * 10 + (c - '0');
    }
    q.exp10_ += neg ? -v : v;
  } else {
    return BadQuantity(text, fmt::format("unknown suffix '{}'", suffix));
  }
  return q;
}

std::optional<std::int64_t> Quantity::AsInt64() const {
  u128 m = mantissa_;
  int e10 = exp10_;
  // Apply the binary exponent first: it only multiplies.
  for (int k = 0; k < exp2_; ++k) {
    if (m > (~static_cast<u128>(0)) / 2) return std::nullopt;
    m *= 2;
  }
  while (e10 < 0) {
    if (m % 10 != 0) return std::nullopt;  // a fraction: not an integer
    m /= 10;
    ++e10;
  }
  while (e10 > 0) {
    if (m == 0) break;
    if (MulOverflows(m, 10, m)) return std::nullopt;
    --e10;
  }
  const u128 limit = negative_ ? static_cast<u128>(std::numeric_limits<std::int64_t>::max()) + 1
                               : static_cast<u128>(std::numeric_limits<std::int64_t>::max());
  if (m > limit) return std::nullopt;
  if (negative_) return m == limit ? std::numeric_limits<std::int64_t>::min() : -static_cast<std::int64_t>(m);
  return static_cast<std::int64_t>(m);
}

std::int64_t Quantity::CeilValue() const {
  u128 m = mantissa_;
  int e10 = exp10_;
  constexpr auto kMax = std::numeric_limits<std::int64_t>::max();
  constexpr u128 kHalf = (~static_cast<u128>(0)) / 2;
  bool fraction = false;
  // Every doubling is applied (stopping at int64's range lost the rest: "92372.000Ti" was 2^k too small).
  // A fraction's trailing zeros go first, exactly; a decimal digit is dropped only when 128 bits run out.
  while (e10 < 0 && m != 0 && m % 10 == 0) {
    m /= 10;
    ++e10;
  }
  for (int k = 0; k < exp2_; ++k) {
    while (m > kHalf && e10 < 0) {
      if (m % 10 != 0) fraction = true;
      m /= 10;
      ++e10;
    }
    if (m > kHalf) return negative_ ? std::numeric_limits<std::int64_t>::min() : kMax;
    m *= 2;
  }
  while (e10 < 0) {
    if (m % 10 != 0) fraction = true;
    m /= 10;
    ++e10;
  }
  while (e10 > 0 && m != 0 && m <= static_cast<u128>(kMax)) {
    m *= 10;
    --e10;
  }
  if (m > static_cast<u128>(kMax)) return negative_ ? std::numeric_limits<std::int64_t>::min() : kMax;
  auto v = static_cast<std::int64_t>(m);
  if (negative_) return -v;  // ceil of a negative value truncates toward zero
  // Saturated like every other value past the range ("9223372036854775807.5" rounds up beyond it).
  if (fraction) return v == kMax ? kMax : v + 1;
  return v;
}

}  // namespace hami
