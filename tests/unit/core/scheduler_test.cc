#include "core/scheduler.h"

#include <gtest/gtest.h>

#include <set>

#include "core/codec/pod_devices.h"
#include "core/keys.h"
#include "tests/support/builders.h"

namespace hami {
namespace {

using testing::Ctr;
using testing::Gpu;
using testing::Pod;

const TimePoint kNow = std::chrono::system_clock::from_time_t(1716199325);

// docs/TEST_VECTORS.md, H1: two nodes of two 8000 MiB GPUs, custom resource names.
class PolicyMatrix : public ::testing::Test {
 protected:
  PolicyMatrix() : backends_(testing::BuiltinBackends({{"nvidia", Settings()}})), state_(backends_) {
    state_.UpsertNode(testing::NvidiaNode("node1", {Gpu("device1", 0), Gpu("device2", 1)}));
    state_.UpsertNode(testing::NvidiaNode("node2", {Gpu("device3", 0), Gpu("device4", 1)}));
    Hold("pod1", "node1", "device1", 2000, 25);
    Hold("pod2", "node2", "device4", 6000, 75);
  }
  static VendorSettings Settings() {
    VendorSettings s;
    s.Set("resourceCountName", "hami.io/gpu");
    s.Set("resourceMemoryName", "hami.io/gpumem");
    s.Set("resourceCoreName", "hami.io/gpucores");
    return s;
  }
  void Hold(std::string pod, std::string node, std::string uuid, std::int64_t mem, std::int64_t cores) {
    PodAllocation a;
    a.uid = pod;
    a.ns = "default";
    a.name = pod;
    a.node = node;
    a.devices["NVIDIA"] = {{ContainerDevice{0, uuid, "NVIDIA", MiB(mem), Cores(cores), std::nullopt}}};
    state_.AddPod(a);
  }
  static ContainerView Want(std::string name, int mem, int cores) {
    return Ctr(std::move(name), {{"hami.io/gpu", "1"},
                                 {"hami.io/gpumem", std::to_string(mem)},
                                 {"hami.io/gpucores", std::to_string(cores)}});
  }
  FilterOutcome Decide(const PodView& pod, std::string node_policy, std::string gpu_policy) {
    Scheduler s(state_, SchedulerOptions{gpu_policy, node_policy});
    return s.Filter(pod, {"node1", "node2"}, kNow);
  }

  Backends backends_;
  ClusterState state_;
};

TEST_F(PolicyMatrix, NodeAndGpuPolicies) {
  const PodView pod = Pod("new", {Want("c", 1000, 20)});
  struct Case {
    const char* node_policy;
    const char* gpu_policy;
    const char* node;
    const char* device;
  };
  for (const Case& c :
       {Case{"binpack", "binpack", "node2", "device4"}, Case{"binpack", "spread", "node2", "device3"},
        Case{"spread", "binpack", "node1", "device1"}, Case{"spread", "spread", "node1", "device2"}}) {
    auto out = Decide(pod, c.node_policy, c.gpu_policy);
    ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << c.node_policy << "/" << c.gpu_policy;
    EXPECT_EQ(out.node, c.node) << c.node_policy << "/" << c.gpu_policy;
    EXPECT_EQ(out.devices.at("NVIDIA").at(0).at(0).uuid, c.device) << c.node_policy << "/" << c.gpu_policy;
  }
}

TEST_F(PolicyMatrix, PodAnnotationsOverrideDefaults) {
  const PodView pod =
      Pod("new", {Want("c", 1000, 20)}, {},
          {{"hami.io/node-scheduler-policy", "spread"}, {"hami.io/gpu-scheduler-policy", "binpack"}});
  auto out = Decide(pod, "binpack", "spread");
  EXPECT_EQ(out.node, "node1");
  EXPECT_EQ(out.devices.at("NVIDIA")[0][0].uuid, "device1");
}

TEST_F(PolicyMatrix, ScoresReportedBestFirst) {
  auto out = Decide(Pod("new", {Want("c", 1000, 20)}), "binpack", "binpack");
  ASSERT_EQ(out.best.size(), 2u);
  EXPECT_EQ(out.best[0].first, "node2");
  EXPECT_DOUBLE_EQ(out.best[0].second, 8.0);
  EXPECT_DOUBLE_EQ(out.best[1].second, 3.0);
  EXPECT_EQ(out.fitting_count, 2u);
}

TEST_F(PolicyMatrix, InitContainerMaxLogic) {
  // H2: init cannot fit device4's 2000 MiB free; the app prefers device4 but 4000 > 2000.
  const PodView pod = Pod("new", {Want("app", 4000, 20)}, {Want("init", 5000, 20)});
  auto out = Decide(pod, "binpack", "binpack");
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled);
  EXPECT_EQ(out.node, "node2");
  const auto& d = out.devices.at("NVIDIA");
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].at(0).uuid, "device3");
  EXPECT_EQ(d[1].at(0).uuid, "device3");
}

TEST_F(PolicyMatrix, AnnotationsWrittenForWinner) {
  auto out = Decide(Pod("new", {Want("c", 1000, 20)}), "binpack", "binpack");
  EXPECT_EQ(out.annotations.at("hami.io/vgpu-node"), "node2");
  EXPECT_EQ(out.annotations.at("hami.io/vgpu-time"), "1716199325");
  EXPECT_EQ(out.annotations.at("hami.io/vgpu-devices-allocated"), "device4,NVIDIA,1000,20:;");
  EXPECT_EQ(out.annotations.at("hami.io/vgpu-devices-to-allocate"), "device4,NVIDIA,1000,20:;");
  EXPECT_EQ(out.annotations.size(), 4u);
}

TEST_F(PolicyMatrix, ReserveIsSeenByTheNextDecision) {
  Scheduler s(state_, SchedulerOptions{"binpack", "binpack"});
  // Four pods of 1000 MiB: device4 has 2000 MiB free, so two land there, then device3.
  std::vector<std::string> uuids;
  for (int i = 0; i < 4; ++i) {
    PodView p = Pod("p" + std::to_string(i), {Want("c", 1000, 5)});
    auto out = s.Filter(p, {"node2"}, kNow);
    ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled);
    s.Reserve(p, out);
    uuids.push_back(out.devices.at("NVIDIA")[0][0].uuid);
  }
  EXPECT_EQ(uuids, (std::vector<std::string>{"device4", "device4", "device3", "device3"}));
  const NodeEntry* n = state_.FindNode("node2");
  EXPECT_EQ(n->usage[1].mem, 8000_MiB);
  EXPECT_EQ(n->usage[1].used, 3);
}

TEST_F(PolicyMatrix, BinpackDivertsFromABusyNodeOnlyWhenTheWaitingPodsReachTheOtherNode) {
  const PodView pod = Pod("new", {Want("c", 1000, 20)});
  const auto decide = [&](int threshold, const std::string& node_policy = "binpack") {
    SchedulerOptions o{"binpack", node_policy};
    o.busy_node_threshold = threshold;
    Scheduler s(state_, o);
    return s.Filter(pod, {"node1", "node2"}, kNow).node;
  };
  // binpack picks the fuller node2; with a second allocation in flight there (pod2's and pod3's) it is busy.
  EXPECT_EQ(decide(2), "node2");
  Hold("pod3", "node2", "device3", 1000, 10);
  EXPECT_EQ(state_.FindNode("node2")->allocations_in_flight, 2);
  // Nothing else waits: node2 takes the pod, as binpack alone would (node1 stays as it is).
  EXPECT_EQ(decide(2), "node2");
  // Spread ranks a busy node below the others, as before.
  EXPECT_EQ(decide(2, "spread"), "node1");
  // Pods like it wait: node2 takes five pods of 1000 MiB and 20 cores (four on device3: 7000 MiB and 90
  // cores free; one on device4: 2000 MiB, 25 cores), so a sixth goes to node1 anyway: the pod goes there
  // while node2 works.
  for (int i = 0; i < 4; ++i) state_.SetWaiting("waiting-" + std::to_string(i), {testing::BackendIndex(backends_, "nvidia")});
  EXPECT_EQ(decide(2), "node2");  // the burst (itself + 4) fits node2
  state_.SetWaiting("waiting-4", {testing::BackendIndex(backends_, "nvidia")});
  EXPECT_EQ(decide(2), "node1");
  EXPECT_EQ(decide(0), "node2");  // off: the policy alone
  EXPECT_EQ(decide(3), "node2");  // not busy at 3
  // The filtered pod itself counts as waiting once, not twice.
  state_.SetWaiting(pod.uid, {testing::BackendIndex(backends_, "nvidia")});
  EXPECT_EQ(decide(2), "node1");
  state_.ClearWaiting("waiting-4");
  EXPECT_EQ(decide(2), "node2");
  // Pods that found no node, and pods already placed, are not part of the burst.
  state_.SetWaiting("waiting-4", {testing::BackendIndex(backends_, "nvidia")});
  state_.SetUnplaceable("waiting-4");
  EXPECT_EQ(decide(2), "node2");
  // A node re-read from the API server keeps its count.
  state_.UpsertNode(testing::NvidiaNode("node2", {Gpu("device3", 0), Gpu("device4", 1)}));
  EXPECT_EQ(state_.FindNode("node2")->allocations_in_flight, 2);
  // Both busy: the policy decides among them, however many wait.
  state_.SetWaiting("waiting-5", {testing::BackendIndex(backends_, "nvidia")});
  state_.SetWaiting("waiting-6", {testing::BackendIndex(backends_, "nvidia")});
  Hold("pod4", "node1", "device1", 1000, 10);
  EXPECT_EQ(decide(2), "node2");
  // The device plugin set pod2 up (bind-phase success): node2 is no longer busy; binpack goes on there.
  PodAllocation settled = *state_.FindPod("pod2");
  settled.in_flight = false;
  EXPECT_FALSE(state_.AddPod(settled));  // the same hold
  EXPECT_EQ(state_.FindNode("node2")->allocations_in_flight, 1);
  EXPECT_EQ(decide(2), "node2");
  state_.RemovePod("pod3");
  EXPECT_EQ(state_.FindNode("node2")->allocations_in_flight, 0);
}

// Bursts under binpack (docs/DECISIONS.md): a burst on empty nodes, every pod reserved and in flight before
// any is set up. Strict binpack fills one node after another; the busy rule may only fill the same nodes
// several at a time.
TEST(Scheduler, ABurstUnderBinpackLeavesAsManyNodesEmptyAsStrictBinpack) {
  // `windows` > 1: as kube-scheduler does in clusters of 100 nodes or more, each pod's candidates are the
  // next window of the nodes, in turn.
  const auto run = [](int threshold, const std::string& node_policy, int pods, int node_count = 8,
                      int windows = 1) {
    Backends backends = testing::BuiltinBackends();
    ClusterState state(backends);
    std::vector<std::string> nodes;
    for (int n = 0; n < node_count; ++n) {
      const std::string name = "node-" + std::to_string(n);
      // Two cards of 16000 MiB: three pods of 30 cores each per card, six per node.
      state.UpsertNode(testing::NvidiaNode(
          name, {Gpu(name + "-gpu0", 0, 16000, 10, "NVIDIA-A10"), Gpu(name + "-gpu1", 1, 16000, 10, "NVIDIA-A10")}));
      nodes.push_back(name);
    }
    SchedulerOptions o{"spread", node_policy};
    o.busy_node_threshold = threshold;
    Scheduler s(state, o);
    std::vector<PodView> burst;
    for (int i = 0; i < pods; ++i) {
      burst.push_back(Pod("p" + std::to_string(i), {testing::GpuCtr("c", 1, 3000, 30)}));
      state.SetWaiting(burst.back().uid, {testing::BackendIndex(backends, "nvidia")});
    }
    std::vector<std::string> chosen;
    const auto window_size = static_cast<std::ptrdiff_t>(nodes.size()) / windows;
    for (std::size_t i = 0; i < burst.size(); ++i) {
      const PodView& p = burst[i];
      const auto begin = nodes.begin() + static_cast<std::ptrdiff_t>(i % windows) * window_size;
      auto out = s.Filter(p, std::vector<std::string>(begin, begin + window_size), kNow);
      EXPECT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << p.name;
      s.Reserve(p, out);  // in flight: no device plugin has set anything up
      chosen.push_back(out.node);
    }
    return chosen;
  };
  const auto used = [](const std::vector<std::string>& chosen) {
    return std::set<std::string>(chosen.begin(), chosen.end()).size();
  };
  for (int pods : {12, 15, 18, 40}) {
    const auto strict = run(0, "binpack", pods);
    const auto burst = run(2, "binpack", pods);
    EXPECT_EQ(used(strict), static_cast<std::size_t>((pods + 5) / 6)) << pods;
    EXPECT_EQ(used(burst), used(strict)) << pods << " pods: nodes used";
    // Strict binpack queues six pods on node-0's lock before node-1 gets one; the burst's third pod goes
    // to node-1 while node-0 sets the first two up.
    EXPECT_EQ(strict[2], "node-0");
    EXPECT_EQ(burst[2], "node-1") << pods;
  }
  // An empty node is opened only for a node's worth: of 8 pods, node-0 takes 6 and the 2 left over would
  // leave node-1 mostly empty, so they queue behind node-0's lock until it is full (as strict binpack).
  const auto eight = run(2, "binpack", 8);
  EXPECT_EQ(used(eight), 2u);
  EXPECT_EQ(eight[2], "node-0");
  EXPECT_EQ(eight[5], "node-0");
  EXPECT_EQ(eight[6], "node-1");
  // Spread is unchanged: it uses every node.
  EXPECT_EQ(used(run(2, "spread", 12)), 8u);
  // Two windows of 8 nodes out of 16, pods in turn: each window gets half of the burst and strict binpack
  // fills its nodes one after another (4 per window for 40 pods); the burst fills the same number.
  for (int pods : {24, 40, 60}) {
    const auto strict = run(0, "binpack", pods, 16, 2);
    const auto burst = run(2, "binpack", pods, 16, 2);
    EXPECT_EQ(used(strict), static_cast<std::size_t>(2 * ((pods / 2 + 5) / 6))) << pods;
    EXPECT_EQ(used(burst), used(strict)) << pods << " pods in two windows: nodes used";
  }
}

TEST_F(PolicyMatrix, RefilterFreesTheEarlierReservation) {
  Scheduler s(state_, SchedulerOptions{"binpack", "binpack"});
  PodView p = Pod("again", {Want("c", 2000, 5)});
  auto first = s.Filter(p, {"node2"}, kNow);
  s.Reserve(p, first);
  EXPECT_EQ(state_.FindNode("node2")->usage[1].mem, 8000_MiB);
  auto second =
      s.Filter(p, {"node2"}, kNow);  // still fits only because nothing double-counts once reserved again
  s.Reserve(p, second);
  EXPECT_EQ(state_.PodCount(), 3u);
  EXPECT_EQ(state_.FindNode("node2")->usage[1].mem + state_.FindNode("node2")->usage[0].mem, 8000_MiB);
}

TEST_F(PolicyMatrix, UnschedulableReasonsPerNode) {
  auto out = Decide(Pod("big", {Want("c", 9000, 20)}), "binpack", "binpack");
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kUnschedulable);
  EXPECT_EQ(out.failed_nodes.at("node1"), "2/2 CardInsufficientMemory");
  EXPECT_EQ(out.failed_nodes.at("node2"), "2/2 CardInsufficientMemory");
  Scheduler s(state_, SchedulerOptions{});
  auto missing = s.Filter(Pod("x", {Want("c", 100, 1)}), {"node1", "ghost"}, kNow);
  EXPECT_EQ(missing.failed_nodes.at("ghost"), "node unregistered");
  auto too_many = s.Filter(Pod("x", {Ctr("c", {{"hami.io/gpu", "3"}})}), {"node1"}, kNow);
  EXPECT_EQ(too_many.failed_nodes.at("node1"), "NodeInsufficientDevice");
}

TEST_F(PolicyMatrix, PodsWithoutDeviceRequestsPassThrough) {
  Scheduler s(state_, SchedulerOptions{});
  auto out = s.Filter(Pod("cpu", {Ctr("c", {{"cpu", "1"}})}), {"node1"}, kNow);
  EXPECT_EQ(out.kind, FilterOutcome::Kind::kPassThrough);
}

TEST_F(PolicyMatrix, InvalidInputIsAnError) {
  Scheduler s(state_, SchedulerOptions{});
  auto bad_mem = s.Filter(Pod("bad", {Ctr("main", {{"hami.io/gpu", "1"}, {"hami.io/gpumem", "16Gi"}})}),
                          {"node1"}, kNow);
  ASSERT_EQ(bad_mem.kind, FilterOutcome::Kind::kError);
  EXPECT_NE(bad_mem.error.find("hami.io/gpumem"), std::string::npos) << bad_mem.error;
  EXPECT_NE(bad_mem.error.find("\"main\""), std::string::npos) << bad_mem.error;
  auto bad_weights = s.Filter(
      Pod("w", {Want("c", 100, 1)}, {}, {{"hami.io/device-scoring-weights", "slot=1"}}), {"node1"}, kNow);
  ASSERT_EQ(bad_weights.kind, FilterOutcome::Kind::kError);
  EXPECT_NE(bad_weights.error.find("expected slot, core, and memory"), std::string::npos);
}

// All-fitting mode (docs/DECISIONS.md "Filter modes").
TEST_F(PolicyMatrix, AllFittingListsEveryFittingNodeAndReservesNothing) {
  SchedulerOptions options{"binpack", "binpack"};
  options.filter_mode = FilterMode::kAllFitting;
  Scheduler s(state_, options);
  const auto used = [&](const char* node) { return state_.FindNode(node)->totals.used_mem; };
  const std::int64_t node1_before = used("node1"), node2_before = used("node2");
  auto out = s.Filter(Pod("p", {Want("c", 7000, 20)}), {"ghost", "node1", "node2"}, kNow);
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kFitting);
  EXPECT_EQ(out.fitting, (std::vector<std::string>{"node1", "node2"}));
  EXPECT_EQ(out.node, "node2");  // where binpack alone would put it
  EXPECT_FALSE(out.devices.empty());
  EXPECT_TRUE(out.annotations.empty());
  EXPECT_EQ(out.failed_nodes.at("ghost"), "node unregistered");
  EXPECT_TRUE(out.unresolvable.contains("ghost"));
  EXPECT_EQ(state_.PodCount(), 2u);
  EXPECT_EQ(used("node1"), node1_before);
  EXPECT_EQ(used("node2"), node2_before);
  // Two cards of 5000 MiB: node2's second card has 2000 free. Its reason is sent, as one pod leaving
  // lifts it.
  auto one = s.Filter(Pod("r", {Ctr("c", {{"hami.io/gpu", "2"}, {"hami.io/gpumem", "5000"}})}),
                      {"node1", "node2"}, kNow);
  ASSERT_EQ(one.kind, FilterOutcome::Kind::kFitting);
  EXPECT_EQ(one.fitting, (std::vector<std::string>{"node1"}));
  EXPECT_NE(one.failed_nodes.at("node2").find("CardInsufficientMemory"), std::string::npos);
  EXPECT_FALSE(one.unresolvable.contains("node2"));
}

TEST_F(PolicyMatrix, PrioritizeScalesThePolicyScoreToTheExtenderRange) {
  const PodView pod = Pod("p", {Want("c", 1000, 10)});
  const auto requests = CollectRequests(pod, backends_);
  const std::vector<std::string> candidates{"node1", "node2", "ghost"};
  using Scores = std::vector<std::pair<std::string, int>>;
  Scheduler binpack(state_, SchedulerOptions{"binpack", "binpack"});
  auto packed = binpack.Prioritize(pod, requests, candidates, {});
  EXPECT_EQ(packed.scores, (Scores{{"node1", 1}, {"node2", 10}, {"ghost", 0}}));
  EXPECT_EQ(packed.best, "node2");
  EXPECT_FALSE(packed.devices.empty());
  Scheduler spread(state_, SchedulerOptions{"binpack", "spread"});
  auto spreaded = spread.Prioritize(pod, requests, candidates, {});
  EXPECT_EQ(spreaded.scores, (Scores{{"node1", 10}, {"node2", 1}, {"ghost", 0}}));
  EXPECT_EQ(spreaded.best, "node1");
  // The pod's own annotation picks the policy, as in /filter.
  const PodView spread_pod =
      Pod("s", {Want("c", 1000, 10)}, {}, {{"hami.io/node-scheduler-policy", "spread"}});
  auto annotated = binpack.Prioritize(spread_pod, requests, candidates, {});
  EXPECT_EQ(annotated.best, "node1");
  // A pod asking for nothing of ours, or one that cannot be read, scores 0 everywhere.
  const PodView cpu = Pod("cpu", {Ctr("c", {{"cpu", "1"}})});
  auto none = binpack.Prioritize(cpu, CollectRequests(cpu, backends_), candidates, {});
  EXPECT_EQ(none.scores, (Scores{{"node1", 0}, {"node2", 0}, {"ghost", 0}}));
  EXPECT_TRUE(none.best.empty());
  const PodView bad = Pod("bad", {Ctr("c", {{"hami.io/gpu", "1"}, {"hami.io/gpumem", "16Gi"}})});
  auto unread = binpack.Prioritize(bad, CollectRequests(bad, backends_), candidates, {});
  EXPECT_FALSE(unread.error.empty());
  EXPECT_EQ(unread.scores, (Scores{{"node1", 0}, {"node2", 0}, {"ghost", 0}}));
}

TEST_F(PolicyMatrix, PrioritizeCountsThePodsExpectedOnANode) {
  // A pod filtered before, expected on node2's free card: a 7000 MiB pod fits node2 only without it.
  PodAllocation expected;
  expected.uid = expected.name = "earlier";
  expected.ns = "default";
  expected.node = "node2";
  expected.devices["NVIDIA"] = {
      {ContainerDevice{0, "device3", "NVIDIA", MiB(8000), Cores(10), std::nullopt}}};
  const PendingFits pending{{"node2", {&expected}}};
  const PodView pod = Pod("p", {Want("c", 7000, 10)});
  Scheduler binpack(state_, SchedulerOptions{"binpack", "binpack"});
  auto without = binpack.Prioritize(pod, CollectRequests(pod, backends_), {"node1", "node2"}, {});
  EXPECT_EQ(without.best, "node2");
  auto with = binpack.Prioritize(pod, CollectRequests(pod, backends_), {"node1", "node2"}, pending);
  EXPECT_EQ(with.scores, (std::vector<std::pair<std::string, int>>{{"node1", 10}, {"node2", 0}}));
  EXPECT_EQ(with.best, "node1");
  // A small pod still fits beside it: the expected pod's devices make node2 fuller, binpack likes it more.
  const PodView small = Pod("small", {Want("c", 1000, 10)});
  auto beside = binpack.Prioritize(small, CollectRequests(small, backends_), {"node1", "node2"}, pending);
  EXPECT_EQ(beside.best, "node2");
  EXPECT_EQ(state_.PodCount(), 2u);  // nothing was charged
}

TEST_F(PolicyMatrix, PlaceOnDecidesOnTheNamedNodeWhateverTheMode) {
  SchedulerOptions options{"binpack", "binpack"};
  options.filter_mode = FilterMode::kAllFitting;
  Scheduler s(state_, options);
  const PodView pod = Pod("p", {Want("c", 1000, 10)});
  auto out = s.PlaceOn(pod, CollectRequests(pod, backends_), "node1", kNow);  // binpack would take node2
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled);
  EXPECT_EQ(out.node, "node1");
  EXPECT_EQ(out.annotations.at(std::string(keys::kAssignedNode)), "node1");
  s.Reserve(pod, out);
  EXPECT_EQ(state_.PodCount(), 3u);
  const PodView big = Pod("big", {Ctr("c", {{"hami.io/gpu", "2"}, {"hami.io/gpumem", "6500"}})});
  auto refused = s.PlaceOn(big, CollectRequests(big, backends_), "node2", kNow);
  ASSERT_EQ(refused.kind, FilterOutcome::Kind::kUnschedulable);
  EXPECT_NE(refused.failed_nodes.at("node2").find("CardInsufficientMemory"), std::string::npos);
}

TEST(FilterMode, NamesAndParsing) {
  EXPECT_EQ(FilterModeName(FilterMode::kOneNode), "one-node");
  EXPECT_EQ(FilterModeName(FilterMode::kAllFitting), "all-fitting");
  EXPECT_EQ(*ParseFilterMode("all-fitting"), FilterMode::kAllFitting);
  EXPECT_EQ(*ParseFilterMode("one-node"), FilterMode::kOneNode);
  auto bad = ParseFilterMode("All-Fitting");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "expected one-node or all-fitting");
}

TEST(Scheduler, InitPlaceholderAlignment) {
  // H3: init0 none, init1 and app one GPU each -> [[], [uuid1], [uuid1]].
  Backends backends = testing::BuiltinBackends();
  ClusterState state(backends);
  state.UpsertNode(testing::NvidiaNode("n", {Gpu("uuid1", 0, 8000, 10, "NVIDIA-A100")}));
  Scheduler s(state, SchedulerOptions{});
  PodView p = Pod("p", {testing::GpuCtr("app", 1, 1000, 30)},
                  {Ctr("init0", {{"cpu", "1"}}), testing::GpuCtr("init1", 1, 1000, 30)});
  auto out = s.Filter(p, {"n"}, kNow);
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled);
  const auto& d = out.devices.at("NVIDIA");
  ASSERT_EQ(d.size(), 3u);
  EXPECT_TRUE(d[0].empty());
  EXPECT_EQ(d[1].at(0).uuid, "uuid1");
  EXPECT_EQ(d[2].at(0).uuid, "uuid1");
  EXPECT_EQ(out.annotations.at("hami.io/vgpu-devices-allocated"),
            ";uuid1,NVIDIA,1000,30:;uuid1,NVIDIA,1000,30:;");
  // With real model names the list still lines up (docs/DECISIONS.md, D5): a first container without a GPU.
  PodView q = Pod("q", {Ctr("sidecar", {{"cpu", "1"}}), testing::GpuCtr("main", 1, 1000, 30)});
  auto out2 = s.Filter(q, {"n"}, kNow);
  EXPECT_EQ(out2.annotations.at("hami.io/vgpu-devices-allocated"), ";uuid1,NVIDIA,1000,30:;");
  // Accounting collapses init + app on the shared device: max(1000, 1000) MiB, one slot.
  s.Reserve(p, out);
  EXPECT_EQ(state.FindNode("n")->usage[0].mem, 1000_MiB);
  EXPECT_EQ(state.FindNode("n")->usage[0].used, 1);
}

TEST(Scheduler, MultiVendorPodGetsOneAnnotationPairPerVendor) {
  Backends backends = testing::BuiltinBackends();
  ClusterState state(backends);
  NodeView n = testing::NvidiaNode("mixed", {Gpu("GPU-0", 0, 16000, 10, "NVIDIA-A10")});
  n.annotations["hami.io/node-dcu-register"] = "DCU-0001,4,16384,100,DCU-K100,0,true:";
  n.capacity["cambricon.com/mlu.smlu.vcore"] = "200";
  n.capacity["cambricon.com/mlu.smlu.vmemory"] = "128";
  state.UpsertNode(n);
  Scheduler s(state, SchedulerOptions{});
  PodView p = Pod("multi", {testing::GpuCtr("cuda", 1, 2000, 10),
                            Ctr("dcu", {{"hygon.com/dcunum", "1"}, {"hygon.com/dcumem", "1000"}}),
                            Ctr("mlu", {{"cambricon.com/vmlu", "1"},
                                        {"cambricon.com/mlu.smlu.vmemory", "4"},
                                        {"cambricon.com/mlu.smlu.vcore", "10"}})});
  auto out = s.Filter(p, {"mixed"}, kNow);
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << out.error;
  EXPECT_EQ(out.annotations.at("hami.io/vgpu-devices-allocated"), "GPU-0,NVIDIA,2000,10:;;;");
  EXPECT_EQ(out.annotations.at("hami.io/dcu-devices-allocated"), ";DCU-0001,DCU,1000,100:;;");
  EXPECT_EQ(out.annotations.at("hami.io/hcu-devices-to-allocate"), ";DCU-0001,DCU,1000,100:;;");
  EXPECT_EQ(out.annotations.at("hami.io/cambricon-mlu-devices-allocated"),
            ";;mixed-cambricon-mlu-1,MLU,1024,10:;");
  EXPECT_EQ(out.annotations.at("CAMBRICON_DSMLU_PROFILE"), "1_10_4");
  EXPECT_FALSE(out.annotations.contains("hami.io/mthreads-vgpu-devices-allocated"));
}

TEST(Scheduler, TieBreakIsDeterministic) {
  Backends backends = testing::BuiltinBackends();
  ClusterState state(backends);
  for (const char* name : {"b", "c", "a"})
    state.UpsertNode(testing::NvidiaNode(name, {Gpu(std::string(name) + "-0", 0)}));
  Scheduler s(state, SchedulerOptions{});
  for (int i = 0; i < 3; ++i) {
    auto out = s.Filter(Pod("p", {testing::GpuCtr("c", 1, 100, 1)}), {"c", "b", "a"}, kNow);
    EXPECT_EQ(out.node, "a");
  }
}

}  // namespace
}  // namespace hami
