// All-fitting filter mode through the services (docs/DECISIONS.md "Filter modes"): /filter lets every
// fitting node through and reserves nothing, /prioritize scores with the pods expected elsewhere counted,
// and /bind fits the pod on kube-scheduler's node against the ledger as it is then.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/keys.h"
#include "tests/unit/extender/services_fixture.h"

namespace hami {
namespace {

using ::testing::HasSubstr;

class AllFittingTest : public testing::ServicesTest {
 protected:
  static SchedulerOptions AllFitting() {
    SchedulerOptions o;
    o.filter_mode = FilterMode::kAllFitting;
    return o;
  }
  PodView Wants(const std::string& name, int mem) {
    PodView p = testing::Pod(name, {testing::GpuCtr("main", 1, mem, 10)});
    p.resource_version = "7";
    pods_[p.Key()] = p;
    writer_.pods[p.Key()] = p;
    return p;
  }
  k8s::ExtenderFilterResult FilterAll(const PodView& pod, std::vector<std::string> nodes) {
    k8s::ExtenderArgs args;
    args.pod = pod;
    args.node_names = std::move(nodes);
    FilterOutcome out;
    testing::RunCoro(ioc_, [&]() -> boost::asio::awaitable<void> {
      out = co_await all_filter_.Filter(args.pod, *args.node_names);
    }());
    return k8s::ToFilterResult(out, args);
  }
  std::string BindAll(const PodView& pod, const std::string& node) {
    const extender::BindRequest request{pod.ns, pod.name, pod.uid, node};
    std::string error;
    testing::RunCoro(ioc_, [&]() -> boost::asio::awaitable<void> {
      error = co_await all_binder_.Bind(request);
    }());
    return error;
  }
  std::string Metrics() {
    k8s::prom::TextWriter w;
    all_scores_.WriteMetrics(w);
    return w.Take();
  }

  extender::ScoreService all_scores_{feed_.state(), ledger_, pods_, clock_, readiness_, AllFitting()};
  extender::BindService all_binder_{
      feed_.state(), ledger_, pods_, lock_queue_, plugin_locks_, locker_, writer_, clock_,
      extender::BindOptions{std::chrono::milliseconds(0), std::chrono::seconds(300)}, requeue_, &all_scores_};
  extender::FilterService all_filter_{feed_.state(), ledger_, all_binder_, pods_, writer_, clock_,
                                      extender::FilterOptions{.policies = AllFitting()}, 0, readiness_,
                                      requeue_, all_scores_};
};

TEST_F(AllFittingTest, FilterAnswersEveryFittingNodeWithReasonsAndReservesNothing) {
  AddNode("n1");
  AddNode("n2");
  const PodView pod = Wants("p", 3000);
  const auto result = FilterAll(pod, {"n1", "n2", "ghost"});
  EXPECT_EQ(*result.node_names, (std::vector<std::string>{"n1", "n2"}));
  EXPECT_EQ(result.failed_and_unresolvable.at("ghost"), "node unregistered");
  EXPECT_FALSE(ledger_.Holds(pod.uid));
  EXPECT_EQ(feed_.state().PodCount(), 0u);
  EXPECT_EQ(all_scores_.expected(), 1u);
  // Only the event is written.
  ASSERT_EQ(writer_.calls.size(), 1u);
  EXPECT_THAT(writer_.Whats().front(), HasSubstr("FilteringSucceed"));
}

TEST_F(AllFittingTest, BindFitsThePodOnTheNodeKubeSchedulerChose) {
  AddNode("n1");
  AddNode("n2");
  const PodView pod = Wants("p", 3000);
  FilterAll(pod, {"n1", "n2"});
  EXPECT_EQ(BindAll(pod, "n2"), "");
  ASSERT_EQ(writer_.bindings.size(), 1u);
  const auto& a = writer_.bindings[0].annotations;
  EXPECT_EQ(a.at(std::string(keys::kAssignedNode)), "n2");
  EXPECT_THAT(a.at("hami.io/vgpu-devices-to-allocate"), HasSubstr("n2-gpu0"));
  EXPECT_TRUE(writer_.nodes["n2"].annotations.contains("hami.io/mutex.lock"));
  EXPECT_EQ(feed_.state().FindNode("n2")->usage[0].mem, MiB(3000));
  EXPECT_EQ(all_scores_.expected(), 0u);
  // A pod kube-scheduler binds without our filter (we restarted in between) is fitted all the same.
  const PodView later = Wants("later", 3000);
  EXPECT_EQ(BindAll(later, "n1"), "");
  EXPECT_EQ(feed_.state().FindNode("n1")->usage[0].mem, MiB(3000));
}

TEST_F(AllFittingTest, OfTwoPodsFilteredForTheLastRoomTheSecondBindIsRefusedWithTheReason) {
  AddNode("n1");
  const PodView a = Wants("a", 10000), b = Wants("b", 10000);
  EXPECT_EQ(*FilterAll(a, {"n1"}).node_names, (std::vector<std::string>{"n1"}));
  EXPECT_EQ(*FilterAll(b, {"n1"}).node_names, (std::vector<std::string>{"n1"}));  // nothing reserved
  EXPECT_EQ(BindAll(a, "n1"), "");
  writer_.calls.clear();
  const std::string refused = BindAll(b, "n1");
  EXPECT_THAT(refused, HasSubstr("pod default/b no longer fits node n1"));
  EXPECT_THAT(refused, HasSubstr("CardInsufficientMemory"));
  // No lock, no Binding: only the event that says why.
  ASSERT_EQ(writer_.calls.size(), 1u);
  EXPECT_THAT(writer_.Whats().front(), HasSubstr("BindingFailed"));
  EXPECT_EQ(writer_.bindings.size(), 1u);
  EXPECT_FALSE(ledger_.Holds(b.uid));
  EXPECT_THAT(Metrics(), HasSubstr("hami_scheduler_bind_placements_total{result=\"no_longer_fits\"} 1"));
  EXPECT_THAT(Metrics(), HasSubstr("hami_scheduler_bind_placements_total{result=\"placed\"} 1"));
}

TEST_F(AllFittingTest, PrioritizeSteersABurstAwayFromTheCardThePodBeforeIsExpectedToTake) {
  AddNode("n1");
  AddNode("n2");
  const PodView a = Wants("a", 10000), b = Wants("b", 10000);
  FilterAll(a, {"n1", "n2"});
  using Scores = std::vector<std::pair<std::string, int>>;
  EXPECT_EQ(all_scores_.Prioritize(a, {"n1", "n2"}), (Scores{{"n1", 10}, {"n2", 10}}));  // a tie: n1
  FilterAll(b, {"n1", "n2"});
  EXPECT_EQ(all_scores_.Prioritize(b, {"n1", "n2"}), (Scores{{"n1", 0}, {"n2", 10}}));
  // a went to n2 after all (kube-scheduler's other plugins): b's scores follow once a is bound.
  EXPECT_EQ(BindAll(a, "n2"), "");
  EXPECT_EQ(all_scores_.Prioritize(b, {"n1", "n2"}), (Scores{{"n1", 10}, {"n2", 0}}));
  // A pod gone stops counting.
  const PodView c = Wants("c", 10000);
  all_scores_.Forget(b.uid);
  EXPECT_EQ(all_scores_.Prioritize(c, {"n1", "n2"}), (Scores{{"n1", 10}, {"n2", 0}}));
}

TEST_F(AllFittingTest, ABindDecidesNothingBeforeTheFirstHealthPassNorMovesAPodBoundAMomentAgo) {
  AddNode("n1");
  AddNode("n2");
  const PodView pod = Wants("p", 3000);
  // A replica just started: its ledger may not show what the nodes hold yet.
  extender::HealthService fresh_health{backends_, writer_, clock_, std::chrono::seconds(60)};
  extender::Readiness starting{leadership_};
  starting.RequireHealthPass(fresh_health);
  extender::ScoreService starting_scores{feed_.state(), ledger_, pods_, clock_, starting, AllFitting()};
  EXPECT_THAT(starting_scores.PlaceAtBind(pod, CollectRequests(pod, backends_), "n1"),
              HasSubstr("hami-scheduler is not ready"));
  EXPECT_FALSE(ledger_.Holds(pod.uid));
  // Bound to n1 by our Binding; the watch has not shown it yet when a bind for n2 comes.
  EXPECT_EQ(BindAll(pod, "n1"), "");
  EXPECT_THAT(BindAll(pod, "n2"),
              HasSubstr("pod default/p is bound to node n1 already, cannot bind it to n2"));
  EXPECT_EQ(feed_.state().FindNode("n1")->usage[0].mem, MiB(3000));
  EXPECT_EQ(feed_.state().FindNode("n2")->usage[0].mem, MiB(0));
}

TEST_F(AllFittingTest, AMadeUpPodIsScoredButNeverExpected) {
  AddNode("n1");
  AddNode("n2");
  PodView ghost = testing::Pod("ghost", {testing::GpuCtr("main", 1, 10000, 10)});  // not in the cache
  using Scores = std::vector<std::pair<std::string, int>>;
  EXPECT_EQ(all_scores_.Prioritize(ghost, {"n1", "n2"}), (Scores{{"n1", 10}, {"n2", 10}}));
  EXPECT_EQ(all_scores_.expected(), 0u);
  const PodView real = Wants("real", 10000);
  ghost.uid = real.uid;  // another pod's uid under its own name: still not kept
  all_scores_.Prioritize(ghost, {"n1", "n2"});
  EXPECT_EQ(all_scores_.expected(), 0u);
  // The real pod under a body asking for more than it does: scored and expected as the cache has it.
  PodView claims = real;
  claims.containers = testing::Pod("x", {testing::GpuCtr("main", 1, 16000, 10)}).containers;
  all_scores_.Prioritize(claims, {"n1", "n2"});
  EXPECT_EQ(all_scores_.expected(), 1u);
  const PodView other = Wants("other", 6000);  // fits beside a 10000 MiB pod, not beside 16000
  EXPECT_EQ(all_scores_.Prioritize(other, {"n1", "n2"}), (Scores{{"n1", 10}, {"n2", 1}}));
}

TEST_F(AllFittingTest, AnExpectationOutlivingKubeSchedulersBindStopsCounting) {
  AddNode("n1");
  AddNode("n2");
  const PodView a = Wants("a", 10000), b = Wants("b", 10000);
  FilterAll(a, {"n1", "n2"});
  all_scores_.Prioritize(a, {"n1", "n2"});
  clock_.Advance(std::chrono::seconds(31));
  using Scores = std::vector<std::pair<std::string, int>>;
  EXPECT_EQ(all_scores_.Prioritize(b, {"n1", "n2"}), (Scores{{"n1", 10}, {"n2", 10}}));
}

}  // namespace
}  // namespace hami
