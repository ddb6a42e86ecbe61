// A request names a pod but never speaks for another: the ledger, the reservations and the quota change
// only for the uid the caches hold for exactly that namespace/name. And a pod's own annotations charge
// devices only on the node it runs on, for what it asks for; one that cannot be read closes its node.
#include <gmock/gmock.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/keys.h"
#include "tests/unit/extender/services_fixture.h"

namespace hami {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::ServicesTest;

constexpr std::string_view kAllocated = "hami.io/vgpu-devices-allocated";

class IdentityTest : public ServicesTest {
 protected:
  void SetUp() override {
    AddNode("n1");
    AddNode("n2");
  }
  // A pod of `mem` MiB filtered, bound to `node` and seen bound by the pod watch, as the extender routes it.
  PodView Running(const std::string& name, std::int64_t mem, const std::string& node) {
    PodView pod = GpuPod(name, mem);
    EXPECT_EQ(Filter(pod, {node}).node_names, std::vector<std::string>{node});
    EXPECT_EQ(Bind(pod, node), "");
    pod.node_name = node;
    for (const auto& [k, v] : writer_.bindings.back().annotations) pod.annotations[k] = v;
    pod.annotations[std::string(keys::kBindPhase)] = std::string(keys::kBindPhaseSuccess);
    Observe(pod);
    return pod;
  }
  PodView GpuPod(const std::string& name, std::int64_t mem) {
    PodView p = ServicesTest::GpuPod(name);
    p.containers[0] = testing::GpuCtr("main", 1, mem, 0);
    pods_[p.Key()] = p;
    writer_.pods[p.Key()] = p;
    return p;
  }
  // The pod watch's event for `pod` (extender/extender.cc OnPod, for a pod carrying an allocation).
  void Observe(const PodView& pod) {
    pods_[pod.Key()] = pod;
    writer_.pods[pod.Key()] = pod;
    if (!pod.node_name.empty()) ledger_.DropReservation(pod.UidOrKey());
    feed_.RecordAllocation(pod);
  }
  std::string BindAs(const std::string& name, const std::string& uid, const std::string& node) {
    return ServicesTest::BindAs("default", name, uid, node);
  }
  // Whether a new pod of the whole card's memory still finds a place on `node`.
  bool CardFree(const std::string& node) {
    const PodView probe = GpuPod("probe-" + std::to_string(++probes_), 16000);
    const bool fits = Filter(probe, {node}).node_names == std::vector<std::string>{node};
    ledger_.Release(probe.uid);
    pods_.erase(probe.Key());
    return fits;
  }
  int probes_ = 0;
};

TEST_F(IdentityTest, ABindNamingAMissingPodWithARunningPodsUidFreesNothing) {
  const PodView real = Running("real", 16000, "n1");
  EXPECT_THAT(BindAs("ghost", real.uid, "n1"), HasSubstr("not found"));
  ASSERT_NE(feed_.state().FindPod(real.uid), nullptr);
  EXPECT_FALSE(CardFree("n1"));
}

TEST_F(IdentityTest, ABindNamingAnotherPodWithARunningPodsUidFreesNothing) {
  const PodView real = Running("real", 16000, "n1");
  GpuPod("other", 1000);
  EXPECT_THAT(BindAs("other", real.uid, "n1"), HasSubstr("was re-created"));
  EXPECT_NE(feed_.state().FindPod(real.uid), nullptr);  // nothing released
  EXPECT_FALSE(CardFree("n1"));
}

TEST_F(IdentityTest, ABindOfAPodReCreatedUnderItsNameStillFreesTheGonePodsReservation) {
  const PodView first = GpuPod("p", 16000);
  Filter(first, {"n1"});
  PodView second = first;
  second.uid = "uid-p-2";
  pods_[second.Key()] = second;
  writer_.pods[second.Key()] = second;
  EXPECT_THAT(BindAs("p", first.uid, "n1"), HasSubstr("was re-created"));
  EXPECT_EQ(feed_.state().FindPod(first.uid), nullptr);  // released
  EXPECT_FALSE(ledger_.reserved(first.uid));
}

TEST_F(IdentityTest, AFilterOfABoundPodReleasesNothingAndPassesItsNodeOnly) {
  const PodView real = Running("real", 16000, "n1");
  PodView as_kube_scheduler_sent_it = real;  // its cache has not seen the bind yet
  as_kube_scheduler_sent_it.node_name.clear();
  const auto answer = Filter(as_kube_scheduler_sent_it, {"n2", "n1"});
  EXPECT_EQ(answer.error, "");
  EXPECT_EQ(answer.node_names, std::vector<std::string>{"n1"});
  EXPECT_FALSE(ledger_.reserved(real.uid));
  const PodAllocation* held = feed_.state().FindPod(real.uid);
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(held->node, "n1");
  EXPECT_FALSE(CardFree("n1"));
  // The bind that follows finds the pod bound there: success, nothing written.
  writer_.calls.clear();
  EXPECT_EQ(Bind(real, "n1"), "");
  EXPECT_TRUE(writer_.bindings.size() == 1u);
}

TEST_F(IdentityTest, AFilterOfAPodWhoseBodySaysBoundReleasesNothing) {
  const PodView real = Running("real", 16000, "n1");
  pods_.erase(real.Key());  // not in the cache: the body's spec.nodeName alone says it
  const auto answer = Filter(real, {"n1", "n2"});
  EXPECT_EQ(answer.node_names, std::vector<std::string>{"n1"});
  ASSERT_NE(feed_.state().FindPod(real.uid), nullptr);
  EXPECT_FALSE(CardFree("n1"));
}

TEST_F(IdentityTest, AFilterOfAMadeUpPodCarryingARunningPodsUidIsRefusedAndChangesNothing) {
  const PodView real = Running("real", 16000, "n1");
  PodView fake = testing::Pod("fake", {testing::GpuCtr("main", 1, 16000, 0)});
  fake.uid = real.uid;
  EXPECT_THAT(Filter(fake, {"n1"}).error, HasSubstr("pod default/fake does not exist"));
  // A pod of that name exists, with a uid of its own.
  writer_.pods[fake.Key()] = testing::Pod("fake", {});
  const auto answer = Filter(fake, {"n1"});
  EXPECT_THAT(answer.error, HasSubstr("pod default/fake has uid uid-fake, not the request's uid-real"));
  const PodAllocation* held = feed_.state().FindPod(real.uid);
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(held->name, "real");
  EXPECT_FALSE(CardFree("n1"));
}

TEST_F(IdentityTest, AFilterWhoseUidIsNotTheCachedPodsIsRefusedUnlessTheApiServerAgrees) {
  const PodView real = Running("real", 16000, "n1");
  PodView other = real;
  other.uid = "uid-someone-else";
  other.node_name.clear();
  EXPECT_THAT(Filter(other, {"n1"}).error, HasSubstr("has uid uid-real, not the request's uid-someone-else"));
  EXPECT_FALSE(CardFree("n1"));
  // Re-created and the cache behind: the API server shows the request's uid, and the filter decides.
  PodView recreated = GpuPod("again", 1000);
  recreated.uid = "uid-again-2";
  writer_.pods[recreated.Key()] = recreated;
  EXPECT_EQ(Filter(recreated, {"n2"}).node_names, std::vector<std::string>{"n2"});
}

TEST_F(IdentityTest, ACpuPodNamingAnotherNodesCardIsNotCharged) {
  PodView cpu = testing::Pod("cpu", {testing::Ctr("main", {{"cpu", "1"}})});
  cpu.node_name = "n2";
  cpu.annotations[std::string(keys::kAssignedNode)] = "n1";
  cpu.annotations[std::string(kAllocated)] = "n1-gpu0,NVIDIA,16000,0:;";
  cpu.annotations[std::string(keys::kBindPhase)] = std::string(keys::kBindPhaseSuccess);
  Observe(cpu);
  EXPECT_EQ(feed_.state().FindPod(cpu.uid), nullptr);
  EXPECT_TRUE(CardFree("n1"));
  // Bound to the node it names, it still asks for no GPU: nothing to charge either.
  cpu.node_name = "n1";
  Observe(cpu);
  EXPECT_EQ(feed_.state().FindPod(cpu.uid), nullptr);
  EXPECT_TRUE(CardFree("n1"));
  EXPECT_EQ(feed_.stats().foreign_charges, 2u);
}

TEST_F(IdentityTest, AGpuPodIsChargedOnTheNodeItRunsOnOnly) {
  PodView pod = GpuPod("gpu", 16000);
  pod.node_name = "n2";
  pod.annotations[std::string(keys::kAssignedNode)] = "n1";
  pod.annotations[std::string(kAllocated)] = "n1-gpu0,NVIDIA,16000,0:;";
  Observe(pod);
  EXPECT_EQ(feed_.state().FindPod(pod.uid), nullptr);
  EXPECT_TRUE(CardFree("n1"));
  // Which of n2's cards it uses is unknown: n2 closes to NVIDIA pods (fail closed).
  EXPECT_EQ(feed_.unreadable_allocations(), 1u);
  EXPECT_FALSE(CardFree("n2"));
  // Not bound at all: the pod's own annotations charge nothing, and a bind cannot use them either (only a
  // decision of our filter is bound).
  pod.node_name.clear();
  Observe(pod);
  EXPECT_EQ(feed_.state().FindPod(pod.uid), nullptr);
  EXPECT_TRUE(CardFree("n1"));
  EXPECT_THAT(BindAs("gpu", pod.uid, "n1"), HasSubstr("holds no device reservation"));
  EXPECT_TRUE(writer_.bindings.empty());
}

TEST_F(IdentityTest, ARunningPodKeepsItsChargeWhenItsAnnotationsAreRemoved) {
  PodView real = Running("real", 16000, "n1");
  for (const auto& k : {keys::kAssignedNode, kAllocated}) real.annotations.erase(std::string(k));
  pods_[real.Key()] = real;  // the watch's event: a bound pod without an allocation is routed nowhere
  const auto none = [](const std::string&) { return false; };
  EXPECT_TRUE(feed_.Orphans(pods_, none).empty());
  EXPECT_FALSE(CardFree("n1"));
  // Gone: orphaned, released.
  pods_.erase(real.Key());
  EXPECT_EQ(feed_.Orphans(pods_, none), std::vector<std::string>{real.uid});
}

TEST_F(IdentityTest, AFilterOfAPodThatDoesNotExistReservesNothing) {
  const PodView made_up = testing::Pod("nobody", {testing::GpuCtr("main", 1, 16000, 0)});
  EXPECT_THAT(Filter(made_up, {"n1"}).error, HasSubstr("pod default/nobody does not exist"));
  EXPECT_EQ(feed_.state().FindPod(made_up.uid), nullptr);
  EXPECT_FALSE(ledger_.reserved(made_up.uid));
  EXPECT_TRUE(CardFree("n1"));
}

TEST_F(IdentityTest, AFilterJustAfterOurBindAnswersTheNodeItWasBoundTo) {
  PodView pod = GpuPod("quick", 16000);
  Filter(pod, {"n1"});
  EXPECT_EQ(Bind(pod, "n1"), "");
  // kube-scheduler gave up on the bind and filters again before our watch shows the pod bound.
  EXPECT_EQ(Filter(pod, {"n2", "n1"}).node_names, std::vector<std::string>{"n1"});
  ASSERT_NE(feed_.state().FindPod(pod.uid), nullptr);
  EXPECT_EQ(feed_.state().FindPod(pod.uid)->node, "n1");
}

TEST_F(IdentityTest, APodAskingForNoDeviceCannotCloseANode) {
  PodView cpu = testing::Pod("cpu", {testing::Ctr("main", {{"cpu", "1"}})});
  cpu.node_name = "n1";
  cpu.annotations[std::string(keys::kAssignedNode)] = "n1";
  cpu.annotations[std::string(kAllocated)] = "n1-gpu0,NVIDIA,lots,0:;";
  cpu.annotations[std::string(keys::kMigAllocations)] = "not a mig allocation";
  Observe(cpu);
  EXPECT_EQ(feed_.unreadable_allocations(), 0u);
  EXPECT_TRUE(CardFree("n1"));
}

TEST_F(IdentityTest, ARunningPodWhoseAllocationCannotBeReadClosesItsNodeToItsVendor) {
  PodView pod = GpuPod("odd", 16000);
  pod.node_name = "n1";
  pod.annotations[std::string(keys::kAssignedNode)] = "n1";
  pod.annotations[std::string(kAllocated)] = "n1-gpu0,NVIDIA,lots,0:;";
  Observe(pod);
  EXPECT_EQ(feed_.unreadable_allocations(), 1u);
  const PodView probe = GpuPod("probe", 1000);
  const auto refused = Filter(probe, {"n1"});
  ASSERT_TRUE(refused.failed_nodes.contains("n1"));
  EXPECT_THAT(refused.failed_nodes.at("n1"), HasSubstr("NodeBlocked: pod default/odd runs here"));
  EXPECT_THAT(writer_.Whats(), ::testing::Contains("event Warning UnreadableAllocation n1"));
  EXPECT_TRUE(CardFree("n2"));  // another node is not concerned
  // Mended: the node opens (and the pod's devices are charged).
  pod.annotations[std::string(kAllocated)] = "n1-gpu0,NVIDIA,8000,0:;";
  Observe(pod);
  EXPECT_EQ(feed_.unreadable_allocations(), 0u);
  EXPECT_EQ(Filter(GpuPod("half", 8000), {"n1"}).node_names, std::vector<std::string>{"n1"});
  // Unreadable again, then gone: the node opens.
  pod.annotations[std::string(kAllocated)] = "garbage";  // no device entry at all: as unreadable
  Observe(pod);
  EXPECT_FALSE(Filter(GpuPod("small", 100), {"n1"}).failed_nodes.empty());
  feed_.Forget(pod.uid);
  EXPECT_EQ(feed_.unreadable_allocations(), 0u);
  EXPECT_EQ(Filter(GpuPod("small2", 100), {"n1"}).node_names, std::vector<std::string>{"n1"});
}

TEST_F(IdentityTest, TheWebhookRefusesAPodCreatedWithAllocationAnnotations) {
  for (const char* scheduler : {"", "someone-else"}) {
    const auto [answer, pod] = testing::Admit(admission_, fmt::format(
        R"({{"metadata":{{"name":"forged","annotations":{{"hami.io/vgpu-node":"n1","hami.io/bind-phase":"success",
        "hami.io/vgpu-devices-allocated":"n1-gpu0,NVIDIA,16000,0:;","team":"a"}}}},
        "spec":{{"schedulerName":"{}","containers":[{{"name":"c","image":"x"}}]}}}})",
        scheduler));
    EXPECT_FALSE(answer.allowed) << scheduler;
    EXPECT_EQ(answer.code, 403);
    // HAMi's words, naming the first key in order.
    EXPECT_EQ(answer.message,
              "annotation hami.io/bind-phase is written by the scheduler and cannot be set when creating a "
              "pod");
    EXPECT_TRUE(answer.patch.empty());
  }
}

}  // namespace
}  // namespace hami
