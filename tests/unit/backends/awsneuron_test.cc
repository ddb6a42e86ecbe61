// AWS Neuron in isolation and through the scheduler: devices from capacity (each node's own cores per
// device), requests for whole devices or NeuronCores, core masks, contiguous windows of devices and the
// plugin's annotations. Vectors N1-N7 of HAMi v2.10's AWS Neuron backend, with the departures of
// docs/DECISIONS.md "AWS Neuron".
#include "backends/awsneuron/awsneuron.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "backends/common.h"
#include "core/keys.h"
#include "core/scheduler.h"
#include "tests/support/builders.h"

namespace hami {
namespace {

using ::testing::HasSubstr;
using testing::Ctr;
using testing::Pod;
using testing::Req;
using testing::Request;
using Indexes = std::vector<std::int32_t>;

const TimePoint kNow = std::chrono::system_clock::from_time_t(1716199325);

BackendPtr Neuron() { return std::move(backends::awsneuron::Module().create({}).value().front()); }

NodeView NeuronNode(const std::string& name, int devices, int cores,
                    const std::string& type = "trn1.32xlarge") {
  NodeView n;
  n.name = name;
  if (!type.empty()) n.labels["node.kubernetes.io/instance-type"] = type;
  n.capacity["aws.amazon.com/neuron"] = std::to_string(devices);
  n.capacity["aws.amazon.com/neuroncore"] = std::to_string(cores);
  return n;
}

TEST(AwsNeuron, DevicesFromCapacityWithEachNodesCores) {
  BackendPtr b = Neuron();
  auto two = b->Discover(NeuronNode("test", 1, 2, "inf2")).value();
  ASSERT_EQ(two.size(), 1u);
  EXPECT_EQ(two[0].id, "test-AWSNeuron-0");
  EXPECT_EQ(two[0].count, 2);
  EXPECT_EQ(two[0].devcore, Cores(3));
  EXPECT_EQ(two[0].devmem, MiB(0));
  EXPECT_EQ(two[0].type, "AWSNeuron inf2");
  // Another node's cores per device do not leak into this one (upstream learns them once per process).
  auto one = b->Discover(NeuronNode("small", 2, 2)).value();
  EXPECT_EQ(one[1].devcore, Cores(1));
  EXPECT_EQ(one[1].count, 1);
  auto eight = b->Discover(NeuronNode("trn2", 1, 8)).value();
  EXPECT_EQ(eight[0].devcore, Cores(3)) << "two cores per mask";
  EXPECT_EQ(eight[0].count, 8);
  EXPECT_TRUE(b->Discover(NeuronNode("none", 0, 0)).value().empty());
  NodeView bad = NeuronNode("bad", 1, 2);
  bad.capacity["aws.amazon.com/neuron"] = "lots";
  EXPECT_THAT(b->Discover(bad).error().message, HasSubstr("aws.amazon.com/neuron"));
}

TEST(AwsNeuron, N1N2N3RequestsAndTheirErrors) {
  BackendPtr b = Neuron();
  EXPECT_EQ(Request(*b, Ctr("c", {{"aws.amazon.com/neuron", "1"}})), Req("AWSNeuron", 1, 0, 100, 0));
  EXPECT_EQ(Request(*b, Ctr("c", {{"aws.amazon.com/neuroncore", "1"}})), Req("AWSNeuron", 1, 0, 0, 1));
  EXPECT_EQ(Request(*b, Ctr("c", {{"aws.amazon.com/neuroncore", "2"}})), Req("AWSNeuron", 1, 0, 0, 2));
  EXPECT_EQ(Request(*b, Ctr("c", {{"aws.amazon.com/neuroncore", "6"}})), Req("AWSNeuron", 3, 0, 0, 2));
  ContainerView requests_only = Ctr("c", {});
  requests_only.requests["aws.amazon.com/neuron"] = "2";
  EXPECT_EQ(Request(*b, requests_only), Req("AWSNeuron", 2, 0, 100, 0));
  auto odd = b->RequestFor(Ctr("c", {{"aws.amazon.com/neuroncore", "3"}}));
  ASSERT_FALSE(odd);
  EXPECT_EQ(odd.error().message, "aws.amazon.com/neuroncore must be 1 or a multiple of 2, got 3");
  for (const char* bad : {"-2", "1.5", "4294967296"}) {
    auto r = b->RequestFor(Ctr("c", {{"aws.amazon.com/neuroncore", bad}}));
    ASSERT_FALSE(r) << bad;
    EXPECT_THAT(r.error().message, HasSubstr("aws.amazon.com/neuroncore")) << bad;
  }
  EXPECT_THAT(b->RequestFor(Ctr("c", {{"aws.amazon.com/neuron", "2147483648"}})).error().message,
              HasSubstr("aws.amazon.com/neuron"));
  EXPECT_FALSE(Request(*b, Ctr("c", {})));
  EXPECT_THAT(backends::awsneuron::SplitCores(4294967298, "x").error().message, HasSubstr("needs"));
}

TEST(AwsNeuron, N1AdmissionTakesEitherResource) {
  BackendPtr b = Neuron();
  PodView pod;
  ContainerView whole = Ctr("c", {{"aws.amazon.com/neuron", "2"}});
  EXPECT_TRUE(b->Admit(whole, pod).value());
  ContainerView core = Ctr("c", {{"aws.amazon.com/neuroncore", "2"}});
  EXPECT_TRUE(b->Admit(core, pod).value()) << "a core pod is ours too (upstream: not marked)";
  ContainerView odd = Ctr("c", {{"aws.amazon.com/neuroncore", "3"}});
  EXPECT_THAT(b->Admit(odd, pod).error().message, HasSubstr("must be 1 or a multiple of 2, got 3"));
  ContainerView plain = Ctr("c", {});
  EXPECT_FALSE(b->Admit(plain, pod).value());
  // Zero of either is refused, as upstream refuses it, in the webhook and the filter alike.
  for (const char* name : {"aws.amazon.com/neuron", "aws.amazon.com/neuroncore"}) {
    ContainerView zero = Ctr("c", {{name, "0"}});
    const std::string unit = std::string(name).ends_with("core") ? "NeuronCores" : "Neuron devices";
    EXPECT_EQ(b->Admit(zero, pod).error().message,
              std::string(name) + " must be greater than 0, got \"0\" (leave it out of a container that needs " +
                  "no " + unit + ")");
    ContainerView requests_zero = Ctr("c", {});
    requests_zero.requests[name] = "0";
    EXPECT_THAT(b->RequestFor(requests_zero).error().message, HasSubstr("must be greater than 0")) << name;
  }
}

TEST(AwsNeuron, N5ContiguousWindowsByIndex) {
  using backends::awsneuron::ContiguousWindow;
  Indexes all;
  for (int i = 0; i < 16; ++i) all.push_back(i);
  const auto without = [&](Indexes taken) {
    Indexes out;
    for (int i : all) {
      if (std::find(taken.begin(), taken.end(), i) == taken.end()) out.push_back(i);
    }
    return out;
  };
  EXPECT_EQ(ContiguousWindow(all, 16, true), all);
  EXPECT_EQ(ContiguousWindow(without({7, 13}), 8, false), Indexes{});
  EXPECT_EQ(ContiguousWindow(without({7}), 8, false), (Indexes{8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(ContiguousWindow(without({5, 14}), 8, true), (Indexes{6, 7, 8, 9, 10, 11, 12, 13}));
  EXPECT_EQ(ContiguousWindow(all, 2, false), Indexes{}) << "Trainium takes 1, 4, 8 or 16 devices";
  EXPECT_EQ(ContiguousWindow(all, 2, true), (Indexes{0, 1}));
}

struct Cluster {
  Cluster() : backends(testing::BuiltinBackends()), state(backends) {}
  FilterOutcome Run(const PodView& pod, const std::string& gpu_policy = "spread") {
    Scheduler s(state, SchedulerOptions{gpu_policy, "binpack"});
    return s.Filter(pod, {"n"}, kNow);
  }
  Backends backends;
  ClusterState state;
};

std::string Failure(const FilterOutcome& out) {
  auto it = out.failed_nodes.find("n");
  return it == out.failed_nodes.end() ? "<fits>" : it->second;
}

TEST(AwsNeuronFit, N6CoresTakeFreeBitsAndSeveralDevicesAWindow) {
  Cluster c;
  c.state.UpsertNode(NeuronNode("n", 1, 2));
  const PodView one_core = Pod("p", {Ctr("a", {{"aws.amazon.com/neuroncore", "1"}})});
  auto first = c.Run(one_core);
  ASSERT_EQ(first.kind, FilterOutcome::Kind::kScheduled) << Failure(first);
  EXPECT_EQ(first.devices.at("AWSNeuron")[0][0].cores, Cores(1)) << "the first core's bit";
  testing::Hold(c.state, "h", "n", "AWSNeuron", "n-AWSNeuron-0", 1, 0, 1);
  auto second = c.Run(one_core);
  ASSERT_EQ(second.kind, FilterOutcome::Kind::kScheduled) << Failure(second);
  EXPECT_EQ(second.devices.at("AWSNeuron")[0][0].cores, Cores(2)) << "the other core";
  EXPECT_EQ(Failure(c.Run(Pod("p", {Ctr("a", {{"aws.amazon.com/neuroncore", "2"}})}))),
            "1/1 CardInsufficientCore");
  EXPECT_EQ(Failure(c.Run(Pod("p", {Ctr("a", {{"aws.amazon.com/neuron", "1"}})}))),
            "1/1 ExclusiveDeviceAllocateConflict");
  EXPECT_EQ(Failure(c.Run(Pod("p", {Ctr("a", {{"aws.amazon.com/neuron", "2"}})}))), "NodeInsufficientDevice");

  // Two containers of one core each share device 0, with the two bits (upstream's multi-container example).
  Cluster shared;
  shared.state.UpsertNode(NeuronNode("n", 1, 2, "inf2"));
  PodView two = Pod("p", {Ctr("a", {{"aws.amazon.com/neuroncore", "1"}}),
                          Ctr("b", {{"aws.amazon.com/neuroncore", "1"}})});
  auto out = shared.Run(two);
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << Failure(out);
  const auto& d = out.devices.at("AWSNeuron");
  EXPECT_EQ(d[0][0].cores, Cores(1));
  EXPECT_EQ(d[1][0].cores, Cores(2));

  // Four whole devices on Trainium: an aligned window of idle ones.
  Cluster trn;
  trn.state.UpsertNode(NeuronNode("n", 8, 16));
  testing::Hold(trn.state, "h", "n", "AWSNeuron", "n-AWSNeuron-2", 1, 0, 1);
  auto four = trn.Run(Pod("p", {Ctr("a", {{"aws.amazon.com/neuron", "4"}})}));
  ASSERT_EQ(four.kind, FilterOutcome::Kind::kScheduled) << Failure(four);
  std::vector<std::int32_t> idx;
  for (const auto& dev : four.devices.at("AWSNeuron")[0]) idx.push_back(dev.index);
  std::sort(idx.begin(), idx.end());
  EXPECT_EQ(idx, (Indexes{4, 5, 6, 7}));
  EXPECT_EQ(four.devices.at("AWSNeuron")[0][0].cores, Cores(3)) << "a whole device is charged its mask";
  EXPECT_EQ(Failure(trn.Run(Pod("p", {Ctr("a", {{"aws.amazon.com/neuron", "2"}})}))),
            "1/8 ExclusiveDeviceAllocateConflict, 1/8 NumaNotFit");
}

TEST(AwsNeuronFit, CoresOnlyOfTwoCoreDevicesAndNotWithWholeDevices) {
  Cluster c;
  c.state.UpsertNode(NeuronNode("n", 2, 8));  // four cores per device: the plugin's core ids differ
  EXPECT_EQ(Failure(c.Run(Pod("p", {Ctr("a", {{"aws.amazon.com/neuroncore", "1"}})}))), "2/2 ModeNotFit");
  auto whole = c.Run(Pod("p", {Ctr("a", {{"aws.amazon.com/neuron", "1"}})}));
  EXPECT_EQ(whole.kind, FilterOutcome::Kind::kScheduled) << Failure(whole);
  auto both =
      Neuron()->RequestFor(Ctr("a", {{"aws.amazon.com/neuron", "1"}, {"aws.amazon.com/neuroncore", "1"}}));
  ASSERT_FALSE(both);
  EXPECT_EQ(both.error().message,
            "aws.amazon.com/neuron and aws.amazon.com/neuroncore: ask for whole devices or for NeuronCores, "
            "not both");
}

TEST(AwsNeuron, N7AnnotationsForThePlugin) {
  BackendPtr b = Neuron();
  PodView pod = Pod("p", {Ctr("init", {{"aws.amazon.com/neuron", "1"}})});
  pod.init_containers = {pod.containers[0]};
  pod.containers = {Ctr("cores", {{"aws.amazon.com/neuroncore", "2"}}), Ctr("none", {})};
  const PodVendorDevices devices{
      {ContainerDevice{0, "n-AWSNeuron-0", "AWSNeuron", MiB(0), Cores(3), std::nullopt}},
      {ContainerDevice{1, "n-AWSNeuron-1", "AWSNeuron", MiB(0), Cores(3), std::nullopt}},
      {}};
  Annotations out;
  b->Annotate(pod, devices, {{std::string(keys::kAssignedNode), "n"}}, kNow, out);
  EXPECT_EQ(out.at("hami.io/aws-neuron-devices-allocated"),
            "n-AWSNeuron-0,AWSNeuron,0,3:;n-AWSNeuron-1,AWSNeuron,0,3:;;");
  EXPECT_EQ(out.at("AWS_NEURON_IDS"), "0,2,3") << "device 0 for the init container, cores 2-3 of device 1";
  EXPECT_EQ(out.at("NEURON_RESOURCE_TYPE"), "aws.amazon.com/neuroncore");
  EXPECT_EQ(out.at("NEURON_ALLOCATED"), "false");
  EXPECT_EQ(out.at("NEURON_ALLOC_TIME"), "1716199325000000000");
  EXPECT_EQ(out.at("aws.amazon.com/predicate-node"), "n");
  EXPECT_FALSE(out.contains("hami.io/aws-neuron-devices-to-allocate"));
}

}  // namespace
}  // namespace hami
