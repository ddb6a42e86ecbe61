// The fit engine: the common matrix F1-F15 for the first four backends and every Ascend chip, the NVIDIA
// (V30, V34-V38, V40), Cambricon (V50), Moore Threads (V57) and Hygon (V59) specifics (case ids:
// docs/TEST_VECTORS.md), the engine's what-ifs and refusal traces, run through ClusterState with devices as
// the device plugins publish them.
#include "core/fit.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/codec/node_devices.h"
#include "core/codec/pod_devices.h"
#include "core/scheduler.h"
#include "tests/support/builders.h"

namespace hami {
namespace {

using testing::Ctr;
using testing::Gpu;
using testing::Hold;
using testing::Pod;

const TimePoint kNow = std::chrono::system_clock::from_time_t(1716199325);

std::vector<std::string> Uuids(const PodVendorDevices& devices, std::size_t container) {
  std::vector<std::string> out;
  if (container >= devices.size()) return out;
  for (const auto& d : devices[container]) out.push_back(d.uuid);
  return out;
}

std::vector<std::string> Uuids(const FilterOutcome& out, std::size_t container = 0,
                               const std::string& vendor = "NVIDIA") {
  auto it = out.devices.find(vendor);
  return it == out.devices.end() ? std::vector<std::string>{} : Uuids(it->second, container);
}

std::string Failure(const FilterOutcome& out, const std::string& node = "n") {
  if (out.kind == FilterOutcome::Kind::kError) return "<error: " + out.error + ">";
  auto it = out.failed_nodes.find(node);
  return it == out.failed_nodes.end() ? "<fits>" : it->second;
}

// --- the common matrix, per backend ------------------------------------------------------------------------

struct DevSpec {
  std::int64_t mem = 1024;  // total MiB, before the vendor's memory scale
  std::int32_t count = 100;
  bool health = true;
  int used = 0;                 // tasks already on the device
  std::int64_t used_mem = 0;    // before the memory scale
  std::int64_t used_cores = 0;  // percent of a card, before the core scale
};

struct FitResult {
  bool ok = false;
  std::vector<std::string> uuids;
  std::vector<ContainerDevice> devices;
  std::string reason;
};

// One node "n" with devices of one backend. Capacity-discovered backends (MLU, Mthreads) have uniform cards
// of 100 (MLU) or 16 (Mthreads) cores and always-healthy devices, and memory in 256/512 MiB steps: the
// matrix's memory numbers are scaled by 4 for them and its core numbers by the card's core count.
class Rig {
 public:
  explicit Rig(std::string vendor, const std::map<std::string, VendorSettings>& settings = {})
      : vendor_(std::move(vendor)), backends_(testing::BuiltinBackends(WithAscend(vendor_, settings))),
        state_(backends_) {}

  // Ascend chips (vendor keys "Ascend...") come from the vnpus section, which is off by default.
  static std::map<std::string, VendorSettings> WithAscend(const std::string& vendor,
                                                          std::map<std::string, VendorSettings> settings) {
    if (vendor.starts_with("Ascend")) settings.try_emplace("vnpus");
    return settings;
  }
  bool Ascend() const { return vendor_.starts_with("Ascend"); }

  const std::string& vendor() const { return vendor_; }
  bool Capacity() const { return vendor_ == "MLU" || vendor_ == "Mthreads"; }
  std::int64_t M(std::int64_t mib) const { return Capacity() ? mib * 4 : mib; }
  std::int64_t C(std::int64_t percent) const { return vendor_ == "Mthreads" ? percent * 16 / 100 : percent; }
  ClusterState& state() { return state_; }
  const Backends& backends() const { return backends_; }

  std::string Uuid(int i) const {
    if (vendor_ == "MLU") return "n-cambricon-mlu-" + std::to_string(i);
    if (vendor_ == "Mthreads") return "n-mthreads-" + std::to_string(i);
    return "dev-" + std::to_string(i);
  }

  void Node(const std::vector<DevSpec>& specs, const Annotations& annotations = {}) {
    NodeView n;
    n.name = "n";
    n.annotations = annotations;
    const auto count = static_cast<std::int64_t>(specs.size());
    if (vendor_ == "NVIDIA" || vendor_ == "DCU" || Ascend()) {
      std::vector<DeviceInfo> devices;
      for (std::size_t i = 0; i < specs.size(); ++i) {
        DeviceInfo d = Gpu(Uuid(static_cast<int>(i)), static_cast<std::int32_t>(i), M(specs[i].mem),
                           specs[i].count,
                           vendor_ == "DCU" ? "DCU-K100" : (Ascend() ? vendor_ : "NVIDIA-A100"));
        d.health = specs[i].health;
        devices.push_back(d);
      }
      if (Ascend()) {
        n.annotations["hami.io/node-register-" + vendor_] = codec::EncodeDeviceManifest(devices);
        n.allocatable["huawei.com/" + vendor_] = std::to_string(specs.size() * 100);
      } else if (vendor_ == "NVIDIA") {
        NodeView built = testing::NvidiaNode("n", devices);
        for (const auto& [k, v] : built.annotations) n.annotations[k] = v;
      } else {
        n.annotations["hami.io/node-dcu-register"] = codec::EncodeLegacyDevices(devices);
      }
    } else {
      const std::int64_t per_card_mem = M(specs.front().mem);
      const std::int64_t unit = vendor_ == "MLU" ? 256 : 512;
      const std::int64_t cores_per_card = vendor_ == "MLU" ? 100 : 16;
      ASSERT_EQ(per_card_mem * count % unit, 0) << "memory not expressible in node capacity";
      const std::string prefix = vendor_ == "MLU" ? "cambricon.com/mlu.smlu." : "mthreads.com/sgpu-";
      n.capacity[prefix + (vendor_ == "MLU" ? "vcore" : "core")] = std::to_string(cores_per_card * count);
      n.capacity[prefix + (vendor_ == "MLU" ? "vmemory" : "memory")] =
          std::to_string(per_card_mem * count / unit);
    }
    state_.UpsertNode(n);
    const NodeEntry* e = state_.FindNode("n");
    ASSERT_NE(e, nullptr);
    const int b = backends_.IndexOf(vendor_);
    const auto [begin, end] = e->vendor_range[static_cast<std::size_t>(b)];
    ASSERT_EQ(end - begin, count) << e->discovery_error[static_cast<std::size_t>(b)];
    for (int i = 0; i < count; ++i) {
      const DeviceInfo& d = e->devices[static_cast<std::size_t>(begin + i)];
      const DevSpec& s = specs[static_cast<std::size_t>(i)];
      ASSERT_EQ(d.id, Uuid(i));
      ASSERT_EQ(d.devmem, MiB(M(s.mem))) << d.id;
      ASSERT_EQ(d.health, s.health) << d.id;
      ASSERT_EQ(d.count, s.count) << d.id;
    }
    for (int i = 0; i < count; ++i) {
      const DevSpec& s = specs[static_cast<std::size_t>(i)];
      const int slots = s.used > 0 ? s.used : (s.used_mem > 0 || s.used_cores > 0 ? 1 : 0);
      if (slots > 0)
        Hold(state_, "hold-" + std::to_string(i), "n", vendor_, Uuid(i), slots, M(s.used_mem),
             C(s.used_cores));
    }
  }

  // Fits one container asking `count` devices (memory and cores before scaling) of `vendor` (default: the
  // rig's).
  FitResult Fit(std::int32_t count, std::int64_t mem, std::int32_t pct, std::int64_t cores,
                const Annotations& pod_annotations = {}, const std::string& vendor = "") {
    const std::string v = vendor.empty() ? vendor_ : vendor;
    PodView pod = Pod("p", {Ctr("c", {})}, {}, {pod_annotations.begin(), pod_annotations.end()});
    PodRequests reqs;
    reqs.containers.resize(1);
    reqs.containers[0].emplace_back(backends_.IndexOf(v),
                                    DeviceRequest{v, count, MiB(M(mem)), pct, Cores(C(cores))});
    auto ctx = MakePodContext(pod, backends_, state_.quotas(), "spread");
    FitResult r;
    if (!ctx) {
      r.reason = "<context error: " + ctx.error().message + ">";
      return r;
    }
    const NodeEntry* node = state_.FindNode("n");
    if (node == nullptr) {
      r.reason = "<no node>";
      return r;
    }
    FitEngine fitter(backends_, state_.quotas());
    PodDevices out;
    r.ok = fitter.Fit(*ctx, reqs, *node, &out, &r.reason);
    if (r.ok) {
      r.uuids = Uuids(out.at(v), 0);
      r.devices = out.at(v).at(0);
    }
    return r;
  }

 private:
  std::string vendor_;
  Backends backends_;
  ClusterState state_;
};

class FitMatrix : public ::testing::TestWithParam<const char*> {
 protected:
  FitMatrix() : rig_(GetParam()) {}
  const BackendSpec& Spec() const { return rig_.backends().Find(rig_.vendor())->Spec(); }
  Rig rig_;
};

// The vendor key as a test name ("Ascend910B4-1" -> "Ascend910B4_1").
std::string VendorName(const ::testing::TestParamInfo<const char*>& info) {
  std::string name = info.param;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(AllBackends, FitMatrix, ::testing::Values("NVIDIA", "MLU", "Mthreads", "DCU"),
                         VendorName);
// Every chip of HAMi's chart; the 910C takes whole modules for requests of more than one card.
#define HAMI_ASCEND_CHIPS                                                                            \
  ::testing::Values("Ascend910A", "Ascend910B2", "Ascend910B3", "Ascend910B4-1", "Ascend910B4", \
                    "Ascend310P", "Ascend910C")
INSTANTIATE_TEST_SUITE_P(AscendChips, FitMatrix, HAMI_ASCEND_CHIPS, VendorName);

TEST_P(FitMatrix, F1LastDeviceTriedFirst) {
  rig_.Node({{.mem = 128}, {.mem = 128}});
  auto r = rig_.Fit(1, 64, 0, 50);
  ASSERT_TRUE(r.ok) << r.reason;
  EXPECT_EQ(r.uuids, (std::vector<std::string>{rig_.Uuid(1)}));
  EXPECT_EQ(r.devices.at(0).mem, MiB(rig_.M(64)));
  EXPECT_EQ(r.devices.at(0).cores, Cores(rig_.C(50)));
  EXPECT_EQ(r.devices.at(0).vendor, rig_.vendor());
}

TEST_P(FitMatrix, F2InsufficientMemory) {
  rig_.Node({{.mem = 128}});
  EXPECT_EQ(rig_.Fit(1, 512, 0, 50).reason, "1/1 CardInsufficientMemory");
}

TEST_P(FitMatrix, F3InsufficientCore) {
  rig_.Node({{.mem = 1024, .used_cores = 100}});
  EXPECT_EQ(rig_.Fit(1, 512, 0, 50).reason, "1/1 CardInsufficientCore");
}

TEST_P(FitMatrix, F4RequestOfAnotherVendor) {
  // Devices are matched by the backend that discovered them: a request of another vendor sees no device here.
  rig_.Node({{}});
  const std::string other = rig_.vendor() == "MLU" ? "Mthreads" : "MLU";
  auto r = rig_.Fit(1, 64, 0, 50, {}, other);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.reason, "NodeInsufficientDevice");
}

TEST_P(FitMatrix, F5UseUuid) {
  rig_.Node({{.mem = 1280}, {.mem = 1280}});
  const std::string key = Spec().keys.use_uuid;
  auto r = rig_.Fit(2, 512, 0, 50, {{key, rig_.Uuid(0)}});
  EXPECT_EQ(r.reason, std::string(rig_.vendor() == "Ascend910C" ? "0" : "1") +
                          "/2 AllocatedCardsInsufficientRequest, 1/2 CardUuidMismatch");
  auto one = rig_.Fit(1, 512, 0, 50, {{key, rig_.Uuid(0)}});
  ASSERT_TRUE(one.ok) << one.reason;
  EXPECT_EQ(one.uuids, (std::vector<std::string>{rig_.Uuid(0)}));
}

TEST_P(FitMatrix, F6NouseUuid) {
  rig_.Node({{.mem = 1280}, {.mem = 1280}});
  const std::string key = Spec().keys.nouse_uuid;
  auto r = rig_.Fit(2, 512, 0, 50, {{key, rig_.Uuid(0)}});
  // A 910C's half module is no allocation (it counts the module's cards it could take: none).
  EXPECT_EQ(r.reason, std::string(rig_.vendor() == "Ascend910C" ? "0" : "1") +
                          "/2 AllocatedCardsInsufficientRequest, 1/2 CardUuidMismatch");
  auto one = rig_.Fit(1, 512, 0, 50, {{key, rig_.Uuid(1)}});
  ASSERT_TRUE(one.ok) << one.reason;
  EXPECT_EQ(one.uuids, (std::vector<std::string>{rig_.Uuid(0)}));
}

TEST_P(FitMatrix, F5F6SingleDeviceGeometryStopsAtTheDeviceCount) {
  // Upstream calls Fit with 2 wanted on 1 device and gets CardUuidMismatch; here the node-level device count
  // check is part of Fit and comes first.
  rig_.Node({{.mem = 1280}});
  const std::string key = Spec().keys.nouse_uuid;
  EXPECT_EQ(rig_.Fit(2, 512, 0, 50, {{key, rig_.Uuid(0)}}).reason, "NodeInsufficientDevice");
}

TEST_P(FitMatrix, F7TimeSlicingExhausted) {
  const std::int32_t count = rig_.Capacity() ? 100 : 3;  // capacity-discovered cards always have 100 slots
  rig_.Node({{.mem = 1024, .count = count, .used = count}});
  EXPECT_EQ(rig_.Fit(1, 512, 0, 50).reason, "1/1 CardTimeSlicingExhausted");
}

TEST_P(FitMatrix, F8CoresClampedToAWholeCard) {
  rig_.Node({{.mem = 1280}});
  auto r = rig_.Fit(1, 512, 0, 120);
  if (rig_.vendor() == "Mthreads") {
    // A Moore Threads card has 16 cores: clamping to 100 still does not fit.
    EXPECT_EQ(r.reason, "1/1 CardInsufficientCore");
    return;
  }
  ASSERT_TRUE(r.ok) << r.reason;
  EXPECT_EQ(r.uuids, (std::vector<std::string>{rig_.Uuid(0)}));
  EXPECT_EQ(r.devices.at(0).cores, 100_cores);
}

TEST_P(FitMatrix, F9WholeCardConflictsWithUsers) {
  rig_.Node({{.mem = 1024, .used = 20}});
  auto r = rig_.Fit(1, 512, 0, 100);
  if (rig_.vendor() == "Mthreads") {
    // The exclusivity rule needs a 100-core card; a 16-core Moore Threads card never triggers it (S9).
    ASSERT_TRUE(r.ok) << r.reason;
    EXPECT_EQ(r.devices.at(0).cores, 16_cores);
    return;
  }
  EXPECT_EQ(r.reason, "1/1 ExclusiveDeviceAllocateConflict");
}

TEST_P(FitMatrix, F10ComputeUnitsExhausted) {
  rig_.Node({{.mem = 1024, .used = 20, .used_cores = 100}});
  EXPECT_EQ(rig_.Fit(1, 512, 0, 0).reason, "1/1 CardComputeUnitsExhausted");
}

TEST_P(FitMatrix, F11PartialSelection) {
  // Upstream's geometry (2 wanted, 1 device) stops at the device count here; a second, full device gives the
  // partial selection upstream reports.
  rig_.Node({{.mem = 1024, .used = 20, .used_cores = 10}});
  EXPECT_EQ(rig_.Fit(2, 512, 0, 20).reason, "NodeInsufficientDevice");
  Rig two(rig_.vendor());
  two.Node({{.mem = 1024, .used = 20, .used_cores = 10}, {.mem = 1024, .used = 1, .used_mem = 1000}});
  auto r = two.Fit(2, 512, 0, 20);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.reason, std::string(rig_.vendor() == "Ascend910C" ? "0" : "1") +
                          "/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientMemory");
}

TEST_P(FitMatrix, F12AllocatedCardsInsufficientRequest) {
  rig_.Node({{.mem = 1280}, {.mem = 1280}, {.mem = 1280, .used = 1, .used_mem = 1000}});
  auto r = rig_.Fit(3, 512, 0, 20);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.reason, "1/3 CardInsufficientMemory, 2/3 AllocatedCardsInsufficientRequest");
}

TEST_P(FitMatrix, F13PercentageOfTotalMemory) {
  rig_.Node({{.mem = 1280, .used = 20, .used_cores = 10}});
  auto r = rig_.Fit(1, 0, 10, 20);
  ASSERT_TRUE(r.ok) << r.reason;
  EXPECT_EQ(r.uuids, (std::vector<std::string>{rig_.Uuid(0)}));
  EXPECT_EQ(r.devices.at(0).mem, MiB(rig_.M(128)));
}

TEST_P(FitMatrix, F15Mutex) {
  rig_.Node({{.mem = 1024, .used = 1}});
  EXPECT_EQ(rig_.Fit(1, 64, 0, 50, {{"hami.io/gpu-scheduler-policy", "mutex"}}).reason,
            "1/1 ExclusiveDeviceAllocateConflict");
  EXPECT_TRUE(rig_.Fit(1, 64, 0, 50).ok);
}

TEST_P(FitMatrix, UuidSelectorKeysAreThisVendors) {
  rig_.Node({{.mem = 1280}, {.mem = 1280}});
  // Another vendor's use-uuid annotation does not constrain this one.
  const std::string foreign = rig_.vendor() == "NVIDIA" ? "hygon.com/use-gpuuuid" : "nvidia.com/use-gpuuuid";
  auto r = rig_.Fit(1, 512, 0, 50, {{foreign, "nothing-here"}});
  ASSERT_TRUE(r.ok) << r.reason;
  EXPECT_EQ(r.uuids, (std::vector<std::string>{rig_.Uuid(1)}));
}

// --- F4 (type annotations) and F14 (health) need devices that carry a type and a health flag ---------------

class FitMatrixReported : public FitMatrix {};
INSTANTIATE_TEST_SUITE_P(ReportedDevices, FitMatrixReported, ::testing::Values("NVIDIA", "DCU"), VendorName);

TEST_P(FitMatrixReported, F4TypeMismatch) {
  rig_.Node({{}});
  const BackendSpec& spec = Spec();
  EXPECT_EQ(rig_.Fit(1, 512, 0, 50, {{spec.keys.use_type, "OtherType"}}).reason, "1/1 CardTypeMismatch");
  EXPECT_EQ(rig_.Fit(1, 512, 0, 50, {{spec.keys.nouse_type, "k100,a100"}}).reason, "1/1 CardTypeMismatch");
  EXPECT_TRUE(rig_.Fit(1, 512, 0, 50, {{spec.keys.use_type, "OtherType,k100,a100"}}).ok);
}

TEST_P(FitMatrixReported, F14NotHealthy) {
  rig_.Node({{.health = false}});
  EXPECT_EQ(rig_.Fit(1, 0, 10, 20).reason, "1/1 CardNotHealth");
  EXPECT_EQ(rig_.Fit(1, 64, 0, 50).reason, "1/1 CardNotHealth");
}

// --- the same vectors through pod resources (RequestFor -> Fit -> Annotate)
// ---------------------------------

ContainerView VendorCtr(const std::string& vendor, const std::string& name, int count, std::int64_t mem_mib,
                        std::int64_t cores) {
  if (vendor == "NVIDIA") return testing::GpuCtr(name, count, mem_mib, static_cast<int>(cores));
  if (vendor == "DCU") {
    return Ctr(name, {{"hygon.com/dcunum", std::to_string(count)},
                      {"hygon.com/dcumem", std::to_string(mem_mib)},
                      {"hygon.com/dcucores", std::to_string(cores)}});
  }
  if (vendor == "MLU") {
    return Ctr(name, {{"cambricon.com/vmlu", std::to_string(count)},
                      {"cambricon.com/mlu.smlu.vmemory", std::to_string(mem_mib / 256)},
                      {"cambricon.com/mlu.smlu.vcore", std::to_string(cores)}});
  }
  if (vendor.starts_with("Ascend")) {
    return Ctr(name, {{"huawei.com/" + vendor, std::to_string(count)},
                      {"huawei.com/" + vendor + "-memory", std::to_string(mem_mib)},
                      {"huawei.com/" + vendor + "-core", std::to_string(cores)}});
  }
  // Moore Threads: pod totals.
  return Ctr(name, {{"mthreads.com/vgpu", std::to_string(count)},
                    {"mthreads.com/sgpu-memory", std::to_string(mem_mib * count / 512)},
                    {"mthreads.com/sgpu-core", std::to_string(cores * count)}});
}

TEST_P(FitMatrix, V41UsageAddsUpThroughPodResources) {
  if (rig_.vendor() == "Ascend910C")
    GTEST_SKIP() << "a super-pod 910C is asked for two NPUs at a time (AscendAdmit.A5SuperPodPairs)";
  rig_.Node({{.mem = 4096}});
  Hold(rig_.state(), "earlier", "n", rig_.vendor(), rig_.Uuid(0), 1, 2000, rig_.C(15));
  Scheduler s(rig_.state(), SchedulerOptions{});
  const PodView pod = Pod("new", {VendorCtr(rig_.vendor(), "c", 1, 1024, rig_.C(50))});
  auto out = s.Filter(pod, {"n"}, kNow);
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << Failure(out);
  const BackendSpec& spec = Spec();
  EXPECT_EQ(out.annotations.at(spec.keys.allocated),
            rig_.Uuid(0) + "," + rig_.vendor() + ",1024," + std::to_string(rig_.C(50)) + ":;");
  s.Reserve(pod, out);
  const NodeEntry* e = rig_.state().FindNode("n");
  const int i = e->by_uuid.at(rig_.Uuid(0));
  EXPECT_EQ(e->usage[static_cast<std::size_t>(i)],
            (DeviceUsage{2, MiB(3024), Cores(rig_.C(15) + rig_.C(50))}));
}

// --- vendor specifics, through Scheduler::Filter on one node "n"
// ----------------------------------------------

struct Env {
  explicit Env(const std::map<std::string, VendorSettings>& settings = {})
      : backends(testing::BuiltinBackends(settings)), state(backends) {}
  FilterOutcome Run(const PodView& pod, const std::string& gpu_policy = "spread") {
    Scheduler s(state, SchedulerOptions{gpu_policy, "binpack"});
    return s.Filter(pod, {"n"}, kNow);
  }
  void Reserve(const PodView& pod, const FilterOutcome& out) {
    Scheduler s(state, SchedulerOptions{});
    s.Reserve(pod, out);
  }
  DeviceUsage Usage(const std::string& uuid) const {
    const NodeEntry* e = state.FindNode("n");
    return e->usage[static_cast<std::size_t>(e->by_uuid.at(uuid))];
  }
  Backends backends;
  ClusterState state;
};

PodView GpuPod(int count, std::int64_t mem, int cores, std::map<std::string, std::string> annotations = {}) {
  return Pod("p", {testing::GpuCtr("c", count, mem, cores)}, {}, std::move(annotations));
}

std::vector<std::string> Sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

NodeView DcuNode(const std::string& name, const std::vector<DeviceInfo>& devices) {
  NodeView n;
  n.name = name;
  n.annotations["hami.io/node-dcu-register"] = codec::EncodeLegacyDevices(devices);
  return n;
}

// Capacity: copies of the pod that fit one after another, each against what the ones before it use.
TEST(FitEngine, CapacityCountsCopiesAgainstTheUsageTheyLeave) {
  Env env;
  env.state.UpsertNode(testing::NvidiaNode("n", {Gpu("g0", 0, 16000, 10), Gpu("g1", 1, 16000, 10)}));
  auto fit = [&](const PodView& pod, int limit) {
    auto requests = CollectRequests(pod, env.backends);
    auto context = MakePodContext(pod, env.backends, env.state.quotas(), "binpack");
    FitEngine fitter(env.backends, env.state.quotas());
    return fitter.Capacity(*context, *requests, *env.state.FindNode("n"), limit);
  };
  EXPECT_EQ(fit(GpuPod(1, 3000, 30), 100), 6);  // cores: three per card
  EXPECT_EQ(fit(GpuPod(1, 3000, 30), 4), 4);    // up to the limit
  EXPECT_EQ(fit(GpuPod(1, 3000, 0), 100), 10);  // memory: five per card
  EXPECT_EQ(fit(GpuPod(1, 1000, 0), 100), 20);  // slots: the split, 10 per card
  EXPECT_EQ(fit(GpuPod(2, 3000, 30), 100), 3);  // both cards each time
  EXPECT_EQ(fit(GpuPod(1, 20000, 0), 100), 0);  // none
  // What the node already holds counts.
  env.Reserve(GpuPod(1, 15000, 0), env.Run(GpuPod(1, 15000, 0)));
  EXPECT_EQ(fit(GpuPod(1, 3000, 0), 100), 5);
  // Init containers give back what they used: a copy costs only its app containers.
  Env fresh;
  fresh.state.UpsertNode(testing::NvidiaNode("n", {Gpu("g0", 0, 16000, 10), Gpu("g1", 1, 16000, 4)}));
  const PodView with_init =
      Pod("i", {testing::GpuCtr("app", 1, 1000, 0)}, {testing::GpuCtr("init", 1, 8000, 0)});
  auto requests = CollectRequests(with_init, fresh.backends);
  auto context = MakePodContext(with_init, fresh.backends, fresh.state.quotas(), "binpack");
  FitEngine fitter(fresh.backends, fresh.state.quotas());
  // Were the init container's 8000 MiB kept, four copies would fill both cards; the slots allow 14.
  const int copies = fitter.Capacity(*context, *requests, *fresh.state.FindNode("n"), 100);
  EXPECT_GT(copies, 4);
  EXPECT_LE(copies, 14);
  // The node's recorded usage is untouched.
  EXPECT_EQ(fresh.Usage("g0"), DeviceUsage{});
}

// What-ifs: the same fit against the node's usage with some pods' charges taken away or added.
TEST(FitEngine, AnOverlayTakesPodsAwayOrAddsThemWithoutTouchingTheLedger) {
  Env env;
  env.state.UpsertNode(testing::NvidiaNode("n", {Gpu("g0", 0, 16000, 10)}));
  Hold(env.state, "big", "n", "NVIDIA", "g0", 1, 12000, 50);
  Hold(env.state, "small", "n", "NVIDIA", "g0", 1, 2000, 10);
  const PodView pod = GpuPod(1, 6000, 0);
  auto requests = CollectRequests(pod, env.backends);
  auto context = MakePodContext(pod, env.backends, env.state.quotas(), "binpack");
  FitEngine engine(env.backends, env.state.quotas());
  const NodeEntry& node = *env.state.FindNode("n");
  std::string reason;
  ASSERT_FALSE(engine.Fit(*context, *requests, node, nullptr, &reason));
  EXPECT_EQ(reason, "1/1 CardInsufficientMemory");
  // Without the small pod: still 6000 short of 8000 free? 16000 - 12000 = 4000 free: no.
  const PodAllocation* small = env.state.FindPod("small");
  const PodAllocation* big = env.state.FindPod("big");
  ASSERT_NE(small, nullptr);
  ASSERT_NE(big, nullptr);
  const std::vector<const PodAllocation*> without_small{small}, without_big{big};
  EXPECT_FALSE(engine.FitWith(*context, *requests, node, UsageOverlay{without_small, {}}, nullptr, &reason));
  // Without the big pod: 14000 free.
  PodDevices devices;
  ASSERT_TRUE(engine.FitWith(*context, *requests, node, UsageOverlay{without_big, {}}, &devices, &reason))
      << reason;
  EXPECT_EQ(devices.at("NVIDIA").at(0).at(0).uuid, "g0");
  // The big pod gone and the same pod placed again: 6000 + 6000 + 2000 of 16000.
  PodAllocation again = *big;
  again.uid = "again";
  again.devices = devices;
  const std::vector<const PodAllocation*> again_added{&again};
  EXPECT_TRUE(engine.FitWith(*context, *requests, node, UsageOverlay{without_big, again_added}, nullptr,
                             nullptr));
  PodAllocation third = again;
  third.uid = "third";
  const std::vector<const PodAllocation*> two_added{&again, &third};
  EXPECT_FALSE(engine.FitWith(*context, *requests, node, UsageOverlay{without_big, two_added}, nullptr,
                              &reason));
  EXPECT_EQ(reason, "1/1 CardInsufficientMemory");
  // A pod charged to another node changes nothing here.
  PodAllocation elsewhere = *big;
  elsewhere.node = "other";
  const std::vector<const PodAllocation*> not_here{&elsewhere};
  EXPECT_FALSE(engine.FitWith(*context, *requests, node, UsageOverlay{not_here, {}}, nullptr, nullptr));
  // The ledger is as it was.
  EXPECT_EQ(env.Usage("g0"), (DeviceUsage{2, 14000_MiB, 60_cores}));
  EXPECT_FALSE(engine.Fit(*context, *requests, node, nullptr, nullptr));
}

// Explain's question: which check refused each card first, and how far it was from fitting.
TEST(FitEngine, TracesEachCardsFirstRefusalAndHowFarItWas) {
  Env env;
  DeviceInfo sick = Gpu("g2", 2, 16000, 10);
  sick.health = false;
  env.state.UpsertNode(testing::NvidiaNode("n", {Gpu("g0", 0, 16000, 10), Gpu("g1", 1, 16000, 1), sick}));
  Hold(env.state, "a", "n", "NVIDIA", "g0", 1, 13000, 20);
  Hold(env.state, "b", "n", "NVIDIA", "g1", 1, 1000, 0);
  const PodView pod = GpuPod(1, 5000, 90);
  auto requests = CollectRequests(pod, env.backends);
  auto context = MakePodContext(pod, env.backends, env.state.quotas(), "binpack");
  FitEngine engine(env.backends, env.state.quotas());
  std::vector<CardRefusal> trace;
  engine.TraceRefusals(&trace);
  std::string reason;
  ASSERT_FALSE(engine.Fit(*context, *requests, *env.state.FindNode("n"), nullptr, &reason));
  EXPECT_EQ(reason, "1/3 CardInsufficientMemory, 1/3 CardNotHealth, 1/3 CardTimeSlicingExhausted");
  std::map<std::string, std::pair<Reason, std::int64_t>> by_card;
  for (const CardRefusal& r : trace) {
    EXPECT_EQ(r.container, 0u);
    EXPECT_EQ(r.backend, env.backends.IndexOf("NVIDIA"));
    by_card[env.state.FindNode("n")->devices[static_cast<std::size_t>(r.device)].id] = {r.reason, r.short_by};
  }
  ASSERT_EQ(by_card.size(), 3u);
  EXPECT_EQ(by_card["g0"], std::make_pair(Reason::kCardInsufficientMemory, std::int64_t{2000}));
  EXPECT_EQ(by_card["g1"], std::make_pair(Reason::kCardTimeSlicingExhausted, std::int64_t{1}));
  EXPECT_EQ(by_card["g2"], std::make_pair(Reason::kCardNotHealth, std::int64_t{0}));
  // Cores: with 3000 MiB the memory fits g0, but 90 cores do not fit its 80 free.
  const PodView smaller = GpuPod(1, 3000, 90);
  auto smaller_requests = CollectRequests(smaller, env.backends);
  ASSERT_FALSE(engine.Fit(*context, *smaller_requests, *env.state.FindNode("n"), nullptr, &reason));
  bool cores = false;
  for (const CardRefusal& r : trace) {
    if (r.reason == Reason::kCardInsufficientCore) cores = r.short_by == 10;
  }
  EXPECT_TRUE(cores) << reason;
  // Untraced, nothing is recorded.
  engine.TraceRefusals(nullptr);
  trace.clear();
  EXPECT_FALSE(engine.Fit(*context, *requests, *env.state.FindNode("n"), nullptr, nullptr));
  EXPECT_TRUE(trace.empty());
}

TEST(NvidiaFit, V30ZeroPercentageBooksTheWholeCard) {
  Env env;
  env.state.UpsertNode(testing::NvidiaNode("n", {Gpu("gpu-0", 0, 11264)}));
  const PodView pod = Pod("p", {Ctr("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "0"}})});
  auto out = env.Run(pod);
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << Failure(out);
  EXPECT_EQ(out.devices.at("NVIDIA").at(0).at(0).mem, 11264_MiB);
  Hold(env.state, "other", "n", "NVIDIA", "gpu-0", 1, 11260, 0);
  EXPECT_EQ(Failure(env.Run(pod)), "1/1 CardInsufficientMemory");
}

// V34
NodeView CordonNode(const std::string& cordon) {
  NodeView n = testing::NvidiaNode("n", {Gpu("dev-0", 0, 128, 100), Gpu("dev-1", 1, 128, 100)});
  if (!cordon.empty()) n.annotations["hami.io/device-cordon"] = cordon;
  return n;
}

TEST(NvidiaFit, V34Cordon) {
  const PodView pod = GpuPod(1, 64, 50);
  {
    Env env;
    env.state.UpsertNode(CordonNode(""));
    EXPECT_EQ(Uuids(env.Run(pod)), (std::vector<std::string>{"dev-1"}));
  }
  {
    Env env;
    env.state.UpsertNode(CordonNode("dev-1, "));
    EXPECT_EQ(Uuids(env.Run(pod)), (std::vector<std::string>{"dev-0"}));
  }
  {
    Env env;
    env.state.UpsertNode(CordonNode("dev-0,dev-1"));
    EXPECT_EQ(Failure(env.Run(pod)), "2/2 CardCordoned");
  }
}

TEST(NvidiaFit, V34CordonedDeviceInUseKeepsItsUsage) {
  Env env;
  env.state.UpsertNode(CordonNode("dev-1"));
  Hold(env.state, "running", "n", "NVIDIA", "dev-1", 1, 32, 10);
  const PodView pod = GpuPod(1, 64, 50);
  auto out = env.Run(pod, "binpack");  // binpack would prefer the device in use
  ASSERT_EQ(Uuids(out), (std::vector<std::string>{"dev-0"}));
  env.Reserve(pod, out);
  EXPECT_EQ(env.Usage("dev-1"), (DeviceUsage{1, 32_MiB, 10_cores}));
  EXPECT_EQ(env.Usage("dev-0"), (DeviceUsage{1, 64_MiB, 50_cores}));
}

TEST(NvidiaFit, CordonFollowsTheLiveNodeObject) {
  Env env;
  env.state.UpsertNode(CordonNode("dev-1"));
  EXPECT_EQ(Uuids(env.Run(GpuPod(1, 64, 50))), (std::vector<std::string>{"dev-0"}));
  env.state.UpsertNode(CordonNode(""));  // docs/DECISIONS.md, D6: takes effect at once
  EXPECT_EQ(Uuids(env.Run(GpuPod(1, 64, 50))), (std::vector<std::string>{"dev-1"}));
}

TEST(HygonFit, CordonIsNvidiaOnly) {
  Env env;
  DeviceInfo a = Gpu("dcu-0", 0, 16384, 4, "DCU-K100");
  DeviceInfo b = Gpu("dcu-1", 1, 16384, 4, "DCU-K100");
  NodeView n = DcuNode("n", {a, b});
  n.annotations["hami.io/device-cordon"] = "dcu-0,dcu-1";
  env.state.UpsertNode(n);
  auto out = env.Run(Pod("p", {Ctr("c", {{"hygon.com/dcunum", "1"}, {"hygon.com/dcumem", "100"}})}));
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << Failure(out);
  EXPECT_EQ(Uuids(out, 0, "DCU"), (std::vector<std::string>{"dcu-1"}));
}

// V35, V24
TEST(NvidiaFit, V35NumaBind) {
  Env env;
  env.state.UpsertNode(testing::NvidiaNode(
      "n", {Gpu("dev-0", 0, 8192, 10, "NVIDIA", 1), Gpu("dev-1", 1, 8192, 10, "NVIDIA", 1),
            Gpu("dev-2", 2, 8192, 10, "NVIDIA", 0)}));
  EXPECT_EQ(Uuids(env.Run(GpuPod(2, 100, 10, {{"nvidia.com/numa-bind", "true"}}))),
            (std::vector<std::string>{"dev-1", "dev-0"}));
}

TEST(NvidiaFit, V35NumaBindKeepsOneNode) {
  Env env;
  env.state.UpsertNode(testing::NvidiaNode(
      "n", {Gpu("dev-0", 0, 8192, 10, "NVIDIA", 0), Gpu("dev-1", 1, 8192, 10, "NVIDIA", 1),
            Gpu("dev-2", 2, 8192, 10, "NVIDIA", 0)}));
  EXPECT_EQ(Uuids(env.Run(GpuPod(2, 100, 10, {{"nvidia.com/numa-bind", "true"}}))),
            (std::vector<std::string>{"dev-2", "dev-0"}));
  // Without binding (absent, false or unreadable) the pair may straddle NUMA nodes.
  EXPECT_EQ(Uuids(env.Run(GpuPod(2, 100, 10))), (std::vector<std::string>{"dev-1", "dev-2"}));
  EXPECT_EQ(Uuids(env.Run(GpuPod(2, 100, 10, {{"nvidia.com/numa-bind", "false"}}))),
            (std::vector<std::string>{"dev-1", "dev-2"}));
  EXPECT_EQ(Uuids(env.Run(GpuPod(2, 100, 10, {{"nvidia.com/numa-bind", "notabool"}}))),
            (std::vector<std::string>{"dev-1", "dev-2"}));
}

TEST(NvidiaFit, NumaNotFitReason) {
  Env env;
  env.state.UpsertNode(testing::NvidiaNode(
      "n", {Gpu("dev-0", 0, 8192, 10, "NVIDIA", 0), Gpu("dev-1", 1, 8192, 10, "NVIDIA", 1)}));
  EXPECT_EQ(Failure(env.Run(GpuPod(2, 100, 10, {{"nvidia.com/numa-bind", "true"}}))),
            "1/2 AllocatedCardsInsufficientRequest, 1/2 NumaNotFit");
  EXPECT_EQ(Failure(env.Run(GpuPod(2, 100, 10))), "<fits>");
}

// V36
TEST(NvidiaFit, V36Mutex) {
  Env env;
  env.state.UpsertNode(testing::NvidiaNode("n", {Gpu("used", 0), Gpu("idle", 1)}));
  Hold(env.state, "running", "n", "NVIDIA", "used", 1, 100, 10);
  const auto policy = [](const char* p) {
    return std::map<std::string, std::string>{{"hami.io/gpu-scheduler-policy", p}};
  };
  EXPECT_EQ(Uuids(env.Run(GpuPod(1, 100, 10, policy("binpack")))), (std::vector<std::string>{"used"}));
  EXPECT_EQ(Uuids(env.Run(GpuPod(1, 100, 10, policy("mutex")))), (std::vector<std::string>{"idle"}));
  EXPECT_EQ(Uuids(env.Run(GpuPod(1, 100, 10, policy("binpack,mutex")))), (std::vector<std::string>{"idle"}));
  EXPECT_EQ(Uuids(env.Run(GpuPod(1, 100, 10), "mutex")), (std::vector<std::string>{"idle"}));
  EXPECT_EQ(Failure(env.Run(GpuPod(2, 100, 10, policy("mutex")))),
            "1/2 AllocatedCardsInsufficientRequest, 1/2 ExclusiveDeviceAllocateConflict");
}

// --- MIG (V37, V42-ish)
// ---------------------------------------------------------------------------------------

std::vector<MigProfile> A100Profiles() {
  return {MigProfile{"1g.10gb", 10240, 14, 1, {{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}}},
          MigProfile{"3g.40gb", 40960, 42, 3, {{0, 4}, {4, 4}}},
          MigProfile{"7g.80gb", 81920, 100, 7, {{0, 8}}}};
}

DeviceInfo MigGpu(std::string id, std::int32_t index, std::vector<MigProfile> profiles,
                  std::int64_t mem = 81920) {
  DeviceInfo d = Gpu(std::move(id), index, mem, 7, "NVIDIA A100-SXM4-80GB");
  d.mode = "mig";
  d.mig_profiles = std::move(profiles);
  return d;
}

std::optional<MigSlot> SlotOf(const FilterOutcome& out, std::size_t container = 0, std::size_t device = 0) {
  auto it = out.devices.find("NVIDIA");
  if (it == out.devices.end() || container >= it->second.size() || device >= it->second[container].size()) {
    return std::nullopt;
  }
  return it->second[container][device].mig;
}

TEST(NvidiaMigFit, V37MigDeviceWithoutProfiles) {
  Env env;
  env.state.UpsertNode(testing::NvidiaNode("n", {MigGpu("mig-0", 0, {}, 8192)}));
  const PodView pod = Pod("p", {Ctr("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "50"}})});
  EXPECT_EQ(Failure(env.Run(pod)), "1/1 CardMigTopologyInfeasible");
}

TEST(NvidiaMigFit, RequestPlacedOnTheSmallestFittingInstance) {
  Env env;
  env.state.UpsertNode(testing::NvidiaNode("n", {MigGpu("GPU-MIG", 0, A100Profiles())}));
  auto small = env.Run(GpuPod(1, 8000, 0));
  ASSERT_EQ(small.kind, FilterOutcome::Kind::kScheduled) << Failure(small);
  EXPECT_EQ(SlotOf(small), (MigSlot{"1g.10gb", {6, 1}}));  // 1g profiles fill from the highest start
  const ContainerDevice& d = small.devices.at("NVIDIA").at(0).at(0);
  EXPECT_EQ(d.mem, 10240_MiB);  // charged at the profile's size
  EXPECT_EQ(d.cores, 14_cores);
  EXPECT_EQ(small.annotations.at("hami.io/vgpu-devices-allocated"), "GPU-MIG,NVIDIA,10240,14:;");
  auto mig = codec::DecodeMigAllocations(small.annotations.at("hami.io/vgpu-mig-allocations"));
  ASSERT_TRUE(mig) << mig.error().message;
  ASSERT_EQ(mig->size(), 1u);
  EXPECT_EQ((*mig)[0].gpu_uuid, "GPU-MIG");
  EXPECT_EQ((*mig)[0].profile, "1g.10gb");
  EXPECT_EQ((*mig)[0].placement, (MigPlacement{6, 1}));

  EXPECT_EQ(SlotOf(env.Run(GpuPod(1, 30000, 0))), (MigSlot{"3g.40gb", {4, 4}}));
  auto whole = env.Run(GpuPod(1, 50000, 0));
  EXPECT_EQ(SlotOf(whole), (MigSlot{"7g.80gb", {0, 8}}));
  EXPECT_EQ(whole.devices.at("NVIDIA").at(0).at(0).mem, 81920_MiB);
}

TEST(NvidiaMigFit, SeveralInstancesOfOneGpuForOneContainer) {
  Env env;
  env.state.UpsertNode(testing::NvidiaNode("n", {MigGpu("GPU-MIG", 0, A100Profiles())}));
  // Two devices wanted on a node with one GPU: the device-count check does not apply to MIG.
  auto out = env.Run(GpuPod(3, 8000, 0));
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << Failure(out);
  EXPECT_EQ(Uuids(out), (std::vector<std::string>{"GPU-MIG", "GPU-MIG", "GPU-MIG"}));
  EXPECT_EQ(SlotOf(out, 0, 0), (MigSlot{"1g.10gb", {6, 1}}));
  EXPECT_EQ(SlotOf(out, 0, 1), (MigSlot{"1g.10gb", {5, 1}}));
  EXPECT_EQ(SlotOf(out, 0, 2), (MigSlot{"1g.10gb", {4, 1}}));
  auto two_big = env.Run(GpuPod(2, 30000, 0));
  ASSERT_EQ(two_big.kind, FilterOutcome::Kind::kScheduled) << Failure(two_big);
  EXPECT_EQ(SlotOf(two_big, 0, 0), (MigSlot{"3g.40gb", {4, 4}}));
  EXPECT_EQ(SlotOf(two_big, 0, 1), (MigSlot{"3g.40gb", {0, 4}}));
}

TEST(NvidiaMigFit, InstancesInUseAreAvoided) {
  Env env;
  env.state.UpsertNode(testing::NvidiaNode("n", {MigGpu("GPU-MIG", 0, A100Profiles())}));
  PodAllocation a;
  a.uid = "running";
  a.ns = "default";
  a.name = "running";
  a.node = "n";
  a.devices["NVIDIA"] = {
      {ContainerDevice{0, "GPU-MIG", "NVIDIA", 10240_MiB, 14_cores, MigSlot{"1g.10gb", {6, 1}}}},
      {ContainerDevice{0, "GPU-MIG", "NVIDIA", 10240_MiB, 14_cores, MigSlot{"1g.10gb", {2, 1}}}}};
  a.mig = codec::MigAllocationsOf(a.devices["NVIDIA"]);
  env.state.AddPod(a);
  EXPECT_EQ(SlotOf(env.Run(GpuPod(1, 8000, 0))), (MigSlot{"1g.10gb", {5, 1}}));
  // Memory (61440 MiB free) would do, but no 3g or 7g placement avoids slices 2 and 6.
  EXPECT_EQ(Failure(env.Run(GpuPod(1, 30000, 0))), "1/1 CardMigTopologyInfeasible");
  env.state.RemovePod("running");
  EXPECT_EQ(SlotOf(env.Run(GpuPod(1, 30000, 0))), (MigSlot{"3g.40gb", {4, 4}}));
}

TEST(NvidiaMigFit, ReservationIsSeenByTheNextDecision) {
  Env env;
  env.state.UpsertNode(testing::NvidiaNode("n", {MigGpu("GPU-MIG", 0, A100Profiles())}));
  const PodView first = Pod("first", {testing::GpuCtr("c", 1, 8000, 0)});
  auto a = env.Run(first);
  ASSERT_EQ(SlotOf(a), (MigSlot{"1g.10gb", {6, 1}}));
  env.Reserve(first, a);
  EXPECT_EQ(SlotOf(env.Run(Pod("second", {testing::GpuCtr("c", 1, 8000, 0)}))), (MigSlot{"1g.10gb", {5, 1}}));
}

TEST(NvidiaMigFit, AllowlistRestrictsProfiles) {
  VendorSettings s;
  s.Set("migProfileAllowlist", testing::MigAllowlist({{{"A100"}, {"1g.10gb"}}}));
  Env env({{"nvidia", s}});
  env.state.UpsertNode(testing::NvidiaNode("n", {MigGpu("GPU-MIG", 0, A100Profiles())}));
  EXPECT_EQ(SlotOf(env.Run(GpuPod(1, 8000, 0))), (MigSlot{"1g.10gb", {6, 1}}));
  EXPECT_EQ(Failure(env.Run(GpuPod(1, 30000, 0))), "1/1 CardMigTopologyInfeasible");
}

TEST(NvidiaMigFit, NoProfileLargeEnough) {
  // 60000 MiB is within the card's memory, but its largest allowed instance has 40960.
  Env env;
  std::vector<MigProfile> small = A100Profiles();
  small.pop_back();
  env.state.UpsertNode(testing::NvidiaNode("n", {MigGpu("GPU-MIG", 0, small)}));
  EXPECT_EQ(Failure(env.Run(GpuPod(1, 60000, 0))), "1/1 CardMigTopologyInfeasible");
  EXPECT_EQ(SlotOf(env.Run(GpuPod(1, 40000, 0))), (MigSlot{"3g.40gb", {4, 4}}));
}

TEST(NvidiaFit, V23VgpuModeSelectsDeviceModes) {
  Env env;
  DeviceInfo core = Gpu("GPU-CORE", 1, 81920, 10, "NVIDIA A100-SXM4-80GB");
  env.state.UpsertNode(testing::NvidiaNode("n", {MigGpu("GPU-MIG", 0, A100Profiles()), core}));
  const auto mode = [](const char* m) {
    return std::map<std::string, std::string>{{"nvidia.com/vgpu-mode", m}};
  };
  auto mig = env.Run(GpuPod(1, 8000, 0, mode("mig")));
  EXPECT_EQ(Uuids(mig), (std::vector<std::string>{"GPU-MIG"}));
  EXPECT_TRUE(SlotOf(mig).has_value());
  auto plain = env.Run(GpuPod(1, 8000, 0, mode("hami-core")));
  EXPECT_EQ(Uuids(plain), (std::vector<std::string>{"GPU-CORE"}));
  EXPECT_FALSE(SlotOf(plain).has_value());
  EXPECT_EQ(Failure(env.Run(GpuPod(1, 8000, 0, mode("mps")))), "2/2 CardTypeMismatch");
  EXPECT_EQ(Failure(env.Run(GpuPod(1, 8000, 0, mode("hami-core,mig")))), "<fits>");
}

TEST(NvidiaFit, VgpuModeOnADeviceWithoutMode) {
  Env env;
  DeviceInfo d = Gpu("GPU-0", 0);
  d.mode = "";  // the manifest omitted it
  env.state.UpsertNode(testing::NvidiaNode("n", {d}));
  EXPECT_EQ(Uuids(env.Run(GpuPod(1, 100, 10, {{"nvidia.com/vgpu-mode", "mps"}}))),
            (std::vector<std::string>{"GPU-0"}));
}

TEST(NvidiaFit, ModeFilterWithoutMigKeepsTheDeviceCountCheck) {
  Env env;
  env.state.UpsertNode(testing::NvidiaNode("n", {MigGpu("GPU-MIG", 0, A100Profiles())}));
  EXPECT_EQ(Failure(env.Run(GpuPod(2, 8000, 0, {{"nvidia.com/vgpu-mode", "hami-core"}}))),
            "NodeInsufficientDevice");
}

// --- topology-aware (V38)
// -------------------------------------------------------------------------------------

NodeView TopologyNode(int devices, const std::string& scores, int unhealthy = -1) {
  std::vector<DeviceInfo> gpus;
  for (int i = 0; i < devices; ++i) {
    gpus.push_back(Gpu("dev-" + std::to_string(i), i, 8192, 10));
    if (i == unhealthy) gpus.back().health = false;
  }
  NodeView n = testing::NvidiaNode("n", gpus);
  if (!scores.empty()) n.annotations["hami.io/node-nvidia-score"] = scores;
  return n;
}

PodView TopologyPod(int count) {
  return GpuPod(count, 1000, 10, {{"hami.io/gpu-scheduler-policy", "topology-aware"}});
}

constexpr const char* kPositiveScores =
    R"([{"uuid":"dev-0","score":{"dev-1":100,"dev-2":200}},{"uuid":"dev-1","score":{"dev-0":100,"dev-2":150}},)"
    R"({"uuid":"dev-2","score":{"dev-0":200,"dev-1":150}}])";
constexpr const char* kNegativeScores =
    R"([{"uuid":"dev-0","score":{"dev-1":-5,"dev-2":-3}},{"uuid":"dev-1","score":{"dev-0":-5,"dev-2":-1}},)"
    R"({"uuid":"dev-2","score":{"dev-0":-3,"dev-1":-1}}])";

TEST(NvidiaTopologyFit, V38ExactlyAsManyCandidates) {
  Env env;
  env.state.UpsertNode(TopologyNode(2, ""));
  EXPECT_EQ(Sorted(Uuids(env.Run(TopologyPod(2)))), (std::vector<std::string>{"dev-0", "dev-1"}));
}

TEST(NvidiaTopologyFit, V38PositiveScores) {
  Env env;
  env.state.UpsertNode(TopologyNode(3, kPositiveScores));
  // One card: the least connected one, keeping the best pair free.
  EXPECT_EQ(Uuids(env.Run(TopologyPod(1))), (std::vector<std::string>{"dev-1"}));
  EXPECT_EQ(Sorted(Uuids(env.Run(TopologyPod(2)))), (std::vector<std::string>{"dev-0", "dev-2"}));
  // Without the policy the scores are not used.
  EXPECT_EQ(Uuids(env.Run(GpuPod(1, 1000, 10))), (std::vector<std::string>{"dev-2"}));
}

TEST(NvidiaTopologyFit, V38ZeroScores) {
  Env env;
  env.state.UpsertNode(TopologyNode(3, ""));
  auto out = env.Run(TopologyPod(2));
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << Failure(out);
  auto uuids = Sorted(Uuids(out));
  ASSERT_EQ(uuids.size(), 2u);
  EXPECT_NE(uuids[0], uuids[1]);
}

TEST(NvidiaTopologyFit, V38NegativeScores) {
  Env env;
  env.state.UpsertNode(TopologyNode(3, kNegativeScores));
  EXPECT_EQ(Uuids(env.Run(TopologyPod(1))), (std::vector<std::string>{"dev-0"}));
  EXPECT_EQ(Sorted(Uuids(env.Run(TopologyPod(2)))), (std::vector<std::string>{"dev-1", "dev-2"}));
}

TEST(NvidiaTopologyFit, TooFewCandidates) {
  Env env;
  env.state.UpsertNode(TopologyNode(3, kPositiveScores, /*unhealthy=*/1));
  EXPECT_EQ(Sorted(Uuids(env.Run(TopologyPod(2)))), (std::vector<std::string>{"dev-0", "dev-2"}));
  EXPECT_EQ(Failure(env.Run(TopologyPod(3))), "1/3 CardNotHealth, 2/3 AllocatedCardsInsufficientRequest");
}

// --- quota in fit (V40, V50)
// ------------------------------------------------------------------------------------

ResourceQuotaView Quota(std::string ns, std::string name, std::map<std::string, std::string> hard) {
  ResourceQuotaView q;
  q.ns = std::move(ns);
  q.name = std::move(name);
  for (auto& [k, v] : hard) q.hard[k] = v;
  return q;
}

class NvidiaQuotaFit : public ::testing::Test {
 protected:
  NvidiaQuotaFit() {
    env_.state.UpsertNode(testing::NvidiaNode("n", {Gpu("gpu-0", 0), Gpu("gpu-1", 1)}));
    env_.state.quotas().UpsertQuota(Quota("default", "q", {{"limits.nvidia.com/gpumem", "2048"}}));
  }
  Env env_;
};

TEST_F(NvidiaQuotaFit, V40SingleContainer) {
  EXPECT_EQ(Failure(env_.Run(GpuPod(1, 100, 10))), "<fits>");
  EXPECT_EQ(Failure(env_.Run(GpuPod(1, 2048, 10))), "<fits>");
  EXPECT_EQ(Failure(env_.Run(GpuPod(1, 3000, 10))), "2/2 ResourceQuotaNotFit");
  // A percentage request is charged at its share of the card: 50 % of 8000 MiB.
  EXPECT_EQ(Failure(env_.Run(
                Pod("p", {Ctr("c", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "50"}})}))),
            "2/2 ResourceQuotaNotFit");
  // Other namespaces are not limited.
  EXPECT_EQ(Failure(env_.Run(Pod("p", {testing::GpuCtr("c", 1, 3000, 10)}, {}, {}, "free"))), "<fits>");
}

TEST_F(NvidiaQuotaFit, V40ExistingUsageOfTheNamespace) {
  Hold(env_.state, "elsewhere", "n", "NVIDIA", "gpu-0", 1, 1500, 0, "other");
  EXPECT_EQ(Failure(env_.Run(GpuPod(1, 2000, 10))), "<fits>");
  Hold(env_.state, "mine", "n", "NVIDIA", "gpu-0", 1, 1024, 0, "default");
  EXPECT_EQ(Failure(env_.Run(GpuPod(1, 100, 10))), "<fits>");
  EXPECT_EQ(Failure(env_.Run(GpuPod(1, 2000, 10))), "2/2 ResourceQuotaNotFit");
  env_.state.RemovePod("mine");
  EXPECT_EQ(Failure(env_.Run(GpuPod(1, 2000, 10))), "<fits>");
}

TEST_F(NvidiaQuotaFit, V40SelectionOfTheSameContainer) {
  EXPECT_EQ(Failure(env_.Run(GpuPod(2, 1024, 10))), "<fits>");
  EXPECT_EQ(Failure(env_.Run(GpuPod(2, 1100, 10))),
            "1/2 AllocatedCardsInsufficientRequest, 1/2 ResourceQuotaNotFit");
}

TEST_F(NvidiaQuotaFit, V40EarlierContainersOfThePod) {
  EXPECT_EQ(
      Failure(env_.Run(Pod("p", {testing::GpuCtr("a", 1, 1024, 10), testing::GpuCtr("b", 1, 1024, 10)}))),
      "<fits>");
  EXPECT_EQ(
      Failure(env_.Run(Pod("p", {testing::GpuCtr("a", 1, 1024, 10), testing::GpuCtr("b", 1, 1100, 10)}))),
      "2/2 ResourceQuotaNotFit");
}

TEST(NvidiaQuotaFitInit, V40InitContainersCountByTheirPeak) {
  Env env;
  env.state.UpsertNode(testing::NvidiaNode("n", {Gpu("gpu-0", 0)}));
  env.state.quotas().UpsertQuota(Quota("default", "q", {{"limits.nvidia.com/gpumem", "2048"}}));
  const PodView peak = Pod("p", {testing::GpuCtr("app", 1, 100, 10)},
                           {testing::GpuCtr("init0", 1, 1500, 10), testing::GpuCtr("init1", 1, 1500, 10)});
  EXPECT_EQ(Failure(env.Run(peak)), "<fits>");
  const PodView big_init =
      Pod("p", {testing::GpuCtr("app", 1, 100, 10)}, {testing::GpuCtr("init", 1, 2100, 10)});
  EXPECT_EQ(Failure(env.Run(big_init)), "1/1 ResourceQuotaNotFit");
  const PodView apps = Pod("p", {testing::GpuCtr("a", 1, 1000, 10), testing::GpuCtr("b", 1, 1100, 10)},
                           {testing::GpuCtr("init", 1, 1500, 10)});
  EXPECT_EQ(Failure(env.Run(apps)), "1/1 ResourceQuotaNotFit");  // apps sum to 2100 on the one GPU
}

TEST(NvidiaQuotaFitCores, CoresAndTightestLimit) {
  Env env;
  env.state.UpsertNode(testing::NvidiaNode("n", {Gpu("gpu-0", 0)}));
  env.state.quotas().UpsertQuota(Quota("default", "cores", {{"limits.nvidia.com/gpucores", "50"}}));
  EXPECT_EQ(Failure(env.Run(GpuPod(1, 100, 40))), "<fits>");
  EXPECT_EQ(Failure(env.Run(GpuPod(1, 100, 60))), "1/1 ResourceQuotaNotFit");
  env.state.quotas().UpsertQuota(Quota("default", "loose", {{"limits.nvidia.com/gpumem", "4096"}}));
  env.state.quotas().UpsertQuota(Quota("default", "tight", {{"limits.nvidia.com/gpumem", "2048"}}));
  EXPECT_EQ(Failure(env.Run(GpuPod(1, 3000, 10))), "1/1 ResourceQuotaNotFit");
  env.state.quotas().RemoveQuota("default", "tight");
  EXPECT_EQ(Failure(env.Run(GpuPod(1, 3000, 10))), "<fits>");
}

TEST(NvidiaQuotaFitFactor, LimitIsScaledLikeTheRequest) {
  VendorSettings s;
  s.Set("memoryFactor", 2);
  Env env({{"nvidia", s}});
  env.state.UpsertNode(testing::NvidiaNode("n", {Gpu("gpu-0", 0, 8000)}));
  env.state.quotas().UpsertQuota(Quota("default", "q", {{"limits.nvidia.com/gpumem", "1000"}}));
  EXPECT_EQ(Failure(env.Run(GpuPod(1, 900, 10))), "<fits>");  // 1800 MiB of 2000
  EXPECT_EQ(Failure(env.Run(GpuPod(1, 1100, 10))), "1/1 ResourceQuotaNotFit");
}

TEST(CambriconQuotaFit, V50) {
  Env env;
  NodeView n;
  n.name = "n";
  n.capacity["cambricon.com/mlu.smlu.vcore"] = "100";
  n.capacity["cambricon.com/mlu.smlu.vmemory"] = "160";  // one card of 40960 MiB
  env.state.UpsertNode(n);
  ASSERT_EQ(env.state.FindNode("n")->devices.at(0).devmem, 40960_MiB);
  env.state.quotas().UpsertQuota(Quota("default", "q", {{"limits.cambricon.com/mlu.smlu.vmemory", "50"}}));
  const auto mlu = [](std::map<std::string, std::string> limits) {
    return Pod("p", {Ctr("c", std::move(limits))});
  };
  EXPECT_EQ(Failure(env.Run(mlu({{"cambricon.com/vmlu", "1"}, {"cambricon.com/mlu.smlu.vcore", "10"}}))),
            "1/1 ResourceQuotaNotFit");
  EXPECT_EQ(Failure(env.Run(mlu({{"cambricon.com/vmlu", "1"}, {"cambricon.com/mlu.smlu.vmemory", "50"}}))),
            "<fits>");
  EXPECT_EQ(Failure(env.Run(mlu({{"cambricon.com/vmlu", "1"}, {"cambricon.com/mlu.smlu.vmemory", "51"}}))),
            "1/1 ResourceQuotaNotFit");
}

TEST(QuotaFit, NotCheckedInFitForHygonAndMthreads) {
  Env env;
  NodeView n = DcuNode("n", {Gpu("dcu-0", 0, 16384, 4, "DCU-K100")});
  n.capacity["mthreads.com/sgpu-core"] = "16";
  n.capacity["mthreads.com/sgpu-memory"] = "32";
  env.state.UpsertNode(n);
  env.state.quotas().UpsertQuota(
      Quota("default", "q", {{"limits.hygon.com/dcumem", "100"}, {"limits.mthreads.com/sgpu-memory", "1"}}));
  EXPECT_EQ(Failure(env.Run(Pod("p", {Ctr("c", {{"hygon.com/dcunum", "1"}, {"hygon.com/dcumem", "2000"}})}))),
            "<fits>");
  EXPECT_EQ(
      Failure(env.Run(Pod("p", {Ctr("c", {{"mthreads.com/vgpu", "1"}, {"mthreads.com/sgpu-memory", "8"}})}))),
      "<fits>");
}

// --- use / nouse selectors (V7, V8, V23, V59)
// ------------------------------------------------------------------

TEST(NvidiaSelectorFit, V7Uuids) {
  Env env;
  env.state.UpsertNode(testing::NvidiaNode("n", {Gpu("abc", 0), Gpu("1abc", 1)}));
  const auto run = [&](std::map<std::string, std::string> a) {
    return env.Run(GpuPod(1, 100, 10, std::move(a)));
  };
  EXPECT_EQ(Uuids(run({})), (std::vector<std::string>{"1abc"}));
  EXPECT_EQ(Uuids(run({{"nvidia.com/use-gpuuuid", "abc,123"}})), (std::vector<std::string>{"abc"}));
  EXPECT_EQ(Uuids(run({{"nvidia.com/nouse-gpuuuid", "abc,123"}})), (std::vector<std::string>{"1abc"}));
  EXPECT_EQ(Uuids(run({{"nvidia.com/nouse-gpuuuid", "1abc"}})), (std::vector<std::string>{"abc"}));
  EXPECT_EQ(Failure(run({{"nvidia.com/use-gpuuuid", "abc,123"}, {"nvidia.com/nouse-gpuuuid", "abc"}})),
            "2/2 CardUuidMismatch");
  EXPECT_EQ(Uuids(run({{"nvidia.com/use-gpuuuid", "abc,123"}, {"nvidia.com/nouse-gpuuuid", "456"}})),
            (std::vector<std::string>{"abc"}));
  EXPECT_EQ(Uuids(run({{"nvidia.com/use-gpuuuid", " abc , 123 "}})), (std::vector<std::string>{"abc"}));
  EXPECT_EQ(Uuids(run({{"nvidia.com/use-gpuuuid", ""}})), (std::vector<std::string>{"1abc"}));
  EXPECT_EQ(Uuids(run({{"nvidia.com/use-gpuuuid", "   "}})), (std::vector<std::string>{"1abc"}));
  EXPECT_EQ(Uuids(run({{"nvidia.com/nouse-gpuuuid", ""}})), (std::vector<std::string>{"1abc"}));
  EXPECT_EQ(Failure(run({{"nvidia.com/use-gpuuuid", "ABC"}})), "2/2 CardUuidMismatch");  // exact match
}

TEST(NvidiaSelectorFit, V8CardTypes) {
  Env env;
  env.state.UpsertNode(testing::NvidiaNode("n", {Gpu("gpu-0", 0, 8000, 10, "NVIDIA-A100")}));
  const auto run = [&](std::map<std::string, std::string> a) {
    return Failure(env.Run(GpuPod(1, 100, 10, std::move(a))));
  };
  EXPECT_EQ(run({}), "<fits>");
  EXPECT_EQ(run({{"nvidia.com/use-gputype", "A100,V100"}}), "<fits>");
  EXPECT_EQ(run({{"nvidia.com/use-gputype", "V100"}}), "1/1 CardTypeMismatch");
  EXPECT_EQ(run({{"nvidia.com/nouse-gputype", "A100"}}), "1/1 CardTypeMismatch");
  EXPECT_EQ(run({{"nvidia.com/nouse-gputype", "V100"}}), "<fits>");
  EXPECT_EQ(run({{"nvidia.com/use-gputype", ""}}), "<fits>");
  EXPECT_EQ(run({{"nvidia.com/nouse-gputype", "   "}}), "<fits>");
  EXPECT_EQ(run({{"nvidia.com/use-gputype", "A100"}, {"nvidia.com/nouse-gputype", "A100"}}),
            "1/1 CardTypeMismatch");
  EXPECT_EQ(run({{"nvidia.com/nouse-gputype", "V100,"}}), "<fits>");
  EXPECT_EQ(run({{"nvidia.com/nouse-gputype", ",V100"}}), "<fits>");
  EXPECT_EQ(run({{"nvidia.com/use-gputype", "V100,"}}), "1/1 CardTypeMismatch");
  EXPECT_EQ(run({{"nvidia.com/use-gputype", "a100"}}), "<fits>");  // case-insensitive
}

TEST(NvidiaSelectorFit, V23SubstringTypes) {
  Env env;
  env.state.UpsertNode(testing::NvidiaNode(
      "n", {Gpu("a10", 0, 8000, 10, "NVIDIA A10"), Gpu("a100", 1, 8000, 10, "NVIDIA A100")}));
  EXPECT_EQ(Uuids(env.Run(GpuPod(2, 100, 10, {{"nvidia.com/use-gputype", "A10"}}))).size(), 2u);  // substring
  EXPECT_EQ(Uuids(env.Run(GpuPod(1, 100, 10,
                                 {{"nvidia.com/use-gputype", "A10"}, {"nvidia.com/nouse-gputype", "A100"}}))),
            (std::vector<std::string>{"a10"}));
}

TEST(HygonSelectorFit, V59DcuTypes) {
  Env env;
  // Any card model is a DCU when the Hygon backend discovered it.
  env.state.UpsertNode(DcuNode("n", {Gpu("dcu-0", 0, 16384, 4, "dcu"), Gpu("test-0", 1, 16384, 4, "test")}));
  const auto run = [&](std::map<std::string, std::string> a) {
    return env.Run(
        Pod("p", {Ctr("c", {{"hygon.com/dcunum", "1"}, {"hygon.com/dcumem", "100"}})}, {}, std::move(a)));
  };
  EXPECT_EQ(Uuids(run({}), 0, "DCU"), (std::vector<std::string>{"test-0"}));
  EXPECT_EQ(Uuids(run({{"hygon.com/use-dcutype", "dcu"}}), 0, "DCU"), (std::vector<std::string>{"dcu-0"}));
  EXPECT_EQ(Uuids(run({{"hygon.com/use-dcutype", "dcu,test"}}), 0, "DCU"),
            (std::vector<std::string>{"test-0"}));
  EXPECT_EQ(Uuids(run({{"hygon.com/nouse-dcutype", "test"}}), 0, "DCU"), (std::vector<std::string>{"dcu-0"}));
  EXPECT_EQ(Uuids(run({{"hygon.com/nouse-dcutype", "dcu"}}), 0, "DCU"), (std::vector<std::string>{"test-0"}));
  EXPECT_EQ(Failure(run({{"hygon.com/nouse-dcutype", "test,dcu"}})), "2/2 CardTypeMismatch");
  EXPECT_EQ(Failure(run({{"hygon.com/use-dcutype", ""}})), "<fits>");
  EXPECT_EQ(Failure(run({{"hygon.com/nouse-dcutype", "   "}})), "<fits>");
  EXPECT_EQ(Uuids(run({{"hygon.com/use-gpuuuid", "dcu-0"}}), 0, "DCU"), (std::vector<std::string>{"dcu-0"}));
  // NVIDIA's type annotations do not apply to DCUs.
  EXPECT_EQ(Failure(run({{"nvidia.com/use-gputype", "A100"}})), "<fits>");
}

TEST(TypeMatching, ByDiscoveringBackendNotByModelName) {
  Env env;
  NodeView n = testing::NvidiaNode("n", {Gpu("tesla", 0, 8000, 10, "Tesla V100-PCIE-32GB")});
  n.annotations["hami.io/node-dcu-register"] =
      codec::EncodeLegacyDevices({Gpu("lookalike", 0, 8000, 4, "NVIDIA-K100")});
  env.state.UpsertNode(n);
  // A card model without "NVIDIA" is still an NVIDIA device; a DCU named like an NVIDIA card is not.
  auto nv = env.Run(GpuPod(1, 100, 10));
  EXPECT_EQ(Uuids(nv), (std::vector<std::string>{"tesla"}));
  EXPECT_EQ(Failure(env.Run(GpuPod(2, 100, 10))), "NodeInsufficientDevice");
  auto dcu = env.Run(Pod("p", {Ctr("c", {{"hygon.com/dcunum", "1"}, {"hygon.com/dcumem", "100"}})}));
  EXPECT_EQ(Uuids(dcu, 0, "DCU"), (std::vector<std::string>{"lookalike"}));
  EXPECT_TRUE(Uuids(dcu, 0, "NVIDIA").empty());
}

// --- Moore Threads: every container on the first one's device (V57)
// -------------------------------------------

NodeView MthreadsNode() {
  NodeView n;
  n.name = "n";
  n.capacity["mthreads.com/sgpu-core"] = "32";
  n.capacity["mthreads.com/sgpu-memory"] = "64";  // two cards of 16384 MiB
  return n;
}

ContainerView MtCtr(std::string name, int mem_units, int cores) {
  return Ctr(std::move(name), {{"mthreads.com/vgpu", "1"},
                               {"mthreads.com/sgpu-memory", std::to_string(mem_units)},
                               {"mthreads.com/sgpu-core", std::to_string(cores)}});
}

TEST(MthreadsFit, V57LaterContainersShareTheFirstDevice) {
  Env env;
  env.state.UpsertNode(MthreadsNode());
  auto out = env.Run(Pod("p", {MtCtr("a", 8, 4), Ctr("sidecar", {{"cpu", "1"}}), MtCtr("b", 8, 4)}));
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << Failure(out);
  EXPECT_EQ(Uuids(out, 0, "Mthreads"), (std::vector<std::string>{"n-mthreads-1"}));
  EXPECT_TRUE(Uuids(out, 1, "Mthreads").empty());
  EXPECT_EQ(Uuids(out, 2, "Mthreads"), (std::vector<std::string>{"n-mthreads-1"}));
  EXPECT_EQ(out.annotations.at("hami.io/mthreads-vgpu-devices-allocated"),
            "n-mthreads-1,Mthreads,4096,4:;;n-mthreads-1,Mthreads,4096,4:;");
  EXPECT_EQ(out.annotations.at("mthreads.com/predicate-node"), "n");
}

TEST(MthreadsFit, V57NoOtherDeviceForLaterContainers) {
  Env env;
  env.state.UpsertNode(MthreadsNode());
  EXPECT_EQ(Failure(env.Run(Pod("p", {MtCtr("a", 32, 4), MtCtr("b", 8, 4)}))),
            "1/2 CardInsufficientMemory, 1/2 CardNotFoundCustomFilterRule");
}

TEST(NvidiaFit, ContainersMaySpreadOverDevices) {
  // The same-device rule is Moore Threads' alone.
  Env env;
  env.state.UpsertNode(testing::NvidiaNode("n", {Gpu("gpu-0", 0), Gpu("gpu-1", 1)}));
  auto out = env.Run(Pod("p", {testing::GpuCtr("a", 1, 100, 10), testing::GpuCtr("b", 1, 100, 10)}));
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << Failure(out);
  EXPECT_EQ(Uuids(out, 0), (std::vector<std::string>{"gpu-1"}));
  EXPECT_EQ(Uuids(out, 1), (std::vector<std::string>{"gpu-0"}));
}

TEST(Annotations, OnlyVendorsWithDevicesInThePodWrite) {
  // V25/V47/V63 "empty -> no keys": on a node with the first four vendors, an NVIDIA-only pod gets NVIDIA keys
  // only.
  Env env;
  NodeView n = testing::NvidiaNode("n", {Gpu("gpu-0", 0)});
  n.annotations["hami.io/node-dcu-register"] =
      codec::EncodeLegacyDevices({Gpu("dcu-0", 0, 16384, 4, "DCU-K100")});
  n.capacity["cambricon.com/mlu.smlu.vcore"] = "100";
  n.capacity["cambricon.com/mlu.smlu.vmemory"] = "64";
  n.capacity["mthreads.com/sgpu-core"] = "16";
  n.capacity["mthreads.com/sgpu-memory"] = "32";
  env.state.UpsertNode(n);
  ASSERT_EQ(env.state.FindNode("n")->devices.size(), 4u);
  auto out = env.Run(GpuPod(1, 100, 10));
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << Failure(out);
  EXPECT_EQ(out.annotations, (Annotations{{"hami.io/vgpu-devices-allocated", "gpu-0,NVIDIA,100,10:;"},
                                          {"hami.io/vgpu-devices-to-allocate", "gpu-0,NVIDIA,100,10:;"},
                                          {"hami.io/vgpu-node", "n"},
                                          {"hami.io/vgpu-time", "1716199325"}}));
}

// --- reason strings
// -----------------------------------------------------------------------------------------------

TEST(Reasons, SortedAsStrings) {
  ReasonCounts r;
  r.Add(Reason::kCardNotHealth, 3);
  r.Add(Reason::kCardInsufficientMemory, 3);
  r.Add(Reason::kCardInsufficientCore);
  r.Add(Reason::kCardInsufficientCore);
  EXPECT_EQ(r.Format(8), "2/8 CardInsufficientCore, 3/8 CardInsufficientMemory, 3/8 CardNotHealth");
  EXPECT_EQ(ReasonCounts{}.Format(8), "");
  ReasonCounts set;
  set.Add(Reason::kAllocatedCardsInsufficientRequest, 5);
  set.Set(Reason::kAllocatedCardsInsufficientRequest, 2);
  EXPECT_EQ(set.Format(3), "2/3 AllocatedCardsInsufficientRequest");
  EXPECT_EQ(ReasonName(Reason::kCardUuidMismatch), "CardUuidMismatch");
  EXPECT_EQ(ReasonName(Reason::kResourceQuotaNotFit), "ResourceQuotaNotFit");
}

TEST(Reasons, TenSortsBeforeTwo) {
  Env env;
  std::vector<DeviceInfo> gpus;
  for (int i = 0; i < 12; ++i) {
    gpus.push_back(Gpu("gpu-" + std::to_string(i), i, 1000));
    gpus.back().health = i >= 10;
  }
  env.state.UpsertNode(testing::NvidiaNode("n", gpus));
  EXPECT_EQ(Failure(env.Run(GpuPod(1, 2000, 10))), "10/12 CardNotHealth, 2/12 CardInsufficientMemory");
}

TEST(Reasons, OnlyTheFailingRequestIsReported) {
  // A multi-vendor pod: NVIDIA fits, the DCU request does not; the reason counts DCU devices only.
  Env env;
  NodeView n = testing::NvidiaNode("n", {Gpu("gpu-0", 0)});
  n.annotations["hami.io/node-dcu-register"] =
      codec::EncodeLegacyDevices({Gpu("dcu-0", 0, 1000, 4, "DCU"), Gpu("dcu-1", 1, 1000, 4, "DCU")});
  env.state.UpsertNode(n);
  auto out = env.Run(Pod("p", {testing::GpuCtr("cuda", 1, 100, 10),
                               Ctr("dcu", {{"hygon.com/dcunum", "1"}, {"hygon.com/dcumem", "2000"}})}));
  EXPECT_EQ(Failure(out), "2/2 CardInsufficientMemory");
}

// --- Ascend: health, network groups, 910C modules, the soft-split gate and the network score -------------

class AscendMatrix : public FitMatrix {};
INSTANTIATE_TEST_SUITE_P(AscendChips, AscendMatrix, HAMI_ASCEND_CHIPS, VendorName);

TEST_P(AscendMatrix, F14NotHealthy) {
  rig_.Node({{.health = false}});
  EXPECT_EQ(rig_.Fit(1, 0, 10, 20).reason, "1/1 CardNotHealth");
  EXPECT_EQ(rig_.Fit(1, 64, 0, 50).reason, "1/1 CardNotHealth");
}

// Cards dev-<i> of chip `cw` on node `name`, in the networks given (nullopt: the plugin published none).
NodeView AscendNode(const std::string& name, const std::string& cw,
                    const std::vector<std::optional<std::int32_t>>& networks,
                    std::vector<std::int32_t> indexes = {},
                    Annotations annotations = {}, std::int64_t devcore = 100) {
  NodeView n;
  n.name = name;
  n.annotations = std::move(annotations);
  std::vector<DeviceInfo> cards;
  for (std::size_t i = 0; i < networks.size(); ++i) {
    const auto index = indexes.empty() ? static_cast<std::int32_t>(i) : indexes[i];
    DeviceInfo d = Gpu("dev-" + std::to_string(index), index, 65536, 4, cw);
    d.devcore = Cores(devcore);
    d.network = networks[i];
    cards.push_back(d);
  }
  n.annotations["hami.io/node-register-" + cw] = codec::EncodeDeviceManifest(cards);
  n.allocatable["huawei.com/" + cw] = std::to_string(cards.size() * 4);
  return n;
}

PodView NpuPod(const std::string& cw, int count, std::int64_t memory = 0, std::int64_t cores = 0,
               std::map<std::string, std::string> annotations = {}) {
  std::map<std::string, std::string> limits{{"huawei.com/" + cw, std::to_string(count)}};
  if (memory > 0) limits["huawei.com/" + cw + "-memory"] = std::to_string(memory);
  if (cores > 0) limits["huawei.com/" + cw + "-core"] = std::to_string(cores);
  return Pod("p", {Ctr("npu", std::move(limits))}, {}, std::move(annotations));
}

const std::map<std::string, VendorSettings> kAscend = {{"vnpus", VendorSettings{}}};

TEST(AscendFit, A8SeveralCardsComeFromTheLargestNetwork) {
  for (const char* cw : {"Ascend910A", "Ascend910B2", "Ascend910B3", "Ascend910B4-1", "Ascend910B4"}) {
    Env env(kAscend);
    env.state.UpsertNode(AscendNode("n", cw, {0, 1, 1}));
    auto out = env.Run(NpuPod(cw, 2));
    ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << cw << ": " << Failure(out);
    EXPECT_EQ(Uuids(out, 0, cw), (std::vector<std::string>{"dev-2", "dev-1"})) << cw;
  }
}

TEST(AscendFit, NetworkGroupsByFreeCardsThenByNetworkId) {
  Env env(kAscend);
  env.state.UpsertNode(AscendNode("n", "Ascend910B3", {0, 0, 0, 0, 1, 1, 1, 1}));
  // Three cards of the second ring are taken whole: its one free card does not join a request of three.
  for (int i = 5; i < 8; ++i) {
    Hold(env.state, "h" + std::to_string(i), "n", "Ascend910B3", "dev-" + std::to_string(i), 4, 0, 0);
  }
  auto three = env.Run(NpuPod("Ascend910B3", 3));
  ASSERT_EQ(three.kind, FilterOutcome::Kind::kScheduled) << Failure(three);
  EXPECT_EQ(Sorted(Uuids(three, 0, "Ascend910B3")), (std::vector<std::string>{"dev-1", "dev-2", "dev-3"}));

  // Equal groups: the lower network id, whatever the order of a map.
  Env tie(kAscend);
  tie.state.UpsertNode(AscendNode("n", "Ascend910B3", {1, 1, 0, 0}));
  auto two = tie.Run(NpuPod("Ascend910B3", 2));
  ASSERT_EQ(two.kind, FilterOutcome::Kind::kScheduled) << Failure(two);
  EXPECT_EQ(Sorted(Uuids(two, 0, "Ascend910B3")), (std::vector<std::string>{"dev-2", "dev-3"}));

  // One card without a network: no grouping, the policy's order.
  Env partial(kAscend);
  partial.state.UpsertNode(AscendNode("n", "Ascend910B3", {0, std::nullopt, 1}));
  auto plain = partial.Run(NpuPod("Ascend910B3", 2));
  ASSERT_EQ(plain.kind, FilterOutcome::Kind::kScheduled) << Failure(plain);
  EXPECT_EQ(Uuids(plain, 0, "Ascend910B3"), (std::vector<std::string>{"dev-2", "dev-1"}));

  Env short_of(kAscend);
  short_of.state.UpsertNode(AscendNode("n", "Ascend910B3", {0, 0, 1}));
  Hold(short_of.state, "h", "n", "Ascend910B3", "dev-0", 4, 0, 0);
  EXPECT_EQ(Failure(short_of.Run(NpuPod("Ascend910B3", 3))),
            "1/3 CardTimeSlicingExhausted, 2/3 AllocatedCardsInsufficientRequest");
}

TEST(AscendFit, A10The910CTakesWholeModules) {
  for (const bool with_network : {true, false}) {
    auto node = [&](std::vector<std::int32_t> indexes) {
      std::vector<std::optional<std::int32_t>> networks(indexes.size());
      if (with_network) networks.assign(indexes.size(), 0);
      return AscendNode("n", "Ascend910C", networks, std::move(indexes));
    };
    Env env(kAscend);
    env.state.UpsertNode(node({0, 1, 2}));
    auto pair = env.Run(NpuPod("Ascend910C", 2));
    ASSERT_EQ(pair.kind, FilterOutcome::Kind::kScheduled) << Failure(pair);
    EXPECT_EQ(Uuids(pair, 0, "Ascend910C"), (std::vector<std::string>{"dev-1", "dev-0"}));

    Env scattered(kAscend);
    scattered.state.UpsertNode(node({0, 1, 2, 4, 6}));
    EXPECT_EQ(Failure(scattered.Run(NpuPod("Ascend910C", 4))), "2/4 AllocatedCardsInsufficientRequest")
        << "one whole module is not two";

    Env halves(kAscend);
    halves.state.UpsertNode(node({0, 2}));
    EXPECT_EQ(Failure(halves.Run(NpuPod("Ascend910C", 2))), "0/2 AllocatedCardsInsufficientRequest");

    Env whole(kAscend);
    whole.state.UpsertNode(node({0, 1}));
    auto ok = whole.Run(NpuPod("Ascend910C", 2));
    ASSERT_EQ(ok.kind, FilterOutcome::Kind::kScheduled) << Failure(ok);
    EXPECT_EQ(Uuids(ok, 0, "Ascend910C").size(), 2u);

    Env four(kAscend);
    four.state.UpsertNode(node({0, 1, 2, 3, 4, 5, 6, 7}));
    Hold(four.state, "h", "n", "Ascend910C", "dev-3", 4, 0, 0);  // module 1 is half taken
    auto two_modules = four.Run(NpuPod("Ascend910C", 4));
    ASSERT_EQ(two_modules.kind, FilterOutcome::Kind::kScheduled) << Failure(two_modules);
    EXPECT_EQ(Sorted(Uuids(two_modules, 0, "Ascend910C")),
              (std::vector<std::string>{"dev-4", "dev-5", "dev-6", "dev-7"}));
  }
}

TEST(AscendFit, A9SoftSplitPodsNeedANodeThatOffersIt) {
  const std::map<std::string, std::string> soft{{"huawei.com/vnpu-mode", "hami-core"}};
  const Annotations offers{{"hami-vnpu-core", "true"}};
  auto run = [&](const Annotations& node, const PodView& pod,
                 const std::map<std::string, VendorSettings>& settings = kAscend) {
    Env env(settings);
    env.state.UpsertNode(AscendNode("n", "Ascend910B3", {0}, {}, node));
    return env.Run(pod);
  };
  EXPECT_EQ(Failure(run({}, NpuPod("Ascend910B3", 1, 15360, 20, soft))), "1/1 ModeNotFit");
  EXPECT_EQ(Failure(run({}, NpuPod("Ascend910B3", 1, 65536, 0, soft))), "1/1 ModeNotFit");
  EXPECT_EQ(Failure(run({}, NpuPod("Ascend910B3", 1, 0, 0, soft))), "1/1 ModeNotFit") << "#2029";
  EXPECT_EQ(Failure(run({{"hami-vnpu-core", "false"}}, NpuPod("Ascend910B3", 1, 15360, 20, soft))),
            "1/1 ModeNotFit");
  EXPECT_EQ(Failure(run(offers, NpuPod("Ascend910B3", 1, 15360, 20, soft))), "<fits>");
  EXPECT_EQ(Failure(run(offers, NpuPod("Ascend910B3", 1, 0, 0, soft))), "<fits>");
  EXPECT_EQ(Failure(run(offers, NpuPod("Ascend910B3", 1, 16384))), "<fits>") << "hard split on such a node";
  EXPECT_EQ(Failure(run(offers, NpuPod("Ascend910B3", 1))), "<fits>");

  // vnpus.hamiVnpuCore offers it where the node says nothing; the node's own annotation wins.
  const std::map<std::string, VendorSettings> global = {
      {"vnpus", VendorSettings{}.Set("hamiVnpuCore", true)}};
  EXPECT_EQ(Failure(run({}, NpuPod("Ascend910B3", 1, 15360, 20, soft), global)), "<fits>");
  EXPECT_EQ(Failure(run({{"hami-vnpu-core", "false"}}, NpuPod("Ascend910B3", 1, 15360, 20, soft), global)),
            "1/1 ModeNotFit");
}

TEST(AscendFit, SoftSplitCoresArePercentOfTheCard) {
  // The plugin publishes a card's AI cores (20 on a 910B3); a soft-split pod asks in percent of the card.
  const std::map<std::string, std::string> soft{{"huawei.com/vnpu-mode", "hami-core"}};
  Env env(kAscend);
  env.state.UpsertNode(AscendNode("n", "Ascend910B3", {0}, {}, {{"hami-vnpu-core", "true"}}, 20));
  auto out = env.Run(NpuPod("Ascend910B3", 1, 8192, 60, soft));
  ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << Failure(out);
  env.Reserve(NpuPod("Ascend910B3", 1, 8192, 60, soft), out);
  EXPECT_EQ(env.Usage("dev-0"), (DeviceUsage{1, MiB(8192), Cores(60)}));
  EXPECT_EQ(Failure(env.Run(NpuPod("Ascend910B3", 1, 8192, 50, soft))), "1/1 CardInsufficientCore");
  EXPECT_EQ(Failure(env.Run(NpuPod("Ascend910B3", 1, 8192, 40, soft))), "<fits>");
}

TEST(AscendFit, NodesThatKeepAContainersCardsTogetherRankFirstUnderEitherPolicy) {
  // Two nodes used alike; on "split" the two free cards sit in different rings, on "together" in one.
  for (const char* policy : {"binpack", "spread"}) {
    Env env(kAscend);
    env.state.UpsertNode(AscendNode("split", "Ascend910B3", {0, 0, 0, 0, 1, 1, 1, 1}));
    env.state.UpsertNode(AscendNode("together", "Ascend910B3", {0, 0, 0, 0, 1, 1, 1, 1}));
    for (int i : {1, 2, 3, 5, 6, 7}) {
      Hold(env.state, "s" + std::to_string(i), "split", "Ascend910B3", "dev-" + std::to_string(i), 4, 0, 0);
    }
    for (int i : {2, 3, 4, 5, 6, 7}) {
      Hold(env.state, "t" + std::to_string(i), "together", "Ascend910B3", "dev-" + std::to_string(i), 4, 0,
           0);
    }
    Scheduler s(env.state, SchedulerOptions{"spread", policy});
    auto out = s.Filter(NpuPod("Ascend910B3", 2), {"split", "together"}, kNow);
    ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << policy;
    EXPECT_EQ(out.node, "together") << policy;
  }
}

// One card is together in any network: it ranks no node first, so spread takes the idle node whose cards
// publish no network rather than the busier one that does, and binpack the busier one.
TEST(AscendFit, AOneCardContainerScoresNothingTogether) {
  using Case = std::pair<const char*, const char*>;  // the node policy, the node it chooses
  for (const auto& [policy, want] : {Case{"spread", "plain"}, Case{"binpack", "rings"}}) {
    Env env(kAscend);
    env.state.UpsertNode(AscendNode("rings", "Ascend910B3", {0, 0, 1, 1}));
    env.state.UpsertNode(AscendNode("plain", "Ascend910B3", {std::nullopt, std::nullopt, std::nullopt,
                                                             std::nullopt}));
    Hold(env.state, "h", "rings", "Ascend910B3", "dev-0", 1, 0, 0);
    Scheduler s(env.state, SchedulerOptions{"spread", policy});
    auto out = s.Filter(NpuPod("Ascend910B3", 1), {"rings", "plain"}, kNow);
    ASSERT_EQ(out.kind, FilterOutcome::Kind::kScheduled) << policy;
    EXPECT_EQ(out.node, want) << policy;
  }
}

}  // namespace
}  // namespace hami
