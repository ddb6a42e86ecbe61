#include "config/flags.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "tests/support/builders.h"

namespace hami::config {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/flags_test_" + name;
  std::ofstream(path) << text;
  return path;
}

Result<LoadedConfig> Load(std::vector<std::string> args) {
  args.insert(args.begin(), "hami-scheduler");
  return LoadConfig(args, testing::BuiltinVendors());
}

// The problem lines of a failed load ("N problem(s) in configuration:\n  - a\n  - b").
std::vector<std::string> ProblemLines(const Result<LoadedConfig>& r) {
  std::vector<std::string> out;
  if (r) return out;
  const std::string& msg = r.error().message;
  std::size_t pos = 0;
  while ((pos = msg.find("\n  - ", pos)) != std::string::npos) {
    pos += 5;
    const std::size_t end = msg.find("\n  - ", pos);
    out.push_back(msg.substr(pos, end == std::string::npos ? std::string::npos : end - pos));
  }
  return out;
}

TEST(Flags, NoFlagsGiveTheDefaults) {
  auto r = Load({});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_FALSE(r->help);
  EXPECT_FALSE(r->print_config);
  EXPECT_EQ(r->config.serving.http_bind, "127.0.0.1:8080");
  EXPECT_EQ(r->config.extender.filter.policies.gpu_policy, "spread");
  EXPECT_EQ(r->config.extender.node_lock_timeout, seconds(300));
  EXPECT_TRUE(r->config.sources.empty());
  EXPECT_TRUE(r->config.warnings.empty());
}

// The kernel takes arguments of up to 128 KiB: one that long is read like any other, never a crash.
TEST(Flags, AnArgumentOfTheKernelsLargestSizeIsRead) {
  const std::string path(128 * 1024 - 32, 'a');
  auto loaded = Load({"--kubeconfig=" + path});
  ASSERT_TRUE(loaded) << loaded.error().message;
  EXPECT_EQ(loaded->config.kube.kubeconfig, path);
  EXPECT_FALSE(Load({"--" + path + "=1"}));
}

// The selector becomes the node watch's labelSelector query: a key or value that is no label would select
// other nodes (a value "a,gpu!" reads as two requirements).
TEST(Flags, TheNodeLabelSelectorTakesLabelsOnly) {
  auto ok = Load({"--node-label-selector=gpu=on,example.com/zone=eu-1,empty="});
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(ok->config.extender.node_label_selector.at("example.com/zone"), "eu-1");
  EXPECT_THAT(ProblemLines(Load({"--node-label-selector=gpu=on!,ZONE/x=a"})),
              ElementsAre(HasSubstr("\"ZONE/x\"=\"a\" is not a label"),
                          HasSubstr("\"gpu\"=\"on!\" is not a label (want a label key")));
}

TEST(Flags, TheSchedulerNameIsOneTheApiServerTakes) {
  EXPECT_TRUE(Load({"--scheduler-name=hami-scheduler.gpu"}));
  EXPECT_TRUE(Load({"--scheduler-name="}));  // pods keep the scheduler they name
  EXPECT_THAT(ProblemLines(Load({"--scheduler-name=Hami Scheduler"})),
              ElementsAre("--scheduler-name (scheduler.schedulerName): \"Hami Scheduler\" is not a scheduler "
                          "name (a DNS subdomain, as spec.schedulerName)"));
}

TEST(Flags, HamiChartCommandLine) {
  const std::string device_config =
      WriteTemp("chart-device-config.yaml",
                "nvidia:\n  resourceCountName: nvidia.com/gpu\n  deviceSplitCount: 10\n"
                "iluvatar:\n  gpu: {}\n");
  auto r = Load({"--http_bind=0.0.0.0:443", "--cert_file=/tls/tls.crt", "--key_file=/tls/tls.key",
                 "--scheduler-name=hami-scheduler", "--metrics-bind-address=:9395",
                 "--node-scheduler-policy=binpack", "--gpu-scheduler-policy=spread",
                 "--force-overwrite-default-scheduler=true", "--device-config-file=" + device_config,
                 "--leader-elect=true", "--leader-elect-resource-name=hami-scheduler",
                 "--leader-elect-resource-namespace=kube-system", "--enable-ascend=false",
                 "--legacy-metrics=true", "--debug", "-v=4"});
  ASSERT_TRUE(r) << r.error().message;
  const Config& c = r->config;
  EXPECT_EQ(c.serving.http_bind, "0.0.0.0:443");
  EXPECT_EQ(c.serving.cert_file, "/tls/tls.crt");
  EXPECT_EQ(c.serving.key_file, "/tls/tls.key");
  EXPECT_EQ(c.extender.admission.scheduler_name, "hami-scheduler");
  EXPECT_EQ(c.serving.metrics_bind_address, ":9395");
  EXPECT_EQ(c.extender.filter.policies.node_policy, "binpack");
  EXPECT_EQ(c.extender.filter.policies.gpu_policy, "spread");
  EXPECT_TRUE(c.extender.admission.force_overwrite_default_scheduler);
  EXPECT_TRUE(c.extender.leadership.enabled);
  EXPECT_EQ(c.extender.leadership.name, "hami-scheduler");
  EXPECT_EQ(c.extender.leadership.ns, "kube-system");
  EXPECT_TRUE(c.extender.legacy_metrics);
  EXPECT_EQ(c.log_level, "trace");
  EXPECT_EQ(c.vendors.at("nvidia").String("resourceCountName"), "nvidia.com/gpu");
  EXPECT_THAT(c.sources, ElementsAre(device_config));
  EXPECT_THAT(c.warnings,
              ElementsAre(device_config + ":4: section 'iluvatar' is a HAMi vendor this scheduler does "
                                          "not implement; ignored"));
}

TEST(Flags, GoSpellings) {
  auto r = Load({"-http_bind=0.0.0.0:443", "-leader-elect", "-leader-elect-resource-name=hami-scheduler",
                 "-leader-elect-resource-namespace=kube-system", "-v=4",
                 "--node-label-selector=gpu=on,zone=a", "-kube-burst", "30", "--kube-qps", "7.5",
                 "--profiling=false", "-force-overwrite-default-scheduler=F"});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->config.serving.http_bind, "0.0.0.0:443");
  EXPECT_TRUE(r->config.extender.leadership.enabled);
  EXPECT_EQ(r->config.log_level, "trace");
  EXPECT_EQ(r->config.extender.node_label_selector,
            (std::map<std::string, std::string>{{"gpu", "on"}, {"zone", "a"}}));
  EXPECT_EQ(r->config.kube.burst, 30);
  EXPECT_DOUBLE_EQ(r->config.kube.qps, 7.5);
  EXPECT_FALSE(r->config.serving.profiling);
  EXPECT_FALSE(r->config.extender.admission.force_overwrite_default_scheduler);
}

TEST(Flags, RequeueQps) {
  auto unset = Load({});
  ASSERT_TRUE(unset);
  EXPECT_FALSE(unset->config.extender.requeue_qps)
      << "unset: half of --kube-qps, decided where the clients are";
  auto off = Load({"--requeue-qps=0"});
  ASSERT_TRUE(off) << off.error().message;
  EXPECT_EQ(off->config.extender.requeue_qps, 0.0);
  auto set = Load({"--requeue-qps", "12.5"});
  ASSERT_TRUE(set) << set.error().message;
  EXPECT_EQ(set->config.extender.requeue_qps, 12.5);
  EXPECT_THAT(ProblemLines(Load({"--requeue-qps=-1"})),
              ElementsAre("--requeue-qps: '-1' is not a number >= 0"));
  EXPECT_THAT(ProblemLines(Load({"--requeue-qps=fast"})),
              ElementsAre("--requeue-qps: 'fast' is not a number >= 0"));
}

TEST(Flags, KlogVerbosityInEverySpelling) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"-v=0"}, "info"},      {{"-v=1"}, "info"}, {{"--v=2"}, "debug"}, {{"-v", "3"}, "debug"},
      {{"--v", "4"}, "trace"}, {{"-v5"}, "trace"}, {{"-v=10"}, "trace"},
  };
  for (const auto& [args, level] : cases) {
    auto r = Load(args);
    ASSERT_TRUE(r) << args[0] << ": " << r.error().message;
    EXPECT_EQ(r->config.log_level, level) << args[0];
  }
  // --log-level is this scheduler's own flag and wins over -v whatever the order.
  auto r = Load({"--log-level=warn", "-v=4"});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->config.log_level, "warn");
}

TEST(Flags, BooleansTakeTheirValueAfterEquals) {
  for (const std::string v : {"true", "TRUE", "True", "t", "1"}) {
    auto r = Load({"--legacy-metrics=" + v});
    ASSERT_TRUE(r) << v;
    EXPECT_TRUE(r->config.extender.legacy_metrics) << v;
  }
  auto off = Load({"--force-overwrite-default-scheduler=false"});
  ASSERT_TRUE(off);
  EXPECT_FALSE(off->config.extender.admission.force_overwrite_default_scheduler);
  // Go's flag package would take `false` as a positional argument here and quietly enable the flag.
  auto spaced = Load({"--leader-elect", "false"});
  EXPECT_THAT(ProblemLines(spaced),
              ElementsAre("--leader-elect: a boolean flag takes its value after '=' (--leader-elect=false)"));
}

TEST(Flags, DurationsAndOurFlags) {
  auto r = Load({"--node-lock-timeout=2m", "--node-lock-retry-timeout=500ms", "--kube-timeout=30",
                 "--health-check-interval=10s", "--handshake-timeout=2m30s", "--kubeconfig=/tmp/kc",
                 "--log-level=error", "--print-config", "--reservation-timeout=90s"});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->config.extender.bind.reservation_timeout, seconds(90));
  auto zero = Load({"--reservation-timeout=0s"});
  ASSERT_FALSE(zero);
  EXPECT_THAT(zero.error().message, HasSubstr("--reservation-timeout"));
  EXPECT_EQ(r->config.extender.node_lock_timeout, seconds(120));
  EXPECT_EQ(r->config.extender.bind.node_lock_retry_timeout, milliseconds(500));
  EXPECT_EQ(r->config.kube.timeout, seconds(30));
  EXPECT_EQ(r->config.extender.health_interval, seconds(10));
  EXPECT_EQ(r->config.extender.handshake_timeout, seconds(150));
  EXPECT_EQ(r->config.kube.kubeconfig, "/tmp/kc");
  EXPECT_EQ(r->config.log_level, "error");
  EXPECT_TRUE(r->print_config);
  EXPECT_FALSE(r->help);
}

TEST(Flags, FlagsOverrideTheConfigFileWhichOverridesDefaults) {
  const std::string config = WriteTemp("override-config.yaml",
                                       "scheduler:\n  kubeBurst: 20\n  httpBind: 0.0.0.0:8443\n"
                                       "  nodeLabelSelector: {pool: gpu}\n"
                                       "nvidia:\n  resourceCountName: a/gpu\n  memoryFactor: 2\n");
  const std::string device = WriteTemp("override-device.yaml", "nvidia:\n  memoryFactor: 4\n");
  auto r = Load({"--kube-burst=30", "--device-config-file", device, "--config=" + config});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->config.kube.burst, 30);                     // flag over file
  EXPECT_EQ(r->config.serving.http_bind, "0.0.0.0:8443");  // file over default
  EXPECT_EQ(r->config.extender.node_label_selector.at("pool"), "gpu");
  EXPECT_EQ(r->config.vendors.at("nvidia").String("resourceCountName"), "a/gpu");
  EXPECT_EQ(r->config.vendors.at("nvidia").Int("memoryFactor"), 4);  // --device-config-file after --config
  EXPECT_THAT(r->config.sources, ElementsAre(config, device));

  // A flag replaces the file's selector as a whole.
  auto s = Load({"--config=" + config, "--node-label-selector=zone=b"});
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->config.extender.node_label_selector, (std::map<std::string, std::string>{{"zone", "b"}}));
}

TEST(Flags, ManyBadFlagsAreReportedTogether) {
  auto r = Load({"--kube-burst=ten", "--kube-qps=abc", "--unknown-flag=1", "--gpu-scheduler-policy=fastest",
                 "--leader-elect=maybe", "--node-lock-timeout=5parsecs", "--node-label-selector=gpu",
                 "-v=high", "--http-bind=0.0.0.0:80", "stray"});
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().message, StartsWith("10 problem(s) in configuration:\n  - "));
  const auto lines = ProblemLines(r);
  EXPECT_THAT(lines, Contains("--kube-burst: 'ten' is not an integer (want an integer >= 1)"));
  EXPECT_THAT(lines, Contains("--kube-qps: 'abc' is not a number (want a number > 0)"));
  EXPECT_THAT(lines, Contains("unknown flag '--unknown-flag'"));
  EXPECT_THAT(lines, Contains(HasSubstr("--gpu-scheduler-policy: 'fastest' has unknown policy 'fastest'")));
  EXPECT_THAT(lines, Contains("--leader-elect: 'maybe' is not a boolean (want true or false)"));
  EXPECT_THAT(
      lines,
      Contains(HasSubstr("--node-lock-timeout: '5parsecs' is not a duration: unknown unit 'parsecs'")));
  EXPECT_THAT(lines, Contains("--node-label-selector: 'gpu' is not a key=value pair (want k=v,k2=v2)"));
  EXPECT_THAT(lines, Contains("-v: 'high' is not an integer (want a verbosity >= 0)"));
  EXPECT_THAT(lines, Contains("unknown flag '--http-bind'; did you mean --http_bind?"));
  EXPECT_THAT(lines, Contains("unexpected argument 'stray' (only flags are accepted here)"));
}

TEST(Flags, MissingValuesAndUnknownFlagValues) {
  auto r = Load({"--unknown", "value", "--kube-burst"});
  EXPECT_THAT(ProblemLines(r), ElementsAre("unknown flag '--unknown'", "--kube-burst: needs a value"));
  auto typo = Load({"--kube-brust=3", "--leader-elect-namespace=x"});
  EXPECT_THAT(ProblemLines(typo), ElementsAre("unknown flag '--kube-brust'; did you mean --kube-burst?",
                                              "unknown flag '--leader-elect-namespace'"));
  auto v = Load({"-v"});
  EXPECT_THAT(ProblemLines(v), ElementsAre("-v: needs a value (e.g. -v=4)"));
}

TEST(Flags, MissingConfigFileIsAProblemNamingThePath) {
  const std::string path = ::testing::TempDir() + "/flags_test_no_such_config.yaml";
  auto r = Load({"--config=" + path, "--kube-burst=0"});
  ASSERT_FALSE(r);
  const auto lines = ProblemLines(r);
  EXPECT_THAT(lines, Contains(AllOf(StartsWith(path + ": cannot read the configuration file"))));
  EXPECT_THAT(lines, Contains("--kube-burst: 0 is out of range (want an integer >= 1)"));

  auto empty = Load({"--device-config-file="});
  EXPECT_THAT(ProblemLines(empty), ElementsAre("--device-config-file: needs a file path"));
}

TEST(Flags, FileProblemsAndFlagProblemsTogether) {
  const std::string config = WriteTemp("bad-config.yaml", "scheduler:\n  kubeBurst: many\n  colour: blue\n");
  auto r = Load({"--config", config, "--kube-qps=-1"});
  EXPECT_THAT(ProblemLines(r),
              ElementsAre(config + ":2: scheduler.kubeBurst: 'many' is not an integer (want an integer >= 1)",
                          HasSubstr(config + ":3: unknown key 'scheduler.colour'"),
                          "--kube-qps: -1 is not a number > 0"));
}

TEST(Flags, CrossSettingRulesAreCheckedOnTheFinalConfig) {
  auto r = Load({"--cert_file=/tls/tls.crt"});
  EXPECT_THAT(ProblemLines(r), ElementsAre(HasSubstr("TLS needs both a certificate and a key")));
  const std::string config = WriteTemp("tls-key.yaml", "scheduler:\n  keyFile: /tls/tls.key\n");
  auto ok = Load({"--config=" + config, "--cert_file=/tls/tls.crt"});
  EXPECT_TRUE(ok) << ok.error().message;
}

TEST(Flags, ClientCaFileAndMaxConnections) {
  EXPECT_EQ(Load({})->config.serving.max_connections, 1024);
  auto r = Load({"--cert_file=/tls/tls.crt", "--key_file=/tls/tls.key", "--client-ca-file=/tls/ca.crt",
                 "--max-connections=8"});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->config.serving.client_ca_file, "/tls/ca.crt");
  EXPECT_EQ(r->config.serving.max_connections, 8);
  const std::string config =
      WriteTemp("mtls.yaml", "scheduler:\n  clientCaFile: /etc/ca.crt\n  maxConnections: 0\n");
  auto no_tls = Load({"--config=" + config});
  EXPECT_THAT(ProblemLines(no_tls),
              ElementsAre("--client-ca-file (scheduler.clientCaFile) needs TLS: client certificates are "
                          "verified only over HTTPS; set --cert_file and --key_file (scheduler.certFile, "
                          "scheduler.keyFile) too"));
  auto yaml = Load({"--config=" + config, "--cert_file=/c", "--key_file=/k"});
  ASSERT_TRUE(yaml) << yaml.error().message;
  EXPECT_EQ(yaml->config.serving.client_ca_file, "/etc/ca.crt");
  EXPECT_EQ(yaml->config.serving.max_connections, 0);
  EXPECT_THAT(
      ProblemLines(Load({"--max-connections=-1"})),
      ElementsAre("--max-connections: -1 is out of range (want a number of connections from 0 (no cap) "
                  "to 1048576)"));
}

TEST(Flags, BusyNodeThreshold) {
  EXPECT_EQ(Load({})->config.extender.filter.policies.busy_node_threshold, 2);
  EXPECT_EQ(Load({"--busy-node-threshold=0"})->config.extender.filter.policies.busy_node_threshold, 0);
  const std::string config = WriteTemp("busy.yaml", "scheduler:\n  busyNodeThreshold: 5\n");
  EXPECT_EQ(Load({"--config=" + config})->config.extender.filter.policies.busy_node_threshold, 5);
  EXPECT_THAT(ProblemLines(Load({"--busy-node-threshold=many"})),
              ElementsAre(HasSubstr("--busy-node-threshold: 'many'")));
  EXPECT_THAT(ProblemLines(Load({"--busy-node-threshold=-1"})),
              ElementsAre("--busy-node-threshold: -1 is out of range (want a number of allocations from 0 "
                          "(off) to 1000000)"));
}

TEST(Flags, FilterMode) {
  const auto mode = [](const Result<LoadedConfig>& loaded) {
    return loaded->config.extender.filter.policies.filter_mode;
  };
  EXPECT_EQ(mode(Load({})), FilterMode::kOneNode);
  EXPECT_EQ(mode(Load({"--filter-mode=all-fitting"})), FilterMode::kAllFitting);
  EXPECT_EQ(mode(Load({"--filter-mode", "one-node"})), FilterMode::kOneNode);
  const std::string config = WriteTemp("mode.yaml", "scheduler:\n  filterMode: all-fitting\n");
  EXPECT_EQ(mode(Load({"--config=" + config})), FilterMode::kAllFitting);
  EXPECT_EQ(mode(Load({"--config=" + config, "--filter-mode=one-node"})), FilterMode::kOneNode);  // flags win
  EXPECT_THAT(ProblemLines(Load({"--filter-mode=best"})),
              ElementsAre("--filter-mode 'best': expected one-node or all-fitting"));
  const std::string bad = WriteTemp("bad-mode.yaml", "scheduler:\n  filterMode: [all-fitting]\n");
  EXPECT_THAT(ProblemLines(Load({"--config=" + bad})), ElementsAre(HasSubstr("filterMode")));
  const std::string wrong = WriteTemp("wrong-mode.yaml", "scheduler:\n  filterMode: allfitting\n");
  EXPECT_THAT(ProblemLines(Load({"--config=" + wrong})),
              ElementsAre(HasSubstr("'allfitting': expected one-node or all-fitting")));
}

TEST(Flags, RefusalAnnotation) {
  const auto on = [](const Result<LoadedConfig>& loaded) {
    return loaded->config.extender.filter.refusal_annotation;
  };
  EXPECT_FALSE(on(Load({})));
  EXPECT_TRUE(on(Load({"--refusal-annotation"})));
  EXPECT_TRUE(on(Load({"--refusal-annotation=true"})));
  const std::string config = WriteTemp("refusal.yaml", "scheduler:\n  refusalAnnotation: true\n");
  EXPECT_TRUE(on(Load({"--config=" + config})));
  EXPECT_FALSE(on(Load({"--config=" + config, "--refusal-annotation=false"})));  // flags win
  EXPECT_THAT(ProblemLines(Load({"--refusal-annotation=maybe"})),
              ElementsAre(HasSubstr("--refusal-annotation")));
  const std::string bad = WriteTemp("bad-refusal.yaml", "scheduler:\n  refusalAnnotation: [true]\n");
  EXPECT_THAT(ProblemLines(Load({"--config=" + bad})), ElementsAre(HasSubstr("refusalAnnotation")));
}

TEST(Flags, CapacityShapes) {
  const auto names = [](const Result<LoadedConfig>& loaded) {
    std::vector<std::string> out;
    if (!loaded) {
      ADD_FAILURE() << loaded.error().message;
      return out;
    }
    for (const auto& s : loaded->config.extender.capacity_shapes) out.push_back(FormatCapacityShape(s));
    return out;
  };
  EXPECT_THAT(names(Load({})), IsEmpty());
  EXPECT_THAT(names(Load({"--capacity-shape=a10-quarter=NVIDIA:1x6000:25, big=NVIDIA:2x40000"})),
              ElementsAre("a10-quarter=NVIDIA:1x6000:25", "big=NVIDIA:2x40000"));
  EXPECT_THAT(names(Load({"--capacity-shape", "one=NVIDIA:1x100"})), ElementsAre("one=NVIDIA:1x100"));
  const std::string config = WriteTemp(
      "shapes.yaml", "scheduler:\n  capacityShapes:\n    - half=NVIDIA:1x8000:50\n    - two=NVIDIA:2x100\n");
  EXPECT_THAT(names(Load({"--config=" + config})), ElementsAre("half=NVIDIA:1x8000:50", "two=NVIDIA:2x100"));
  EXPECT_THAT(names(Load({"--config=" + config, "--capacity-shape=one=NVIDIA:1x100"})),
              ElementsAre("one=NVIDIA:1x100"));  // flags win
  EXPECT_THAT(names(Load({"--config=" + config, "--capacity-shape="})), IsEmpty());

  EXPECT_THAT(ProblemLines(Load({"--capacity-shape=ok=NVIDIA:1x100,bad=NVIDIA:0x100"})),
              ElementsAre("--capacity-shape: capacity shape \"bad=NVIDIA:0x100\": count \"0\" is not a "
                          "number of cards, 1 to 64"));
  EXPECT_THAT(ProblemLines(Load({"--capacity-shape=a=NVIDIA:1x100,a=NVIDIA:1x200"})),
              ElementsAre("--capacity-shape (scheduler.capacityShapes): \"a=NVIDIA:1x100\" and "
                          "\"a=NVIDIA:1x200\" share a name"));
  std::string many;
  for (int i = 0; i < 17; ++i) many += fmt::format("{}s{}=NVIDIA:1x100", i == 0 ? "" : ",", i);
  EXPECT_THAT(ProblemLines(Load({"--capacity-shape=" + many})),
              ElementsAre(HasSubstr("17 shapes given; at most 16")));
  const std::string bad = WriteTemp("bad-shapes.yaml",
                                    "scheduler:\n  capacityShapes:\n    - fine=NVIDIA:1x100\n    - Wrong\n");
  EXPECT_THAT(ProblemLines(Load({"--config=" + bad})),
              ElementsAre(HasSubstr("bad-shapes.yaml:4: scheduler.capacityShapes[1]: capacity shape "
                                    "\"Wrong\": expected NAME=VENDOR:COUNTxMEMORY[:CORES]")));
  const std::string scalar = WriteTemp("scalar-shapes.yaml", "scheduler:\n  capacityShapes: a=NVIDIA:1x1\n");
  EXPECT_THAT(ProblemLines(Load({"--config=" + scalar})),
              ElementsAre(HasSubstr("scheduler.capacityShapes: expected a list of strings")));
}

TEST(Flags, AWebhookListenerOfItsOwnNeedsItsCertificate) {
  auto ok = Load(
      {"--webhook-bind=0.0.0.0:8443", "--webhook-cert-file=/tls/tls.crt", "--webhook-key-file=/tls/tls.key"});
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(ok->config.serving.webhook_bind, "0.0.0.0:8443");
  EXPECT_THAT(ProblemLines(Load({"--webhook-bind=0.0.0.0:8443"})),
              ElementsAre(HasSubstr("--webhook-bind (scheduler.webhookBind) needs --webhook-cert-file and "
                                    "--webhook-key-file")));
  EXPECT_THAT(ProblemLines(Load({"--webhook-cert-file=/tls/tls.crt"})),
              ElementsAre(HasSubstr("serve --webhook-bind, which is not set")));
  EXPECT_THAT(ProblemLines(Load({"--http_bind=127.0.0.1:9443", "--webhook-bind=127.0.0.1:9443",
                                 "--webhook-cert-file=c", "--webhook-key-file=k"})),
              ElementsAre(HasSubstr("--webhook-bind: must differ from --http_bind")));
}

TEST(Flags, LeaderElectionNamesTheLeaseWithValidNames) {
  EXPECT_THAT(ProblemLines(Load({"--leader-elect=true"})),
              ElementsAre(HasSubstr("--leader-elect needs --leader-elect-resource-name and")));
  EXPECT_THAT(
      ProblemLines(Load({"--leader-elect", "--leader-elect-resource-name=x/../../y",
                         "--leader-elect-resource-namespace=Kube System"})),
      ElementsAre(HasSubstr("--leader-elect-resource-namespace: \"Kube System\" is not a namespace name"),
                  HasSubstr("--leader-elect-resource-name: \"x/../../y\" is not a Lease name")));
  EXPECT_TRUE(Load({"--leader-elect", "--leader-elect-resource-name=hami-scheduler",
                    "--leader-elect-resource-namespace=kube-system"}));
}

TEST(Flags, TheDevicePluginsServiceAccountIsNamedWholeWithValidNames) {
  auto both =
      Load({"--device-plugin-namespace=hami-system", "--device-plugin-service-account=hami-device-plugin"});
  ASSERT_TRUE(both);
  EXPECT_EQ(both->config.extender.refit.device_plugin_namespace, "hami-system");
  EXPECT_EQ(both->config.extender.refit.device_plugin_service_account, "hami-device-plugin");
  EXPECT_THAT(
      ProblemLines(Load({"--device-plugin-namespace=hami-system"})),
      ElementsAre(HasSubstr("--device-plugin-namespace and --device-plugin-service-account go together")));
  EXPECT_THAT(
      ProblemLines(Load({"--device-plugin-namespace=Hami System", "--device-plugin-service-account=a:b"})),
      ElementsAre(HasSubstr("--device-plugin-namespace: \"Hami System\" is not a namespace name"),
                  HasSubstr("--device-plugin-service-account: \"a:b\" is not a service account name")));
}

// Acquire mode takes kube-scheduler's timing flags, checked by client-go's rules.
TEST(Flags, AcquiringTheLeaseTakesKubeSchedulersTimingFlags) {
  const std::vector<std::string> lease{"--leader-elect", "--leader-elect-resource-name=hami-scheduler",
                                       "--leader-elect-resource-namespace=kube-system"};
  auto with = [&lease](std::vector<std::string> more) {
    more.insert(more.begin(), lease.begin(), lease.end());
    return Load(more);
  };
  auto defaults = with({"--leader-elect-mode=acquire"});
  ASSERT_TRUE(defaults) << defaults.error().message;
  EXPECT_EQ(defaults->config.extender.leadership.mode, extender::LeaderElectMode::kAcquire);
  EXPECT_EQ(defaults->config.extender.leadership.lease_duration, std::chrono::seconds(15));
  EXPECT_EQ(defaults->config.extender.leadership.renew_deadline, std::chrono::seconds(10));
  EXPECT_EQ(defaults->config.extender.leadership.retry_period, std::chrono::seconds(2));
  auto set = with({"--leader-elect-mode=acquire", "--leader-elect-identity=pair-a.zone_1",
                   "--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s",
                   "--leader-elect-retry-period=500ms"});
  ASSERT_TRUE(set) << set.error().message;
  EXPECT_EQ(set->config.extender.leadership.identity, "pair-a.zone_1");
  EXPECT_EQ(set->config.extender.leadership.retry_period, std::chrono::milliseconds(500));

  EXPECT_THAT(
      ProblemLines(with({"--leader-elect-mode=steal"})),
      ElementsAre("--leader-elect-mode (scheduler.leaderElectMode): \"steal\" is not follow or acquire"));
  EXPECT_THAT(ProblemLines(with({"--leader-elect-identity=../a:b"})),
              ElementsAre(HasSubstr("--leader-elect-identity (scheduler.leaderElectIdentity): \"../a:b\" is "
                                    "not an identity")));
  EXPECT_THAT(
      ProblemLines(with({"--leader-elect-lease-duration=10s"})),
      ElementsAre("--leader-elect-lease-duration (10s) must be greater than --leader-elect-renew-deadline "
                  "(10s)"));
  EXPECT_THAT(ProblemLines(with({"--leader-elect-retry-period=9s"})),
              ElementsAre("--leader-elect-renew-deadline (10s) must be greater than 1.2 x "
                          "--leader-elect-retry-period (9s)"));
  EXPECT_THAT(
      ProblemLines(with({"--leader-elect-lease-duration=500ms", "--leader-elect-renew-deadline=400ms",
                         "--leader-elect-retry-period=100ms"})),
      ElementsAre(HasSubstr("--leader-elect-lease-duration (scheduler.leaderElectLeaseDuration): 500ms is "
                            "not a whole number of seconds of at least 1s")));
  EXPECT_THAT(
      ProblemLines(with({"--leader-elect-lease-duration=10500ms", "--leader-elect-renew-deadline=10s"})),
      ElementsAre(HasSubstr("10s500ms is not a whole number of seconds")));
  EXPECT_THAT(ProblemLines(with({"--leader-elect-retry-period=0s"})),
              ElementsAre(HasSubstr("--leader-elect-retry-period: '0s' is too short")));
}

TEST(Flags, HamiNoOpFlagsAreAcceptedWithWarnings) {
  auto r =
      Load({"--cambricon-mlu-name=cambricon.com/mlu", "--dcu-memory=hygon.com/dcumem", "--mthreads-cores=x",
            "--metax-vcount=y", "--kunlun-name=z", "--sgpu-topology-aware", "--enflame-gcu-resource-name=e",
            "--enable-ascend=true", "--enable-iluvatar", "--logtostderr", "--log_dir=/var/log",
            "--vmodule=a=2", "--alsologtostderr=true", "--debug=false"});
  ASSERT_TRUE(r) << r.error().message;
  const auto& w = r->config.warnings;
  EXPECT_EQ(w.size(), 7u);
  EXPECT_THAT(w, Contains(HasSubstr("--cambricon-mlu-name=cambricon.com/mlu has no effect")));
  EXPECT_THAT(w, Not(Contains(HasSubstr("--enable-ascend"))));
  EXPECT_THAT(w, Not(Contains(HasSubstr("--enable-iluvatar")))) << "a vendor switch";
  EXPECT_TRUE(r->config.vendors.at("iluvatars").enabled);
  EXPECT_THAT(w, Not(Contains(HasSubstr("log_dir"))));
}

// A vendor declares its flags in its module: config parses them with the others, a switch turns its section
// on (a section off by default stays off, whatever its YAML says), and --help lists them.
TEST(Flags, AVendorsOwnFlagsComeFromItsModule) {
  BackendRegistry registry;
  VendorModule chips{"chips", VendorSchema{{{"resourceCountName", SettingKind::kString}}, {}, {}},
                     [](const VendorSettings&) { return Result<std::vector<BackendPtr>>(std::vector<BackendPtr>()); }};
  chips.enabled_by_default = false;
  chips.flags = {{"enable-chips", VendorFlag::Effect::kEnables, true, "build the chips' backends"},
                 {"chips-name", VendorFlag::Effect::kNoEffect, false, "no effect: set chips.resourceCountName"}};
  ASSERT_TRUE(registry.Register(std::move(chips)));
  VendorModule again{"more-chips", {}, [](const VendorSettings&) {
                       return Result<std::vector<BackendPtr>>(std::vector<BackendPtr>());
                     }};
  again.flags = {{"enable-chips", VendorFlag::Effect::kEnables, true, "twice"}};
  EXPECT_FALSE(registry.Register(std::move(again))) << "a flag name registered twice must fail";
  BackendRegistry shadowing;
  VendorModule ours{"ours", {}, [](const VendorSettings&) {
                      return Result<std::vector<BackendPtr>>(std::vector<BackendPtr>());
                    }};
  ours.flags = {{"kube-qps", VendorFlag::Effect::kNoEffect, false, "shadows one of ours"}};
  ASSERT_TRUE(shadowing.Register(std::move(ours)));
  EXPECT_THROW(LoadConfig({"hami-scheduler"}, shadowing), std::logic_error);
  const std::string file = WriteTemp("chips.yaml", "chips:\n  resourceCountName: example.com/chip\n");
  const auto load = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "hami-scheduler");
    return LoadConfig(args, registry);
  };

  auto off = load({"--config=" + file});
  ASSERT_TRUE(off) << off.error().message;
  EXPECT_FALSE(off->config.vendors.at("chips").enabled);
  EXPECT_EQ(off->config.vendors.at("chips").String("resourceCountName"), "example.com/chip");
  auto on = load({"--config=" + file, "--enable-chips", "--chips-name=x"});
  ASSERT_TRUE(on) << on.error().message;
  EXPECT_TRUE(on->config.vendors.at("chips").enabled);
  EXPECT_THAT(on->config.warnings, ElementsAre(HasSubstr("--chips-name=x has no effect")));
  EXPECT_TRUE(load({"-enable-chips=true"})->config.vendors.at("chips").enabled);
  EXPECT_FALSE(load({"--enable-chips=false"})->config.vendors.at("chips").enabled);
  EXPECT_THAT(ProblemLines(load({"--enable-chips=maybe"})), ElementsAre(HasSubstr("--enable-chips")));
  EXPECT_THAT(ProblemLines(load({"--enable-chip"})), ElementsAre(HasSubstr("did you mean --enable-chips?")));

  const std::string help = FlagsHelp("hami-scheduler serve", registry);
  EXPECT_THAT(help, HasSubstr("--enable-chips"));
  EXPECT_THAT(help, HasSubstr("build the chips' backends (default: false)"));
  EXPECT_THAT(help, HasSubstr("--chips-name=NAME"));
  EXPECT_LT(help.find("--chips-name"), help.find("-h, --help"));
}

TEST(Flags, HelpShortCircuits) {
  for (const std::string flag : {"--help", "-h", "-help"}) {
    auto r = Load({flag, "--kube-burst=bad"});
    ASSERT_TRUE(r) << flag;
    EXPECT_TRUE(r->help) << flag;
    EXPECT_THAT(r->help_text, StartsWith("Usage: hami-scheduler [flags]")) << flag;
  }
}

TEST(FlagsHelp, GroupsDefaultsAndIntro) {
  const std::string help = FlagsHelp("hami-scheduler serve", testing::BuiltinVendors());
  EXPECT_THAT(help, StartsWith("Usage: hami-scheduler serve [flags]\n"));
  EXPECT_THAT(help, HasSubstr("HAMi's scheduler flag names are accepted"));
  EXPECT_THAT(help, HasSubstr("a flag overrides the files"));
  std::size_t last = 0;
  for (const std::string group :
       {"\nExtender server:\n", "\nScheduling:\n", "\nKubernetes client:\n", "\nLeader election:\n",
        "\nFiles:\n", "\nLogging:\n", "\nHAMi compatibility"}) {
    const std::size_t at = help.find(group);
    ASSERT_NE(at, std::string::npos) << group;
    EXPECT_GT(at, last) << group;
    last = at;
  }
  EXPECT_THAT(help, HasSubstr("--http_bind=ADDR"));
  EXPECT_THAT(help, HasSubstr("(default: 127.0.0.1:8080)"));
  EXPECT_THAT(help, HasSubstr("(default: 5m)"));
  EXPECT_THAT(help, HasSubstr("(default: 28s)"));
  EXPECT_THAT(help, HasSubstr("-v N"));
  EXPECT_THAT(help, HasSubstr("--config=FILE"));
  EXPECT_THAT(help, HasSubstr("--print-config"));
  EXPECT_THAT(help, HasSubstr("-h, --help"));
  // No line is wider than 110 columns.
  std::size_t start = 0;
  while (start < help.size()) {
    const std::size_t end = help.find('\n', start);
    const std::size_t len = (end == std::string::npos ? help.size() : end) - start;
    EXPECT_LE(len, 110u) << help.substr(start, len);
    if (end == std::string::npos) break;
    start = end + 1;
  }
}

// HAMi's --profiling turns on Go's pprof endpoints; there is nothing like them here. The chart passes it, so
// it stays accepted (flag and YAML key), says so in the help, and warns once when set.
TEST(Flags, ProfilingIsAcceptedWithOneWarningAndAnHonestHelpLine) {
  const std::string help = FlagsHelp("hami-scheduler serve", testing::BuiltinVendors());
  const std::size_t at = help.find("--profiling");
  ASSERT_NE(at, std::string::npos);
  const std::string line = help.substr(at, help.find('\n', at) - at);
  EXPECT_THAT(line, HasSubstr("no effect")) << line;
  EXPECT_THAT(help, Not(HasSubstr("enable the profiling endpoints")));

  const auto profiling_warnings = [](const LoadedConfig& c) {
    std::size_t n = 0;
    for (const auto& w : c.config.warnings) n += w.find("profiling") != std::string::npos ? 1 : 0;
    return n;
  };
  auto flag = Load({"--profiling"});
  ASSERT_TRUE(flag) << flag.error().message;
  EXPECT_TRUE(flag->config.serving.profiling);
  EXPECT_EQ(profiling_warnings(*flag), 1u);
  EXPECT_THAT(flag->config.warnings, Contains(HasSubstr("has no effect")));
  // From the file and the flag at once: still one warning.
  const std::string file = WriteTemp("profiling.yaml", "scheduler:\n  profiling: true\n");
  auto both = Load({"--config=" + file, "-profiling=true"});
  ASSERT_TRUE(both) << both.error().message;
  EXPECT_EQ(profiling_warnings(*both), 1u);
  auto yaml_only = Load({"--config=" + file});
  ASSERT_TRUE(yaml_only) << yaml_only.error().message;
  EXPECT_EQ(profiling_warnings(*yaml_only), 1u);
  auto off = Load({"--profiling=false"});
  ASSERT_TRUE(off) << off.error().message;
  EXPECT_EQ(profiling_warnings(*off), 0u);
}

}  // namespace
}  // namespace hami::config
