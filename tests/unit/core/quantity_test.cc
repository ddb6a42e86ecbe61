#include "core/quantity.h"

#include <gtest/gtest.h>

namespace hami {
namespace {

std::optional<std::int64_t> Int(std::string_view s) { return Quantity::Parse(s).value().AsInt64(); }

TEST(Quantity, IntegersAndSuffixes) {
  EXPECT_EQ(Int("1"), 1);
  EXPECT_EQ(Int("+5"), 5);
  EXPECT_EQ(Int("-1"), -1);
  EXPECT_EQ(Int("3000"), 3000);
  EXPECT_EQ(Int("1k"), 1000);
  EXPECT_EQ(Int("2M"), 2000000);
  EXPECT_EQ(Int("1G"), 1000000000);
  EXPECT_EQ(Int("1T"), 1000000000000);
  EXPECT_EQ(Int("1P"), 1000000000000000);
  EXPECT_EQ(Int("1E"), 1000000000000000000);
  EXPECT_EQ(Int("1Ki"), 1024);
  EXPECT_EQ(Int("16Gi"), 17179869184);
  EXPECT_EQ(Int("1Ti"), 1099511627776);
  EXPECT_EQ(Int("1Pi"), 1125899906842624);
  EXPECT_EQ(Int("1Ei"), 1152921504606846976);
  EXPECT_EQ(Int("2e3"), 2000);
  EXPECT_EQ(Int("2E3"), 2000);
  EXPECT_EQ(Int("1.5k"), 1500);
  EXPECT_EQ(Int("1000m"), 1);
  EXPECT_EQ(Int("12e-1"), std::nullopt);
  EXPECT_EQ(Int("120e-1"), 12);
}

TEST(Quantity, FractionsAreNotIntegers) {
  EXPECT_EQ(Int("1.5"), std::nullopt);
  EXPECT_EQ(Int("100m"), std::nullopt);
  EXPECT_EQ(Int("1.1Ki"), std::nullopt);
  EXPECT_EQ(Int("16.5Gi"), 17716740096);  // fractional digits, integral value
  EXPECT_EQ(Int("16.0Gi"), 17179869184);  // exact even with a decimal point
  EXPECT_EQ(Int("1n"), std::nullopt);
  EXPECT_EQ(Int("1u"), std::nullopt);
}

TEST(Quantity, OverflowIsNotAnInt64) {
  EXPECT_EQ(Int("9223372036854775807"), 9223372036854775807);
  EXPECT_EQ(Int("9223372036854775808"), std::nullopt);
  EXPECT_EQ(Int("-9223372036854775808"), std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(Int("10Ei"), std::nullopt);
  EXPECT_EQ(Int("4294967296"), 4294967296);
}

TEST(Quantity, CeilValueRoundsUp) {
  EXPECT_EQ(Quantity::Parse("100m").value().CeilValue(), 1);
  EXPECT_EQ(Quantity::Parse("1.5").value().CeilValue(), 2);
  EXPECT_EQ(Quantity::Parse("8").value().CeilValue(), 8);
  EXPECT_EQ(Quantity::Parse("0").value().CeilValue(), 0);
  EXPECT_EQ(Quantity::Parse("2Ki").value().CeilValue(), 2048);
}

TEST(Quantity, CeilValueAppliesTheWholeBinaryExponent) {
  // Found by tests/fuzz/fuzz_quantity: mantissa * 2^k passed int64's range before the decimal point applied.
  EXPECT_EQ(Quantity::Parse("92372.000Ti").value().CeilValue(), std::int64_t{92372} << 40);
  EXPECT_EQ(Quantity::Parse("1.5000000000Ti").value().CeilValue(), std::int64_t{3} << 39);
  EXPECT_EQ(Quantity::Parse("3.00000000000000000001Ei").value().CeilValue(), (std::int64_t{3} << 60) + 1);
  EXPECT_EQ(Quantity::Parse("-1.5000000000Ti").value().CeilValue(), -(std::int64_t{3} << 39));
  EXPECT_EQ(Quantity::Parse("9000000000000000000.0Ei").value().CeilValue(), INT64_MAX);
  // Found by the fuzzer on a cold run: int64's maximum with a fraction rounded up past it (signed overflow).
  EXPECT_EQ(Quantity::Parse("9223372036854775807.6337209223372").value().CeilValue(), INT64_MAX);
  EXPECT_EQ(Quantity::Parse("9223372036854775806.5").value().CeilValue(), INT64_MAX);
}

TEST(Quantity, InvalidTextNamesInputAndExpectation) {
  for (const char* bad : {"", "abc", "1.2.3", "1KB", "1K", "1e", "e3", "--1", "1 Gi", "0x10"}) {
    auto q = Quantity::Parse(bad);
    ASSERT_FALSE(q) << bad;
    EXPECT_NE(q.error().message.find(std::string("'") + bad + "'"), std::string::npos) << q.error().message;
    EXPECT_NE(q.error().message.find("expected"), std::string::npos) << q.error().message;
  }
}

}  // namespace
}  // namespace hami
