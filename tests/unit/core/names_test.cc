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
}

}  // namespace
}  // namespace hami
