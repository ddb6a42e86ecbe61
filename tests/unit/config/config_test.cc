#include "config/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "tests/support/builders.h"

namespace hami::config {
namespace {

// The vendor sections are read by the schemas the built-in backends declare.
const BackendRegistry& Vendors() { return testing::BuiltinVendors(); }
void ApplyYaml(const std::string& text, const std::string& source, Config& cfg,
               std::vector<std::string>& problems) {
  config::ApplyYaml(text, source, Vendors(), cfg, problems);
}
void ApplyYamlFile(const std::string& path, Config& cfg, std::vector<std::string>& problems) {
  config::ApplyYamlFile(path, Vendors(), cfg, problems);
}
std::string ToYaml(const Config& cfg) { return config::ToYaml(cfg, Vendors()); }

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

// 1-based line of the first line of `text` that contains `needle` (0 when absent).
int LineOf(const std::string& text, const std::string& needle) {
  int line = 1;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = text.find('\n', start);
    const std::string current =
        text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (current.find(needle) != std::string::npos) return line;
    if (end == std::string::npos) break;
    start = end + 1;
    ++line;
  }
  return 0;
}

std::string At(const std::string& file, const std::string& text, const std::string& needle) {
  return file + ":" + std::to_string(LineOf(text, needle)) + ": ";
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/config_test_" + name;
  std::ofstream(path) << text;
  return path;
}

// HAMi's chart device-config.yaml (charts/hami/templates/scheduler/device-configmap.yaml), abridged: the
// NVIDIA section with its device-plugin keys and MIG tables, the other three vendors we implement, and two we
// do not.
const std::string kHamiDeviceConfig = R"(nvidia:
  resourceCountName: nvidia.com/gpu
  resourceMemoryName: nvidia.com/gpumem
  resourceMemoryPercentageName: nvidia.com/gpumem-percentage
  resourceCoreName: nvidia.com/gpucores
  resourcePriorityName: nvidia.com/priority
  overwriteEnv: false
  defaultMemory: 0
  defaultCores: 0
  defaultGPUNum: 1
  memoryFactor: 1
  deviceSplitCount: 10
  deviceMemoryScaling: 1
  deviceCoreScaling: 1
  gpuCorePolicy: default
  libCudaLogLevel: 1
  runtimeClassName: ""
  knownMigGeometries:
  - models: [ "A30" ]
    allowedGeometries:
      -
        - name: 1g.6gb
          memory: 6144
          count: 4
      -
        - name: 2g.12gb
          memory: 12288
          count: 2
      -
        - name: 4g.24gb
          memory: 24576
          count: 1
  - models: [ "A100-SXM4-40GB", "A100-40GB-PCIe", "A100-PCIE-40GB", "A100-SXM4-40GB" ]
    allowedGeometries:
      -
        - name: 1g.5gb
          memory: 5120
          count: 7
      -
        - name: 2g.10gb
          memory: 10240
          count: 3
        - name: 1g.5gb
          memory: 5120
          count: 1
  migProfileAllowlist:
  - models: ["A30"]
    profiles: ["1g.6gb", "2g.12gb", "4g.24gb"]
  - models: ["A100-SXM4-40GB", "A100-40GB-PCIe"]
    profiles: ["1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb"]
cambricon:
  resourceCountName: cambricon.com/vmlu
  resourceMemoryName: cambricon.com/mlu.smlu.vmemory
  resourceCoreName: cambricon.com/mlu.smlu.vcore
hygon:
  resourceCountName: hygon.com/dcunum
  resourceMemoryName: hygon.com/dcumem
  resourceCoreName: hygon.com/dcucores
  memoryFactor: 1
metax:
  resourceCountName: "metax-tech.com/gpu"
  resourceVCountName: metax-tech.com/sgpu
  resourceVMemoryName: metax-tech.com/vmemory
  resourceVCoreName: metax-tech.com/vcore
  sgpuTopologyAware: false
mthreads:
  resourceCountName: "mthreads.com/vgpu"
  resourceMemoryName: "mthreads.com/sgpu-memory"
  resourceCoreName: "mthreads.com/sgpu-core"
vnpus:
  hamiVnpuCore: false
  configs:
  - chipName: 910A
    commonWord: Ascend910A
    resourceName: huawei.com/Ascend910A
    resourceMemoryName: huawei.com/Ascend910A-memory
    resourceCoreName: huawei.com/Ascend910A-core
    memoryAllocatable: 32768
    memoryCapacity: 32768
    memoryFactor: 1
    aiCore: 30
    runtimeClassName: ""
    overwriteEnv: false
    templates:
      - name: vir02
        memory: 2184
        aiCore: 2
)";

TEST(ConfigDefaults, EmptyDocumentKeepsDefaults) {
  for (const std::string text : {"", "\n", "# only a comment\n", "---\n", "~\n"}) {
    Config cfg;
    std::vector<std::string> problems;
    ApplyYaml(text, "empty.yaml", cfg, problems);
    EXPECT_THAT(problems, IsEmpty()) << text;
    EXPECT_THAT(cfg.warnings, IsEmpty());
    EXPECT_EQ(cfg.serving.http_bind, "127.0.0.1:8080");
    EXPECT_EQ(cfg.extender.admission.scheduler_name, "hami-scheduler");
    EXPECT_EQ(cfg.serving.metrics_bind_address, ":9395");
    EXPECT_EQ(cfg.extender.filter.policies.gpu_policy, "spread");
    EXPECT_EQ(cfg.extender.filter.policies.node_policy, "binpack");
    EXPECT_EQ(cfg.extender.node_lock_timeout, seconds(300));
    EXPECT_EQ(cfg.extender.bind.node_lock_retry_timeout, milliseconds(28000));
    EXPECT_TRUE(cfg.extender.admission.force_overwrite_default_scheduler);
    EXPECT_EQ(cfg.extender.health_interval, seconds(15));
    EXPECT_EQ(cfg.extender.handshake_timeout, seconds(60));
    EXPECT_EQ(cfg.kube.qps, 5);
    EXPECT_EQ(cfg.kube.burst, 10);
    EXPECT_EQ(cfg.kube.timeout, seconds(0));
    EXPECT_FALSE(cfg.extender.leadership.enabled);
    EXPECT_EQ(cfg.log_level, "info");
    EXPECT_TRUE(cfg.vendors.empty());
  }
}

TEST(ConfigYaml, FullSchedulerSection) {
  const std::string text = R"(scheduler:
  httpBind: 0.0.0.0:443
  certFile: /tls/tls.crt
  keyFile: /tls/tls.key
  schedulerName: my-scheduler
  metricsBindAddress: ":9400"
  profiling: true
  gpuSchedulerPolicy: binpack,topology-aware
  nodeSchedulerPolicy: spread
  nodeLabelSelector:
    gpu: "on"
    zone: a
  nodeLockTimeout: 2m
  nodeLockRetryTimeout: 1.5s
  forceOverwriteDefaultScheduler: false
  healthCheckInterval: 30
  handshakeTimeout: 1h30m
  reservationTimeout: 2m30s
  requeueQPS: 0
  kubeconfig: /root/.kube/config
  kubeQPS: 50.5
  kubeBurst: 100
  kubeTimeout: 10s
  leaderElect: yes
  leaderElectResourceName: hami-scheduler
  leaderElectResourceNamespace: kube-system
  legacyMetrics: true
  refusalAnnotation: true
  logLevel: debug
)";
  Config cfg;
  std::vector<std::string> problems;
  ApplyYaml(text, "full.yaml", cfg, problems);
  ASSERT_THAT(problems, IsEmpty());
  EXPECT_EQ(cfg.serving.http_bind, "0.0.0.0:443");
  EXPECT_EQ(cfg.serving.cert_file, "/tls/tls.crt");
  EXPECT_EQ(cfg.serving.key_file, "/tls/tls.key");
  EXPECT_EQ(cfg.extender.admission.scheduler_name, "my-scheduler");
  EXPECT_EQ(cfg.serving.metrics_bind_address, ":9400");
  EXPECT_TRUE(cfg.serving.profiling);
  EXPECT_EQ(cfg.extender.filter.policies.gpu_policy, "binpack,topology-aware");
  EXPECT_EQ(cfg.extender.filter.policies.node_policy, "spread");
  EXPECT_EQ(cfg.extender.node_label_selector,
            (std::map<std::string, std::string>{{"gpu", "on"}, {"zone", "a"}}));
  EXPECT_EQ(cfg.extender.node_lock_timeout, seconds(120));
  EXPECT_EQ(cfg.extender.bind.node_lock_retry_timeout, milliseconds(1500));
  EXPECT_FALSE(cfg.extender.admission.force_overwrite_default_scheduler);
  EXPECT_EQ(cfg.extender.health_interval, seconds(30));
  EXPECT_EQ(cfg.extender.handshake_timeout, seconds(5400));
  EXPECT_EQ(cfg.extender.bind.reservation_timeout, seconds(150));
  EXPECT_EQ(cfg.extender.requeue_qps, 0.0) << "0: no nudges";
  EXPECT_EQ(cfg.kube.kubeconfig, "/root/.kube/config");
  EXPECT_DOUBLE_EQ(cfg.kube.qps, 50.5);
  EXPECT_EQ(cfg.kube.burst, 100);
  EXPECT_EQ(cfg.kube.timeout, seconds(10));
  EXPECT_TRUE(cfg.extender.leadership.enabled);
  EXPECT_EQ(cfg.extender.leadership.name, "hami-scheduler");
  EXPECT_EQ(cfg.extender.leadership.ns, "kube-system");
  EXPECT_TRUE(cfg.extender.legacy_metrics);
  EXPECT_TRUE(cfg.extender.filter.refusal_annotation);
  EXPECT_EQ(cfg.log_level, "debug");
}

TEST(ConfigYaml, HamiChartDeviceConfig) {
  Config cfg;
  std::vector<std::string> problems;
  ApplyYaml(kHamiDeviceConfig, "/device-config.yaml", cfg, problems);
  ASSERT_THAT(problems, IsEmpty());

  ASSERT_EQ(cfg.vendors.size(), 6u);
  const VendorSettings& nv = cfg.vendors.at("nvidia");
  EXPECT_TRUE(nv.enabled);
  EXPECT_EQ(nv.String("resourceCountName"), "nvidia.com/gpu");
  EXPECT_EQ(nv.String("resourceMemoryName"), "nvidia.com/gpumem");
  EXPECT_EQ(nv.String("resourceMemoryPercentageName"), "nvidia.com/gpumem-percentage");
  EXPECT_EQ(nv.String("resourceCoreName"), "nvidia.com/gpucores");
  EXPECT_EQ(nv.String("resourcePriorityName"), "nvidia.com/priority");
  EXPECT_EQ(nv.Bool("overwriteEnv"), false);
  EXPECT_EQ(nv.Int("defaultMemory"), 0);
  EXPECT_EQ(nv.Int("defaultCores"), 0);
  EXPECT_EQ(nv.Int("defaultGPUNum"), 1);
  EXPECT_EQ(nv.Int("memoryFactor"), 1);
  EXPECT_EQ(nv.String("gpuCorePolicy"), "default");
  EXPECT_EQ(nv.String("runtimeClassName"), "");
  ASSERT_THAT(nv.Records("migProfileAllowlist"), SizeIs(2));
  EXPECT_THAT(nv.Records("migProfileAllowlist")[0].StringList("models"), ElementsAre("A30"));
  EXPECT_THAT(nv.Records("migProfileAllowlist")[0].StringList("profiles"),
              ElementsAre("1g.6gb", "2g.12gb", "4g.24gb"));
  EXPECT_THAT(nv.Records("migProfileAllowlist")[1].StringList("models"),
              ElementsAre("A100-SXM4-40GB", "A100-40GB-PCIe"));
  EXPECT_THAT(nv.Records("migProfileAllowlist")[1].StringList("profiles"), SizeIs(4));
  EXPECT_FALSE(nv.String("annotations.register").has_value());

  const VendorSettings& mlu = cfg.vendors.at("cambricon");
  EXPECT_EQ(mlu.String("resourceCountName"), "cambricon.com/vmlu");
  EXPECT_EQ(mlu.String("resourceMemoryName"), "cambricon.com/mlu.smlu.vmemory");
  EXPECT_EQ(mlu.String("resourceCoreName"), "cambricon.com/mlu.smlu.vcore");
  EXPECT_FALSE(mlu.Int("memoryFactor").has_value());

  const VendorSettings& dcu = cfg.vendors.at("hygon");
  EXPECT_EQ(dcu.String("resourceCountName"), "hygon.com/dcunum");
  EXPECT_EQ(dcu.String("resourceMemoryName"), "hygon.com/dcumem");
  EXPECT_EQ(dcu.String("resourceCoreName"), "hygon.com/dcucores");
  EXPECT_EQ(dcu.Int("memoryFactor"), 1);

  const VendorSettings& mt = cfg.vendors.at("mthreads");
  EXPECT_EQ(mt.String("resourceCountName"), "mthreads.com/vgpu");
  EXPECT_EQ(mt.String("resourceMemoryName"), "mthreads.com/sgpu-memory");
  EXPECT_EQ(mt.String("resourceCoreName"), "mthreads.com/sgpu-core");

  const VendorSettings& npu = cfg.vendors.at("vnpus");
  EXPECT_EQ(npu.Bool("hamiVnpuCore"), false);
  ASSERT_THAT(npu.Records("configs"), SizeIs(1));
  const auto configs = npu.Records("configs");
  const SettingRecord& chip = configs[0];
  EXPECT_EQ(chip.String("commonWord"), "Ascend910A");
  EXPECT_EQ(chip.Int("memoryAllocatable"), 32768);
  EXPECT_EQ(chip.Bool("overwriteEnv"), false);
  ASSERT_THAT(chip.Records("templates"), SizeIs(1));
  const auto templates = chip.Records("templates");
  EXPECT_EQ(templates[0].String("name"), "vir02");
  EXPECT_EQ(templates[0].Int("memory"), 2184);

  const VendorSettings& metax = cfg.vendors.at("metax");
  EXPECT_EQ(metax.String("resourceVCoreName"), "metax-tech.com/vcore");
  EXPECT_EQ(metax.Bool("sgpuTopologyAware"), false);
  EXPECT_THAT(cfg.warnings, IsEmpty());
}

TEST(ConfigYaml, EveryForeignHamiSectionIsAWarning) {
  const std::string text = "iluvatar: {}\n";
  Config cfg;
  std::vector<std::string> problems;
  ApplyYaml(text, "f.yaml", cfg, problems);
  EXPECT_THAT(problems, IsEmpty());
  ASSERT_THAT(cfg.warnings, SizeIs(1));
  EXPECT_EQ(cfg.warnings[0],
            "f.yaml:1: section 'iluvatar' is a HAMi vendor this scheduler does not implement; ignored");
  EXPECT_TRUE(cfg.vendors.empty());
  // Every registered vendor's section is read, not warned about.
  Config built;
  std::string every;
  for (const std::string& section : Vendors().Sections()) every += section + ": {}\n";
  ApplyYaml(every, "f.yaml", built, problems);
  EXPECT_THAT(problems, IsEmpty());
  EXPECT_THAT(built.warnings, IsEmpty());
  EXPECT_EQ(built.vendors.size(), Vendors().Sections().size());
}

// HAMi writes its Iluvatar chips as a plain list; a section may be a list of its records.
TEST(ConfigYaml, ASectionWrittenAsAList) {
  const std::string text =
      "iluvatars:\n- {commonWord: MR-V100, chipName: MR-V100, resourceCountName: iluvatar.ai/MR-V100-vgpu}\n"
      "- 42\n";
  Config cfg;
  std::vector<std::string> problems;
  ApplyYaml(text, "f.yaml", cfg, problems);
  ASSERT_THAT(problems, SizeIs(1));
  EXPECT_THAT(problems[0], HasSubstr("f.yaml:3"));
  EXPECT_THAT(problems[0], HasSubstr("expected a map with commonWord"));
  const auto& chips = cfg.vendors.at("iluvatars").Records("chips");
  ASSERT_THAT(chips, SizeIs(1));
  EXPECT_EQ(chips[0].String("resourceCountName"), "iluvatar.ai/MR-V100-vgpu");
  EXPECT_FALSE(cfg.vendors.at("iluvatars").enabled) << "still off until --enable-iluvatar";
}

TEST(ConfigYaml, OurExtensionsInVendorSections) {
  const std::string text = R"(nvidia:
  enabled: false
  annotations:
    register: example.com/node-nvidia-register
    score: example.com/node-nvidia-score
    handshake: example.com/node-handshake
    allocated: example.com/vgpu-devices-allocated
    toAllocate: example.com/vgpu-devices-to-allocate
    nodeLock: example.com/mutex.lock
hygon:
mthreads: {}
)";
  Config cfg;
  std::vector<std::string> problems;
  ApplyYaml(text, "ext.yaml", cfg, problems);
  ASSERT_THAT(problems, IsEmpty());
  const VendorSettings& nv = cfg.vendors.at("nvidia");
  EXPECT_FALSE(nv.enabled);
  EXPECT_EQ(nv.String("annotations.register"), "example.com/node-nvidia-register");
  EXPECT_EQ(nv.String("annotations.score"), "example.com/node-nvidia-score");
  EXPECT_EQ(nv.String("annotations.handshake"), "example.com/node-handshake");
  EXPECT_EQ(nv.String("annotations.allocated"), "example.com/vgpu-devices-allocated");
  EXPECT_EQ(nv.String("annotations.toAllocate"), "example.com/vgpu-devices-to-allocate");
  EXPECT_EQ(nv.String("annotations.nodeLock"), "example.com/mutex.lock");
  // Null and empty sections are fine and set nothing.
  EXPECT_TRUE(cfg.vendors.at("hygon").enabled);
  EXPECT_FALSE(cfg.vendors.at("hygon").String("resourceCountName").has_value());
  EXPECT_TRUE(cfg.vendors.at("mthreads").enabled);
}

TEST(ConfigYaml, UnknownKeysEverywhereReportedTogetherWithLines) {
  const std::string text = R"(scheduler:
  httpBind: 0.0.0.0:80
  httpbind: 0.0.0.0:81
  kubeBurstiness: 3
nvidia:
  resourceCountName: nvidia.com/gpu
  resourceVCountName: nvidia.com/vgpu
  annotations:
    lock: x
cambricon:
  memoryFactor: 2
intel:
  resourceCountName: gpu.intel.com/i915
Scheduler: {}
)";
  Config cfg;
  std::vector<std::string> problems;
  ApplyYaml(text, "c.yaml", cfg, problems);
  // Our own section refuses what it does not know; HAMi's vendor sections warn, as HAMi ignores unknown keys.
  ASSERT_THAT(problems, SizeIs(4)) << ProblemsError(problems).message;
  EXPECT_EQ(problems[0],
            At("c.yaml", text, "httpbind:") + "unknown key 'scheduler.httpbind'; did you mean 'httpBind'?");
  EXPECT_THAT(problems[1],
              AllOf(HasSubstr(At("c.yaml", text, "kubeBurstiness")),
                    HasSubstr("unknown key 'scheduler.kubeBurstiness'; expected one of: httpBind,"),
                    HasSubstr("kubeBurst,")));
  ASSERT_THAT(cfg.warnings, SizeIs(3));
  EXPECT_THAT(cfg.warnings[0], AllOf(HasSubstr(At("c.yaml", text, "resourceVCountName")),
                                     HasSubstr("unknown key 'nvidia.resourceVCountName' ignored"),
                                     HasSubstr("HAMi ignores keys it does not know")));
  EXPECT_THAT(
      cfg.warnings[1],
      AllOf(HasSubstr(At("c.yaml", text, "lock: x")),
            HasSubstr("unknown key 'nvidia.annotations.lock' ignored (expected one of: register, score,")));
  // memoryFactor is a Hygon/NVIDIA key, not a Cambricon one (HAMi's MLU memory unit is fixed).
  EXPECT_THAT(cfg.warnings[2], AllOf(HasSubstr(At("c.yaml", text, "memoryFactor")),
                                     HasSubstr("unknown key 'cambricon.memoryFactor' ignored")));
  EXPECT_FALSE(cfg.vendors.at("cambricon").Has("memoryFactor"));
  EXPECT_THAT(problems[2],
              AllOf(HasSubstr(At("c.yaml", text, "intel:")), HasSubstr("unknown top-level key 'intel'")));
  EXPECT_EQ(problems[3], At("c.yaml", text, "Scheduler:") +
                             "unknown top-level key 'Scheduler'; did you mean 'scheduler'?");
  // What was valid is still applied.
  EXPECT_EQ(cfg.serving.http_bind, "0.0.0.0:80");
  EXPECT_EQ(cfg.vendors.at("nvidia").String("resourceCountName"), "nvidia.com/gpu");
}

TEST(ConfigYaml, WrongTypesNameFileLinePathAndExpectation) {
  const std::string text = R"(scheduler:
  kubeBurst: {a: 1}
  profiling: abc
  kubeQPS: -1
  requeueQPS: soon
  kubeTimeout: -5
  gpuSchedulerPolicy: spread,fastest
  nodeSchedulerPolicy: topology-aware
  logLevel: loud
  nodeLabelSelector: [a, b]
  httpBind: [0.0.0.0]
  healthCheckInterval: 0
  nodeLockTimeout: 1500ms
nvidia:
  defaultMemory: lots
  memoryFactor: 4294967296
  overwriteEnv: maybe
  migProfileAllowlist: A30
hygon:
  memoryFactor: 1.5
mthreads: [a]
)";
  Config cfg;
  std::vector<std::string> problems;
  ApplyYaml(text, "t.yaml", cfg, problems);
  const std::vector<std::string> want = {
      At("t.yaml", text, "kubeBurst") + "scheduler.kubeBurst: expected an integer >= 1, got a map",
      At("t.yaml", text, "profiling") + "scheduler.profiling: 'abc' is not a boolean (want true or false)",
      At("t.yaml", text, "kubeQPS") + "scheduler.kubeQPS: -1 is not a number > 0",
      At("t.yaml", text, "requeueQPS") + "scheduler.requeueQPS: 'soon' is not a number (a number >= 0)",
      At("t.yaml", text, "kubeTimeout") +
          "scheduler.kubeTimeout: '-5' is not a duration: it is negative (want a "
          "Go duration such as 300ms, 28s, 5m or 1h30m, or a whole number of seconds)",
      At("t.yaml", text, "gpuSchedulerPolicy") +
          "scheduler.gpuSchedulerPolicy: 'spread,fastest' has unknown policy 'fastest' (want one of binpack, "
          "spread, "
          "topology-aware, mutex, numa, or a comma-separated list of them)",
      At("t.yaml", text, "nodeSchedulerPolicy") +
          "scheduler.nodeSchedulerPolicy: 'topology-aware' is not a node policy (want binpack or spread)",
      At("t.yaml", text, "logLevel") +
          "scheduler.logLevel: 'loud' is not a log level (want one of trace, debug, info, warn, error, "
          "critical, off)",
      At("t.yaml", text, "nodeLabelSelector") +
          "scheduler.nodeLabelSelector: expected a map of strings (key: value), got a list",
      At("t.yaml", text, "httpBind") + "scheduler.httpBind: expected a string, got a list",
      At("t.yaml", text, "healthCheckInterval") +
          "scheduler.healthCheckInterval: '0' is too short (want at least 1s)",
      At("t.yaml", text, "nodeLockTimeout") +
          "scheduler.nodeLockTimeout: '1500ms' is not a whole number of seconds",
      At("t.yaml", text, "defaultMemory") +
          "nvidia.defaultMemory: 'lots' is not an integer (want a 32-bit integer)",
      At("t.yaml", text, "memoryFactor: 4294967296") +
          "nvidia.memoryFactor: 4294967296 is out of range (want a 32-bit integer)",
      At("t.yaml", text, "overwriteEnv") +
          "nvidia.overwriteEnv: 'maybe' is not a boolean (want true or false)",
      At("t.yaml", text, "migProfileAllowlist") +
          "nvidia.migProfileAllowlist: expected a list of {models: [...], profiles: [...]}, got 'A30'",
      At("t.yaml", text, "memoryFactor: 1.5") +
          "hygon.memoryFactor: '1.5' is not an integer (want a 32-bit integer)",
      At("t.yaml", text, "mthreads:") + "mthreads: expected a map of settings, got a list",
  };
  EXPECT_EQ(problems, want) << ProblemsError(problems).message;
  // Nothing wrong was applied.
  EXPECT_EQ(cfg.kube.burst, 10);
  EXPECT_EQ(cfg.extender.filter.policies.gpu_policy, "spread");
  EXPECT_EQ(cfg.extender.health_interval, seconds(15));
}

TEST(ConfigYaml, MigAllowlistEntriesAreChecked) {
  const std::string text = R"(nvidia:
  migProfileAllowlist:
  - models: [A30]
  - profiles: [1g.5gb]
    model: [A100]
  - [A30]
  - models: [[A30]]
    profiles: []
)";
  Config cfg;
  std::vector<std::string> problems;
  ApplyYaml(text, "m.yaml", cfg, problems);
  EXPECT_THAT(
      problems,
      ElementsAre(
          At("m.yaml", text, "- models: [A30]") + "nvidia.migProfileAllowlist[0]: 'profiles' is missing",
          At("m.yaml", text, "- profiles: [1g.5gb]") + "nvidia.migProfileAllowlist[1]: 'models' is missing",
          At("m.yaml", text, "- [A30]") +
              "nvidia.migProfileAllowlist[2]: expected a map with models and profiles, got a list",
          HasSubstr("nvidia.migProfileAllowlist[3].models[0]: expected a string, got a list")));
  EXPECT_THAT(cfg.warnings,
              ElementsAre(HasSubstr(
                  "unknown key 'nvidia.migProfileAllowlist[1].model' ignored (did you mean 'models'?)")));
}

// A record's fields may be of any kind: numbers, switches, lists and records of their own (a list of chips,
// each with a list of memory templates).
TEST(ConfigYaml, RecordListsHoldTypedFieldsAndNestedRecords) {
  BackendRegistry registry;
  VendorSchema schema;
  schema.fields = {{"softSplit", SettingKind::kBool},
                   {"chips",
                    SettingKind::kRecordList,
                    {{"name", SettingKind::kString, {}, true},
                     {"memory", SettingKind::kInt32},
                     {"paired", SettingKind::kBool},
                     {"aliases", SettingKind::kStringList},
                     {"templates",
                      SettingKind::kRecordList,
                      {{"name", SettingKind::kString, {}, true}, {"memory", SettingKind::kInt32, {}, true}}}}}};
  ASSERT_TRUE(registry.Register(VendorModule{"chips", schema, [](const VendorSettings&) {
    return Result<std::vector<BackendPtr>>(Error{"not built in this test"});
  }}));
  const std::string text = R"(chips:
  softSplit: true
  chips:
  - name: A
    memory: 65536
    paired: true
    aliases: [a1, a2]
    templates:
    - {name: small, memory: 16384}
    - {name: big, memory: 32768}
  - name: B
)";
  Config cfg;
  std::vector<std::string> problems;
  config::ApplyYaml(text, "c.yaml", registry, cfg, problems);
  EXPECT_THAT(problems, IsEmpty());
  EXPECT_THAT(cfg.warnings, IsEmpty());
  const VendorSettings& section = cfg.vendors.at("chips");
  EXPECT_EQ(section.Bool("softSplit"), true);
  const auto chips = section.Records("chips");
  ASSERT_THAT(chips, SizeIs(2));
  EXPECT_EQ(chips[0].String("name"), "A");
  EXPECT_EQ(chips[0].Int("memory"), 65536);
  EXPECT_EQ(chips[0].Bool("paired"), true);
  EXPECT_THAT(chips[0].StringList("aliases"), ElementsAre("a1", "a2"));
  const auto templates = chips[0].Records("templates");
  ASSERT_THAT(templates, SizeIs(2));
  EXPECT_EQ(templates[1].String("name"), "big");
  EXPECT_EQ(templates[1].Int("memory"), 32768);
  EXPECT_EQ(chips[1].String("name"), "B");
  EXPECT_FALSE(chips[1].Has("memory"));
  EXPECT_TRUE(chips[1].Records("templates").empty());

  // --print-config writes it back in the same shape.
  Config again;
  std::vector<std::string> again_problems;
  config::ApplyYaml(config::ToYaml(cfg, registry), "printed", registry, again, again_problems);
  EXPECT_THAT(again_problems, IsEmpty());
  EXPECT_EQ(again.vendors.at("chips").values, section.values);

  // Each field is checked against its kind, at every depth, with the entry's path.
  const std::string bad = R"(chips:
  chips:
  - name: A
    memory: lots
    paired: maybe
    templates:
    - {name: t}
    - small
)";
  Config broken;
  std::vector<std::string> bad_problems;
  config::ApplyYaml(bad, "b.yaml", registry, broken, bad_problems);
  EXPECT_THAT(bad_problems,
              ElementsAre(HasSubstr("chips.chips[0].memory: 'lots' is not an integer (want a 32-bit integer)"),
                          HasSubstr("chips.chips[0].paired: 'maybe' is not a boolean (want true or false)"),
                          At("b.yaml", bad, "- {name: t}") + "chips.chips[0].templates[0]: 'memory' is missing",
                          At("b.yaml", bad, "- small") +
                              "chips.chips[0].templates[1]: expected a map with name and memory, got 'small'"));
}

TEST(ConfigYaml, DuplicateKeysAreProblems) {
  const std::string text = "scheduler:\n  kubeBurst: 1\n  kubeBurst: 2\nnvidia: {}\nnvidia: {}\n";
  Config cfg;
  std::vector<std::string> problems;
  ApplyYaml(text, "d.yaml", cfg, problems);
  EXPECT_THAT(problems, ElementsAre("d.yaml:3: scheduler.kubeBurst: duplicate key (first set on line 2)",
                                    "d.yaml:5: nvidia: duplicate section (first on line 4)"));
}

TEST(ConfigYaml, InvalidYamlNamesTheLine) {
  Config cfg;
  std::vector<std::string> problems;
  ApplyYaml("scheduler:\n  httpBind: [unclosed\n  kubeBurst: 3\n", "bad.yaml", cfg, problems);
  ASSERT_THAT(problems, SizeIs(1));
  EXPECT_THAT(problems[0], AllOf(HasSubstr("bad.yaml:"), HasSubstr(": invalid YAML: ")));

  problems.clear();
  ApplyYaml("- just\n- a list\n", "list.yaml", cfg, problems);
  EXPECT_THAT(problems, ElementsAre(HasSubstr("list.yaml:1: expected a map of sections (scheduler, nvidia")));

  problems.clear();
  ApplyYaml("scheduler: {}\n---\nnvidia: {}\n", "two.yaml", cfg, problems);
  EXPECT_THAT(problems, ElementsAre(HasSubstr("two.yaml:3: a second YAML document")));
}

TEST(ConfigYaml, LaterFileOverridesOnlyWhatItSets) {
  Config cfg;
  std::vector<std::string> problems;
  ApplyYaml(
      "scheduler:\n  kubeBurst: 20\n  httpBind: a:1\nnvidia:\n  resourceCountName: x/gpu\n  memoryFactor: "
      "2\n",
      "one.yaml", cfg, problems);
  ApplyYaml("scheduler:\n  kubeBurst: 30\nnvidia:\n  memoryFactor: 4\n", "two.yaml", cfg, problems);
  ASSERT_THAT(problems, IsEmpty());
  EXPECT_EQ(cfg.kube.burst, 30);
  EXPECT_EQ(cfg.serving.http_bind, "a:1");
  EXPECT_EQ(cfg.vendors.at("nvidia").String("resourceCountName"), "x/gpu");
  EXPECT_EQ(cfg.vendors.at("nvidia").Int("memoryFactor"), 4);
}

TEST(ConfigYaml, NullValueKeepsTheCurrentSetting) {
  Config cfg;
  std::vector<std::string> problems;
  ApplyYaml("scheduler:\n  httpBind:\n  kubeBurst: ~\nnvidia:\n  resourceCountName:\n", "n.yaml", cfg,
            problems);
  ASSERT_THAT(problems, IsEmpty());
  EXPECT_EQ(cfg.serving.http_bind, "127.0.0.1:8080");
  EXPECT_EQ(cfg.kube.burst, 10);
  EXPECT_FALSE(cfg.vendors.at("nvidia").String("resourceCountName").has_value());
}

TEST(ConfigFile, ReadsAndRecordsTheSource) {
  const std::string path = WriteTemp("reads.yaml", "scheduler:\n  schedulerName: from-file\n");
  Config cfg;
  std::vector<std::string> problems;
  ApplyYamlFile(path, cfg, problems);
  EXPECT_THAT(problems, IsEmpty());
  EXPECT_EQ(cfg.extender.admission.scheduler_name, "from-file");
  EXPECT_THAT(cfg.sources, ElementsAre(path));
}

TEST(ConfigFile, ProblemsNameTheFile) {
  const std::string path = WriteTemp("bad.yaml", "scheduler:\n  kubeBurst: ten\n");
  Config cfg;
  std::vector<std::string> problems;
  ApplyYamlFile(path, cfg, problems);
  EXPECT_THAT(problems,
              ElementsAre(path + ":2: scheduler.kubeBurst: 'ten' is not an integer (want an integer >= 1)"));
}

TEST(ConfigFile, MissingFileIsAProblemNamingThePath) {
  const std::string path = ::testing::TempDir() + "/config_test_does_not_exist.yaml";
  Config cfg;
  std::vector<std::string> problems;
  ApplyYamlFile(path, cfg, problems);
  ASSERT_THAT(problems, SizeIs(1));
  EXPECT_THAT(problems[0], AllOf(HasSubstr(path), HasSubstr("cannot read")));
  EXPECT_TRUE(cfg.sources.empty());

  problems.clear();
  ApplyYamlFile(::testing::TempDir(), cfg, problems);
  EXPECT_THAT(problems, ElementsAre(HasSubstr("is a directory")));
}

TEST(ParseDuration, AcceptsGoDurationsAndSeconds) {
  const std::vector<std::pair<std::string, milliseconds>> cases = {
      {"0", milliseconds(0)},
      {"0s", milliseconds(0)},
      {"30", milliseconds(30'000)},
      {"300ms", milliseconds(300)},
      {"28s", milliseconds(28'000)},
      {"5m", milliseconds(300'000)},
      {"1h30m", milliseconds(5'400'000)},
      {"1.5s", milliseconds(1500)},
      {".5s", milliseconds(500)},
      {"1.s", milliseconds(1000)},
      {"2h45m10s5ms", milliseconds(9'910'005)},
      {"1000us", milliseconds(1)},
      {"1000\xC2\xB5s", milliseconds(1)},
      {"1000\xCE\xBCs", milliseconds(1)},
      {"2000000ns", milliseconds(2)},
      {"+5s", milliseconds(5000)},
      {"0.25h", milliseconds(900'000)},
  };
  for (const auto& [text, want] : cases) {
    auto got = ParseDuration(text);
    ASSERT_TRUE(got) << text << ": " << got.error().message;
    EXPECT_EQ(*got, want) << text;
  }
}

TEST(ParseDuration, RejectsWithAReason) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "it is empty"},
      {"abc", "expected a number at 'abc'"},
      {"5", ""},  // valid: placeholder so the table reads in order
      {"5x", "unknown unit 'x'"},
      {"1h30", "a number is missing its unit"},
      {"-5s", "it is negative"},
      {"1.5", "a number is missing its unit"},
      {".s", "a '.' needs digits"},
      {"5 s", "unknown unit ' s'"},
      {"99999999999999999999s", "it is too large"},
      {"3000000h", "it is too large"},
  };
  for (const auto& [text, why] : cases) {
    auto got = ParseDuration(text);
    if (why.empty()) {
      EXPECT_TRUE(got) << text;
      continue;
    }
    ASSERT_FALSE(got) << text;
    EXPECT_THAT(got.error().message, AllOf(HasSubstr("'" + text + "' is not a duration"), HasSubstr(why),
                                           HasSubstr("want a Go duration such as 300ms")))
        << text;
  }
  auto fine = ParseDuration("1ns");
  ASSERT_FALSE(fine);
  EXPECT_EQ(fine.error().message, "'1ns' is finer than a millisecond, the resolution this setting takes");
}

Config RichConfig() {
  Config cfg;
  cfg.serving.http_bind = "0.0.0.0:443";
  cfg.serving.cert_file = "/tls/tls.crt";
  cfg.serving.key_file = "/tls/tls.key";
  cfg.extender.admission.scheduler_name = "true";  // a string that looks like a boolean must stay a string
  cfg.serving.metrics_bind_address = ":9395";
  cfg.serving.profiling = true;
  cfg.extender.filter.policies.gpu_policy = "binpack,numa";
  cfg.extender.filter.policies.node_policy = "spread";
  cfg.extender.node_label_selector = {{"gpu", "on"}, {"zone", ""}, {"rack", "12"}};
  cfg.extender.node_lock_timeout = seconds(5400);
  cfg.extender.bind.node_lock_retry_timeout = milliseconds(1500);
  cfg.extender.admission.force_overwrite_default_scheduler = false;
  cfg.extender.health_interval = seconds(7);
  cfg.extender.handshake_timeout = seconds(90);
  cfg.extender.bind.reservation_timeout = seconds(45);
  cfg.kube.kubeconfig = "~";  // null in plain YAML
  cfg.kube.qps = 12.25;
  cfg.kube.burst = 33;
  cfg.kube.timeout = seconds(45);
  cfg.extender.leadership.enabled = true;
  cfg.extender.leadership.name = "hami-scheduler";
  cfg.extender.leadership.ns = "kube-system";
  cfg.extender.leadership.mode = extender::LeaderElectMode::kAcquire;
  cfg.extender.leadership.identity = "pair-a";
  cfg.extender.leadership.lease_duration = seconds(20);
  cfg.extender.leadership.renew_deadline = milliseconds(12500);
  cfg.extender.leadership.retry_period = seconds(3);
  cfg.extender.legacy_metrics = true;
  cfg.extender.filter.refusal_annotation = true;
  cfg.extender.capacity_shapes = {ParseCapacityShape("a10-quarter=NVIDIA:1x6000:25").value(),
                                  ParseCapacityShape("big=NVIDIA:2x40000").value()};
  cfg.log_level = "warn";
  VendorSettings nv;
  nv.Set("resourceCountName", "nvidia.com/gpu");
  nv.Set("resourceMemoryName", "nvidia.com/gpumem");
  nv.Set("resourceMemoryPercentageName", "nvidia.com/gpumem-percentage");
  nv.Set("resourceCoreName", "nvidia.com/gpucores");
  nv.Set("resourcePriorityName", "nvidia.com/priority");
  nv.Set("overwriteEnv", true);
  nv.Set("defaultMemory", 1024);
  nv.Set("defaultCores", 0);
  nv.Set("defaultGPUNum", 1);
  nv.Set("memoryFactor", 1);
  nv.Set("gpuCorePolicy", "force");
  nv.Set("runtimeClassName", "");
  nv.Set("migProfileAllowlist", testing::MigAllowlist({{{"A30"}, {"1g.6gb", "2g.12gb"}},
                                                       {{"A100-SXM4-40GB", "H100"}, {"7g.40gb"}}}));
  nv.Set("annotations.register", "hami.io/node-nvidia-register");
  nv.Set("annotations.nodeLock", "hami.io/mutex.lock");
  cfg.vendors["nvidia"] = nv;
  VendorSettings dcu;
  dcu.enabled = false;
  dcu.Set("memoryFactor", 1024);
  cfg.vendors["hygon"] = dcu;
  cfg.vendors["mthreads"] = VendorSettings{};
  return cfg;
}

void ExpectSameVendor(const VendorSettings& a, const VendorSettings& b) {
  EXPECT_EQ(a.enabled, b.enabled);
  EXPECT_EQ(a.values, b.values);  // every key, its kind and its value
}

TEST(ConfigToYaml, RoundTripsThroughApplyYaml) {
  const Config want = RichConfig();
  const std::string yaml = ToYaml(want);
  Config got;
  std::vector<std::string> problems;
  ApplyYaml(yaml, "printed.yaml", got, problems);
  ASSERT_THAT(problems, IsEmpty()) << yaml;
  EXPECT_EQ(got.serving.http_bind, want.serving.http_bind);
  EXPECT_EQ(got.serving.cert_file, want.serving.cert_file);
  EXPECT_EQ(got.serving.key_file, want.serving.key_file);
  EXPECT_EQ(got.extender.admission.scheduler_name, want.extender.admission.scheduler_name);
  EXPECT_EQ(got.serving.metrics_bind_address, want.serving.metrics_bind_address);
  EXPECT_EQ(got.serving.profiling, want.serving.profiling);
  EXPECT_EQ(got.extender.filter.policies.gpu_policy, want.extender.filter.policies.gpu_policy);
  EXPECT_EQ(got.extender.filter.policies.node_policy, want.extender.filter.policies.node_policy);
  EXPECT_EQ(got.extender.node_label_selector, want.extender.node_label_selector);
  EXPECT_EQ(got.extender.node_lock_timeout, want.extender.node_lock_timeout);
  EXPECT_EQ(got.extender.bind.node_lock_retry_timeout, want.extender.bind.node_lock_retry_timeout);
  EXPECT_EQ(got.extender.admission.force_overwrite_default_scheduler,
            want.extender.admission.force_overwrite_default_scheduler);
  EXPECT_EQ(got.extender.health_interval, want.extender.health_interval);
  EXPECT_EQ(got.extender.handshake_timeout, want.extender.handshake_timeout);
  EXPECT_EQ(got.extender.bind.reservation_timeout, want.extender.bind.reservation_timeout);
  EXPECT_EQ(got.kube.kubeconfig, want.kube.kubeconfig);
  EXPECT_EQ(got.kube.qps, want.kube.qps);
  EXPECT_EQ(got.kube.burst, want.kube.burst);
  EXPECT_EQ(got.kube.timeout, want.kube.timeout);
  EXPECT_EQ(got.extender.leadership.enabled, want.extender.leadership.enabled);
  EXPECT_EQ(got.extender.leadership.name, want.extender.leadership.name);
  EXPECT_EQ(got.extender.leadership.ns, want.extender.leadership.ns);
  EXPECT_EQ(got.extender.leadership.mode, want.extender.leadership.mode);
  EXPECT_EQ(got.extender.leadership.identity, want.extender.leadership.identity);
  EXPECT_EQ(got.extender.leadership.lease_duration, want.extender.leadership.lease_duration);
  EXPECT_EQ(got.extender.leadership.renew_deadline, want.extender.leadership.renew_deadline);
  EXPECT_EQ(got.extender.leadership.retry_period, want.extender.leadership.retry_period);
  EXPECT_EQ(got.extender.legacy_metrics, want.extender.legacy_metrics);
  EXPECT_EQ(got.extender.filter.refusal_annotation, want.extender.filter.refusal_annotation);
  EXPECT_EQ(got.extender.capacity_shapes, want.extender.capacity_shapes) << yaml;
  EXPECT_EQ(got.log_level, want.log_level);
  ASSERT_EQ(got.vendors.size(), want.vendors.size()) << yaml;
  for (const auto& [name, settings] : want.vendors) {
    SCOPED_TRACE(name);
    ExpectSameVendor(got.vendors.at(name), settings);
  }
  // Printing again gives the same text.
  EXPECT_EQ(ToYaml(got), yaml);
}

TEST(ConfigToYaml, DefaultsAndChartConfigRoundTrip) {
  for (const std::string& text : {std::string(), kHamiDeviceConfig}) {
    Config first;
    std::vector<std::string> problems;
    ApplyYaml(text, "in.yaml", first, problems);
    ASSERT_THAT(problems, IsEmpty());
    const std::string printed = ToYaml(first);
    Config second;
    ApplyYaml(printed, "printed.yaml", second, problems);
    ASSERT_THAT(problems, IsEmpty()) << printed;
    EXPECT_EQ(ToYaml(second), printed);
  }
}

TEST(ConfigToYaml, ShapeAndDurations) {
  Config cfg;
  cfg.sources = {"/etc/hami/config.yaml"};
  const std::string yaml = ToYaml(cfg);
  EXPECT_THAT(yaml, HasSubstr("# read from: /etc/hami/config.yaml"));
  EXPECT_THAT(yaml, HasSubstr("\nscheduler:\n  httpBind: 127.0.0.1:8080\n"));
  EXPECT_THAT(yaml, HasSubstr("  nodeLockTimeout: 5m\n"));
  EXPECT_THAT(yaml, HasSubstr("  nodeLockRetryTimeout: 28s\n"));
  EXPECT_THAT(yaml, HasSubstr("  handshakeTimeout: 1m\n"));
  EXPECT_THAT(yaml, HasSubstr("  reservationTimeout: 5m\n"));
  EXPECT_THAT(yaml, HasSubstr("  kubeTimeout: 0s\n"));
  EXPECT_THAT(yaml, HasSubstr("  certFile: \"\"\n"));
  EXPECT_THAT(yaml, HasSubstr("  nodeLabelSelector: {}\n"));
  EXPECT_THAT(yaml, HasSubstr("  capacityShapes: []\n"));
  EXPECT_THAT(yaml, HasSubstr("  refusalAnnotation: false\n"));
}

TEST(ProblemsError, ListsEveryProblem) {
  EXPECT_EQ(ProblemsError({"a.yaml:1: one", "--kube-burst: two"}).message,
            "2 problem(s) in configuration:\n  - a.yaml:1: one\n  - --kube-burst: two");
  EXPECT_EQ(ProblemsError({"only"}).message, "1 problem(s) in configuration:\n  - only");
}

}  // namespace
}  // namespace hami::config
