#pragma once
// `hami-scheduler sim-device-plugins`: simulated vendor device plugins (sim::DevicePlugin) for a few nodes of
// any API server, so the real kube-scheduler and `serve` can be run end to end without GPUs or kubelets.
// The pieces the command is made of are here so tests can check them without an API server.
#include <boost/json/value.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/backend.h"
#include "core/result.h"
#include "sim/device_plugins/device_plugin.h"

namespace hami::cmd {

// One `--node NAME=VENDOR:COUNTxMEMORY_MIB[:SPLIT[:TYPE]]` value.
struct SimNodeSpec {
  std::string name;
  std::string vendor;  // backend registry name (device-config section): nvidia, cambricon, mthreads, hygon
  std::int32_t count = 0;
  std::int64_t memory_mib = 0;  // per card
  std::int32_t split = 10;      // tasks that may share one card
  std::string type;             // card model; "" = "<vendor key>-SIM"
  friend bool operator==(const SimNodeSpec&, const SimNodeSpec&) = default;
};

inline constexpr std::string_view kSimNodeSyntax = "NAME=VENDOR:COUNTxMEMORY_MIB[:SPLIT[:TYPE]]";

// Parses one --node value; the error names the value and what was expected.
Result<SimNodeSpec> ParseSimNodeSpec(std::string_view text);

struct SimPluginsFlags {
  std::string kubeconfig;
  std::vector<SimNodeSpec> nodes;
  std::chrono::milliseconds allocate_delay{20};
  std::chrono::milliseconds register_interval{30000};
  std::string device_config_file;  // resource names and keys, as `serve --device-config-file` reads them
  bool help = false;
};

// Parses the command's arguments (after `sim-device-plugins`): every problem names the flag and what was
// expected. --kubeconfig and at least one --node are required, node names must be unique.
Result<SimPluginsFlags> ParseSimPluginsFlags(const std::vector<std::string>& args);

std::string SimPluginsHelp();

// The backend serving `vendor` (its device-config section); the error lists the vendors there are.
Result<const Backend*> BackendForVendor(const Backends& backends, std::string_view vendor);

// The cards of one node: ids "<vendor key>-<node>-<i>", all healthy, 100 cores, NUMA node i/2.
std::vector<sim::SimDevice> SimDevicesOf(const SimNodeSpec& spec, const Backend& backend);

// The Node created for a simulated node that does not exist yet: the hostname label, and a status the real
// kube-scheduler's in-tree filters accept (cpu 64, memory 256Gi, pods 110, condition Ready=True).
boost::json::value SimNodeObject(const std::string& name);

}  // namespace hami::cmd
