#include "core/preemption.h"

#include <gtest/gtest.h>

#include <deque>

#include "core/scheduler.h"
#include "tests/support/builders.h"

namespace hami {
namespace {

using testing::Ctr;
using testing::Gpu;
using testing::GpuCtr;

constexpr const char* kDcuRegister = "hami.io/node-dcu-register";

// One container holding `mem` MiB of NVIDIA card `uuid`.
PodDevices OnCard(const std::string& uuid, std::int64_t mem) {
  return {{"NVIDIA", {{ContainerDevice{0, uuid, "NVIDIA", MiB(mem), Cores(0), {}}}}}};
}

// Nodes of NVIDIA GPUs (and Hygon DCUs), the pods bound there holding devices, and the preemptor's query.
class Preemption : public ::testing::Test {
 protected:
  Preemption() : backends_(testing::BuiltinBackends()), state_(backends_), chooser_(state_) {}

  // NVIDIA GPUs, and Hygon DCUs in their device plugin's colon list ("" for none).
  void GpuNode(const std::string& name, std::vector<DeviceInfo> gpus, std::string dcus = "") {
    NodeView n = testing::NvidiaNode(name, gpus);
    if (!dcus.empty()) n.annotations[kDcuRegister] = dcus;
    state_.UpsertNode(n);
  }
  // A pod bound to `node` holding `mem` MiB of card `uuid` (per container when there are several).
  const PodView* Running(const std::string& name, std::int32_t priority, const std::string& node,
                         std::vector<std::pair<std::string, std::int64_t>> cards,
                         const std::string& vendor = "NVIDIA", Labels labels = {}) {
    PodView& p = pods_.emplace_back(testing::Pod(name, {Ctr("c", {})}));
    p.priority = priority;
    p.node_name = node;
    p.labels = std::move(labels);
    PodAllocation a;
    a.uid = p.uid;
    a.ns = p.ns;
    a.name = p.name;
    a.node = node;
    ContainerDevices devices;
    for (const auto& [uuid, mem] : cards)
      devices.push_back(ContainerDevice{0, uuid, vendor, MiB(mem), Cores(0), {}});
    a.devices[vendor] = {devices};
    state_.AddPod(std::move(a));
    return &p;
  }
  PodView Preemptor(std::vector<ContainerView> containers, std::int32_t priority = 100) {
    PodView p = testing::Pod("high", std::move(containers));
    p.priority = priority;
    return p;
  }
  VictimChoice Choose(const PodView& preemptor, const std::string& node,
                      std::vector<const PodView*> required = {}, std::vector<DisruptionBudgetView> budgets = {}) {
    auto requests = CollectRequests(preemptor, backends_);
    auto ctx = DecisionContext(preemptor, state_, SchedulerOptions{"binpack", "binpack"});
    EXPECT_TRUE(requests && ctx);
    const auto find = [this](const std::string& key) -> const PodView* {
      for (const PodView& p : pods_) {
        if (p.Key() == key) return &p;
      }
      return nullptr;
    };
    return chooser_.ChooseOn(preemptor, *ctx, *requests, *state_.FindNode(node), required, find, budgets);
  }
  static std::vector<std::string> Names(const VictimChoice& c) {
    std::vector<std::string> out;
    for (const PodView* p : c.victims) out.push_back(p->name);
    return out;
  }
  static DisruptionBudgetView Budget(std::string app, std::int32_t allowed) {
    DisruptionBudgetView b;
    b.ns = "default";
    b.name = "pdb-" + app;
    b.selector.emplace().match_labels["app"] = std::move(app);
    b.disruptions_allowed = allowed;
    return b;
  }

  Backends backends_;
  ClusterState state_;
  VictimChooser chooser_;
  std::deque<PodView> pods_;  // stable addresses
};

TEST_F(Preemption, EvictsTheOnePodThatMakesRoom) {
  GpuNode("n1", {Gpu("g1", 0, 16000)});
  Running("low", 1, "n1", {{"g1", 10000}});
  const VictimChoice c = Choose(Preemptor({GpuCtr("c", 1, 10000, 0)}), "n1");
  ASSERT_TRUE(c.helps) << c.reason;
  EXPECT_EQ(Names(c), std::vector<std::string>{"low"});
  EXPECT_EQ(c.pdb_violations, 0);
  EXPECT_EQ(c.devices.at("NVIDIA").at(0).at(0).uuid, "g1");
}

TEST_F(Preemption, TakesAsManyAsTheFitNeedsAndPicksTheNodeWithFewer) {
  GpuNode("n1", {Gpu("g1", 0, 16000)});
  GpuNode("n2", {Gpu("g2", 0, 16000)});
  Running("one", 1, "n1", {{"g1", 10000}});
  Running("two-a", 1, "n2", {{"g2", 8000}});
  Running("two-b", 1, "n2", {{"g2", 8000}});
  const PodView high = Preemptor({GpuCtr("c", 1, 10000, 0)});
  std::map<std::string, VictimChoice> choices;
  choices["n1"] = Choose(high, "n1");
  choices["n2"] = Choose(high, "n2");
  EXPECT_EQ(Names(choices["n1"]), std::vector<std::string>{"one"});
  EXPECT_EQ(Names(choices["n2"]), (std::vector<std::string>{"two-a", "two-b"}));
  const std::string* best = PickPreemptionNode(choices);
  ASSERT_NE(best, nullptr);
  EXPECT_EQ(*best, "n1");
}

TEST_F(Preemption, NeverEvictsAPodOfEqualOrHigherPriority) {
  GpuNode("n1", {Gpu("g1", 0, 16000)});
  Running("peer", 100, "n1", {{"g1", 8000}});
  Running("boss", 200, "n1", {{"g1", 8000}});
  const VictimChoice c = Choose(Preemptor({GpuCtr("c", 1, 10000, 0)}, 100), "n1");
  EXPECT_FALSE(c.helps);
  EXPECT_NE(c.reason.find("no pod of lower priority"), std::string::npos) << c.reason;
}

TEST_F(Preemption, LeavesOutANodeWhereEvictingEveryLowerPodIsNotEnough) {
  GpuNode("n1", {Gpu("g1", 0, 16000)});
  Running("low", 1, "n1", {{"g1", 4000}});
  Running("boss", 200, "n1", {{"g1", 10000}});
  const VictimChoice c = Choose(Preemptor({GpuCtr("c", 1, 8000, 0)}), "n1");
  EXPECT_FALSE(c.helps);
  EXPECT_NE(c.reason.find("evicting all 1 pods of lower priority"), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("CardInsufficientMemory"), std::string::npos) << c.reason;
}

TEST_F(Preemption, EvictsTheLowestPriorityFirst) {
  GpuNode("n1", {Gpu("g1", 0, 16000)});
  Running("mid", 5, "n1", {{"g1", 8000}});
  Running("lowest", 1, "n1", {{"g1", 8000}});
  EXPECT_EQ(Names(Choose(Preemptor({GpuCtr("c", 1, 8000, 0)}), "n1")), std::vector<std::string>{"lowest"});
}

TEST_F(Preemption, EvictsTheFewestPods) {
  GpuNode("n1", {Gpu("g1", 0, 16000)});
  Running("small-a", 1, "n1", {{"g1", 2000}});
  Running("small-b", 1, "n1", {{"g1", 2000}});
  Running("big", 1, "n1", {{"g1", 8000}});
  EXPECT_EQ(Names(Choose(Preemptor({GpuCtr("c", 1, 10000, 0)}), "n1")), std::vector<std::string>{"big"});
}

TEST_F(Preemption, SparesAPodABudgetProtectsWhenAnotherChoiceExists) {
  GpuNode("n1", {Gpu("g1", 0, 16000)});
  Running("guarded", 1, "n1", {{"g1", 8000}}, "NVIDIA", {{"app", "db"}});
  Running("free", 1, "n1", {{"g1", 8000}}, "NVIDIA", {{"app", "batch"}});
  const PodView high = Preemptor({GpuCtr("c", 1, 8000, 0)});
  VictimChoice c = Choose(high, "n1", {}, {Budget("db", 0)});
  EXPECT_EQ(Names(c), std::vector<std::string>{"free"});
  EXPECT_EQ(c.pdb_violations, 0);
  // When both must go, the set counts the violation.
  c = Choose(Preemptor({GpuCtr("c", 1, 16000, 0)}), "n1", {}, {Budget("db", 0)});
  EXPECT_EQ(Names(c), (std::vector<std::string>{"free", "guarded"}));
  EXPECT_EQ(c.pdb_violations, 1);
}

TEST_F(Preemption, PrefersThePodsOnTheCardTheFitTakes) {
  GpuNode("n1", {Gpu("g1", 0, 8000), Gpu("g2", 1, 8000)});
  Running("on-g1", 1, "n1", {{"g1", 4000}});
  Running("on-g2", 1, "n1", {{"g2", 4000}});
  const VictimChoice c = Choose(Preemptor({GpuCtr("c", 1, 8000, 0)}), "n1");
  ASSERT_EQ(c.victims.size(), 1u);
  // The freed card is the one the preemptor's devices are placed on.
  const std::string freed = c.victims[0]->name == "on-g1" ? "g1" : "g2";
  EXPECT_EQ(c.devices.at("NVIDIA").at(0).at(0).uuid, freed);
}

TEST_F(Preemption, KeepsKubeSchedulersVictimsAndAddsNoneWhenThoseAreEnough) {
  GpuNode("n1", {Gpu("g1", 0, 16000)});
  const PodView* mid = Running("mid", 5, "n1", {{"g1", 8000}});
  Running("lowest", 1, "n1", {{"g1", 8000}});
  const VictimChoice c = Choose(Preemptor({GpuCtr("c", 1, 8000, 0)}), "n1", {mid});
  EXPECT_EQ(Names(c), std::vector<std::string>{"mid"});
}

TEST_F(Preemption, TerminatingPodsCountAsGoneAndAreNotNamed) {
  GpuNode("n1", {Gpu("g1", 0, 16000)});
  PodView* leaving = const_cast<PodView*>(Running("leaving", 1, "n1", {{"g1", 10000}}));
  leaving->terminating = true;
  const VictimChoice c = Choose(Preemptor({GpuCtr("c", 1, 10000, 0)}), "n1");
  EXPECT_TRUE(c.helps);
  EXPECT_TRUE(c.victims.empty());
}

TEST_F(Preemption, AMultiContainerPodNeedsEveryCardItsContainersTake) {
  GpuNode("n1", {Gpu("g1", 0, 16000), Gpu("g2", 1, 16000)});
  Running("a", 1, "n1", {{"g1", 8000}});
  Running("b", 1, "n1", {{"g2", 8000}});
  const VictimChoice c = Choose(Preemptor({GpuCtr("one", 1, 12000, 0), GpuCtr("two", 1, 12000, 0)}), "n1");
  EXPECT_EQ(Names(c), (std::vector<std::string>{"a", "b"}));
}

TEST_F(Preemption, TwoVendorsOnOneNode) {
  GpuNode("n1", {Gpu("g1", 0, 16000)}, "d1,4,16000,100,DCU,0,true,0,hami-core:");
  Running("gpu-user", 1, "n1", {{"g1", 10000}});
  Running("dcu-user", 1, "n1", {{"d1", 10000}}, "DCU");
  const ContainerView dcu = Ctr("d", {{"hygon.com/dcunum", "1"}, {"hygon.com/dcumem", "10000"}});
  EXPECT_EQ(Names(Choose(Preemptor({dcu}), "n1")), std::vector<std::string>{"dcu-user"});
  EXPECT_EQ(Names(Choose(Preemptor({GpuCtr("g", 1, 10000, 0), dcu}), "n1")),
            (std::vector<std::string>{"dcu-user", "gpu-user"}));
}

TEST_F(Preemption, ANominatedPodsHoldStaysForPodsItOutranks) {
  GpuNode("n1", {Gpu("g1", 0, 16000)});
  Running("low", 1, "n1", {{"g1", 8000}});
  PodView nominated = Preemptor({GpuCtr("c", 1, 8000, 0)}, 500);
  nominated.name = "nominated";
  nominated.uid = "uid-nominated";
  state_.Nominate(500, AllocationOf(nominated, "n1", OnCard("g1", 8000), backends_, true));
  EXPECT_FALSE(Choose(Preemptor({GpuCtr("c", 1, 10000, 0)}, 100), "n1").helps);
  // One that outranks the nominated pod may take its devices.
  EXPECT_EQ(Names(Choose(Preemptor({GpuCtr("c", 1, 10000, 0)}, 900), "n1")), std::vector<std::string>{"low"});
}

TEST(PdbViolations, BudgetsAreUsedMostImportantFirstAndSkipDisruptedPods) {
  PodView a = testing::Pod("a", {});
  a.priority = 5;
  a.labels["app"] = "db";
  PodView b = testing::Pod("b", {});
  b.priority = 1;
  b.labels["app"] = "db";
  PodView other_ns = testing::Pod("c", {}, {}, {}, "other");
  other_ns.labels["app"] = "db";
  DisruptionBudgetView budget;
  budget.ns = "default";
  budget.selector.emplace().match_labels["app"] = "db";
  budget.disruptions_allowed = 1;
  std::vector<const PodView*> pods{&a, &b, &other_ns};
  std::vector<DisruptionBudgetView> budgets{budget};
  EXPECT_EQ(PdbViolations(pods, budgets), (std::vector<bool>{false, true, false}));
  budgets[0].disrupted_pods = {"a"};  // being evicted already: it uses none of what is left
  EXPECT_EQ(PdbViolations(pods, budgets), (std::vector<bool>{false, false, false}));
  budgets[0].selector.emplace();  // an empty selector covers every pod of the namespace
  budgets[0].disrupted_pods.clear();
  budgets[0].disruptions_allowed = 0;
  EXPECT_EQ(PdbViolations(pods, budgets), (std::vector<bool>{true, true, false}));
  budgets[0].selector.reset();  // none covers no pod, as kube-scheduler counts
  EXPECT_EQ(PdbViolations(pods, budgets), (std::vector<bool>{false, false, false}));
  // A pod stops at the first budget it violates: the next budget keeps its disruption for the next pod.
  a.labels["tier"] = "x";
  PodView c = testing::Pod("c", {});
  c.labels["tier"] = "x";
  DisruptionBudgetView tier;
  tier.ns = "default";
  tier.selector.emplace().match_labels["tier"] = "x";
  tier.disruptions_allowed = 1;
  budgets[0].selector.emplace().match_labels["app"] = "db";  // allows none
  budgets.push_back(tier);
  const std::vector<const PodView*> two{&a, &c};
  EXPECT_EQ(PdbViolations(two, budgets), (std::vector<bool>{true, false}));
}

TEST(LabelSelectorTest, EveryRequirementHolds) {
  LabelSelector s;
  s.match_labels["app"] = "db";
  s.expressions.push_back({"tier", LabelSelector::Requirement::Op::kIn, {"gold", "silver"}});
  s.expressions.push_back({"canary", LabelSelector::Requirement::Op::kDoesNotExist, {}});
  EXPECT_TRUE(s.Matches({{"app", "db"}, {"tier", "gold"}}));
  EXPECT_FALSE(s.Matches({{"app", "db"}, {"tier", "bronze"}}));
  EXPECT_FALSE(s.Matches({{"app", "db"}, {"tier", "gold"}, {"canary", ""}}));
  EXPECT_FALSE(s.Matches({{"tier", "gold"}}));
  s.expressions.push_back({"zone", LabelSelector::Requirement::Op::kNotIn, {"a"}});
  EXPECT_TRUE(s.Matches({{"app", "db"}, {"tier", "gold"}}));
  EXPECT_FALSE(s.Matches({{"app", "db"}, {"tier", "gold"}, {"zone", "a"}}));
}

// The filter leaves a nominated pod's devices alone for every pod it does not outrank.
TEST(Nominations, FilterCountsTheHoldForPodsOfLowerOrEqualPriority) {
  testing::FitCluster c;
  c.state.UpsertNode(testing::NvidiaNode("n", {Gpu("g1", 0, 16000)}));
  PodView nominated = testing::Pod("nominated", {GpuCtr("c", 1, 10000, 0)});
  nominated.priority = 100;
  c.state.Nominate(100, AllocationOf(nominated, "n", OnCard("g1", 10000), c.backends, true));
  PodView low = testing::Pod("low", {GpuCtr("c", 1, 10000, 0)});
  low.priority = 100;
  EXPECT_NE(testing::Failure(c.Run(low)).find("CardInsufficientMemory"), std::string::npos);
  PodView small = testing::Pod("small", {GpuCtr("c", 1, 6000, 0)});
  EXPECT_EQ(testing::Failure(c.Run(small)), "<fits>");  // what the hold leaves
  PodView higher = testing::Pod("higher", {GpuCtr("c", 1, 10000, 0)});
  higher.priority = 101;
  EXPECT_EQ(testing::Failure(c.Run(higher)), "<fits>");
  EXPECT_EQ(testing::Failure(c.Run(nominated)), "<fits>");  // its own hold is its own
  // Reserved by a decision: the ledger charges it, the hold no longer counts twice.
  Scheduler s(c.state, SchedulerOptions{"spread", "binpack"});
  s.Reserve(nominated, s.Filter(nominated, {"n"}, c.now));
  EXPECT_EQ(testing::Failure(c.Run(small)), "<fits>");
  c.state.ClearNomination(nominated.uid);
  EXPECT_EQ(testing::Failure(c.Run(small)), "<fits>");
  EXPECT_NE(testing::Failure(c.Run(low)).find("CardInsufficientMemory"), std::string::npos);
}

// The requeue's what-if: the pod nominated to the node is fitted first, into its place; a pod it does not
// outrank finds the place taken, one that outranks it does not.
TEST(Nominations, FitInTurnFitsTheNominatedPodFirstAndKeepsItsPlace) {
  testing::FitCluster c;
  c.state.UpsertNode(testing::NvidiaNode("n", {Gpu("g1", 0, 16000)}));
  PodView urgent = testing::Pod("urgent", {GpuCtr("c", 1, 10000, 0)});
  urgent.priority = 100;
  urgent.nominated_node_name = "n";
  c.state.Nominate(100, AllocationOf(urgent, "n", OnCard("g1", 10000), c.backends, true));
  PodView polite = testing::Pod("polite", {GpuCtr("c", 1, 10000, 0)});
  polite.priority = 100;
  PodView boss = testing::Pod("boss", {GpuCtr("c", 1, 6000, 0)});
  boss.priority = 200;
  Scheduler s(c.state, SchedulerOptions{"spread", "binpack"});
  const std::vector<const PodView*> refused{&polite, &urgent};
  EXPECT_EQ(s.FitInTurn(refused, "n"), (std::vector<bool>{false, true}));
  const std::vector<const PodView*> alone{&polite};
  EXPECT_EQ(s.FitInTurn(alone, "n"), std::vector<bool>{false});  // the hold stays without its pod
  const std::vector<const PodView*> outranking{&boss};
  EXPECT_EQ(s.FitInTurn(outranking, "n"), std::vector<bool>{true});
  // Once the nominated pod took its place, a pod that outranks its hold finds the place taken.
  PodView big_boss = testing::Pod("big-boss", {GpuCtr("c", 1, 7000, 0)});
  big_boss.priority = 200;
  const std::vector<const PodView*> after{&urgent, &big_boss};
  EXPECT_EQ(s.FitInTurn(after, "n"), (std::vector<bool>{true, false}));
}

}  // namespace
}  // namespace hami
