// `hami-scheduler sim-device-plugins`: the --node parser, the flags, the vendor lookup and the Node it
// creates.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <map>
#include <sstream>

#include "cmd/app.h"
#include "cmd/plugins.h"
#include "core/strings.h"

namespace hami::cmd {
namespace {
namespace json = boost::json;
using namespace std::chrono_literals;

TEST(SimNodeSpec, ParsesEveryField) {
  auto spec = ParseSimNodeSpec("gpu-1=nvidia:2x16384:10:NVIDIA-Tesla T4");
  ASSERT_TRUE(spec) << spec.error().message;
  EXPECT_EQ(*spec, (SimNodeSpec{"gpu-1", "nvidia", 2, 16384, 10, "NVIDIA-Tesla T4"}));
}

TEST(SimNodeSpec, SplitAndTypeAreOptional) {
  auto minimal = ParseSimNodeSpec("dcu-1=hygon:2x65536");
  ASSERT_TRUE(minimal) << minimal.error().message;
  EXPECT_EQ(*minimal, (SimNodeSpec{"dcu-1", "hygon", 2, 65536, 10, ""}));

  auto split_only = ParseSimNodeSpec("node.a=cambricon:4x24576:100");
  ASSERT_TRUE(split_only) << split_only.error().message;
  EXPECT_EQ(split_only->split, 100);
  EXPECT_EQ(split_only->type, "");

  auto empty_split = ParseSimNodeSpec("n=nvidia:1x100::T4");
  ASSERT_TRUE(empty_split) << empty_split.error().message;
  EXPECT_EQ(empty_split->split, 10);
  EXPECT_EQ(empty_split->type, "T4");
}

TEST(SimNodeSpec, RejectsBadValuesNamingThemAndTheSyntax) {
  struct Case {
    std::string text;
    std::string says;
  };
  const Case cases[] = {
      {"gpu-1", "no '='"},
      {"GPU-1=nvidia:1x100", "node name 'GPU-1'"},
      {"-gpu=nvidia:1x100", "node name '-gpu'"},
      {"=nvidia:1x100", "node name ''"},
      {"gpu-1=nvidia", "no ':' after the vendor"},
      {"gpu-1=:1x100", "the vendor is empty"},
      {"gpu-1=nvidia:2", "'2' is not COUNTxMEMORY_MIB"},
      {"gpu-1=nvidia:0x100", "card count '0' is not a number from 1 to 256"},
      {"gpu-1=nvidia:257x100", "card count '257'"},
      {"gpu-1=nvidia:twox100", "card count 'two'"},
      {"gpu-1=nvidia:1x0", "memory '0' is not a number of MiB from 1 to 2147483647"},
      {"gpu-1=nvidia:1x16Gi", "memory '16Gi'"},
      {"gpu-1=nvidia:1x2147483648", "memory '2147483648'"},
      {"gpu-1=nvidia:1x-5", "memory '-5'"},
      {"gpu-1=nvidia:1x100:0", "split '0' is not a number from 1 to 1000"},
      {"gpu-1=nvidia:1x100:ten", "split 'ten'"},
      {"gpu-1=nvidia:1x100:10:A,B", "type 'A,B' contains ',' or ':'"},
      {"gpu-1=nvidia:1x100:10:A:B", "type 'A:B' contains ',' or ':'"},
  };
  for (const auto& c : cases) {
    auto spec = ParseSimNodeSpec(c.text);
    ASSERT_FALSE(spec) << c.text;
    const std::string& message = spec.error().message;
    EXPECT_NE(message.find("--node '" + c.text + "'"), std::string::npos) << message;
    EXPECT_NE(message.find(c.says), std::string::npos) << c.text << ": " << message;
    EXPECT_NE(message.find("expected NAME=VENDOR:COUNTxMEMORY_MIB[:SPLIT[:TYPE]]"), std::string::npos)
        << message;
  }
}

TEST(SimPluginsFlags, ReadsRepeatedNodesDurationsAndBothFlagSpellings) {
  const std::vector<std::string> args = {"--kubeconfig",
                                         "/tmp/kc",
                                         "--node",
                                         "gpu-1=nvidia:2x16384",
                                         "--node=dcu-1=hygon:1x65536:4",
                                         "--allocate-delay",
                                         "250ms",
                                         "--register-interval=1m30s"};
  auto flags = ParseSimPluginsFlags(args);
  ASSERT_TRUE(flags) << flags.error().message;
  EXPECT_EQ(flags->kubeconfig, "/tmp/kc");
  ASSERT_EQ(flags->nodes.size(), 2u);
  EXPECT_EQ(flags->nodes[0].name, "gpu-1");
  EXPECT_EQ(flags->nodes[1], (SimNodeSpec{"dcu-1", "hygon", 1, 65536, 4, ""}));
  EXPECT_EQ(flags->allocate_delay, 250ms);
  EXPECT_EQ(flags->register_interval, 90s);
  EXPECT_FALSE(flags->help);
}

TEST(SimPluginsFlags, DefaultsAndHelp) {
  auto flags = ParseSimPluginsFlags({"--kubeconfig", "kc", "--node", "a=nvidia:1x1"});
  ASSERT_TRUE(flags) << flags.error().message;
  EXPECT_EQ(flags->allocate_delay, 20ms);
  EXPECT_EQ(flags->register_interval, 30s);
  EXPECT_EQ(flags->device_config_file, "");
  auto help = ParseSimPluginsFlags({"--help"});
  ASSERT_TRUE(help) << help.error().message;
  EXPECT_TRUE(help->help);
}

TEST(SimPluginsFlags, ProblemsNameTheFlagAndWhatWasExpected) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const Case cases[] = {
      {{"--node", "a=nvidia:1x1"}, "--kubeconfig FILE is required"},
      {{"--kubeconfig", "kc"}, "at least one --node NAME=VENDOR:COUNTxMEMORY_MIB[:SPLIT[:TYPE]] is required"},
      {{"--kubeconfig", "kc", "--node", "a=nvidia:1x1", "--node", "a=hygon:1x1"},
       "--node a: the node is given twice"},
      {{"--kubeconfig", "kc", "--nodes", "a=nvidia:1x1"},
       "unknown flag '--nodes'; expected --kubeconfig, --node"},
      {{"--kubeconfig", "kc", "stray"}, "unexpected argument 'stray'"},
      {{"--kubeconfig"}, "--kubeconfig needs a value"},
      {{"--kubeconfig", "kc", "--node", "a=nvidia:1x1", "--allocate-delay", "soon"},
       "--allocate-delay soon:"},
      {{"--kubeconfig", "kc", "--node", "a=nvidia:1x1", "--allocate-delay", "-1s"}, "--allocate-delay -1s:"},
      {{"--kubeconfig", "kc", "--node", "a=nvidia:1x1", "--register-interval", "0s"},
       "--register-interval 0s: expected a positive duration"},
      {{"--kubeconfig", "kc", "--node", "a=nvidia"}, "--node 'a=nvidia': no ':' after the vendor"},
  };
  for (const auto& c : cases) {
    auto flags = ParseSimPluginsFlags(c.args);
    ASSERT_FALSE(flags) << c.says;
    EXPECT_NE(flags.error().message.find(c.says), std::string::npos) << flags.error().message;
  }
}

// Every enabled backend (the registry's sections enabled by default) is found by its vendor key, and by
// its section when that section builds it alone; the refusal of an unknown name lists them, sorted.
TEST(SimPlugins, VendorsAreTheEnabledBackendsByConfigSection) {
  auto backends = BuildBackends(config::Config{});
  ASSERT_TRUE(backends) << backends.error().message;
  std::map<std::string, int> per_section;
  for (const auto& b : *backends) ++per_section[b->Spec().config_section];
  std::vector<std::string> names;
  for (const auto& b : *backends) {
    auto by_key = BackendForVendor(*backends, b->Vendor());
    ASSERT_TRUE(by_key) << by_key.error().message;
    EXPECT_EQ(*by_key, b.get());
    const std::string& section = b->Spec().config_section;
    auto by_section = BackendForVendor(*backends, section);
    if (per_section[section] == 1) {
      ASSERT_TRUE(by_section) << by_section.error().message;
      EXPECT_EQ(*by_section, b.get());
      names.push_back(section);
    } else {
      // A section of several names none of them, unless it is one's vendor key too (kunlun).
      if (by_section) {
        EXPECT_EQ((*by_section)->Vendor(), section);
      } else {
        EXPECT_NE(by_section.error().message.find("builds several backends"), std::string::npos);
      }
      names.push_back(b->Vendor());
    }
  }
  std::sort(names.begin(), names.end());
  EXPECT_GE(names.size(), 13u) << "every vendor HAMi v2.10 schedules by default";
  auto unknown = BackendForVendor(*backends, "teco");
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().message,
            "unknown vendor 'teco'; expected one of the enabled backends: " + Join(names, ", "));
}

TEST(SimPlugins, ASectionOfSeveralBackendsIsNamedByVendorKey) {
  config::Config cfg;
  cfg.vendors["vnpus"].enabled = true;
  auto backends = BuildBackends(cfg);
  ASSERT_TRUE(backends) << backends.error().message;
  auto chip = BackendForVendor(*backends, "Ascend910B3");
  ASSERT_TRUE(chip) << chip.error().message;
  EXPECT_EQ((*chip)->Vendor(), "Ascend910B3");
  auto section = BackendForVendor(*backends, "vnpus");
  ASSERT_FALSE(section);
  EXPECT_NE(section.error().message.find(
                "section 'vnpus' builds several backends; name one by its vendor key: "
                "Ascend310P, Ascend910A"),
            std::string::npos)
      << section.error().message;
  EXPECT_EQ(BackendForVendor(*backends, "nvidia").value()->Vendor(), "NVIDIA");
}

TEST(SimPlugins, DevicesGetIdsTypesAndTheSpecsSizes) {
  auto backends = BuildBackends(config::Config{});
  ASSERT_TRUE(backends) << backends.error().message;
  const Backend* nvidia = BackendForVendor(*backends, "nvidia").value();
  const auto named = SimDevicesOf(SimNodeSpec{"gpu-1", "nvidia", 3, 8192, 5, "NVIDIA-T4"}, *nvidia);
  ASSERT_EQ(named.size(), 3u);
  EXPECT_EQ(named[0], (sim::SimDevice{"NVIDIA-gpu-1-0", 5, 8192, 100, "NVIDIA-T4", 0, true}));
  EXPECT_EQ(named[2].uuid, "NVIDIA-gpu-1-2");
  EXPECT_EQ(named[2].numa, 1);
  const Backend* hygon = BackendForVendor(*backends, "hygon").value();
  const auto unnamed = SimDevicesOf(SimNodeSpec{"dcu-1", "hygon", 1, 65536, 10, ""}, *hygon);
  ASSERT_EQ(unnamed.size(), 1u);
  EXPECT_EQ(unnamed[0].type, hygon->Spec().vendor + "-SIM");
}

TEST(SimPlugins, CreatedNodeIsReadyWithResourcesForTheInTreeFilters) {
  const json::value node = SimNodeObject("gpu-1");
  EXPECT_EQ(node.at("kind"), "Node");
  EXPECT_EQ(node.at("metadata").at("name"), "gpu-1");
  EXPECT_EQ(node.at("metadata").at("labels").at("kubernetes.io/hostname"), "gpu-1");
  for (const char* field : {"capacity", "allocatable"}) {
    const auto& resources = node.at("status").at(field);
    EXPECT_EQ(resources.at("cpu"), "64") << field;
    EXPECT_EQ(resources.at("memory"), "256Gi") << field;
    EXPECT_EQ(resources.at("pods"), "110") << field;
  }
  const auto& conditions = node.at("status").at("conditions").as_array();
  ASSERT_EQ(conditions.size(), 1u);
  EXPECT_EQ(conditions[0].at("type"), "Ready");
  EXPECT_EQ(conditions[0].at("status"), "True");
}

struct Ran {
  int code;
  std::string out;
  std::string err;
};

Ran Exec(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int code = Run(args, out, err);
  return {code, out.str(), err.str()};
}

TEST(SimPluginsCommand, BadFlagsExitTwoBeforeTouchingAnyServer) {
  const Ran missing = Exec({"sim-device-plugins", "--node", "a=nvidia:1x1"});
  EXPECT_EQ(missing.code, kExitUsage);
  EXPECT_NE(missing.err.find("hami-scheduler sim-device-plugins: --kubeconfig FILE is required"),
            std::string::npos)
      << missing.err;

  // The vendor is checked against the backends before the kubeconfig is even read.
  const Ran vendor = Exec({"sim-device-plugins", "--kubeconfig", "/nonexistent", "--node", "a=teco:1x1"});
  EXPECT_EQ(vendor.code, kExitUsage);
  EXPECT_NE(vendor.err.find("--node a: unknown vendor 'teco'"), std::string::npos) << vendor.err;

  const Ran kubeconfig =
      Exec({"sim-device-plugins", "--kubeconfig", "/nonexistent/kc", "--node", "a=nvidia:1x1"});
  EXPECT_EQ(kubeconfig.code, kExitUsage);
  EXPECT_NE(kubeconfig.err.find("--kubeconfig /nonexistent/kc"), std::string::npos) << kubeconfig.err;
}

TEST(SimPluginsCommand, HelpShowsTheNodeSyntax) {
  const Ran help = Exec({"sim-device-plugins", "--help"});
  EXPECT_EQ(help.code, kExitOk);
  EXPECT_NE(help.out.find("NAME=VENDOR:COUNTxMEMORY_MIB[:SPLIT[:TYPE]]"), std::string::npos) << help.out;
  // The vendors are the registered sections, in order, each followed by the vendor keys of its backends
  // when it builds several: not a list by hand.
  std::string::size_type at = help.out.find("one of a section's backends (");
  ASSERT_NE(at, std::string::npos) << help.out;
  for (const std::string& section : Vendors().Names()) {
    auto built = Vendors().Create(section, VendorSettings{});
    ASSERT_TRUE(built) << section;
    std::string entry = section;
    if (built->size() > 1) {
      entry += ":";
      for (const auto& b : *built) entry += " " + b->Vendor();
    }
    // The help wraps long lines: compare with its whitespace folded.
    std::string folded;
    for (char c : help.out.substr(at)) {
      if (c == '\n' || c == ' ') {
        if (!folded.empty() && folded.back() != ' ') folded += ' ';
      } else {
        folded += c;
      }
    }
    const auto found = folded.find(entry);
    EXPECT_NE(found, std::string::npos) << entry << " in:\n" << help.out;
  }
  const Ran usage = Exec({"--help"});
  EXPECT_NE(usage.out.find("sim-device-plugins"), std::string::npos);
}

}  // namespace
}  // namespace hami::cmd
