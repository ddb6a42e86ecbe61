#include "core/policy.h"

#include <gtest/gtest.h>

namespace hami {
namespace {

TEST(ScoringWeights, ParsesAndRejectsWithUpstreamMessages) {
  auto w = ParseScoringWeights(" slot = 2 , core=0,memory=3").value();
  EXPECT_EQ(w.slot, 2);
  EXPECT_EQ(w.core, 0);
  EXPECT_EQ(w.memory, 3);
  const auto err = [](std::string_view v) { return ParseScoringWeights(v).error().message; };
  EXPECT_NE(err("slot=1").find("expected slot, core, and memory weights"), std::string::npos);
  EXPECT_NE(err("slot=1,core,memory=1").find("expected key=value entries"), std::string::npos);
  EXPECT_NE(err("slot=1,slot=1,memory=1").find("duplicate \"slot\" weight"), std::string::npos);
  EXPECT_NE(err("slot=x,core=1,memory=1").find("\"slot\" weight must be an integer"), std::string::npos);
  EXPECT_NE(err("slot=-1,core=1,memory=1").find("\"slot\" weight must not be negative"), std::string::npos);
  EXPECT_NE(err("slot=1,core=1,gpu=1").find("unknown weight \"gpu\""), std::string::npos);
  EXPECT_NE(err("slot=0,core=0,memory=0").find("at least one weight must be positive"), std::string::npos);
  EXPECT_NE(err("slot=0,core=0,memory=0").find("hami.io/device-scoring-weights"), std::string::npos);
}

TEST(DeviceScore, Vectors) {
  // docs/TEST_VECTORS.md, H4
  DeviceInfo d;
  d.count = 10;
  d.devcore = Cores(4);
  d.devmem = MiB(8192);
  DeviceUsage u{2, MiB(2048), Cores(1)};
  const ScoringWeights w;
  EXPECT_DOUBLE_EQ(DeviceScore(d, u, nullptr, w), 7.0);
  DeviceRequest r{"type1", 4, MiB(1024), 0, Cores(1)};
  EXPECT_DOUBLE_EQ(DeviceScore(d, u, &r, w), 11.75);  // slot +1, not +4
  DeviceInfo e;
  e.count = 10;
  e.devcore = Cores(10);
  e.devmem = MiB(10000);
  DeviceRequest pct{"type1", 1, MiB(0), 50, Cores(2)};
  EXPECT_DOUBLE_EQ(DeviceScore(e, DeviceUsage{}, &pct, w), 8.0);
  DeviceInfo zero;
  EXPECT_DOUBLE_EQ(DeviceScore(zero, u, &r, w), 0.0);
  zero.count = 1;
  zero.devmem = MiB(1);
  EXPECT_DOUBLE_EQ(DeviceScore(zero, u, &r, w), 0.0);  // zero cores: no division by zero
}

std::vector<int> Order(std::string_view policy, bool numa, std::vector<DeviceOrder::Item> items) {
  DeviceOrder(policy, numa).Sort(items);
  std::vector<int> out;
  for (const auto& i : items) out.push_back(i.device);
  return out;
}

// Items: {device, score, numa, index, used}
TEST(DeviceOrder, Table) {
  const std::vector<DeviceOrder::Item> items = {{0, 5, 0, 0, 1}, {1, 1, 0, 1, 0}, {2, 3, 1, 2, 2}};
  EXPECT_EQ(Order("binpack", false, items),
            (std::vector<int>{1, 2, 0}));  // score asc: preferred (last) = highest
  EXPECT_EQ(Order("spread", false, items), (std::vector<int>{0, 2, 1}));  // score desc: preferred = lowest
  EXPECT_EQ(Order("topology-aware", false, items), (std::vector<int>{0, 2, 1}));
  EXPECT_EQ(Order("mutex", false, items), (std::vector<int>{2, 0, 1}));   // used desc: idle last
  EXPECT_EQ(Order("binpack", true, items), (std::vector<int>{2, 1, 0}));  // numa desc, score asc
  EXPECT_EQ(Order("spread", true, items), (std::vector<int>{0, 1, 2}));   // numa asc, score desc
  EXPECT_EQ(Order("numa", false, items), (std::vector<int>{0, 1, 2}));    // numa asc, index tiebreak
  EXPECT_EQ(Order("binpack,numa", false, items), (std::vector<int>{1, 2, 0}));
  EXPECT_EQ(Order("numa,spread", false, items), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(Order("numa,binpack", false, items), (std::vector<int>{1, 0, 2}));
  EXPECT_EQ(Order("mutex,spread", false, items), (std::vector<int>{0, 2, 1}));
  EXPECT_EQ(Order("mutex,topology-aware", false, items), (std::vector<int>{0, 2, 1}));  // no keys -> spread
  EXPECT_EQ(Order("binpack,spread", true, items), (std::vector<int>{1, 0, 2}));         // numa forced first
  // Ties end on device index.
  EXPECT_EQ(Order("spread", false, {{0, 1, 0, 1, 0}, {1, 1, 0, 0, 0}}), (std::vector<int>{1, 0}));
}

TEST(DeviceOrder, NumaBindKeepsGroupsContiguous) {
  // H5: A(numa0,score5), B(numa0,score1), C(numa1,score3), spread + numa-bind: groups stay together.
  auto order = Order("spread", true, {{0, 5, 0, 0, 0}, {1, 1, 0, 1, 0}, {2, 3, 1, 2, 0}});
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  // Without numa-bind the score is primary: P(n0,1) is preferred (last).
  auto plain = Order("spread", false, {{0, 1, 0, 0, 0}, {1, 8, 1, 1, 0}, {2, 5, 1, 2, 0}});
  EXPECT_EQ(plain.back(), 0);
}

TEST(Selectors, UuidExactMatch) {
  const auto sel = [](std::map<std::string, std::string> a) {
    Annotations an(a.begin(), a.end());
    return ReadSelector(an, "use", "nouse");
  };
  EXPECT_TRUE(SelectorAllowsUuid(sel({}), "abc"));
  EXPECT_TRUE(SelectorAllowsUuid(sel({{"use", "abc,123"}}), "abc"));
  EXPECT_FALSE(SelectorAllowsUuid(sel({{"use", "abc,123"}}), "1abc"));
  EXPECT_FALSE(SelectorAllowsUuid(sel({{"nouse", "abc,123"}}), "abc"));
  EXPECT_TRUE(SelectorAllowsUuid(sel({{"nouse", "abc,123"}}), "1abc"));
  EXPECT_FALSE(SelectorAllowsUuid(sel({{"use", "abc,123"}, {"nouse", "abc"}}), "abc"));
  EXPECT_TRUE(SelectorAllowsUuid(sel({{"use", "abc,123"}, {"nouse", "456"}}), "abc"));
  EXPECT_TRUE(SelectorAllowsUuid(sel({{"use", " abc , 123 "}}), "abc"));
  EXPECT_TRUE(SelectorAllowsUuid(sel({{"use", ""}}), "x"));
  EXPECT_TRUE(SelectorAllowsUuid(sel({{"use", "   "}}), "x"));
  EXPECT_TRUE(SelectorAllowsUuid(sel({{"nouse", ""}}), "x"));
}

TEST(Selectors, TypeSubstringIgnoringCase) {
  const auto allows = [](std::map<std::string, std::string> a, std::string_view type) {
    Annotations an(a.begin(), a.end());
    return SelectorAllowsType(ReadSelector(an, "use", "nouse"), type);
  };
  EXPECT_TRUE(allows({}, "NVIDIA-A100"));
  EXPECT_TRUE(allows({{"use", "A100,V100"}}, "NVIDIA-A100"));
  EXPECT_FALSE(allows({{"use", "V100"}}, "NVIDIA-A100"));
  EXPECT_FALSE(allows({{"nouse", "A100"}}, "NVIDIA-A100"));
  EXPECT_TRUE(allows({{"nouse", "V100"}}, "NVIDIA-A100"));
  EXPECT_TRUE(allows({{"use", ""}}, "NVIDIA-A100"));
  EXPECT_TRUE(allows({{"nouse", "   "}}, "NVIDIA-A100"));
  EXPECT_FALSE(allows({{"use", "A100"}, {"nouse", "A100"}}, "NVIDIA-A100"));
  EXPECT_TRUE(allows({{"nouse", "V100,"}}, "NVIDIA-A100"));
  EXPECT_TRUE(allows({{"nouse", ",V100"}}, "NVIDIA-A100"));
  EXPECT_FALSE(allows({{"use", "V100,"}}, "NVIDIA-A100"));
  EXPECT_TRUE(allows({{"use", "a10"}}, "NVIDIA A100"));  // substring, any case
}

TEST(PolicyContains, CommaListsTrimmed) {
  EXPECT_TRUE(PolicyContains("binpack, topology-aware", "topology-aware"));
  EXPECT_FALSE(PolicyContains("binpack", "mutex"));
  EXPECT_FALSE(PolicyContains("mutexx", "mutex"));
}

}  // namespace
}  // namespace hami
