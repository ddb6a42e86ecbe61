#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <sstream>

#include "cmd/app.h"
#include "cmd/text_table.h"
#include "config/flags.h"
#include "core/strings.h"

namespace hami::cmd {
namespace {
namespace json = boost::json;

const std::string kExamples = std::string(HAMI_SOURCE_DIR) + "/examples/";

struct Ran {
  int code;
  std::string out;
  std::string err;
};

Ran Exec(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int code = Run(args, out, err);
  return {code, out.str(), err.str()};
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

json::object ResultFor(const json::value& doc, std::string_view pod) {
  for (const auto& r : doc.at("results").as_array()) {
    if (r.at("pod").as_string() == pod) return r.as_object();
  }
  ADD_FAILURE() << "no result for " << pod;
  return {};
}

class SimulateExamples : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ran_ = new Ran(Exec({"simulate", "--cluster", kExamples + "cluster.yaml", "--pods",
                         kExamples + "pods.yaml", "--now", "2026-11-29T12:00:00Z"}));
    ASSERT_EQ(ran_->code, 0) << ran_->err;
    doc_ = new json::value(json::parse(ran_->out));
  }
  static void TearDownTestSuite() {
    delete ran_;
    delete doc_;
  }
  static std::string NodeOf(std::string_view pod) {
    auto r = ResultFor(*doc_, pod);
    return r.at("node").is_null() ? "" : std::string(r.at("node").as_string());
  }
  static std::string Annotation(std::string_view pod, std::string_view key) {
    auto r = ResultFor(*doc_, pod);
    auto* v = r.at("annotations").as_object().if_contains(key);
    return v ? std::string(v->as_string()) : "";
  }
  static inline Ran* ran_ = nullptr;
  static inline json::value* doc_ = nullptr;
};

TEST_F(SimulateExamples, PlacesEveryPodWithTheExpectedOutcome) {
  // The pending pod of the cluster file comes first, then the --pods file in order.
  const auto& results = doc_->at("results").as_array();
  ASSERT_EQ(results.size(), 16u);
  EXPECT_EQ(results[0].at("pod").as_string(), "default/notebook");
  EXPECT_EQ(ResultFor(*doc_, "default/notebook").at("outcome").as_string(), "scheduled");
  // Binpack (default node policy) keeps filling the node that already runs training-0.
  EXPECT_EQ(NodeOf("default/notebook"), "gpu-a100-1");
  EXPECT_EQ(NodeOf("default/shared-gpu"), "gpu-a100-1");
  EXPECT_EQ(NodeOf("default/v100-only"), "gpu-v100-1");
  EXPECT_EQ(NodeOf("default/mlu-slice"), "mlu-370-1");
  EXPECT_EQ(NodeOf("default/mthreads-slice"), "mthreads-s4000-1");
  EXPECT_EQ(NodeOf("default/dcu-slice"), "dcu-k100-1");
  EXPECT_EQ(ResultFor(*doc_, "team-a/quota-ok").at("outcome").as_string(), "scheduled");
  EXPECT_EQ(ResultFor(*doc_, "team-a/quota-exceeded").at("outcome").as_string(), "unschedulable");
  EXPECT_EQ(ResultFor(*doc_, "default/too-big").at("outcome").as_string(), "unschedulable");
  EXPECT_EQ(ResultFor(*doc_, "default/cpu-only").at("outcome").as_string(), "no-device-request");
  auto bad = ResultFor(*doc_, "default/bad-memory-unit");
  EXPECT_EQ(bad.at("outcome").as_string(), "error");
  EXPECT_NE(std::string(bad.at("error").as_string()).find("nvidia.com/gpumem"), std::string::npos);
}

TEST_F(SimulateExamples, ReasonsAndAnnotations) {
  auto too_big = ResultFor(*doc_, "default/too-big");
  EXPECT_EQ(too_big.at("failedNodes").at("gpu-a100-1").as_string(), "4/4 CardInsufficientMemory");
  EXPECT_EQ(too_big.at("failedNodes").at("mlu-370-1").as_string(), "NodeInsufficientDevice");
  auto quota = ResultFor(*doc_, "team-a/quota-exceeded");
  EXPECT_NE(std::string(quota.at("failedNodes").at("gpu-a100-1").as_string()).find("ResourceQuotaNotFit"),
            std::string::npos);
  EXPECT_EQ(Annotation("default/shared-gpu", "hami.io/vgpu-time"), "1795953600");
  EXPECT_NE(Annotation("default/shared-gpu", "hami.io/vgpu-devices-to-allocate").find(",NVIDIA,3000,30:;"),
            std::string::npos);
  // init + log-shipper + server: three entries, the sidecar's empty.
  const std::string init = Annotation("default/init-and-sidecar", "hami.io/vgpu-devices-allocated");
  EXPECT_NE(init.find(",NVIDIA,6000,20:;;"), std::string::npos) << init;
  EXPECT_NE(init.find(",NVIDIA,4000,20:;"), std::string::npos) << init;
  // The cordoned V100 is never used.
  EXPECT_EQ(ran_->out.find("GPU-v100-broken,NVIDIA"), std::string::npos);
  // NUMA pair: both on one NUMA node (A100 0/1 are NUMA 0, 2/3 NUMA 1).
  const std::string numa = Annotation("default/numa-pair", "hami.io/vgpu-devices-allocated");
  const bool low =
      numa.find("GPU-a100-0") != std::string::npos && numa.find("GPU-a100-1") != std::string::npos;
  const bool high =
      numa.find("GPU-a100-2") != std::string::npos && numa.find("GPU-a100-3") != std::string::npos;
  EXPECT_TRUE(low || high) << numa;
  EXPECT_EQ(Annotation("default/mlu-slice", "CAMBRICON_DSMLU_ASSIGNED"), "false");
  EXPECT_EQ(Annotation("default/mthreads-slice", "mthreads.com/predicate-node"), "mthreads-s4000-1");
  EXPECT_NE(Annotation("default/dcu-slice", "hami.io/hcu-devices-to-allocate").find(",DCU,2000,60:;"),
            std::string::npos);
}

TEST_F(SimulateExamples, DeviceUsageNeverExceedsCapacity) {
  for (const auto& d : doc_->at("devices").as_array()) {
    EXPECT_LE(d.at("used").as_int64(), d.at("count").as_int64()) << json::serialize(d);
    EXPECT_LE(d.at("usedmem").as_int64(), d.at("devmem").as_int64()) << json::serialize(d);
    EXPECT_LE(d.at("usedcores").as_int64(), d.at("devcore").as_int64()) << json::serialize(d);
  }
}

TEST(Simulate, TableOutputAndBadInput) {
  auto table = Exec({"simulate", "--cluster", kExamples + "cluster.yaml", "-o", "table"});
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("default/notebook"), std::string::npos);
  EXPECT_NE(table.out.find("GPU-a100-0"), std::string::npos);

  auto missing = Exec({"simulate"});
  EXPECT_EQ(missing.code, kExitUsage);
  EXPECT_NE(missing.err.find("--cluster"), std::string::npos);
  auto no_file = Exec({"simulate", "--cluster", "/nonexistent.yaml"});
  EXPECT_EQ(no_file.code, kExitUsage);
  EXPECT_NE(no_file.err.find("/nonexistent.yaml"), std::string::npos);
  const std::string bad =
      WriteTemp("bad-cluster.json",
                R"({"kind":"List","items":[{"kind":"Node","metadata":{"name":"n","annotations":[]}}]})");
  auto bad_run = Exec({"simulate", "--cluster", bad});
  EXPECT_EQ(bad_run.code, kExitUsage);
  EXPECT_NE(bad_run.err.find("Node n: metadata.annotations"), std::string::npos) << bad_run.err;
  auto bad_output = Exec({"simulate", "--cluster", kExamples + "cluster.yaml", "-o", "xml"});
  EXPECT_EQ(bad_output.code, kExitUsage);
}

TEST(TextTable, ColumnsAsWideAsTheirWidestCell) {
  TextTable t({"NAME", "ID", "USED"}, {false, false, true});
  t.Add({"a", "mlu-370-1-cambricon-mlu-0", "1/100"});
  t.Add({"node-b", "x", "10/10"});
  t.Add({"bad\x1b[2Jname", "é", ""});  // a control sequence from a snapshot is shown as text
  EXPECT_EQ(t.Render("  "),
            "  NAME            ID                          USED\n"
            "  a               mlu-370-1-cambricon-mlu-0  1/100\n"
            "  node-b          x                          10/10\n"
            "  bad\\x1b[2Jname  é\n");
}

// The device table of `simulate -o table` lines up whatever the IDs (Cambricon's and Moore Threads' are long).
TEST(Simulate, TheDeviceTableLinesUp) {
  auto table = Exec({"simulate", "--cluster", kExamples + "cluster.yaml", "--pods", kExamples + "pods.yaml",
                     "-o", "table", "--now", "2026-11-29T12:00:00Z"});
  ASSERT_EQ(table.code, 0) << table.err;
  std::istringstream lines(table.out);
  std::string line;
  std::size_t end = std::string::npos, rows = 0;
  while (std::getline(lines, line)) {
    if (line.rfind("NODE", 0) == 0) {
      end = line.find("MEMORY MiB") + std::string("MEMORY MiB").size();
      continue;
    }
    if (end == std::string::npos || line.empty()) continue;
    ++rows;
    ASSERT_GT(line.size(), end) << line;
    EXPECT_TRUE(std::isdigit(static_cast<unsigned char>(line[end - 1])) && line[end] == ' ') << line;
  }
  EXPECT_GT(rows, 10u);
  EXPECT_NE(table.out.find("mlu-370-1-cambricon-mlu-0"), std::string::npos);
}

// `explain` on the sample snapshot: the pods before it placed as simulate places them, then its fit traced.
TEST(Explain, WhyAPodIsPendingDownToTheCard) {
  const std::vector<std::string> snapshot{"--cluster", kExamples + "cluster.yaml", "--pods",
                                          kExamples + "pods.yaml", "--now", "2026-11-29T12:00:00Z"};
  const auto run = [&](std::vector<std::string> args) {
    args.insert(args.end(), snapshot.begin(), snapshot.end());
    return Exec(args);
  };
  auto too_big = run({"explain", "default/too-big"});
  ASSERT_EQ(too_big.code, 0) << too_big.err;
  EXPECT_NE(too_big.out.find("  app: 1 x NVIDIA, 100000 MiB\n"), std::string::npos) << too_big.out;
  EXPECT_NE(too_big.out.find("gpu-a100-1        4/4 CardInsufficientMemory; app needs 100000 MiB on one "
                             "card: the closest, GPU-a100-3, has 31960 MiB free (68040 MiB short)"),
            std::string::npos)
      << too_big.out;
  EXPECT_NE(too_big.out.find("  - a request of at most 31960 MiB per card passes the memory check of "
                             "GPU-a100-3 on gpu-a100-1"),
            std::string::npos)
      << too_big.out;
  auto quota = json::parse(run({"explain", "team-a/quota-exceeded", "-o", "json"}).out);
  EXPECT_EQ(quota.at("nodes").at(1).at("reason").as_string(), "4/4 ResourceQuotaNotFit");
  EXPECT_NE(json::serialize(quota.at("hints")).find("namespace team-a's ResourceQuota on devices"),
            std::string::npos);
  // Not pending, not there, not a name, not given.
  auto placed = Exec({"explain", "default/training-0", "--cluster", kExamples + "cluster.yaml"});
  EXPECT_EQ(placed.code, 0);
  EXPECT_NE(placed.out.find("is not pending: it is bound to node"), std::string::npos) << placed.out;
  auto missing = run({"explain", "default/nobody"});
  EXPECT_EQ(missing.code, kExitUsage);
  EXPECT_NE(missing.err.find("pod default/nobody is not in the snapshot"), std::string::npos) << missing.err;
  auto bad = run({"explain", "default/Bad_Name"});
  EXPECT_EQ(bad.code, kExitUsage);
  EXPECT_NE(bad.err.find("the pod name"), std::string::npos) << bad.err;
  auto none = run({"explain"});
  EXPECT_EQ(none.code, kExitUsage);
  EXPECT_NE(none.err.find("the pod to explain (NAMESPACE/POD) comes first"), std::string::npos) << none.err;
}

TEST(Inspect, Node) {
  auto r = Exec({"inspect", "node", kExamples + "inspect-node.json"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto doc = json::parse(r.out);
  EXPECT_EQ(doc.at("node").as_string(), "gpu-node-7");
  const auto& devices = doc.at("devices").as_array();
  ASSERT_EQ(devices.size(), 3u);
  EXPECT_EQ(devices[0].at("vendor").as_string(), "DCU");
  EXPECT_EQ(devices[1].at("vendor").as_string(), "NVIDIA");
  EXPECT_EQ(devices[1].at("id").as_string(), "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec");
  EXPECT_EQ(devices[2].at("index").as_int64(), 1);
  EXPECT_EQ(doc.at("errors").as_array().size(), 0u);
  // Both vendors publish here; the handshakes are old but allocatable counts keep them healthy.
  const auto& health = doc.at("health").as_array();
  ASSERT_EQ(health.size(), 2u);
  EXPECT_TRUE(health[1].at("healthy").as_bool());
  EXPECT_NE(std::string(health[1].at("why").as_string()).find("allocatable"), std::string::npos);

  const std::string broken = WriteTemp("broken-node.yaml", R"(kind: Node
metadata:
  name: b
  annotations:
    hami.io/node-nvidia-register: '[{"id":"GPU-0","devmem":"lots"}]'
)");
  auto b = Exec({"inspect", "node", broken});
  ASSERT_EQ(b.code, 0) << b.err;
  auto bdoc = json::parse(b.out);
  ASSERT_EQ(bdoc.at("errors").as_array().size(), 1u);
  EXPECT_EQ(bdoc.at("errors").at(0).at("vendor").as_string(), "NVIDIA");
  EXPECT_NE(std::string(bdoc.at("errors").at(0).at("error").as_string()).find("devmem"), std::string::npos);
}

TEST(Inspect, Pod) {
  auto r = Exec({"inspect", "pod", kExamples + "inspect-pod.yaml"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto doc = json::parse(r.out);
  EXPECT_EQ(doc.at("pod").as_string(), "default/gpu-pod");
  EXPECT_EQ(doc.at("node").as_string(), "node-1");
  EXPECT_EQ(doc.at("bindPhase").as_string(), "allocating");
  const auto& nvidia = doc.at("allocated").at("NVIDIA").as_array();
  ASSERT_EQ(nvidia.size(), 1u);  // one container
  EXPECT_EQ(nvidia[0].at(0).at("uuid").as_string(), "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448");
  EXPECT_EQ(nvidia[0].at(0).at("usedmem").as_int64(), 3000);
  EXPECT_EQ(nvidia[0].at(0).at("type").as_string(), "NVIDIA");
  EXPECT_EQ(doc.at("toAllocate").at("NVIDIA").as_array().size(), 1u);
  EXPECT_EQ(doc.at("requests").at(0).at("devices").at("NVIDIA").at("memory").as_int64(), 3000);
}

TEST(Inspect, Usage) {
  EXPECT_EQ(Exec({"inspect"}).code, kExitUsage);
  EXPECT_EQ(Exec({"inspect", "service", "x"}).code, kExitUsage);
  auto two = Exec({"inspect", "pod", kExamples + "cluster.yaml"});
  EXPECT_EQ(two.code, kExitUsage);
  EXPECT_NE(two.err.find("want exactly one"), std::string::npos);
}

TEST(Commands, VersionHelpAndConfig) {
  auto v = Exec({"version"});
  EXPECT_EQ(v.code, 0);
  EXPECT_NE(v.out.find("hami-scheduler"), std::string::npos);
  EXPECT_EQ(Exec({"--help"}).code, 0);
  EXPECT_EQ(Exec({"bogus"}).code, kExitUsage);
  auto cfg = Exec({"--print-config", "--gpu-scheduler-policy=binpack"});
  ASSERT_EQ(cfg.code, 0) << cfg.err;
  EXPECT_NE(cfg.out.find("binpack"), std::string::npos);
  auto bad = Exec({"config", "--kube-burst=ten", "--node-scheduler-policy=random"});
  EXPECT_EQ(bad.code, kExitUsage);
  EXPECT_NE(bad.err.find("kube-burst"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("node-scheduler-policy"), std::string::npos) << bad.err;
}

// A capacity shape's vendor is checked once the backends are built: one this scheduler runs, asked for with
// its resources.
TEST(Commands, CapacityShapesNameAVendorWeRun) {
  auto ok = Exec({"config", "--capacity-shape=a10-quarter=NVIDIA:1x6000:25,big=NVIDIA:2x40000"});
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_NE(ok.out.find("capacityShapes: [a10-quarter=NVIDIA:1x6000:25, big=NVIDIA:2x40000]"),
            std::string::npos)
      << ok.out;
  auto bad = Exec({"config", "--capacity-shape=gpu=Nvidia:1x6000"});
  EXPECT_EQ(bad.code, kExitUsage);
  EXPECT_NE(bad.err.find("--capacity-shape (scheduler.capacityShapes): capacity shape \"gpu=Nvidia:1x6000\": "
                         "vendor \"Nvidia\" is not one this scheduler runs (want one of: "),
            std::string::npos)
      << bad.err;
}

// HAMi's image runs `scheduler <the chart's flags>`: the same binary under that name, and every flag the
// chart passes (klog's included) is accepted.
TEST(Commands, TheSchedulerEntryPointTakesTheChartsCommandLine) {
  std::ostringstream out, err;
  const std::vector<std::string> chart = {
      "--http_bind=0.0.0.0:443",
      "--cert_file=/tls/tls.crt",
      "--key_file=/tls/tls.key",
      "--scheduler-name=hami-scheduler",
      "--metrics-bind-address=:9395",
      "--node-scheduler-policy=binpack",
      "--gpu-scheduler-policy=spread",
      "--force-overwrite-default-scheduler=true",
      "--device-config-file=" + std::string(HAMI_SOURCE_DIR) + "/deploy/device-config.yaml",
      "--leader-elect=true",
      "--leader-elect-resource-name=hami-scheduler",
      "--leader-elect-resource-namespace=kube-system",
      "--debug",
      "-v=4",
      "--one_output",
      "--skip_log_headers",
      "--log_file_max_size=1800",
      "--legacy_stderr_threshold_behavior=true",
      "--alsologtostderrthreshold=INFO",
      "--log_backtrace_at=file.go:10",
      "--print-config"};
  ASSERT_EQ(RunProgram("/usr/local/bin/scheduler", chart, out, err), 0) << err.str();
  EXPECT_NE(out.str().find("httpBind: 0.0.0.0:443\n"), std::string::npos) << out.str();
  std::ostringstream vout, verr;
  EXPECT_EQ(RunProgram("scheduler", {"version"}, vout, verr), 0);
  EXPECT_NE(vout.str().find("hami-scheduler"), std::string::npos);
  // A newer chart's command line (HAMi after v2.10) starts us too: its device plugin's account calls /refit.
  std::ostringstream wout, werr;
  EXPECT_EQ(RunProgram("scheduler",
                       {"--device-plugin-namespace=kube-system",
                        "--device-plugin-service-account=hami-device-plugin", "--print-config"},
                       wout, werr),
            0)
      << werr.str();
  EXPECT_NE(wout.str().find("devicePluginNamespace: kube-system\n"), std::string::npos) << wout.str();
  EXPECT_NE(wout.str().find("devicePluginServiceAccount: hami-device-plugin\n"), std::string::npos)
      << wout.str();
  std::ostringstream bout, berr;
  EXPECT_EQ(RunProgram("scheduler", {"--log_file_max_size=big", "--print-config"}, bout, berr), kExitUsage);
  EXPECT_NE(berr.str().find("--log_file_max_size: 'big' is not an integer"), std::string::npos) << berr.str();
}

// tests/e2e/chart-v2.10.0: what HAMi v2.10.0's chart renders, default and with every vendor enabled. Both
// command lines (the mounted files' paths pointed at the fixture) load with the chart's device config.
TEST(Commands, TheChartsRenderedCommandLinesStartUs) {
  const std::string fixture = std::string(HAMI_SOURCE_DIR) + "/tests/e2e/chart-v2.10.0/";
  for (const std::string variant : {"scheduler-args.txt", "scheduler-args-every-vendor.txt"}) {
    std::ifstream in(fixture + variant);
    ASSERT_TRUE(in) << variant;
    std::vector<std::string> words;
    for (std::string w; std::getline(in, w);) {
      if (w == "--device-config-file=/device-config.yaml")
        w = "--device-config-file=" + fixture + "device-config.yaml";
      if (!w.empty()) words.push_back(w);
    }
    ASSERT_GT(words.size(), 10u) << variant;
    ASSERT_EQ(words.front(), "scheduler") << variant;
    std::vector<std::string> args(words.begin() + 1, words.end());
    args.push_back("--print-config");
    std::ostringstream out, err;
    EXPECT_EQ(RunProgram(words.front(), args, out, err), 0) << variant << ": " << err.str();
    EXPECT_NE(out.str().find("httpBind: 0.0.0.0:443\n"), std::string::npos) << variant;
  }
}

// With every vendor enabled (--enable-ascend, --enable-iluvatar and the sections the chart renders) every
// chip of the chart becomes a backend, and neither a built vendor's flag nor its section is warned about.
TEST(Commands, TheChartsAscendConfigurationBuildsOneBackendPerChip) {
  const std::string fixture = std::string(HAMI_SOURCE_DIR) + "/tests/e2e/chart-v2.10.0/";
  std::ifstream in(fixture + "scheduler-args-every-vendor.txt");
  ASSERT_TRUE(in);
  std::vector<std::string> args{"scheduler"};
  for (std::string w; std::getline(in, w);) {
    if (w == "--device-config-file=/device-config.yaml") {
      w = "--device-config-file=" + fixture + "device-config.yaml";
    }
    if (!w.empty() && w != "scheduler") args.push_back(w);
  }
  ASSERT_NE(std::find(args.begin(), args.end(), "--enable-ascend=true"), args.end());
  std::vector<std::string> with_print(args.begin() + 1, args.end());
  with_print.push_back("--print-config");
  std::ostringstream out, err;
  ASSERT_EQ(RunProgram("scheduler", with_print, out, err), 0) << err.str();
  for (const char* word : {"vnpus", "ascend", "Ascend", "iluvatar", "kunlun", "metax", "enflame",
                           "not implemented"}) {
    EXPECT_EQ(err.str().find(word), std::string::npos) << word << " in:\n" << err.str();
  }
  auto loaded = config::LoadConfig(args, Vendors());
  ASSERT_TRUE(loaded) << loaded.error().message;
  auto backends = BuildBackends(loaded->config);
  ASSERT_TRUE(backends) << backends.error().message;
  std::vector<std::string> chips;
  for (const auto& b : *backends) {
    if (b->Spec().config_section == "vnpus") chips.push_back(b->Vendor());
  }
  std::sort(chips.begin(), chips.end());
  EXPECT_EQ(chips, (std::vector<std::string>{"Ascend310P", "Ascend910A", "Ascend910B2", "Ascend910B3",
                                             "Ascend910B4", "Ascend910B4-1", "Ascend910C"}));
  std::vector<std::string> others;
  for (const auto& b : *backends) {
    if (b->Spec().config_section != "vnpus") others.push_back(b->Vendor());
  }
  std::sort(others.begin(), others.end());
  // Every other registered vendor, as its section builds it by default.
  std::vector<std::string> registered;
  for (const std::string& section : Vendors().Sections()) {
    // Remote GPUs came after v2.10: its chart does not turn them on.
    if (section == "vnpus" || section == "remotegpu") continue;
    auto built = Vendors().Create(section, VendorSettings{});
    ASSERT_TRUE(built) << section;
    for (const auto& b : *built) registered.push_back(b->Vendor());
  }
  std::sort(registered.begin(), registered.end());
  EXPECT_EQ(others, registered);
  EXPECT_GE(others.size(), 18u) << "every other vendor HAMi v2.10 schedules";
}

// A vendor is one folder: outside backends/<vendor>/ it is named only by the registration line, the build,
// the tests, the docs, and the chart and deploy/ manifests (HAMi's values and kube-scheduler's resources).
TEST(VendorSeam, AVendorIsNamedOnlyInItsFolder) {
  const std::filesystem::path root = HAMI_SOURCE_DIR;
  struct Vendor {
    std::string folder;
    std::regex name;
  };
  const std::vector<Vendor> vendors = {
      {"backends/ascend", std::regex("ascend(?!ing)|vnpu|huawei", std::regex::icase)},
      {"backends/kunlun", std::regex("kunlun|baidu|\\bv?xpu", std::regex::icase)},
      {"backends/awsneuron",
       std::regex("neuron|aws\\.amazon|AWS_|\\btrn[0-9]|\\binf[0-9]", std::regex::icase)},
      {"backends/iluvatar", std::regex("iluvatar|\\b(MR|BI)-V[0-9]|SOL_CONTINER", std::regex::icase)},
      {"backends/amd", std::regex("\\bamd\\b|instinct|\\bmi[0-9]{3}", std::regex::icase)},
      {"backends/vastai", std::regex("vastai|\\baic\\b", std::regex::icase)},
      {"backends/biren", std::regex("biren", std::regex::icase)},
      {"backends/enflame", std::regex("enflame|\\bv?gcu", std::regex::icase)},
      {"backends/metax", std::regex("metax|sgpu-(app-class|qos|topology)", std::regex::icase)}};
  // In a git worktree `.git` is a file naming the worktree's folder.
  const std::set<std::string> allowed_files = {"README.md", "CMakeLists.txt", "backends/builtin.cc", ".git"};
  const std::set<std::string> allowed_dirs = {".git", "build", "build-asan", "third_party", "tests", "docs",
                                              "charts", "deploy"};
  std::vector<std::string> offenders;
  for (auto it = std::filesystem::recursive_directory_iterator(root);
       it != std::filesystem::recursive_directory_iterator(); ++it) {
    const std::string rel = std::filesystem::relative(it->path(), root).generic_string();
    if (it->is_directory()) {
      if (allowed_dirs.contains(rel) || rel.starts_with("build")) it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file() || allowed_files.contains(rel)) continue;
    std::ifstream in(it->path(), std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (const Vendor& v : vendors) {
      if (rel.starts_with(v.folder + "/")) continue;
      if (std::regex_search(text, v.name)) offenders.push_back(rel);
    }
  }
  EXPECT_TRUE(offenders.empty()) << "a vendor named outside its folder: " << Join(offenders, ", ");
}

// docs/DECISIONS.md, D2 under HAMi's own device config: said at start-up, with the line that fixes it.
TEST(Commands, HamisDeviceConfigWithHygonWarnsAboutTheToAllocateKey) {
  const std::string hamis =
      WriteTemp("hami-device-config.yaml",
                "nvidia:\n  resourceCountName: nvidia.com/gpu\nhygon:\n"
                "  resourceCountName: hygon.com/dcunum\n  resourceMemoryName: hygon.com/dcumem\n"
                "  resourceCoreName: hygon.com/dcucores\n");
  auto warned = Exec({"config", "--device-config-file=" + hamis});
  ASSERT_EQ(warned.code, 0) << warned.err;
  EXPECT_NE(warned.err.find("warning: hygon: pods get their devices under hami.io/hcu-devices-to-allocate"),
            std::string::npos)
      << warned.err;
  EXPECT_NE(warned.err.find("add `annotations: {toAllocate: hami.io/dcu-devices-to-allocate}`"),
            std::string::npos)
      << warned.err;
  // deploy/device-config.yaml carries the override: no warning.
  auto ours =
      Exec({"config", "--device-config-file=" + std::string(HAMI_SOURCE_DIR) + "/deploy/device-config.yaml"});
  ASSERT_EQ(ours.code, 0) << ours.err;
  EXPECT_EQ(ours.err.find("hygon:"), std::string::npos) << ours.err;
}

// simulate with --enable-ascend: a pair of NPUs from one ring, a hami-core pod refused where the node does
// not offer the soft split; without the flag the pods ask for nothing we manage.
TEST(Simulate, KunlunxinWholeXpusFromCapacityAndVxpusOfOneSize) {
  const std::string cluster = WriteTemp("kunlun-cluster.yaml", R"(apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: xpu-w}
  status:
    capacity: {kunlunxin.com/xpu: "8"}
    allocatable: {kunlunxin.com/xpu: "8"}
- apiVersion: v1
  kind: Node
  metadata:
    name: xpu-v
    annotations:
      hami.io/node-handshake-xpu: "Reported 2026-12-03 08:00:00"
      hami.io/node-register-xpu: '[
        {"id":"xpu-0","index":0,"count":4,"devmem":98304,"devcore":100,"type":"XPU","health":true}]'
  status:
    capacity: {kunlunxin.com/vxpu: "4"}
    allocatable: {kunlunxin.com/vxpu: "4"}
)");
  const std::string pods = WriteTemp("kunlun-pods.yaml", R"(apiVersion: v1
kind: Pod
metadata: {name: four, namespace: default}
spec:
  schedulerName: hami-scheduler
  containers: [{name: a, resources: {limits: {kunlunxin.com/xpu: "4"}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: three, namespace: default}
spec:
  schedulerName: hami-scheduler
  containers: [{name: a, resources: {limits: {kunlunxin.com/xpu: "3"}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: quarter, namespace: default}
spec:
  schedulerName: hami-scheduler
  containers: [{name: a, resources: {limits: {kunlunxin.com/vxpu: "1", kunlunxin.com/vxpu-memory: "1000"}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: half, namespace: default}
spec:
  schedulerName: hami-scheduler
  containers: [{name: a, resources: {limits: {kunlunxin.com/vxpu: "1", kunlunxin.com/vxpu-memory: "40000"}}}]
)");
  auto r = Exec({"simulate", "--cluster", cluster, "--pods", pods, "--now", "2026-12-03T08:00:10Z"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto doc = json::parse(r.out);
  const auto four = ResultFor(doc, "default/four");
  ASSERT_EQ(four.at("outcome").as_string(), "scheduled");
  EXPECT_EQ(four.at("annotations").at("BAIDU_COM_DEVICE_IDX").as_string(), "0,1,2,3") << "one whole wing";
  EXPECT_EQ(std::string(ResultFor(doc, "default/three").at("failedNodes").at("xpu-w").as_string()),
            "1/8 NumaNotFit, 4/8 CardInsufficientMemory")
      << "four cards are free (the first pod holds the others); the interconnect takes no three";
  const auto quarter = ResultFor(doc, "default/quarter");
  EXPECT_EQ(quarter.at("annotations").at("hami.io/xpu-devices-allocated").as_string(),
            "xpu-0,XPU,24576,25:;");
  EXPECT_EQ(ResultFor(doc, "default/half").at("failedNodes").at("xpu-v").as_string(), "1/1 CardSizeMismatch");
}

TEST(Simulate, AscendNodesWithTheirFlag) {
  const std::string cluster_text = R"(apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata:
    name: npu-1
    annotations:
      hami.io/node-handshake-Ascend910B3: "Reported 2026-12-03 08:00:00"
      hami.io/node-register-Ascend910B3: '[
        {"id":"npu-0","index":0,"count":4,"devmem":65536,"devcore":20,"type":"Ascend910B3","health":true,
         "custominfo":{"NetworkID":0}},
        {"id":"npu-1","index":1,"count":4,"devmem":65536,"devcore":20,"type":"Ascend910B3","health":true,
         "custominfo":{"NetworkID":0}},
        {"id":"npu-4","index":4,"count":4,"devmem":65536,"devcore":20,"type":"Ascend910B3","health":true,
         "custominfo":{"NetworkID":1}}]'
  status:
    capacity: {huawei.com/Ascend910B3: "12"}
    allocatable: {huawei.com/Ascend910B3: "12"}
)";
  const std::string cluster = WriteTemp("ascend-cluster.yaml", cluster_text);
  const std::string pods = WriteTemp("ascend-pods.yaml", R"(apiVersion: v1
kind: Pod
metadata: {name: pair, namespace: default}
spec:
  schedulerName: hami-scheduler
  containers: [{name: a, resources: {limits: {huawei.com/Ascend910B3: "2"}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: soft, namespace: default, annotations: {huawei.com/vnpu-mode: hami-core}}
spec:
  schedulerName: hami-scheduler
  containers:
  - {name: a, resources: {limits: {huawei.com/Ascend910B3: "1", huawei.com/Ascend910B3-memory: "4096"}}}
)");
  auto r = Exec({"simulate", "--cluster", cluster, "--pods", pods, "--enable-ascend", "--now",
                 "2026-12-03T08:00:10Z"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto doc = json::parse(r.out);
  const auto pair = ResultFor(doc, "default/pair");
  EXPECT_EQ(pair.at("outcome").as_string(), "scheduled");
  EXPECT_EQ(pair.at("annotations").at("hami.io/Ascend910B3-devices-allocated").as_string(),
            "npu-1,Ascend910B3,65536,0:npu-0,Ascend910B3,65536,0:;")
      << "both from ring 0, not the policy's last card (npu-4, ring 1)";
  EXPECT_EQ(ResultFor(doc, "default/soft").at("failedNodes").at("npu-1").as_string(), "1/3 ModeNotFit");
  auto off = Exec({"simulate", "--cluster", cluster, "--pods", pods, "--now", "2026-12-03T08:00:10Z"});
  ASSERT_EQ(off.code, 0) << off.err;
  EXPECT_EQ(ResultFor(json::parse(off.out), "default/pair").at("outcome").as_string(), "no-device-request");

  // inspect node shows each NPU's ring.
  const std::string node = WriteTemp("ascend-node.yaml", R"(kind: Node
metadata:
  name: npu-1
  annotations:
    hami.io/node-register-Ascend910B3: '[{"id":"a","index":0,"count":4,"devmem":65536,"health":true},
      {"id":"b","index":4,"count":4,"devmem":65536,"health":true,"custominfo":{"NetworkID":1}}]'
)");
  auto inspected = Exec({"inspect", "node", node, "--enable-ascend"});
  ASSERT_EQ(inspected.code, 0) << inspected.err;
  const auto devices = json::parse(inspected.out).at("devices").as_array();
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_FALSE(devices[0].as_object().contains("network"));
  EXPECT_EQ(devices[1].at("network").as_int64(), 1);
}

TEST(Simulate, NodeLabelSelectorLimitsCandidates) {
  // Only gpu-a100-1 carries gpu=on in the sample cluster.
  auto r = Exec({"simulate", "--cluster", kExamples + "cluster.yaml", "--pods", kExamples + "pods.yaml",
                 "--node-label-selector=gpu=on"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto doc = json::parse(r.out);
  EXPECT_EQ(ResultFor(doc, "default/mlu-slice").at("outcome").as_string(), "unschedulable");
  EXPECT_FALSE(ResultFor(doc, "default/mlu-slice").at("failedNodes").as_object().contains("mlu-370-1"));
  EXPECT_EQ(ResultFor(doc, "default/shared-gpu").at("node").as_string(), "gpu-a100-1");
}

// A pod that fits nowhere: the node and pods kube-scheduler's preemption would pick, the snapshot's
// PodDisruptionBudget counted; none for a pod whose preemptionPolicy is Never.
TEST(Simulate, ShowsWhomAPendingPodWouldPreempt) {
  const std::string cluster = WriteTemp("preempt.json", R"({"kind":"List","items":[
{"kind":"Node","metadata":{"name":"gpu-1","annotations":{"hami.io/node-nvidia-register":"[{\"id\":\"GPU-a\",\"index\":0,\"count\":10,\"devmem\":16000,\"devcore\":100,\"type\":\"NVIDIA-T4\",\"numa\":0,\"mode\":\"hami-core\",\"health\":true}]","hami.io/node-handshake":"Reported 2026-12-05T13:00:00Z"}},"status":{"capacity":{"nvidia.com/gpu":"10"},"allocatable":{"nvidia.com/gpu":"10"}}},
{"kind":"Pod","metadata":{"name":"low","namespace":"default","uid":"u-low","labels":{"app":"db"},"annotations":{"hami.io/vgpu-node":"gpu-1","hami.io/vgpu-devices-allocated":"GPU-a,NVIDIA,10000,0:;"}},"spec":{"nodeName":"gpu-1","priority":10,"containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"10000"}}}]},"status":{"phase":"Running"}},
{"kind":"Pod","metadata":{"name":"high","namespace":"default","uid":"u-high"},"spec":{"priority":1000,"containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"10000"}}}]}},
{"kind":"Pod","metadata":{"name":"polite","namespace":"default","uid":"u-polite"},"spec":{"priority":1000,"preemptionPolicy":"Never","containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"10000"}}}]}},
{"kind":"PodDisruptionBudget","metadata":{"name":"db","namespace":"default"},"spec":{"selector":{"matchLabels":{"app":"db"}}},"status":{"disruptionsAllowed":0}}
]})");
  auto r = Exec({"simulate", "--cluster", cluster, "--now", "2026-12-05T13:00:10Z"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto doc = json::parse(r.out);
  EXPECT_EQ(json::serialize(ResultFor(doc, "default/high").at("preemption")),
            R"({"node":"gpu-1","victims":["default/low"],"pdbViolations":1})");
  EXPECT_EQ(json::serialize(ResultFor(doc, "default/polite").at("preemption")),
            R"({"node":null,"reason":"its preemptionPolicy is Never"})");
  auto table = Exec({"simulate", "--cluster", cluster, "--now", "2026-12-05T13:00:10Z", "-o", "table"});
  EXPECT_NE(table.out.find("would preempt on gpu-1: default/low (1 PodDisruptionBudget violations)"),
            std::string::npos)
      << table.out;
}

// All-fitting mode: each pod goes to the node /prioritize scores best, and its result shows the scores.
TEST(Simulate, AllFittingModePrintsTheNodeScores) {
  const std::string node = R"({"kind":"Node","metadata":{"name":"NAME","annotations":{"hami.io/node-nvidia-register":"[{\"id\":\"GPU-NAME\",\"index\":0,\"count\":10,\"devmem\":16000,\"devcore\":100,\"type\":\"NVIDIA-T4\",\"numa\":0,\"mode\":\"hami-core\",\"health\":true}]","hami.io/node-handshake":"Reported 2026-12-05T13:00:00Z"}},"status":{"capacity":{"nvidia.com/gpu":"10"},"allocatable":{"nvidia.com/gpu":"10"}}})";
  const auto named = [&](const std::string& name) {
    std::string out = node;
    for (std::size_t at; (at = out.find("NAME")) != std::string::npos;) out.replace(at, 4, name);
    return out;
  };
  const std::string cluster = WriteTemp("soft.json", R"({"kind":"List","items":[)" + named("gpu-1") + "," +
                                                         named("gpu-2") + R"(,
{"kind":"Pod","metadata":{"name":"half","namespace":"default","uid":"u-half","annotations":{"hami.io/vgpu-node":"gpu-1","hami.io/vgpu-devices-allocated":"GPU-gpu-1,NVIDIA,8000,0:;"}},"spec":{"nodeName":"gpu-1","containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"8000"}}}]},"status":{"phase":"Running"}},
{"kind":"Pod","metadata":{"name":"new","namespace":"default","uid":"u-new"},"spec":{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"4000"}}}]}}
]})");
  auto binpack = Exec({"simulate", "--cluster", cluster, "--now", "2026-12-05T13:00:10Z", "--filter-mode",
                       "all-fitting"});
  ASSERT_EQ(binpack.code, 0) << binpack.err;
  auto packed = ResultFor(json::parse(binpack.out), "default/new");
  EXPECT_EQ(packed.at("outcome").as_string(), "scheduled");
  EXPECT_EQ(packed.at("node").as_string(), "gpu-1");
  EXPECT_EQ(json::serialize(packed.at("scores")), R"({"gpu-1":10,"gpu-2":1})");
  EXPECT_EQ(packed.at("annotations").at("hami.io/vgpu-node").as_string(), "gpu-1");
  auto spread = Exec({"simulate", "--cluster", cluster, "--now", "2026-12-05T13:00:10Z", "--filter-mode",
                      "all-fitting", "--node-scheduler-policy", "spread", "-o", "table"});
  ASSERT_EQ(spread.code, 0) << spread.err;
  EXPECT_NE(spread.out.find("scores gpu-1=1 gpu-2=10"), std::string::npos) << spread.out;
  // One-node mode answers as before, without scores.
  auto one = Exec({"simulate", "--cluster", cluster, "--now", "2026-12-05T13:00:10Z"});
  EXPECT_FALSE(ResultFor(json::parse(one.out), "default/new").contains("scores"));
}

TEST(Commands, VendorConfigChangesKeys) {
  const std::string cfg = WriteTemp("vendor.yaml", R"(
hygon:
  annotations: {toAllocate: hami.io/dcu-devices-to-allocate}
)");
  auto r = Exec({"simulate", "--cluster", kExamples + "cluster.yaml", "--pods", kExamples + "pods.yaml",
                 "--config", cfg, "--now", "2026-11-29T12:00:00Z"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("hami.io/dcu-devices-to-allocate"), std::string::npos);
  EXPECT_EQ(r.out.find("hami.io/hcu-devices-to-allocate"), std::string::npos);
}

// A chip whose commonWord spells another vendor's keys would read that vendor's pods: refused at start-up.
TEST(Commands, TwoBackendsNeverShareAnAnnotation) {
  const std::string cfg =
      WriteTemp("clash.yaml", "iluvatars:\n- {commonWord: xpu, resourceCountName: a.io/x}\n");
  std::ostringstream out, err;
  EXPECT_EQ(
      RunProgram("hami-scheduler", {"config", "--device-config-file", cfg, "--enable-iluvatar"}, out, err),
      kExitUsage)
      << err.str();
  EXPECT_NE(err.str().find("annotation hami.io/xpu-devices-allocated is used by vendor key 'XPU' (section "
                           "kunlun) and by 'xpu'"),
            std::string::npos)
      << err.str();
}

}  // namespace
}  // namespace hami::cmd

namespace hami {
namespace {

// kube-scheduler sends a pod to the extender only when it asks for one of the managedResources, and counts
// every resource it does not know as Insufficient: every resource a backend reads must be listed (with
// ignoredByScheduler), or a pod asking for it stays Pending.
// Both copies: deploy/kube-scheduler-config.yaml and the one in deploy/hami-scheduler.yaml's ConfigMap.
std::vector<YAML::Node> SchedulerConfigs() {
  std::vector<YAML::Node> out{
      YAML::LoadFile(std::string(HAMI_SOURCE_DIR) + "/deploy/kube-scheduler-config.yaml")};
  for (const auto& doc :
       YAML::LoadAllFromFile(std::string(HAMI_SOURCE_DIR) + "/deploy/hami-scheduler.yaml")) {
    if (!doc["data"]) continue;
    for (const auto& kv : doc["data"]) {
      const YAML::Node inner = YAML::Load(kv.second.as<std::string>());
      if (inner.IsMap() && inner["kind"] && inner["kind"].as<std::string>() == "KubeSchedulerConfiguration")
        out.push_back(inner);
    }
  }
  return out;
}

// Structural equality of two YAML documents (maps compared by key, whatever their order).
bool SameYaml(const YAML::Node& a, const YAML::Node& b) {
  if (a.Type() != b.Type()) return false;
  switch (a.Type()) {
    case YAML::NodeType::Scalar:
      return a.Scalar() == b.Scalar();
    case YAML::NodeType::Sequence:
      if (a.size() != b.size()) return false;
      for (std::size_t i = 0; i < a.size(); ++i) {
        if (!SameYaml(a[i], b[i])) return false;
      }
      return true;
    case YAML::NodeType::Map:
      if (a.size() != b.size()) return false;
      for (const auto& kv : a) {
        const YAML::Node other = b[kv.first.as<std::string>()];
        if (!other.IsDefined() || !SameYaml(kv.second, other)) return false;
      }
      return true;
    default:
      return true;
  }
}

// deploy/kube-scheduler-config.yaml and deploy/device-config.yaml are the one source of what the bundle in
// deploy/hami-scheduler.yaml carries: its ConfigMaps hold them unchanged.
TEST(DeployConfig, TheBundlesConfigMapsAreTheStandaloneFiles) {
  const std::string deploy = std::string(HAMI_SOURCE_DIR) + "/deploy/";
  const YAML::Node scheduler = YAML::LoadFile(deploy + "kube-scheduler-config.yaml");
  const YAML::Node devices = YAML::LoadFile(deploy + "device-config.yaml");
  int compared = 0;
  for (const auto& doc : YAML::LoadAllFromFile(deploy + "hami-scheduler.yaml")) {
    if (!doc["kind"] || doc["kind"].as<std::string>() != "ConfigMap") continue;
    for (const auto& kv : doc["data"]) {
      const std::string key = kv.first.as<std::string>();
      const YAML::Node inner = YAML::Load(kv.second.as<std::string>());
      if (key == "device-config.yaml") {
        EXPECT_TRUE(SameYaml(inner, devices)) << "hami-scheduler.yaml's " << key << " differs from the file's";
        ++compared;
      } else if (inner.IsMap() && inner["kind"] &&
                 inner["kind"].as<std::string>() == "KubeSchedulerConfiguration") {
        EXPECT_TRUE(SameYaml(inner, scheduler)) << "hami-scheduler.yaml's " << key << " differs from the file's";
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 2);
}

TEST(DeployConfig, TheKubeSchedulerConfigurationListsEveryResourceOurBackendsRead) {
  // Every vendor, also those a flag switches on (--enable-ascend): the static manifests serve them all.
  config::Config every;
  for (const auto& section : cmd::Vendors().Sections()) every.vendors[section].enabled = true;
  auto backends = cmd::BuildBackends(every);
  ASSERT_TRUE(backends) << backends.error().message;
  const auto configs = SchedulerConfigs();
  ASSERT_EQ(configs.size(), 2u);
  for (const YAML::Node& cfg : configs) {
    std::set<std::string> managed;
    for (const auto& r : cfg["extenders"][0]["managedResources"]) {
      EXPECT_TRUE(r["ignoredByScheduler"].as<bool>()) << r["name"].as<std::string>();
      managed.insert(r["name"].as<std::string>());
    }
    std::set<std::string> read;
    for (const auto& b : *backends) {
      const ResourceNames& r = b->Spec().resources;
      for (const std::string& name : {r.count, r.memory, r.memory_percentage, r.cores, r.priority}) {
        if (name.empty()) continue;
        read.insert(name);
        EXPECT_TRUE(managed.contains(name)) << name << " (" << b->Vendor() << ") is not managed";
      }
    }
    // And nothing else: a resource no backend reads would send pods to the extender for nothing.
    for (const std::string& name : managed) EXPECT_TRUE(read.contains(name)) << name << " is read by no backend";
  }
}

}  // namespace
}  // namespace hami
