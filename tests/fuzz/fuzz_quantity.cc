// Kubernetes Quantity (resource limits and allocatable): an accepted text parses again to the same value,
// its integer value written back in decimal is read as the same integer, and rounding is consistent.
#include <limits>

#include "core/quantity.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = hami::fuzz::AsText(data, size);
  auto q = hami::Quantity::Parse(text);
  if (!q) {
    FUZZ_CHECK(!q.error().message.empty(), "an error without a message");
    return 0;
  }
  auto again = hami::Quantity::Parse(q->text());
  FUZZ_CHECK(again.has_value(), "its own text does not parse");
  FUZZ_CHECK(again->AsInt64() == q->AsInt64() && again->CeilValue() == q->CeilValue(), "reparse differs");
  const std::int64_t ceil = q->CeilValue();
  if (q->IsZero()) FUZZ_CHECK(ceil == 0 && q->AsInt64() == 0 && !q->IsNegative(), "zero is not zero");
  if (q->IsNegative()) FUZZ_CHECK(ceil <= 0, "a negative quantity rounds up above zero");
  if (!q->IsNegative() && !q->IsZero()) FUZZ_CHECK(ceil >= 1, "a positive quantity rounds up to below one");
  if (auto exact = q->AsInt64()) {
    FUZZ_CHECK(ceil == *exact, "an exact integer rounds up to another one");
    auto decimal = hami::Quantity::Parse(std::to_string(*exact));
    FUZZ_CHECK(decimal.has_value() && decimal->AsInt64() == exact, "its decimal form is another value");
    FUZZ_CHECK(hami::Quantity::FromInt(*exact).AsInt64() == exact, "FromInt differs");
  } else if (ceil != std::numeric_limits<std::int64_t>::max() &&
             ceil != std::numeric_limits<std::int64_t>::min()) {
    FUZZ_CHECK(hami::Quantity::FromInt(ceil).CeilValue() == ceil, "FromInt(ceil) rounds differently");
  }
  return 0;
}
