#include "core/base64.h"

#include <gtest/gtest.h>

namespace hami {
namespace {

TEST(Base64, StandardAlphabetIsPadded) {
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("h"), "aA==");
  EXPECT_EQ(Base64Encode("ha"), "aGE=");
  EXPECT_EQ(Base64Encode("hami"), "aGFtaQ==");
  EXPECT_EQ(Base64Encode("\xfb\xff"), "+/8=");
}

TEST(Base64, UrlAlphabetIsUnpadded) {
  EXPECT_EQ(Base64Encode("hami", Base64Alphabet::kUrl), "aGFtaQ");
  EXPECT_EQ(Base64Encode("\xfb\xff", Base64Alphabet::kUrl), "-_8");
}

TEST(Base64, DecodesEitherAlphabetAndSkipsPaddingAndLineBreaks) {
  EXPECT_EQ(Base64Decode("aGFtaQ==").value(), "hami");
  EXPECT_EQ(Base64Decode("aGFt\naQ").value(), "hami");
  EXPECT_EQ(Base64Decode("+/8=").value(), "\xfb\xff");
  EXPECT_EQ(Base64Decode("-_8").value(), "\xfb\xff");
  for (std::string text : {std::string(""), std::string("x"), std::string("\0\x01\xff", 3)}) {
    for (auto a : {Base64Alphabet::kStandard, Base64Alphabet::kUrl})
      EXPECT_EQ(Base64Decode(Base64Encode(text, a)).value(), text);
  }
}

TEST(Base64, NamesTheCharacterItCannotRead) {
  auto bad = Base64Decode("aG*t");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "invalid base64 character '*'");
  EXPECT_EQ(Base64Decode(std::string_view("a\0", 2)).error().message, "invalid base64 character 0x00");
}

}  // namespace
}  // namespace hami
