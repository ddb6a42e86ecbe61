#include "core/names.h"

#include <gtest/gtest.h>

namespace hami {
namespace {

TEST(Names, Dns1123AsTheApiServerApplies) {
  EXPECT_TRUE(IsDns1123Subdomain("gpu-node-1.example.com"));
  EXPECT_TRUE(IsDns1123Subdomain("a"));
  EXPECT_TRUE(IsDns1123Subdomain(std::string(63, 'a') + "." + std::string(189, 'b')));  // 253
  EXPECT_TRUE(IsDns1123Subdomain(std::string(70, 'n')));  // Kubernetes limits the whole name, not its parts
  EXPECT_FALSE(IsDns1123Subdomain(std::string(254, 'a')));
  for (std::string_view bad : {"", "-a", "a-", "A", "a..b", ".a", "a.", "a_b", "..", ".", "a/b", "a b",
                               "a\r\nb", "a?x=1", "a%2F", "a.-b"}) {
    EXPECT_FALSE(IsDns1123Subdomain(bad)) << bad;
  }
  EXPECT_TRUE(IsDns1123Label("kube-system"));
  EXPECT_FALSE(IsDns1123Label("a.b"));
  EXPECT_FALSE(IsDns1123Label(std::string(64, 'a')));
}

TEST(Names, ErrorsNameTheFieldAndShowTheValueEscaped) {
  EXPECT_TRUE(ValidateName("x", "default", NameKind::kNamespace));
  const auto e = ValidateName("ExtenderBindingArgs.Node", "n1\r\nX", NameKind::kNode);
  ASSERT_FALSE(e);
  EXPECT_EQ(
      e.error().message,
      "ExtenderBindingArgs.Node: \"n1\\r\\nX\" is not a valid node name: want a lowercase RFC 1123 subdomain "
      "(at most 253 characters of a-z, 0-9, '-' and '.', starting and ending with a letter or digit)");
  EXPECT_EQ(Quoted(std::string("a\0b\x7f\"\\", 6)), R"("a\x00b\x7f\"\\")");
  EXPECT_EQ(Quoted(std::string(300, 'a'), 4), "\"aaaa\" (and 296 more bytes)");
  // Whole UTF-8 characters only: the cut never splits one (the text goes into JSON answers), and bytes that
  // are not part of a well-formed one (a lone continuation, an overlong form, a surrogate) are escaped.
  EXPECT_EQ(Quoted("a\xd7\x90" "b", 2), "\"a\" (and 3 more bytes)");
  EXPECT_EQ(Quoted("a\xd7\x90" "b", 3), "\"a\xd7\x90\" (and 1 more bytes)");
  EXPECT_EQ(Quoted("\xe2\x82\xac\xf0\x9f\x98\x80"), "\"\xe2\x82\xac\xf0\x9f\x98\x80\"");
  EXPECT_EQ(Quoted("\x90\xc0\xaf\xed\xa0\x80\xd7"), R"("\x90\xc0\xaf\xed\xa0\x80\xd7")");
}

}  // namespace
}  // namespace hami
