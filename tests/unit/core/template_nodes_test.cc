// Cluster Autoscaler's template nodes: a filter over nodes that do not exist yet answers from the devices
// they publish, lists every node that fits, and changes nothing.
#include "core/template_nodes.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/builders.h"

namespace hami {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::Gpu;
using testing::GpuCtr;
using testing::NvidiaNode;
using testing::Pod;

class TemplateNodesTest : public ::testing::Test {
 protected:
  TemplateNodesTest() : backends_(testing::BuiltinBackends()), state_(backends_) {
    // A real node with one 16000 MiB card, 12000 MiB of it held.
    state_.UpsertNode(NvidiaNode("real-1", {Gpu("GPU-real", 0, 16000)}));
    testing::Hold(state_, "holder", "real-1", "NVIDIA", "GPU-real", 1, 12000, 0);
  }
  FilterOutcome Ask(const PodView& pod, const std::vector<std::string>& candidates,
                    const std::vector<NodeView>& templates) {
    return FilterWithTemplates(state_, SchedulerOptions{}, pod, CollectRequests(pod, backends_), candidates,
                               templates, TimePoint{});
  }
  Backends backends_;
  ClusterState state_;
};

TEST_F(TemplateNodesTest, ATemplateIsJudgedByWhatItPublishesWithNothingUsed) {
  // The node group's template is a copy of real-1: same card, but a new node holds nothing.
  const std::vector<NodeView> templates{NvidiaNode("template-a", {Gpu("GPU-real", 0, 16000)})};
  const std::uint64_t generation = state_.generation();
  const std::size_t pods = state_.PodCount();
  const FilterOutcome out = Ask(Pod("p", {GpuCtr("c", 1, 8000, 30)}), {"real-1", "template-a"}, templates);
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kFitting);
  EXPECT_THAT(out.fitting, ElementsAre("template-a"));
  EXPECT_THAT(out.failed_nodes.at("real-1"), HasSubstr("CardInsufficientMemory"));
  EXPECT_EQ(out.node, "template-a");
  // Nothing recorded: not the pod, not the template.
  EXPECT_EQ(state_.generation(), generation);
  EXPECT_EQ(state_.PodCount(), pods);
  EXPECT_EQ(state_.FindNode("template-a"), nullptr);
}

TEST_F(TemplateNodesTest, EveryFittingNodeIsListedInTheCandidatesOrder) {
  const std::vector<NodeView> templates{NvidiaNode("template-b", {Gpu("GPU-b", 0, 24000)}),
                                        NvidiaNode("template-a", {Gpu("GPU-a", 0, 16000)}),
                                        NvidiaNode("template-small", {Gpu("GPU-s", 0, 2000)})};
  const FilterOutcome out = Ask(Pod("p", {GpuCtr("c", 1, 3000, 0)}),
                                {"template-b", "real-1", "template-small", "template-a"}, templates);
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kFitting);
  EXPECT_THAT(out.fitting, ElementsAre("template-b", "real-1", "template-a"));
  EXPECT_EQ(out.fitting_count, 3u);
  EXPECT_THAT(out.failed_nodes.at("template-small"), HasSubstr("CardInsufficientMemory"));
  EXPECT_EQ(out.failed_nodes.size(), 1u);
}

TEST_F(TemplateNodesTest, NoNodeFitsSaysWhyForEach) {
  const std::vector<NodeView> templates{NvidiaNode("template-a", {Gpu("GPU-a", 0, 16000)})};
  const FilterOutcome out = Ask(Pod("p", {GpuCtr("c", 2, 1000, 0)}), {"real-1", "template-a"}, templates);
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kUnschedulable);
  EXPECT_TRUE(out.fitting.empty());
  EXPECT_EQ(out.failed_nodes.size(), 2u);
  EXPECT_THAT(out.failed_nodes.at("template-a"), HasSubstr("NodeInsufficientDevice"));
}

TEST_F(TemplateNodesTest, AnUnreadableRegistrationIsNamedInTheRefusal) {
  NodeView broken = NvidiaNode("template-x", {Gpu("GPU-x", 0, 16000)});
  broken.annotations["hami.io/node-nvidia-register"] = "not a device list";
  const FilterOutcome out = Ask(Pod("p", {GpuCtr("c", 1, 1000, 0)}), {"template-x"}, {broken});
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kUnschedulable);
  EXPECT_THAT(out.failed_nodes.at("template-x"), HasSubstr("its NVIDIA registration cannot be read: "));
}

TEST_F(TemplateNodesTest, APodWithoutDevicesPassesAndABadRequestIsAnError) {
  const std::vector<NodeView> templates{NvidiaNode("template-a", {Gpu("GPU-a", 0, 16000)})};
  EXPECT_EQ(Ask(Pod("plain", {testing::Ctr("c", {{"cpu", "1"}})}), {"real-1", "template-a"}, templates).kind,
            FilterOutcome::Kind::kPassThrough);
  const FilterOutcome bad = Ask(Pod("bad", {testing::Ctr("c", {{"nvidia.com/gpu", "x"}})}),
                                {"real-1", "template-a"}, templates);
  EXPECT_EQ(bad.kind, FilterOutcome::Kind::kError);
  EXPECT_FALSE(bad.error.empty());
}

TEST_F(TemplateNodesTest, TheNamespaceQuotaIsTheClustersOnATemplateToo) {
  ResourceQuotaView quota;
  quota.ns = "default";
  quota.name = "gpu";
  quota.hard["limits.nvidia.com/gpumem"] = "4000";
  state_.quotas().UpsertQuota(quota);
  const std::vector<NodeView> templates{NvidiaNode("template-a", {Gpu("GPU-a", 0, 16000)})};
  const FilterOutcome out = Ask(Pod("p", {GpuCtr("c", 1, 8000, 0)}), {"template-a"}, templates);
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kUnschedulable);
  EXPECT_THAT(out.failed_nodes.at("template-a"), HasSubstr("ResourceQuotaNotFit"));
}

}  // namespace
}  // namespace hami
