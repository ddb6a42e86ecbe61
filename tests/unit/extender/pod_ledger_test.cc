// The pod ledger: one record per pod uid, its phase read from the record's facts, and Release ending a pod's
// hold in the usage ledger and the reservation together.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "extender/pod_ledger.h"
#include "tests/unit/extender/services_fixture.h"

namespace hami {
namespace {

using extender::PodLedger;
using Phase = PodLedger::Phase;
using testing::ServicesTest;

class PodLedgerTest : public ServicesTest {
 protected:
  void SetUp() override { AddNode("n1"); }
  // A pod our filter decided for: charged in ClusterState, reserved in the ledger.
  PodView Decided(const std::string& name) {
    const PodView pod = GpuPod(name);
    EXPECT_EQ(Filter(pod, {"n1"}).node_names, std::vector<std::string>{"n1"});
    return pod;
  }
};

TEST_F(PodLedgerTest, APodGoesFromReservedThroughBindingToBoundAndLeavesWhenTheWatchShowsIt) {
  const PodView pod = Decided("p");
  EXPECT_EQ(ledger_.PhaseOf(pod.uid), Phase::kReserved);
  ASSERT_TRUE(ledger_.BeginBind(pod.Key(), pod.uid));
  EXPECT_EQ(ledger_.PhaseOf(pod.uid), Phase::kBinding);
  EXPECT_TRUE(ledger_.Binding(pod.Key(), pod.uid));
  EXPECT_FALSE(ledger_.Binding("default/other", pod.uid));
  EXPECT_TRUE(ledger_.AnyBindOf(pod.Key()));
  EXPECT_EQ(ledger_.binds_running(), 1u);
  ledger_.MarkBound(pod.uid, "n1");
  ledger_.EndBind(pod.uid);
  EXPECT_EQ(ledger_.PhaseOf(pod.uid), Phase::kBound);
  ASSERT_NE(ledger_.BoundTo(pod.uid), nullptr);
  EXPECT_EQ(*ledger_.BoundTo(pod.uid), "n1");
  EXPECT_EQ(ledger_.binds_running(), 0u);
  EXPECT_FALSE(ledger_.AnyBindOf(pod.Key()));
  // The watch shows the pod bound with the Binding's annotations: the record goes, the charge stays.
  ledger_.ShownBound(pod.uid);
  ledger_.DropReservation(pod.uid);
  EXPECT_EQ(ledger_.PhaseOf(pod.uid), Phase::kNone);
  EXPECT_EQ(ledger_.size(), 0u);
  EXPECT_NE(feed_.state().FindPod(pod.uid), nullptr);
}

TEST_F(PodLedgerTest, ASecondBindOfAPodWhoseBindRunsIsRefusedAndChangesNothing) {
  const PodView pod = Decided("p");
  ASSERT_TRUE(ledger_.BeginBind(pod.Key(), pod.uid));
  EXPECT_FALSE(ledger_.BeginBind(pod.Key(), pod.uid));
  EXPECT_EQ(ledger_.binds_running(), 1u);
  ledger_.EndBind(pod.uid);
  EXPECT_EQ(ledger_.binds_running(), 0u);
  EXPECT_EQ(ledger_.PhaseOf(pod.uid), Phase::kReserved);  // a failed bind keeps the reservation
}

TEST_F(PodLedgerTest, ReleaseEndsTheChargeAndTheReservationButNotARunningBind) {
  const PodView pod = Decided("p");
  ASSERT_NE(feed_.state().FindPod(pod.uid), nullptr);
  ASSERT_TRUE(ledger_.BeginBind(pod.Key(), pod.uid));
  ledger_.Release(pod.uid);
  EXPECT_EQ(feed_.state().FindPod(pod.uid), nullptr);
  EXPECT_FALSE(ledger_.reserved(pod.uid));
  EXPECT_TRUE(ledger_.Binding(pod.Key(), pod.uid));  // it ends with its bind
  ledger_.EndBind(pod.uid);
  EXPECT_EQ(ledger_.size(), 0u);
}

TEST_F(PodLedgerTest, ARefilterDropsTheEarlierChargeAndReservationTogether) {
  const PodView pod = Decided("p");
  ledger_.Redecide(pod.uid);
  EXPECT_EQ(feed_.state().FindPod(pod.uid), nullptr);
  EXPECT_FALSE(ledger_.reserved(pod.uid));
  EXPECT_EQ(ledger_.size(), 0u);
}

TEST_F(PodLedgerTest, APodGoneLosesItsBoundRecordToo) {
  const PodView pod = Decided("p");
  ledger_.MarkBound(pod.uid, "n1");
  ledger_.Gone(pod.uid);
  EXPECT_EQ(ledger_.BoundTo(pod.uid), nullptr);
  EXPECT_EQ(ledger_.size(), 0u);
  EXPECT_EQ(feed_.state().FindPod(pod.uid), nullptr);
}

TEST_F(PodLedgerTest, AnUndatedAllocationKeepsTheTimeItWasFirstSeenWhileItIsThere) {
  const TimePoint t0 = clock_.Now();
  EXPECT_EQ(ledger_.FirstSeenUndated("u", t0), t0);
  EXPECT_EQ(ledger_.FirstSeenUndated("u", t0 + std::chrono::seconds(10)), t0);
  ledger_.ForgetUndatedUnless([](const std::string& uid) { return uid == "u"; });
  EXPECT_EQ(ledger_.FirstSeenUndated("u", t0 + std::chrono::seconds(20)), t0);
  ledger_.ForgetUndatedUnless([](const std::string&) { return false; });
  EXPECT_EQ(ledger_.size(), 0u);
}

}  // namespace
}  // namespace hami
