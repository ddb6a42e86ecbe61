#include "core/bind_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/keys.h"
#include "tests/support/builders.h"

namespace hami {
namespace {

using testing::Ctr;
using ::testing::ElementsAre;
using testing::GpuCtr;
using testing::Pod;

class BindPlanTest : public ::testing::Test {
 protected:
  PodRequests Requests(const PodView& pod) { return CollectRequests(pod, backends_).value(); }
  std::vector<std::string> LockKeys(const PodView& pod) {
    std::vector<std::string> keys;
    for (const auto& l : LocksToTake(backends_, Requests(pod))) keys.push_back(l.key);
    return keys;
  }
  Backends backends_ = testing::BuiltinBackends();
  const TimePoint now_ = TimePoint(std::chrono::seconds(1700000000));
};

TEST_F(BindPlanTest, LocksOfTheVendorsTheRegularContainersUseInVendorOrder) {
  const PodView both = Pod("p", {GpuCtr("a", 1, 1000, 10), Ctr("b", {{"cambricon.com/vmlu", "1"}})});
  // Vendor order (MLU < NVIDIA), the same for every bind: two binds never wait on each other crosswise.
  EXPECT_THAT(LockKeys(both), ElementsAre("cambricon.com/dsmlu.lock", "hami.io/mutex.lock"));
  // An init container's vendor takes no lock (its devices are released before the app starts).
  const PodView init_only = Pod("p", {Ctr("c", {{"cpu", "1"}})}, {GpuCtr("i", 1, 1000, 10)});
  EXPECT_TRUE(LockKeys(init_only).empty());
  EXPECT_TRUE(LockKeys(Pod("p", {Ctr("c", {{"cpu", "1"}})})).empty());
}

TEST_F(BindPlanTest, ALockKeySharedByTwoVendorsIsTakenOnce) {
  // Hygon's default lock is NVIDIA's (docs/DECISIONS.md, "HAMi's protocol").
  const PodView both = Pod("p", {GpuCtr("a", 1, 1000, 10), Ctr("b", {{"hygon.com/dcunum", "1"}})});
  EXPECT_THAT(LockKeys(both), ElementsAre("hami.io/mutex.lock"));
}

TEST_F(BindPlanTest, TheBindingCarriesTheDecisionThePhaseAndTheTime) {
  const PodView pod = Pod("p", {GpuCtr("a", 1, 1000, 10)});
  const Annotations decision{{std::string(keys::kAssignedNode), "n1"},
                             {"hami.io/vgpu-devices-allocated", "x"}};
  const BindingWrites w = PlanBinding(backends_, pod, Requests(pod), &decision, "n1", now_);
  EXPECT_EQ(w.annotations.at(std::string(keys::kAssignedNode)), "n1");
  EXPECT_EQ(w.annotations.at("hami.io/vgpu-devices-allocated"), "x");
  EXPECT_EQ(w.annotations.at(std::string(keys::kBindPhase)), keys::kBindPhaseAllocating);
  EXPECT_EQ(w.annotations.at(std::string(keys::kBindTime)), "1700000000");
  EXPECT_EQ(w.labels.at(std::string(keys::kAssignedNode)), "n1");
  EXPECT_FALSE(w.NeedsClearing());
}

TEST_F(BindPlanTest, AnEarlierDecisionsKeysAndLabelAreClearedFirst) {
  PodView pod = Pod("p", {GpuCtr("a", 1, 1000, 10)}, {},
                    {{"hami.io/vgpu-devices-to-allocate", "old"},
                     {std::string(keys::kMigAllocations), "[]"},
                     {"unrelated", "kept"}});
  pod.labels[std::string(keys::kAssignedNode)] = "n0";
  const Annotations decision{{std::string(keys::kAssignedNode), "n1"},
                             {"hami.io/vgpu-devices-to-allocate", "new"}};
  const BindingWrites w = PlanBinding(backends_, pod, Requests(pod), &decision, "n1", now_);
  EXPECT_THAT(w.clear_annotations, ElementsAre(std::string(keys::kMigAllocations)));
  EXPECT_TRUE(w.clear_label);
}

TEST_F(BindPlanTest, WithoutOurDecisionOnlyThePhaseIsWritten) {
  // Devices read from the pod's annotations (HAMi's filter wrote them): they stay as they are.
  const PodView pod = Pod("p", {GpuCtr("a", 1, 1000, 10)}, {}, {{"hami.io/vgpu-devices-allocated", "hami"}});
  const BindingWrites w = PlanBinding(backends_, pod, Requests(pod), nullptr, "n1", now_);
  EXPECT_EQ(w.annotations.size(), 2u);
  EXPECT_TRUE(w.labels.empty());
  EXPECT_FALSE(w.NeedsClearing());
  // A pod asking for no device: nothing at all.
  const PodView plain = Pod("q", {Ctr("c", {{"cpu", "1"}})});
  EXPECT_TRUE(PlanBinding(backends_, plain, Requests(plain), nullptr, "n1", now_).annotations.empty());
}

TEST_F(BindPlanTest, ANodeNameTooLongForALabelIsNamedByTheAnnotationAlone) {
  const std::string node(100, 'n');
  const PodView pod = Pod("p", {GpuCtr("a", 1, 1000, 10)});
  const Annotations decision{{std::string(keys::kAssignedNode), node}};
  const BindingWrites w = PlanBinding(backends_, pod, Requests(pod), &decision, node, now_);
  EXPECT_TRUE(w.labels.empty());
  EXPECT_EQ(w.annotations.at(std::string(keys::kAssignedNode)), node);
}

}  // namespace
}  // namespace hami
