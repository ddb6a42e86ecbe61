// PreemptService: /preempt's answers against the pod cache and the ledger, its refusals of input the caches
// contradict, and the nominations that follow an answer.
#include <gtest/gtest.h>

#include "tests/unit/extender/services_fixture.h"

namespace hami::testing {
namespace {

class PreemptTest : public ServicesTest {
 protected:
  PreemptTest() {
    AddNode("n1");
    AddNode("n2");
  }
  // A pod bound to `node` holding `mem` MiB of its card, in the pod cache and the ledger.
  PodView Running(const std::string& name, const std::string& node, std::int64_t mem,
                  std::int32_t priority = 1) {
    PodView p = testing::Pod(name, {testing::GpuCtr("main", 1, mem, 0)});
    p.node_name = node;
    p.priority = priority;
    pods_[p.Key()] = p;
    PodDevices devices{{"NVIDIA", {{ContainerDevice{0, node + "-gpu0", "NVIDIA", MiB(mem), Cores(0), {}}}}}};
    feed_.state().AddPod(AllocationOf(p, node, std::move(devices), backends_, false));
    return p;
  }
  PodView High(std::int64_t mem, std::int32_t priority = 1000) {
    PodView p = testing::Pod("high", {testing::GpuCtr("main", 1, mem, 0)});
    p.priority = priority;
    p.scheduler_name = "hami-scheduler";
    pods_[p.Key()] = p;
    return p;
  }
  using Victims = std::map<std::string, std::vector<std::string>>;
  Result<std::map<std::string, k8s::MetaVictims>> Preempt(const PodView& pod, Victims victims) {
    k8s::ExtenderPreemptionArgs args;
    args.pod = pod;
    for (const auto& [node, uids] : victims) args.pdb_violations[node] = 0;
    args.victims = std::move(victims);
    return preempt_.Preempt(args);
  }
  std::string Metrics() {
    k8s::prom::TextWriter w;
    preempt_.WriteMetrics(w);
    return w.Take();
  }
};

TEST_F(PreemptTest, NamesTheVictimsWhereTheyHelpAndLeavesOutTheRest) {
  const PodView one = Running("one", "n1", 10000);
  Running("two-a", "n2", 7000);
  Running("two-b", "n2", 7000);
  Running("peer", "n2", 2000, 1000);  // not outranked: it stays
  auto out = Preempt(High(14000), {{"n1", {}}, {"n2", {}}});
  ASSERT_TRUE(out) << out.error().message;
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ(out->at("n1").uids, std::vector<std::string>{one.uid});
  EXPECT_EQ(out->at("n2").uids, (std::vector<std::string>{"uid-two-a", "uid-two-b"}));
  // Asking more than evicting every lower pod frees: the node is left out.
  out = Preempt(High(16000), {{"n1", {}}, {"n2", {}}});
  ASSERT_TRUE(out);
  EXPECT_EQ(out->size(), 1u);
  EXPECT_TRUE(out->contains("n1"));
  EXPECT_NE(Metrics().find("hami_scheduler_preempt_answers_total{result=\"victims\"} 2"), std::string::npos);
}

TEST_F(PreemptTest, CountsTheBudgetsItsVictimsViolate) {
  PodView guarded = Running("guarded", "n1", 8000);
  guarded.labels["app"] = "db";
  pods_[guarded.Key()] = guarded;
  Running("other", "n1", 8000);
  DisruptionBudgetView budget;
  budget.ns = "default";
  budget.name = "db";
  budget.selector.emplace().match_labels["app"] = "db";
  budgets_["default/db"] = budget;
  auto out = Preempt(High(8000), {{"n1", {}}});
  ASSERT_TRUE(out);
  EXPECT_EQ(out->at("n1").uids, std::vector<std::string>{"uid-other"});
  EXPECT_EQ(out->at("n1").pdb_violations, 0);
  out = Preempt(High(16000), {{"n1", {}}});
  ASSERT_TRUE(out);
  EXPECT_EQ(out->at("n1").pdb_violations, 1);
}

TEST_F(PreemptTest, KeepsKubeSchedulersVictimsEvenWhenTheyHoldNoDevice) {
  PodView cpu_only = testing::Pod("cpu-only", {testing::Ctr("c", {})});
  cpu_only.node_name = "n1";
  pods_[cpu_only.Key()] = cpu_only;
  Running("holder", "n1", 10000);
  auto out = Preempt(High(10000), {{"n1", {cpu_only.uid}}});
  ASSERT_TRUE(out) << out.error().message;
  // Most important first: the holder's priority is 1, the other's 0.
  EXPECT_EQ(out->at("n1").uids, (std::vector<std::string>{"uid-holder", "uid-cpu-only"}));
}

TEST_F(PreemptTest, ANeverPreemptingPodEvictsNothing) {
  Running("one", "n1", 10000);
  PodView polite = High(10000);
  polite.never_preempts = true;
  auto out = Preempt(polite, {{"n1", {}}});
  ASSERT_TRUE(out);
  EXPECT_TRUE(out->empty());
}

TEST_F(PreemptTest, AnotherSchedulersPodKeepsKubeSchedulersAnswer) {
  const PodView one = Running("one", "n1", 10000);
  PodView other = High(10000);
  other.scheduler_name = "default-scheduler";
  auto out = Preempt(other, {{"n1", {one.uid}}, {"n2", {}}});
  ASSERT_TRUE(out);
  EXPECT_EQ(out->at("n1").uids, std::vector<std::string>{one.uid});
  EXPECT_TRUE(out->at("n2").uids.empty());
}

TEST_F(PreemptTest, ANodeTheCachesContradictIsLeftOutAndTheOthersAnswered) {
  const PodView one = Running("one", "n1", 10000);
  const PodView peer = Running("peer", "n2", 10000, 1000);
  const PodView high = High(10000);
  for (const Victims& victims : std::vector<Victims>{{{"n9", {}}},           // not registered
                                                     {{"n1", {"uid-nobody"}}},  // no such pod
                                                     {{"n2", {one.uid}}},       // bound elsewhere
                                                     {{"n1", {one.uid, one.uid}}},
                                                     {{"n2", {peer.uid}}}}) {  // not of lower priority
    auto out = Preempt(high, victims);
    ASSERT_TRUE(out) << out.error().message;
    EXPECT_TRUE(out->empty()) << victims.begin()->first;
  }
  // The good node of a request is answered all the same.
  auto out = Preempt(high, {{"n1", {}}, {"n9", {}}});
  ASSERT_TRUE(out);
  EXPECT_EQ(out->at("n1").uids, std::vector<std::string>{one.uid});
  EXPECT_FALSE(out->contains("n9"));
  EXPECT_NE(Metrics().find("hami_scheduler_preempt_nodes_contradicted_total 6"), std::string::npos)
      << Metrics();
  budgets_synced_ = false;
  auto unsynced = Preempt(high, {{"n1", {}}});
  ASSERT_FALSE(unsynced);
  EXPECT_NE(unsynced.error().message.find("PodDisruptionBudget cache has not synced"), std::string::npos);
  EXPECT_EQ(feed_.state().NominationOf(high.uid), nullptr);
}

TEST_F(PreemptTest, AnAnswerForAPodTheCacheDoesNotHaveIsNotKept) {
  Running("one", "n1", 10000);
  PodView made_up = High(10000);
  made_up.uid = "uid-made-up";  // the cache has default/high with another uid
  ASSERT_TRUE(Preempt(made_up, {{"n1", {}}}));
  made_up.nominated_node_name = "n1";
  preempt_.OnPod(made_up);
  EXPECT_EQ(feed_.state().NominationOf(made_up.uid), nullptr);
}

TEST_F(PreemptTest, ANominatedPodHoldsWhatItsVictimsFreeUntilItIsBound) {
  Running("one", "n1", 10000);
  PodView high = High(10000);
  ASSERT_TRUE(Preempt(high, {{"n1", {}}}));
  // kube-scheduler evicts and nominates.
  high.nominated_node_name = "n1";
  preempt_.OnPod(high);
  const PodAllocation* hold = feed_.state().NominationOf(high.uid);
  ASSERT_NE(hold, nullptr);
  EXPECT_EQ(hold->node, "n1");
  EXPECT_EQ(hold->devices.at("NVIDIA").at(0).at(0).mem, MiB(10000));
  feed_.state().RemovePod("uid-one");  // the victim is gone
  // A pod it outranks does not get the freed card; the nominated pod does.
  PodView lower = testing::Pod("lower", {testing::GpuCtr("main", 1, 10000, 0)});
  lower.priority = 5;
  pods_[lower.Key()] = lower;
  writer_.pods[lower.Key()] = lower;
  EXPECT_TRUE(Filter(lower, {"n1"}).node_names->empty());
  writer_.pods[high.Key()] = high;
  EXPECT_EQ(*Filter(high, {"n1"}).node_names, std::vector<std::string>{"n1"});
  // Bound: the nomination ends.
  high.node_name = "n1";
  preempt_.OnPod(high);
  EXPECT_EQ(feed_.state().NominationOf(high.uid), nullptr);
}

TEST_F(PreemptTest, OnlyANominationThatFollowsOurAnswerHolds) {
  Running("one", "n1", 10000);
  Running("two", "n2", 10000);
  PodView high = High(10000);
  // Nominated without our answer (kube-scheduler's own victims, its expectation while binding, a restart):
  // nothing is held.
  high.nominated_node_name = "n1";
  preempt_.OnPod(high);
  EXPECT_EQ(feed_.state().NominationOf(high.uid), nullptr);
  ASSERT_TRUE(Preempt(high, {{"n1", {}}, {"n2", {}}}));
  high.nominated_node_name = "n2";
  preempt_.OnPod(high);
  EXPECT_EQ(feed_.state().NominationOf(high.uid)->node, "n2");
  high.nominated_node_name = "n1";  // nominated elsewhere: the hold moves
  preempt_.OnPod(high);
  EXPECT_EQ(feed_.state().NominationOf(high.uid)->node, "n1");
  high.nominated_node_name.clear();
  preempt_.OnPod(high);
  EXPECT_EQ(feed_.state().NominationOf(high.uid), nullptr);
  high.nominated_node_name = "n1";
  preempt_.OnPod(high);
  preempt_.Forget(high.uid);  // deleted
  EXPECT_EQ(feed_.state().NominationOf(high.uid), nullptr);
  high.nominated_node_name = "n2";  // and its answer with it
  preempt_.OnPod(high);
  EXPECT_EQ(feed_.state().NominationOf(high.uid), nullptr);
}

}  // namespace
}  // namespace hami::testing
