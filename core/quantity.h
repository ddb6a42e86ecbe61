#pragma once
// Kubernetes resource.Quantity: "1", "1.5", "100m", "16Gi", "2e3", "+5", "-1"...
// Values are kept exact (integer mantissa with decimal and binary exponents) so that the integer rules HAMi
// relies on (Go's Quantity.AsInt64: exact integers only) can be reproduced without floating point.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/result.h"

namespace hami {

// GCC/Clang extension; __extension__ keeps -Wpedantic quiet about it.
__extension__ using Uint128 = unsigned __int128;

class Quantity {
 public:
  // Parses the canonical text forms the API server accepts; the error names the text and what was expected.
  static Result<Quantity> Parse(std::string_view text);
  static Quantity FromInt(std::int64_t v);

  // The exact value as int64 if it is an integer that fits (Go's AsInt64 "ok"); nullopt otherwise.
  std::optional<std::int64_t> AsInt64() const;
  // The value rounded up to an integer (Go's Quantity.Value()), saturated to the int64 range.
  std::int64_t CeilValue() const;
  bool IsNegative() const { return negative_ && mantissa_ != 0; }
  bool IsZero() const { return mantissa_ == 0; }
  const std::string& text() const { return text_; }

 private:
  bool negative_ = false;
  Uint128 mantissa_ = 0;  // digits with the decimal point removed
  int exp10_ = 0;         // value = mantissa * 10^exp10 * 2^exp2
  int exp2_ = 0;
  std::string text_;
};

}  // namespace hami
