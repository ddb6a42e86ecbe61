// The pod-level admission rules (core/admission.h; docs/TEST_VECTORS.md, V51 and V66): order, the
// foreign-scheduler rule, denials, schedulerName, quota; each vendor's own mutation is tested with the
// vendor (tests/unit/backends/<vendor>_test.cc).
#include "core/admission.h"

#include <gtest/gtest.h>

#include "core/policy.h"
#include "tests/support/builders.h"

namespace hami {
namespace {

using testing::Ctr;
using testing::Pod;
using Kind = AdmissionVerdict::Kind;

class Admission : public ::testing::Test {
 protected:
  AdmissionVerdict Admit(PodView& pod) { return AdmitPod(pod, backends_, quotas_, options_); }
  void Quota(std::string ns, std::map<std::string, std::string> hard) {
    ResourceQuotaView q;
    q.ns = std::move(ns);
    q.name = "q";
    for (auto& [k, v] : hard) q.hard[k] = v;
    quotas_.UpsertQuota(q);
  }
  void Reconfigure(const std::map<std::string, VendorSettings>& settings) {
    backends_ = testing::BuiltinBackends(settings);
  }

  Backends backends_ = testing::BuiltinBackends();
  QuotaBook quotas_{backends_};
  AdmissionOptions options_{"hami-scheduler", true};
};

TEST_F(Admission, AMemoryOnlyPodGetsACardAndOurScheduler) {
  PodView pod = Pod("p", {Ctr("app", {{"nvidia.com/gpumem", "3000"}})});
  const AdmissionVerdict v = Admit(pod);
  EXPECT_EQ(v.kind, Kind::kAllowed);
  EXPECT_TRUE(v.uses_devices);
  EXPECT_EQ(pod.scheduler_name, "hami-scheduler");
  EXPECT_EQ(pod.containers[0].limits.at("nvidia.com/gpu"), "1");           // defaultGPUNum
  EXPECT_FALSE(pod.containers[0].limits.contains("nvidia.com/gpucores"));  // memory given: shareable
}

TEST_F(Admission, APodWithoutDevicesKeepsItsScheduler) {
  PodView pod = Pod("p", {Ctr("app", {{"cpu", "1"}})});
  const AdmissionVerdict v = Admit(pod);
  EXPECT_EQ(v.kind, Kind::kAllowed);
  EXPECT_FALSE(v.uses_devices);
  EXPECT_EQ(pod.scheduler_name, "");
}

TEST_F(Admission, APodWithoutContainersIsDenied) {
  PodView pod = Pod("p", {});
  const AdmissionVerdict v = Admit(pod);
  EXPECT_EQ(v.kind, Kind::kDenied);
  EXPECT_EQ(v.message, "pod has no containers");
}

TEST_F(Admission, ForeignSchedulerRuleAndItsPrecedence) {
  const auto verdict_for = [&](std::string scheduler, bool force, std::string ours) {
    options_ = AdmissionOptions{std::move(ours), force};
    PodView pod = Pod("p", {Ctr("app", {{"nvidia.com/gpu", "1"}})});
    pod.scheduler_name = std::move(scheduler);
    AdmissionVerdict v = Admit(pod);
    return std::make_pair(v.kind, pod.scheduler_name);
  };
  EXPECT_EQ(verdict_for("other", true, "hami-scheduler"),
            std::make_pair(Kind::kSkipped, std::string("other")));
  EXPECT_EQ(verdict_for("default-scheduler", true, "hami-scheduler"),
            std::make_pair(Kind::kAllowed, std::string("hami-scheduler")));
  EXPECT_EQ(verdict_for("default-scheduler", false, "hami-scheduler"),
            std::make_pair(Kind::kSkipped, std::string("default-scheduler")));
  EXPECT_EQ(verdict_for("hami-scheduler", false, "hami-scheduler"),
            std::make_pair(Kind::kAllowed, std::string("hami-scheduler")));
  // No --scheduler-name: every named scheduler but an overwritten default-scheduler is foreign.
  EXPECT_EQ(verdict_for("hami-scheduler", true, ""),
            std::make_pair(Kind::kSkipped, std::string("hami-scheduler")));
  EXPECT_EQ(verdict_for("default-scheduler", true, ""),
            std::make_pair(Kind::kAllowed, std::string("default-scheduler")));
}

TEST_F(Admission, AForeignPodIsNotMutatedAtAll) {
  PodView pod = Pod("p", {Ctr("app", {{"nvidia.com/gpu", "1"}})});
  pod.scheduler_name = "other";
  const PodView before = pod;
  Admit(pod);
  EXPECT_EQ(pod.containers[0].limits, before.containers[0].limits);  // no exclusive-core default
}

TEST_F(Admission, PrivilegedContainersWithDevicesAreDeniedInitContainersFirst) {
  ContainerView app = Ctr("app", {{"nvidia.com/gpu", "1"}});
  app.privileged = true;
  ContainerView init = Ctr("setup", {});
  init.privileged = true;
  PodView pod = Pod("p", {app}, {init});
  AdmissionVerdict v = Admit(pod);
  EXPECT_EQ(v.kind, Kind::kDenied);
  EXPECT_EQ(v.code, 403);
  EXPECT_EQ(v.message, "container setup is privileged");
  // Privileged without devices is not ours to refuse.
  ContainerView plain = Ctr("app", {{"cpu", "1"}});
  plain.privileged = true;
  PodView other = Pod("q", {plain});
  EXPECT_EQ(Admit(other).kind, Kind::kAllowed);
}

TEST_F(Admission, UnreadableScoringWeightsAreDeniedForAPodWithDevices) {
  PodView pod = Pod("p", {Ctr("app", {{"nvidia.com/gpu", "1"}})});
  pod.annotations["hami.io/device-scoring-weights"] = "slot=1,core=x,memory=1";
  AdmissionVerdict v = Admit(pod);
  EXPECT_EQ(v.kind, Kind::kDenied);
  EXPECT_EQ(v.code, 400);
  EXPECT_EQ(v.message, ParseScoringWeights("slot=1,core=x,memory=1").error().message);  // the filter's words
  EXPECT_NE(v.message.find("hami.io/device-scoring-weights"), std::string::npos) << v.message;
  pod.annotations["hami.io/device-scoring-weights"] = "slot=1,core=0,memory=2";
  EXPECT_EQ(Admit(pod).kind, Kind::kAllowed);
  // Not ours to judge on a pod without devices: its weights weigh nothing.
  PodView plain = Pod("q", {Ctr("app", {{"cpu", "1"}})});
  plain.annotations["hami.io/device-scoring-weights"] = "nonsense";
  EXPECT_EQ(Admit(plain).kind, Kind::kAllowed);
}

TEST_F(Admission, AnUnknownNumaAlignmentIsDeniedWithHamisWords) {
  PodView pod = Pod("p", {Ctr("app", {{"nvidia.com/gpu", "1"}})});
  pod.annotations["hami.io/numa-alignment"] = "bestefort";
  AdmissionVerdict v = Admit(pod);
  EXPECT_EQ(v.kind, Kind::kDenied);
  EXPECT_EQ(v.code, 403);
  EXPECT_EQ(v.message,
            "invalid hami.io/numa-alignment annotation \"bestefort\": expected \"best-effort\" or "
            "\"strict\"");
  // Trimmed and read without regard to case, as the device plugin reads it.
  for (const char* ok : {"best-effort", " Strict ", "BEST-EFFORT"}) {
    pod.annotations["hami.io/numa-alignment"] = ok;
    EXPECT_EQ(Admit(pod).kind, Kind::kAllowed) << ok;
  }
  // Present but empty is no choice either; a pod without devices is held to it too (the plugin's rule).
  PodView plain = Pod("q", {Ctr("app", {{"cpu", "1"}})});
  plain.annotations["hami.io/numa-alignment"] = "";
  EXPECT_EQ(Admit(plain).kind, Kind::kDenied);
  // A control character in the value is escaped in the message.
  plain.annotations["hami.io/numa-alignment"] = "x\ny";
  EXPECT_EQ(Admit(plain).message.find('\n'), std::string::npos);
}

TEST_F(Admission, APodWithANodeNameIsDeniedOnceItUsesDevices) {
  PodView pod = Pod("p", {Ctr("app", {{"nvidia.com/gpu", "1"}})});
  pod.node_name = "n1";
  AdmissionVerdict v = Admit(pod);
  EXPECT_EQ(v.kind, Kind::kDenied);
  EXPECT_EQ(v.message, "pod has node assigned");
  PodView plain = Pod("q", {Ctr("app", {{"cpu", "1"}})});
  plain.node_name = "n1";
  EXPECT_EQ(Admit(plain).kind, Kind::kAllowed);
}

TEST_F(Admission, UnreadableValuesAreDeniedWithTheReason) {
  // docs/DECISIONS.md, D7: HAMi would drop the request and run the pod without a device.
  PodView pod = Pod("p", {Ctr("app", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "16Gi"}})});
  AdmissionVerdict v = Admit(pod);
  EXPECT_EQ(v.kind, Kind::kDenied);
  EXPECT_EQ(v.code, 400);
  EXPECT_NE(v.message.find("nvidia.com/gpumem"), std::string::npos) << v.message;
  EXPECT_NE(v.message.find("16Gi"), std::string::npos) << v.message;
  // A backend's own admission error (percentage over 100) is a denial too, naming the container.
  PodView pct = Pod("p", {Ctr("worker", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "150"}})});
  v = Admit(pct);
  EXPECT_EQ(v.kind, Kind::kDenied);
  EXPECT_EQ(
      v.message,
      "invalid nvidia.com/gpumem-percentage value 150 in container worker: must be an integer between 0 "
      "and 100");
}

TEST_F(Admission, MooreThreadsInvalidMemoryIsDenied) {
  PodView pod = Pod("p", {Ctr("app", {{"mthreads.com/vgpu", "1"}, {"mthreads.com/sgpu-memory", "3"}})});
  AdmissionVerdict v = Admit(pod);
  EXPECT_EQ(v.kind, Kind::kDenied);
  EXPECT_NE(v.message.find("valid values are [2, 4, 8, 16, 32, 64, 96]"), std::string::npos) << v.message;
}

TEST_F(Admission, V51QuotaOnMemoryAndCores) {
  // Cambricon: one vmemory unit is 256 MiB; limit 100 units.
  Quota("ns", {{"limits.cambricon.com/mlu.smlu.vmemory", "100"}});
  PodView fits =
      Pod("a", {Ctr("app", {{"cambricon.com/vmlu", "1"}, {"cambricon.com/mlu.smlu.vmemory", "50"}})}, {}, {},
          "ns");
  EXPECT_EQ(Admit(fits).kind, Kind::kAllowed);
  PodView over =
      Pod("b", {Ctr("app", {{"cambricon.com/vmlu", "1"}, {"cambricon.com/mlu.smlu.vmemory", "200"}})}, {}, {},
          "ns");
  AdmissionVerdict v = Admit(over);
  EXPECT_EQ(v.kind, Kind::kDenied);
  EXPECT_EQ(v.code, 403);
  EXPECT_EQ(
      v.message,
      "exceeding resource quota: cambricon.com/mlu.smlu.vmemory in namespace ns: the pod asks for 51200 "
      "MiB, 0 MiB of the limit 25600 MiB are in use");
  // Two cards of 40 units each: 80 > 60.
  Quota("n2", {{"limits.cambricon.com/mlu.smlu.vmemory", "60"}});
  PodView two =
      Pod("c", {Ctr("app", {{"cambricon.com/vmlu", "2"}, {"cambricon.com/mlu.smlu.vmemory", "40"}})}, {}, {},
          "n2");
  EXPECT_EQ(Admit(two).kind, Kind::kDenied);
  // No quota in the namespace: fits.
  PodView free =
      Pod("d", {Ctr("app", {{"cambricon.com/vmlu", "1"}, {"cambricon.com/mlu.smlu.vmemory", "200"}})}, {}, {},
          "elsewhere");
  EXPECT_EQ(Admit(free).kind, Kind::kAllowed);
  // Cores: used 20 of 50, 60 more asked.
  Quota("n3", {{"limits.nvidia.com/gpucores", "50"}});
  quotas_.AddUsage("n3", {DeviceCharge{"NVIDIA", "g", MiB(0), Cores(20), 1}});
  PodView cores =
      Pod("e", {Ctr("app", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpucores", "60"}})}, {}, {}, "n3");
  v = Admit(cores);
  EXPECT_EQ(v.kind, Kind::kDenied);
  EXPECT_EQ(
      v.message,
      "exceeding resource quota: nvidia.com/gpucores in namespace n3: the pod asks for 60, 20 of the limit "
      "50 are in use");
}

TEST_F(Admission, V66QuotaScalesWithTheMemoryFactor) {
  VendorSettings hygon;
  hygon.Set("memoryFactor", 2);
  Reconfigure({{"hygon", hygon}});
  Quota("ns", {{"limits.hygon.com/dcumem", "1000"}});
  PodView fits =
      Pod("a", {Ctr("app", {{"hygon.com/dcunum", "1"}, {"hygon.com/dcumem", "800"}})}, {}, {}, "ns");
  EXPECT_EQ(Admit(fits).kind, Kind::kAllowed);
  PodView over =
      Pod("b", {Ctr("app", {{"hygon.com/dcunum", "1"}, {"hygon.com/dcumem", "1200"}})}, {}, {}, "ns");
  EXPECT_EQ(Admit(over).kind, Kind::kDenied);
}

TEST_F(Admission, QuotaTakesTheInitPeakOrTheAppSum) {
  Quota("ns", {{"limits.nvidia.com/gpumem", "5000"}});
  const auto gpu = [](std::string name, std::string mem) {
    return Ctr(std::move(name), {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", std::move(mem)}});
  };
  // Init containers run one at a time: a peak of 4000 with apps of 2000 + 2000 fits 5000.
  PodView fits =
      Pod("a", {gpu("a1", "2000"), gpu("a2", "2000")}, {gpu("i1", "4000"), gpu("i2", "3000")}, {}, "ns");
  EXPECT_EQ(Admit(fits).kind, Kind::kAllowed);
  // The apps together exceed it.
  PodView apps = Pod("b", {gpu("a1", "3000"), gpu("a2", "3000")}, {}, {}, "ns");
  EXPECT_EQ(Admit(apps).kind, Kind::kDenied);
  // One init container alone exceeds it.
  PodView init = Pod("c", {gpu("a1", "1000")}, {gpu("i1", "6000")}, {}, "ns");
  EXPECT_EQ(Admit(init).kind, Kind::kDenied);
}

TEST_F(Admission, EveryBackendsQuotaIsChecked) {
  // Upstream fix #2347: a pod using two vendors is checked against both.
  Quota("ns", {{"limits.hygon.com/dcumem", "100"}});
  PodView pod = Pod("a",
                    {Ctr("gpu", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "1000"}}),
                     Ctr("dcu", {{"hygon.com/dcunum", "1"}, {"hygon.com/dcumem", "200"}})},
                    {}, {}, "ns");
  AdmissionVerdict v = Admit(pod);
  EXPECT_EQ(v.kind, Kind::kDenied);
  EXPECT_NE(v.message.find("hygon.com/dcumem"), std::string::npos) << v.message;
}

TEST_F(Admission, QuotaTotalsDoNotWrap) {
  Quota("ns", {{"limits.nvidia.com/gpumem", "1000"}});
  const auto huge = [](std::string name) {
    return Ctr(std::move(name), {{"nvidia.com/gpu", "2147483647"}, {"nvidia.com/gpumem", "2147483647"}});
  };
  PodView pod = Pod("a", {huge("a"), huge("b"), huge("c")}, {}, {}, "ns");
  EXPECT_EQ(Admit(pod).kind, Kind::kDenied);
}

// Two entries of one name: the kubelet applies the last, so that is the one set.
TEST_F(Admission, AnEnvVarGivenTwiceCannotUndoTheWebhooksValue) {
  VendorSettings nvidia;
  nvidia.Set("overwriteEnv", true);
  Reconfigure({{"nvidia", nvidia}});
  ContainerView c = Ctr("app", {{"cpu", "1"}});
  c.env = {EnvVar{"NVIDIA_VISIBLE_DEVICES", "all"}, EnvVar{"NVIDIA_VISIBLE_DEVICES", "all"}};
  PodView pod = Pod("p", {c});
  ASSERT_EQ(Admit(pod).kind, Kind::kAllowed);
  EXPECT_EQ(pod.containers[0].env.back(), (EnvVar{"NVIDIA_VISIBLE_DEVICES", "none"}));
}

TEST_F(Admission, EnvMutationsReachContainersWithoutDevicesAndAreNotDuplicated) {
  VendorSettings nvidia;
  nvidia.Set("gpuCorePolicy", "force");
  Reconfigure({{"nvidia", nvidia}});
  PodView pod = Pod("p", {Ctr("app", {{"cpu", "1"}})}, {Ctr("init", {})});
  ASSERT_EQ(Admit(pod).kind, Kind::kAllowed);
  ASSERT_EQ(Admit(pod).kind, Kind::kAllowed);  // re-invoked on its own output
  for (const ContainerView* c : {&pod.containers[0], &pod.init_containers[0]}) {
    ASSERT_EQ(c->env.size(), 1u) << c->name;
    EXPECT_EQ(c->env[0], (EnvVar{"GPU_CORE_UTILIZATION_POLICY", "force"}));
  }
}

}  // namespace
}  // namespace hami
