// Requeue: which pods our filter refused are nudged for kube-scheduler to try again, and when (the rules in
// extender/requeue.h and docs/DECISIONS.md "Requeue"); the refusals /filter tells apart; a reservation
// kube-scheduler abandoned.
#include "extender/requeue.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/keys.h"
#include "tests/unit/extender/services_fixture.h"

namespace hami {
namespace {

using testing::RunCoro;

class RequeueTest : public testing::ServicesTest {
 protected:
  // A pod of ours asking for `mem` MiB of one GPU (the node's card has 16000).
  PodView Asking(const std::string& name, std::int64_t mem,
                 std::map<std::string, std::string> annotations = {}) {
    PodView p = testing::Pod(name, {testing::GpuCtr("main", 1, mem, 30)}, {}, std::move(annotations));
    p.scheduler_name = "hami-scheduler";
    p.resource_version = "7";
    pods_[p.Key()] = p;
    writer_.pods[p.Key()] = p;
    return p;
  }
  std::vector<std::string> Nudged() {
    RunCoro(ioc_, requeue_.SendQueued());
    std::vector<std::string> out;
    for (const auto& c : writer_.calls) {
      if (c.what.starts_with("patch pod ") && c.patch.at("metadata").at("annotations").as_object().contains(
                                                   std::string(keys::kRequeue))) {
        EXPECT_EQ(c.budget, extender::Budget::kBackground);
        out.push_back(c.what.substr(10));
      }
    }
    return out;
  }
};

TEST_F(RequeueTest, APodRefusedForCapacityIsNudgedOnceTheCardItNeedsIsFreed) {
  AddNode("n1");
  const PodView holder = Asking("holder", 10000);
  ASSERT_EQ(Filter(holder, {"n1"}).node_names, std::vector<std::string>{"n1"});
  const PodView waiting = Asking("waiting", 10000);
  const auto refused = Filter(waiting, {"n1"});
  EXPECT_TRUE(refused.failed_nodes.contains("n1")) << "pods leaving n1 can make room";
  EXPECT_TRUE(refused.failed_and_unresolvable.empty());
  EXPECT_EQ(requeue_.candidates(), 1u);
  requeue_.Pass();
  EXPECT_TRUE(Nudged().empty()) << "nothing freed yet";

  ledger_.Release(holder.uid);  // the holder is gone
  requeue_.Pass();
  EXPECT_EQ(Nudged(), std::vector<std::string>{"default/waiting"});
  requeue_.Pass();
  EXPECT_EQ(Nudged().size(), 1u) << "once per refusal";

  // Filtered again (kube-scheduler took the nudge): decided, nothing more to nudge.
  ASSERT_EQ(Filter(waiting, {"n1"}).node_names, std::vector<std::string>{"n1"});
  EXPECT_EQ(requeue_.candidates(), 0u);
}

// One freed card nudges the pods it can take, in priority order, not every pod refused.
TEST_F(RequeueTest, AFreedCardNudgesOnlyThePodsItCanTake) {
  AddNode("n1");
  const PodView holder = Asking("holder", 16000);
  ASSERT_EQ(Filter(holder, {"n1"}).node_names, std::vector<std::string>{"n1"});
  for (const char* name : {"p1", "p2", "p3", "p4"}) Filter(Asking(name, 9000), {"n1"});
  PodView urgent = Asking("urgent", 9000);
  urgent.priority = 100;
  pods_[urgent.Key()] = urgent;
  Filter(urgent, {"n1"});
  EXPECT_EQ(requeue_.candidates(), 5u);
  requeue_.Pass();
  ledger_.Release(holder.uid);
  requeue_.Pass();
  EXPECT_EQ(Nudged(), std::vector<std::string>{"default/urgent"}) << "9000 MiB twice is more than the card";
}

// Refusals no pod leaving can lift go to FailedAndUnresolvableNodes; a pod that fits no such node however
// its devices change (a GPU type the node lacks) is never nudged.
TEST_F(RequeueTest, APodRefusedOnlyForWhatNoCapacityLiftsIsNeverNudged) {
  AddNode("n1");
  const PodView too_big = Asking("too-big", 20000);
  const auto big = Filter(too_big, {"n1", "gone"});
  EXPECT_TRUE(big.failed_nodes.empty());
  EXPECT_EQ(big.failed_and_unresolvable.size(), 2u) << "larger than the empty card; not registered";
  const PodView wrong_type = Asking("wrong-type", 1000, {{"nvidia.com/use-gputype", "A100"}});
  EXPECT_TRUE(Filter(wrong_type, {"n1"}).failed_and_unresolvable.contains("n1"));
  feed_.UpsertNode(
      testing::NvidiaNode("n1", {testing::Gpu("n1-gpu0", 0, 16000), testing::Gpu("n1-gpu1", 1, 16000)}));
  requeue_.Pass();
  EXPECT_TRUE(Nudged().empty());
}

// A bind that timed out on a node lock: nudged when the node shows the lock released, not before.
TEST_F(RequeueTest, ABindThatWaitedForALockIsNudgedWhenTheLockIsReleased) {
  AddNode("n1");
  const PodView pod = Asking("locked-out", 1000);
  requeue_.WaitsForLock(pod, "n1");
  NodeView locked = testing::NvidiaNode("n1", {testing::Gpu("n1-gpu0", 0, 16000)});
  locked.annotations["hami.io/mutex.lock"] = "2026-12-05T07:00:00Z,default,other";
  requeue_.NodeSeen(locked);
  EXPECT_EQ(requeue_.queued(), 0u);
  locked.annotations.erase("hami.io/mutex.lock");
  requeue_.NodeSeen(locked);
  EXPECT_EQ(Nudged(), std::vector<std::string>{"default/locked-out"});
}

// A pod bound, gated or gone when its turn comes is not patched.
TEST_F(RequeueTest, OnlyPodsStillWaitingForKubeSchedulerArePatched) {
  AddNode("n1");
  const PodView holder = Asking("holder", 16000);
  ASSERT_EQ(Filter(holder, {"n1"}).node_names, std::vector<std::string>{"n1"});
  Filter(Asking("gated", 9000), {"n1"});
  Filter(Asking("later", 9000), {"n1"});
  requeue_.Pass();
  ledger_.Release(holder.uid);
  requeue_.Pass();
  EXPECT_EQ(requeue_.queued(), 1u) << "one card of 16000 MiB takes one of them: the older refusal";
  pods_["default/gated"].scheduling_gated = true;  // a scheduling gate added meanwhile
  EXPECT_TRUE(Nudged().empty());
  EXPECT_EQ(requeue_.stats().skipped, 1u);
  requeue_.Pass();  // the room the gated pod did not take is the next one's
  EXPECT_EQ(Nudged(), std::vector<std::string>{"default/later"});
}

// A nudge still queued when the filter decides its pod (kube-scheduler tried it anyway) is not sent.
TEST_F(RequeueTest, ANudgeForAPodDecidedMeanwhileIsNotSent) {
  AddNode("n1");
  const PodView holder = Asking("holder", 16000);
  ASSERT_EQ(Filter(holder, {"n1"}).node_names, std::vector<std::string>{"n1"});
  const PodView waiting = Asking("waiting", 9000);
  Filter(waiting, {"n1"});
  requeue_.Pass();
  ledger_.Release(holder.uid);
  requeue_.Pass();
  EXPECT_EQ(requeue_.queued(), 1u);
  ASSERT_EQ(Filter(waiting, {"n1"}).node_names, std::vector<std::string>{"n1"});
  EXPECT_TRUE(Nudged().empty());
}

// A node that did not fit the pod even idle is looked at again when its devices change: a larger card
// registered there lets the pod in, and it is nudged.
TEST_F(RequeueTest, APodRefusedOnANodeTooSmallIsNudgedWhenTheNodeGetsALargerCard) {
  AddNode("n1");
  const PodView big = Asking("big", 20000);
  EXPECT_TRUE(Filter(big, {"n1"}).failed_and_unresolvable.contains("n1"));
  EXPECT_EQ(requeue_.candidates(), 1u);
  requeue_.Pass();
  EXPECT_TRUE(Nudged().empty());
  feed_.UpsertNode(
      testing::NvidiaNode("n1", {testing::Gpu("n1-gpu0", 0, 16000), testing::Gpu("n1-gpu1", 1, 32000)}));
  requeue_.Pass();
  EXPECT_EQ(Nudged(), std::vector<std::string>{"default/big"});
}

TEST(ReservationAbandoned, ByAReportAfterTheFilterOrAnotherNomination) {
  extender::Reservation r;
  r.node = "n1";
  r.condition_sent = {"False", "Unschedulable", "0/3 nodes are available", "2026-12-05T07:00:00Z"};
  r.condition_seen = r.condition_sent;
  PodView pod;
  pod.scheduled = r.condition_sent;
  EXPECT_FALSE(r.AbandonedBy(pod)) << "the report the filter saw already";
  pod.scheduled.message = "binding rejected: the extender timed out";
  EXPECT_TRUE(r.AbandonedBy(pod)) << "a report written after the filter";
  pod.node_name = "n1";
  EXPECT_FALSE(r.AbandonedBy(pod)) << "bound";
  PodView nominated;
  nominated.scheduled = r.condition_sent;
  nominated.nominated_node_name = "n1";
  EXPECT_FALSE(r.AbandonedBy(nominated)) << "the node reserved";
  nominated.nominated_node_name = "n2";
  EXPECT_TRUE(r.AbandonedBy(nominated));
  r.nominated_sent = "n3";  // left from an earlier preemption when the filter decided
  nominated.nominated_node_name = "n3";
  EXPECT_FALSE(r.AbandonedBy(nominated)) << "a nomination older than the reservation";
}

}  // namespace
}  // namespace hami
