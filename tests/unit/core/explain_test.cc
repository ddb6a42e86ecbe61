// Why a pod is pending: each node's fit traced down to the card that came closest, and what would help.
#include "core/explain.h"

#include <gtest/gtest.h>

#include "tests/support/builders.h"

namespace hami {
namespace {

using testing::Gpu;
using testing::GpuCtr;
using testing::Pod;

class ExplainTest : public ::testing::Test {
 protected:
  ExplainTest() : backends_(testing::BuiltinBackends()), state_(backends_) {}
  void Hold(const std::string& pod, const std::string& node, const std::string& uuid, std::int64_t mem,
            std::int64_t cores) {
    PodAllocation a;
    a.uid = a.name = pod;
    a.ns = "default";
    a.node = node;
    a.devices["NVIDIA"] = {{ContainerDevice{0, uuid, "NVIDIA", MiB(mem), Cores(cores), std::nullopt}}};
    state_.AddPod(a);
  }
  PodExplanation Explain(const PodView& pod, std::vector<std::string> nodes) {
    return ExplainPod(state_, SchedulerOptions{}, pod, nodes);
  }
  Backends backends_;
  ClusterState state_;
};

TEST_F(ExplainTest, TheClosestCardAndByHowMuch) {
  state_.UpsertNode(testing::NvidiaNode("gpu-1", {Gpu("GPU-a", 0, 16000), Gpu("GPU-b", 1, 16000)}));
  Hold("big", "gpu-1", "GPU-a", 14000, 20);
  Hold("bigger", "gpu-1", "GPU-b", 12000, 70);
  DeviceInfo sick = Gpu("GPU-s", 0, 16000);
  sick.health = false;
  state_.UpsertNode(testing::NvidiaNode("gpu-2", {sick}));
  const PodView pod = Pod("train", {GpuCtr("app", 1, 6000, 30)});
  const PodExplanation e = Explain(pod, {"gpu-1", "gpu-2", "ghost"});
  EXPECT_TRUE(e.error.empty()) << e.error;
  EXPECT_EQ(e.pod, "default/train");
  EXPECT_EQ(e.requests, (std::vector<std::string>{"app: 1 x NVIDIA, 6000 MiB, 30 cores"}));
  ASSERT_EQ(e.nodes.size(), 3u);
  const NodeExplanation& one = e.nodes[0];
  EXPECT_FALSE(one.fits);
  EXPECT_TRUE(one.resolvable);
  ASSERT_TRUE(one.closest);
  EXPECT_EQ(one.closest->device, "GPU-b");  // 4000 MiB free: 2000 short, GPU-a is 4000 short
  EXPECT_EQ(one.closest->short_by, 2000);
  EXPECT_EQ(one.Summary(), one.reason +
                               "; app needs 6000 MiB on one card: the closest, GPU-b, has 4000 MiB free "
                               "(2000 MiB short), cores 70/100 used");
  const NodeExplanation& two = e.nodes[1];
  EXPECT_FALSE(two.resolvable);
  EXPECT_FALSE(two.closest);
  EXPECT_EQ(two.Summary(), "1/1 CardNotHealth; no pod leaving the node makes room");
  EXPECT_EQ(e.nodes[2].Summary(), "node unregistered; no pod leaving the node makes room");
  ASSERT_EQ(e.hints.size(), 2u);
  EXPECT_EQ(e.hints[0], "a request of at most 4000 MiB per card passes the memory check of GPU-b on gpu-1");
  EXPECT_NE(e.hints[1].find("pods leaving gpu-1 would make room"), std::string::npos) << e.hints[1];
  EXPECT_EQ(state_.PodCount(), 2u);  // nothing was charged
}

TEST_F(ExplainTest, CoresAndTasksAreExplainedToo) {
  state_.UpsertNode(testing::NvidiaNode("gpu-1", {Gpu("GPU-a", 0, 16000)}));
  Hold("busy", "gpu-1", "GPU-a", 1000, 80);
  auto cores = Explain(Pod("p", {GpuCtr("app", 1, 1000, 30)}), {"gpu-1"});
  ASSERT_TRUE(cores.nodes[0].closest);
  EXPECT_EQ(cores.nodes[0].closest->reason, Reason::kCardInsufficientCore);
  EXPECT_NE(cores.nodes[0].Summary().find(
                "app needs 30 cores on one card: the closest, GPU-a, has 20 free (10 short)"),
            std::string::npos)
      << cores.nodes[0].Summary();
  // A pod that fits: where, and that the rest is kube-scheduler's.
  auto fits = Explain(Pod("q", {GpuCtr("app", 1, 1000, 10)}), {"gpu-1"});
  EXPECT_TRUE(fits.nodes[0].fits);
  EXPECT_EQ(fits.nodes[0].Summary(), "fits");
  ASSERT_EQ(fits.hints.size(), 1u);
  EXPECT_NE(fits.hints[0].find("its devices fit now on gpu-1"), std::string::npos);
}

TEST_F(ExplainTest, AnUnreadablePodOrOneAskingForNothingOfOurs) {
  state_.UpsertNode(testing::NvidiaNode("gpu-1", {Gpu("GPU-a", 0, 16000)}));
  const PodView unreadable =
      Pod("bad", {testing::Ctr("app", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "16Gi"}})});
  auto bad = Explain(unreadable, {"gpu-1"});
  EXPECT_NE(bad.error.find("nvidia.com/gpumem"), std::string::npos) << bad.error;
  EXPECT_TRUE(bad.nodes.empty());
  auto cpu = Explain(Pod("cpu", {testing::Ctr("app", {{"cpu", "1"}})}), {"gpu-1"});
  EXPECT_TRUE(cpu.error.empty());
  EXPECT_TRUE(cpu.nodes.empty());
  ASSERT_EQ(cpu.hints.size(), 1u);
  EXPECT_NE(cpu.hints[0].find("asks for no device"), std::string::npos);
}

}  // namespace
}  // namespace hami
