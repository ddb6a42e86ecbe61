// Free capacity per node and vendor: the shapes' written form, the largest slice, and how many pods of each
// shape still fit, as the fit engine counts them.
#include "core/free_capacity.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/builders.h"

namespace hami {
namespace {

using ::testing::HasSubstr;
using testing::Gpu;

CapacityShape Shape(std::string_view text) { return ParseCapacityShape(text).value(); }

TEST(CapacityShape, ParsesTheWrittenForm) {
  const CapacityShape quarter = Shape("a10-quarter=NVIDIA:1x6000:25");
  EXPECT_EQ(quarter, (CapacityShape{"a10-quarter", "NVIDIA", 1, 6000, 25}));
  EXPECT_EQ(FormatCapacityShape(quarter), "a10-quarter=NVIDIA:1x6000:25");
  const CapacityShape big = Shape(" big=NVIDIA:2x40000 ");
  EXPECT_EQ(big, (CapacityShape{"big", "NVIDIA", 2, 40000, 0}));
  EXPECT_EQ(FormatCapacityShape(big), "big=NVIDIA:2x40000");
  EXPECT_EQ(Shape("whole=MLU:64x1:100").count, 64);
}

TEST(CapacityShape, AnErrorNamesTheInputAndWhatWasExpected) {
  const auto error = [](std::string_view text) {
    auto shape = ParseCapacityShape(text);
    EXPECT_FALSE(shape) << text;
    return shape ? std::string() : shape.error().message;
  };
  EXPECT_EQ(error("big"),
            "capacity shape \"big\": expected NAME=VENDOR:COUNTxMEMORY[:CORES] (e.g. "
            "a10-quarter=NVIDIA:1x6000:25)");
  EXPECT_THAT(error("Big=NVIDIA:1x100"), HasSubstr("name \"Big\" is not a lowercase DNS label"));
  EXPECT_THAT(error(std::string(64, 'a') + "=NVIDIA:1x100"), HasSubstr("is not a lowercase DNS label"));
  EXPECT_THAT(error("=NVIDIA:1x100"), HasSubstr("is not a lowercase DNS label"));
  EXPECT_THAT(error("a=:1x100"), HasSubstr("no vendor"));
  EXPECT_THAT(error("a=NVIDIA:1*100"), HasSubstr("\"1*100\" is not COUNTxMEMORY"));
  EXPECT_EQ(error("a=NVIDIA:0x100"),
            "capacity shape \"a=NVIDIA:0x100\": count \"0\" is not a number of cards, 1 to 64");
  EXPECT_THAT(error("a=NVIDIA:65x100"), HasSubstr("count \"65\" is not a number of cards, 1 to 64"));
  EXPECT_THAT(error("a=NVIDIA:1x0"), HasSubstr("memory \"0\" is not MiB per card"));
  EXPECT_THAT(error("a=NVIDIA:1x6Gi"), HasSubstr("memory \"6Gi\" is not MiB per card"));
  EXPECT_THAT(error("a=NVIDIA:1x100:101"), HasSubstr("cores \"101\" is not percent of a card, 0 to 100"));
  EXPECT_THAT(error("a=NVIDIA:1x100:25:1"), HasSubstr("expected NAME=VENDOR:COUNTxMEMORY[:CORES]"));
}

TEST(CapacityShape, CheckedAgainstTheBackends) {
  const Backends backends = testing::BuiltinBackends();
  const std::vector<CapacityShape> good{Shape("a=NVIDIA:1x6000:25"), Shape("b=NVIDIA:2x40000")};
  EXPECT_TRUE(CheckCapacityShapes(good, backends));
  const std::vector<CapacityShape> unknown{Shape("a=nvidia:1x6000")};
  auto bad = CheckCapacityShapes(unknown, backends);
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().message, HasSubstr("capacity shape \"a=nvidia:1x6000\": vendor \"nvidia\" is not "
                                             "one this scheduler runs (want one of: "));
  EXPECT_THAT(bad.error().message, HasSubstr("NVIDIA"));
  const std::vector<CapacityShape> twice{Shape("a=NVIDIA:1x6000"), Shape("a=NVIDIA:1x8000")};
  EXPECT_THAT(CheckCapacityShapes(twice, backends).error().message,
              HasSubstr("capacity shape \"a=NVIDIA:1x8000\": name \"a\" is given twice"));
  std::vector<CapacityShape> many;
  for (int i = 0; i < 17; ++i) many.push_back(Shape("s" + std::to_string(i) + "=NVIDIA:1x100"));
  EXPECT_THAT(CheckCapacityShapes(many, backends).error().message,
              HasSubstr("17 capacity shapes given; at most 16"));
  many.pop_back();
  EXPECT_TRUE(CheckCapacityShapes(many, backends));
}

class FreeCapacityTest : public ::testing::Test {
 protected:
  FreeCapacityTest() : backends_(testing::BuiltinBackends()), state_(backends_) {}
  std::vector<VendorCapacity> Of(const std::string& node) {
    return NodeFreeCapacity(state_, *state_.FindNode(node), shapes_, "spread");
  }
  // Two cards of 16000 MiB, the first half used by one pod.
  void HalfUsedNode() {
    state_.UpsertNode(testing::NvidiaNode("n", {Gpu("GPU-a", 0, 16000), Gpu("GPU-b", 1, 16000)}));
    testing::Hold(state_, "half", "n", "NVIDIA", "GPU-a", 1, 8000, 0);
  }
  Backends backends_;
  ClusterState state_;
  std::vector<CapacityShape> shapes_{Shape("quarter=NVIDIA:1x4000:25"), Shape("half=NVIDIA:1x8000"),
                                     Shape("pair=NVIDIA:2x8000:50"), Shape("whole=NVIDIA:1x16000"),
                                     Shape("dcu=DCU:1x1000")};
};

using Fits = std::vector<std::pair<std::string, int>>;

TEST_F(FreeCapacityTest, TheLargestSliceAndThePodsOfEachShapeThatFit) {
  HalfUsedNode();
  const auto capacity = Of("n");
  ASSERT_EQ(capacity.size(), 1u);  // no DCU on the node: no DCU entry
  EXPECT_EQ(capacity[0].vendor, "NVIDIA");
  EXPECT_EQ(capacity[0].largest_free_mib, 16000);
  // quarter: 2 on GPU-a (8000 MiB free), 4 on GPU-b (by memory and by cores); half: 1 + 2; pair: one pod
  // takes 8000 of each card, which leaves GPU-a full; whole: GPU-b alone.
  EXPECT_EQ(capacity[0].fits, (Fits{{"quarter", 6}, {"half", 3}, {"pair", 1}, {"whole", 1}}));
  EXPECT_EQ(state_.PodCount(), 1u);  // nothing was charged
}

TEST_F(FreeCapacityTest, ABlockedVendorOrAnUnhealthyCardCountsNothing) {
  HalfUsedNode();
  std::vector<std::string> blocks(backends_.size());
  blocks[static_cast<std::size_t>(backends_.IndexOf("NVIDIA"))] = "an allocation cannot be read";
  state_.SetVendorBlocks("n", blocks);
  auto blocked = Of("n");
  ASSERT_EQ(blocked.size(), 1u);
  EXPECT_EQ(blocked[0].largest_free_mib, 0);
  EXPECT_EQ(blocked[0].fits, (Fits{{"quarter", 0}, {"half", 0}, {"pair", 0}, {"whole", 0}}));

  DeviceInfo sick = Gpu("GPU-s", 1, 16000);
  sick.health = false;
  state_.UpsertNode(testing::NvidiaNode("m", {Gpu("GPU-c", 0, 8000), sick}));
  testing::Hold(state_, "full", "m", "NVIDIA", "GPU-c", 1, 6000, 0);
  auto unhealthy = Of("m");
  ASSERT_EQ(unhealthy.size(), 1u);
  EXPECT_EQ(unhealthy[0].largest_free_mib, 2000);  // the sick card's 16000 free count for nothing
  EXPECT_EQ(unhealthy[0].fits, (Fits{{"quarter", 0}, {"half", 0}, {"pair", 0}, {"whole", 0}}));
}

TEST_F(FreeCapacityTest, ACardWithNoSlotLeftHasNoSlice) {
  state_.UpsertNode(testing::NvidiaNode("n", {Gpu("GPU-a", 0, 16000, 1), Gpu("GPU-b", 1, 4000)}));
  testing::Hold(state_, "one", "n", "NVIDIA", "GPU-a", 1, 1000, 0);  // its one task: 15000 MiB idle
  auto capacity = Of("n");
  EXPECT_EQ(capacity[0].largest_free_mib, 4000);
  EXPECT_EQ(capacity[0].fits, (Fits{{"quarter", 1}, {"half", 0}, {"pair", 0}, {"whole", 0}}));
}

TEST_F(FreeCapacityTest, TheCountStopsAtTheCap) {
  state_.UpsertNode(testing::NvidiaNode("n", {Gpu("GPU-a", 0, 16000, 100)}));
  shapes_ = {Shape("tiny=NVIDIA:1x1")};
  EXPECT_EQ(Of("n")[0].fits, (Fits{{"tiny", kMaxShapeFits}}));
}

TEST_F(FreeCapacityTest, NominatedHoldsCountAsTaken) {
  HalfUsedNode();
  const PodView nominated = testing::Pod("urgent", {testing::GpuCtr("c", 1, 10000, 0)});
  state_.Nominate(100, AllocationOf(nominated, "n",
                                    {{"NVIDIA", {{ContainerDevice{1, "GPU-b", "NVIDIA", MiB(10000), Cores(0),
                                                                  std::nullopt}}}}},
                                    backends_, true));
  auto capacity = Of("n");
  EXPECT_EQ(capacity[0].largest_free_mib, 8000);
  EXPECT_EQ(capacity[0].fits, (Fits{{"quarter", 3}, {"half", 1}, {"pair", 0}, {"whole", 0}}));
}

TEST_F(FreeCapacityTest, OneCounterForManyNodes) {
  HalfUsedNode();
  state_.UpsertNode(testing::NvidiaNode("idle", {Gpu("GPU-x", 0, 16000)}));
  FreeCapacity counter(state_, shapes_, "binpack");
  EXPECT_EQ(counter.Of(*state_.FindNode("n"))[0].fits[0], (std::pair<std::string, int>{"quarter", 6}));
  EXPECT_EQ(counter.Of(*state_.FindNode("idle"))[0].fits,
            (Fits{{"quarter", 4}, {"half", 2}, {"pair", 0}, {"whole", 1}}));
}

}  // namespace
}  // namespace hami
