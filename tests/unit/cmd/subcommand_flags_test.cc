// cmd/subcommand_flags: the tools' command lines read with cxxopts, Go's single-dash words kept whole.
#include "cmd/subcommand_flags.h"

#include <gtest/gtest.h>

namespace hami::cmd {
namespace {

const SubcommandFlags kFlags("hami-scheduler test", {"kubeconfig", "node", "o,output"});

std::vector<std::string> Names(const GivenArgs& given) {
  std::vector<std::string> out;
  for (const auto& f : given.flags) out.push_back(f.name + "=" + f.value);
  return out;
}

TEST(SubcommandFlags, EveryFormInOrder) {
  auto given = kFlags.Parse({"--kubeconfig", "kc", "--node=a=nvidia:1x1", "-o", "table", "--node", "b",
                             "--output=json", "--kubeconfig", "-"});
  ASSERT_TRUE(given) << given.error().message;
  EXPECT_EQ(Names(*given), (std::vector<std::string>{"kubeconfig=kc", "node=a=nvidia:1x1", "output=table",
                                                     "node=b", "output=json", "kubeconfig=-"}));
  EXPECT_TRUE(given->undeclared.empty());
  EXPECT_FALSE(given->help);
  EXPECT_TRUE(kFlags.Parse({"-h"})->help);
  EXPECT_TRUE(kFlags.Parse({"--help"})->help);
}

TEST(SubcommandFlags, OtherArgumentsStayWholeAndInOrder) {
  // "-v4", "-config", "-ojson", "-v=2" would be groups of one-letter flags to cxxopts; "--" the end of
  // the flags.
  const std::vector<std::string> args = {"-v4",    "--config", "c.yaml", "-config", "x",
                                         "-ojson", "--node",   "-abc",   "--",      "stray",
                                         "-v=2",   "--x=1",    "-http_bind=:80"};
  auto given = kFlags.Parse(args);
  ASSERT_TRUE(given) << given.error().message;
  EXPECT_EQ(Names(*given), (std::vector<std::string>{"node=-abc"}));
  EXPECT_EQ(given->undeclared,
            (std::vector<std::string>{"-v4", "--config", "c.yaml", "-config", "x", "-ojson", "--", "stray",
                                      "-v=2", "--x=1", "-http_bind=:80"}));
  auto marked = kFlags.Parse({"--node", "\x01" "0", "\x01" "7"});
  ASSERT_TRUE(marked) << marked.error().message;
  EXPECT_EQ(Names(*marked), (std::vector<std::string>{"node=\x01" "0"}));
  EXPECT_EQ(marked->undeclared, (std::vector<std::string>{"\x01" "7"}));
  // A value after '=' that looks like a placeholder is the argument's own text, never another argument's.
  for (const std::string value : {"\x01"
                                  "0",
                                  "\x01"
                                  "9",
                                  "\x01"
                                  "x",
                                  "a\x01"
                                  "0"}) {
    auto inline_value = kFlags.Parse({"--node=" + value, "--kubeconfig", "k"});
    ASSERT_TRUE(inline_value) << inline_value.error().message;
    EXPECT_EQ(Names(*inline_value), (std::vector<std::string>{"node=" + value, "kubeconfig=k"}));
    EXPECT_TRUE(inline_value->undeclared.empty());
  }
}

TEST(SubcommandFlags, AnArgumentOfTheKernelsLargestSizeIsRead) {
  const std::string node(128 * 1024 - 32, 'n');
  auto given = kFlags.Parse({"--node=" + node});
  ASSERT_TRUE(given) << given.error().message;
  EXPECT_EQ(Names(*given), (std::vector<std::string>{"node=" + node}));
}

TEST(SubcommandFlags, ProblemsNameTheFlag) {
  auto missing = kFlags.Parse({"--node", "a", "--kubeconfig"});
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().message, "--kubeconfig needs a value");
  auto short_missing = kFlags.Parse({"-o"});
  ASSERT_FALSE(short_missing);
  EXPECT_EQ(short_missing.error().message, "-o needs a value");
  EXPECT_EQ(kFlags.Unexpected("--nodes=a").message,
            "unknown flag '--nodes'; expected --kubeconfig, --node or --output");
  EXPECT_EQ(kFlags.Unexpected("-x").message, "unknown flag '-x'; expected --kubeconfig, --node or --output");
  EXPECT_EQ(kFlags.Unexpected("stray").message, "unexpected argument 'stray'");
  EXPECT_EQ(kFlags.Unexpected("-").message, "unexpected argument '-'");
}

}  // namespace
}  // namespace hami::cmd
