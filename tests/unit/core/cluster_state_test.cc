#include "core/cluster_state.h"

#include <gtest/gtest.h>

#include "tests/support/builders.h"

namespace hami {
namespace {

using testing::Gpu;

PodAllocation Hold(std::string uid, std::string node,
                   std::vector<std::tuple<std::string, int, int>> per_container, std::size_t num_init = 0) {
  PodAllocation a;
  a.uid = uid;
  a.ns = "default";
  a.name = uid;
  a.node = std::move(node);
  a.num_init = num_init;
  PodVendorDevices v;
  for (auto& [uuid, mem, cores] : per_container) {
    v.push_back({ContainerDevice{0, uuid, "NVIDIA", MiB(mem), Cores(cores), std::nullopt}});
  }
  a.devices["NVIDIA"] = v;
  return a;
}

class Ledger : public ::testing::Test {
 protected:
  Ledger() : backends_(testing::BuiltinBackends()), state_(backends_) {
    state_.UpsertNode(testing::NvidiaNode("n1", {Gpu("g0", 0), Gpu("g1", 1)}));
  }
  const DeviceUsage& Usage(std::string_view node, int device) {
    return state_.FindNode(node)->usage.at(device);
  }
  Backends backends_;
  ClusterState state_;
};

TEST_F(Ledger, AddAndRemoveTouchOnlyThePodsDevices) {
  EXPECT_TRUE(state_.AddPod(Hold("a", "n1", {{"g0", 1000, 10}})));
  EXPECT_TRUE(state_.AddPod(Hold("b", "n1", {{"g0", 500, 5}, {"g1", 300, 3}})));
  EXPECT_EQ(Usage("n1", 0), (DeviceUsage{2, MiB(1500), Cores(15)}));
  EXPECT_EQ(Usage("n1", 1), (DeviceUsage{1, MiB(300), Cores(3)}));
  EXPECT_FALSE(state_.AddPod(Hold("a", "n1", {{"g0", 1000, 10}})));  // same hold again: no double count
  EXPECT_EQ(Usage("n1", 0).used, 2);
  auto removed = state_.RemovePod("a");
  ASSERT_TRUE(removed);
  EXPECT_EQ(removed->node, "n1");
  EXPECT_EQ(Usage("n1", 0), (DeviceUsage{1, MiB(500), Cores(5)}));
  EXPECT_FALSE(state_.RemovePod("a"));
  state_.RemovePod("b");
  EXPECT_EQ(Usage("n1", 0), DeviceUsage{});
  EXPECT_EQ(Usage("n1", 1), DeviceUsage{});
}

// Pods waiting for a decision count per vendor while the ledger holds nothing for them and their last
// decision found a node.
TEST_F(Ledger, WaitingPodsCountUntilPlacedAndAgainAfterARefilter) {
  state_.SetWaiting("a", {0});
  state_.SetWaiting("b", {0, 1});
  state_.SetWaiting("a", {0});  // again: counted once
  EXPECT_EQ(state_.WaitingFor(0), 2u);
  EXPECT_EQ(state_.WaitingFor(1), 1u);
  EXPECT_TRUE(state_.CountsAsWaiting("a"));
  EXPECT_TRUE(state_.AddPod(Hold("a", "n1", {{"g0", 1000, 10}})));  // placed
  EXPECT_FALSE(state_.CountsAsWaiting("a"));
  EXPECT_EQ(state_.WaitingFor(0), 1u);
  EXPECT_TRUE(state_.AddPod(Hold("a", "n1", {{"g1", 1000, 10}})));  // moved: still placed
  EXPECT_EQ(state_.WaitingFor(0), 1u);
  state_.RemovePod("a");  // a re-filter releases it: it waits with the others again
  EXPECT_EQ(state_.WaitingFor(0), 2u);
  state_.SetUnplaceable("b");  // no node fits it
  state_.SetUnplaceable("b");
  EXPECT_EQ(state_.WaitingFor(0), 1u);
  EXPECT_EQ(state_.WaitingFor(1), 0u);
  state_.SetWaiting("b", {1});  // its requests changed: still unplaceable
  EXPECT_EQ(state_.WaitingFor(1), 0u);
  state_.AddPod(Hold("b", "n1", {{"g0", 10, 1}}));
  state_.RemovePod("b");  // placed once, released by a re-filter: it counts again
  EXPECT_EQ(state_.WaitingFor(1), 1u);
  state_.SetWaiting("a", {1});  // its requests changed
  EXPECT_EQ(state_.WaitingFor(0), 0u);
  EXPECT_EQ(state_.WaitingFor(1), 2u);
  state_.SetWaiting("a", {});  // asks for no device any more
  state_.ClearWaiting("b");    // bound
  state_.ClearWaiting("b");
  state_.ClearWaiting("never-seen");
  EXPECT_EQ(state_.WaitingFor(0), 0u);
  EXPECT_EQ(state_.WaitingFor(1), 0u);
  EXPECT_EQ(state_.WaitingFor(99), 0u);
  EXPECT_EQ(state_.WaitingPods(), 0u);
}

TEST_F(Ledger, ReplacingAHoldMovesIt) {
  state_.AddPod(Hold("a", "n1", {{"g0", 1000, 10}}));
  state_.AddPod(Hold("a", "n1", {{"g1", 2000, 20}}));
  EXPECT_EQ(Usage("n1", 0), DeviceUsage{});
  EXPECT_EQ(Usage("n1", 1), (DeviceUsage{1, MiB(2000), Cores(20)}));
}

// A vendor that sorts pods into classes sees each card's holders per class; a class leaves with its last pod,
// follows the card when the plugin re-registers, and a changed class replaces the old one.
TEST_F(Ledger, ClassesCountPerCardAndLeaveWithTheirPods) {
  auto classed = [](std::string uid, std::string uuid, std::uint8_t pod_class) {
    PodAllocation a = Hold(std::move(uid), "n1", {{std::move(uuid), 100, 1}});
    a.classes = {{"NVIDIA", pod_class}};
    return a;
  };
  auto classes = [&](int device) { return state_.FindNode("n1")->classes_in_use.at(device); };
  state_.AddPod(classed("a", "g0", 1));
  state_.AddPod(classed("b", "g0", 1));
  state_.AddPod(classed("c", "g0", 2));
  state_.AddPod(Hold("d", "n1", {{"g1", 100, 1}}));  // no class: not counted
  EXPECT_EQ(classes(0), (CardClasses{{1, 2}, {2, 1}}));
  EXPECT_TRUE(classes(1).empty());
  state_.RemovePod("c");
  EXPECT_EQ(classes(0), (CardClasses{{1, 2}}));
  state_.AddPod(classed("b", "g0", 3));  // same devices, another class: the hold is replaced
  EXPECT_EQ(classes(0), (CardClasses{{1, 1}, {3, 1}}));
  state_.UpsertNode(testing::NvidiaNode("n1", {Gpu("g1", 0), Gpu("g0", 1)}));
  EXPECT_EQ(classes(1), (CardClasses{{1, 1}, {3, 1}}));
  EXPECT_TRUE(classes(0).empty());
  state_.RemovePod("a");
  state_.RemovePod("b");
  EXPECT_TRUE(classes(1).empty());
}

TEST_F(Ledger, PodOnUnknownNodeAppliesWhenTheNodeArrives) {
  state_.AddPod(Hold("early", "n2", {{"h0", 700, 7}}));
  EXPECT_EQ(state_.FindNode("n2"), nullptr);
  state_.UpsertNode(testing::NvidiaNode("n2", {Gpu("h0", 0)}));
  EXPECT_EQ(Usage("n2", 0), (DeviceUsage{1, MiB(700), Cores(7)}));
}

TEST_F(Ledger, DeviceListChangeReappliesUsageFromThatNodesPods) {
  state_.AddPod(Hold("a", "n1", {{"g1", 1000, 10}}));
  // The plugin re-registers with g1 first and a new g2: usage follows the UUID, not the position.
  state_.UpsertNode(testing::NvidiaNode("n1", {Gpu("g1", 0), Gpu("g0", 1), Gpu("g2", 2)}));
  EXPECT_EQ(Usage("n1", 0), (DeviceUsage{1, MiB(1000), Cores(10)}));
  EXPECT_EQ(Usage("n1", 1), DeviceUsage{});
  // g1 disappears: its charge is counted as unknown until it comes back.
  state_.UpsertNode(testing::NvidiaNode("n1", {Gpu("g0", 0)}));
  EXPECT_EQ(state_.FindNode("n1")->unknown_device_charges, 1);
  EXPECT_EQ(Usage("n1", 0), DeviceUsage{});
  state_.RemovePod("a");
  EXPECT_EQ(state_.FindNode("n1")->unknown_device_charges, 0);
}

TEST_F(Ledger, MalformedRegistrationKeepsDevices) {
  state_.AddPod(Hold("a", "n1", {{"g0", 1000, 10}}));
  NodeView broken = testing::NvidiaNode("n1", {});
  broken.annotations["hami.io/node-nvidia-register"] = "[{not json";
  state_.UpsertNode(broken);
  const NodeEntry* n = state_.FindNode("n1");
  EXPECT_EQ(n->devices.size(), 2u);
  EXPECT_NE(n->discovery_error[static_cast<std::size_t>(backends_.IndexOf("NVIDIA"))].find("not valid JSON"),
            std::string::npos);
  EXPECT_EQ(Usage("n1", 0).mem, 1000_MiB);
}

TEST_F(Ledger, CordonIsReadFromTheLiveNode) {
  NodeView n = testing::NvidiaNode("n1", {Gpu("g0", 0), Gpu("g1", 1)});
  n.annotations["hami.io/device-cordon"] = " g1 ,";
  state_.UpsertNode(n);
  const NodeEntry* entry = state_.FindNode("n1");
  ASSERT_EQ(entry->caps.size(), 2u);
  EXPECT_FALSE(entry->caps[0].cordoned);
  EXPECT_TRUE(entry->caps[1].cordoned);
}

TEST_F(Ledger, InitContainersReleasedAfterTheyFinish) {
  // init 999/99 and apps 100/10 + 200/20 on g0: charged 999/99 until init finishes, then 300/30.
  auto a = Hold("p", "n1", {{"g0", 999, 99}, {"g0", 100, 10}, {"g0", 200, 20}}, 1);
  state_.AddPod(a);
  EXPECT_EQ(Usage("n1", 0), (DeviceUsage{2, MiB(999), Cores(99)}));
  state_.ReleaseInitContainers("p");
  EXPECT_EQ(Usage("n1", 0), (DeviceUsage{2, MiB(300), Cores(30)}));
  state_.ReleaseInitContainers("p");  // idempotent
  EXPECT_EQ(Usage("n1", 0), (DeviceUsage{2, MiB(300), Cores(30)}));
}

TEST_F(Ledger, RemovingAVendorDropsOnlyItsDevices) {
  NodeView n = testing::NvidiaNode("n1", {Gpu("g0", 0)});
  n.annotations["hami.io/node-dcu-register"] = "DCU-1,4,16384,100,DCU-K100,0,true:";
  state_.UpsertNode(n);
  EXPECT_EQ(state_.FindNode("n1")->devices.size(), 2u);
  state_.RemoveVendorDevices("n1", static_cast<std::size_t>(backends_.IndexOf("NVIDIA")));
  ASSERT_EQ(state_.FindNode("n1")->devices.size(), 1u);
  EXPECT_EQ(state_.FindNode("n1")->devices[0].vendor, "DCU");
}

TEST_F(Ledger, NodesWithAVendorFollowRegistrationRemovalAndDeletion) {
  const auto nvidia = static_cast<std::size_t>(backends_.IndexOf("NVIDIA"));
  const auto dcu = static_cast<std::size_t>(backends_.IndexOf("DCU"));
  EXPECT_EQ(state_.NodesWith(nvidia), 1u);
  EXPECT_EQ(state_.NodesWith(dcu), 0u);
  NodeView n2 = testing::NvidiaNode("n2", {Gpu("g2", 0)});
  n2.annotations["hami.io/node-dcu-register"] = "DCU-1,4,16384,100,DCU-K100,0,true:";
  state_.UpsertNode(n2);
  state_.UpsertNode(n2);  // re-read: counted once
  EXPECT_EQ(state_.NodesWith(nvidia), 2u);
  EXPECT_EQ(state_.NodesWith(dcu), 1u);
  state_.RemoveVendorDevices("n2", nvidia);
  EXPECT_EQ(state_.NodesWith(nvidia), 1u);
  state_.RemoveNode("n2");
  state_.RemoveNode("n2");  // gone already
  EXPECT_EQ(state_.NodesWith(dcu), 0u);
  EXPECT_EQ(state_.NodesWith(nvidia), 1u);
  EXPECT_EQ(state_.NodesWith(backends_.size()), 0u);  // no such backend
}

TEST(AllocationFromAnnotations, ReadsEveryVendorsAllocatedKey) {
  Backends backends = testing::BuiltinBackends();
  PodView p = testing::Pod("p", {testing::Ctr("a", {}), testing::Ctr("b", {})});
  EXPECT_FALSE(AllocationFromAnnotations(p, backends).value());
  p.annotations["hami.io/vgpu-node"] = "n1";
  p.annotations["hami.io/vgpu-devices-allocated"] = "GPU-0,NVIDIA,3000,0:;;";
  p.annotations["hami.io/dcu-devices-allocated"] = ";DCU-1,DCU,1000,100:;";
  auto a = AllocationFromAnnotations(p, backends).value();
  ASSERT_TRUE(a);
  EXPECT_EQ(a->node, "n1");
  EXPECT_EQ(a->devices.at("NVIDIA")[0][0].uuid, "GPU-0");
  EXPECT_EQ(a->devices.at("DCU")[1][0].mem, 1000_MiB);
  // In flight until the device plugin answers: no phase (filtered) or allocating; success and failed end it.
  EXPECT_TRUE(a->in_flight);
  for (const auto& [phase, in_flight] : std::initializer_list<std::pair<const char*, bool>>{
           {"allocating", true}, {"success", false}, {"failed", false}}) {
    p.annotations["hami.io/bind-phase"] = phase;
    EXPECT_EQ(AllocationFromAnnotations(p, backends).value()->in_flight, in_flight) << phase;
  }
  p.annotations["hami.io/vgpu-devices-allocated"] = "GPU-0,NVIDIA,x,0:;";
  auto bad = AllocationFromAnnotations(p, backends);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("hami.io/vgpu-devices-allocated"), std::string::npos);
}

}  // namespace
}  // namespace hami
