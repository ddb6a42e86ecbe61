#pragma once
// The composition root's building blocks, kept out of main() so tests can run every subcommand in-process.
#include <iosfwd>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/backend.h"

namespace hami::cmd {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;  // bad flags, bad config, bad input files

// Runs `hami-scheduler <args...>` (args[0] is the first argument after the program name).
int Run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
// Runs the program as invoked: `program` is argv[0]. Called as `scheduler` (HAMi's image entry point, which
// HAMi's chart runs with the extender's flags) with no arguments, it serves, as HAMi's does; otherwise as
// Run (bare flags serve there too).
int RunProgram(std::string_view program, const std::vector<std::string>& args, std::ostream& out,
               std::ostream& err);

// Every vendor compiled in (backends/builtin.cc): the schemas of the device-config sections and the
// factories.
const BackendRegistry& Vendors();
// The backends the configuration enables, created through the explicit registry; the vendors' start-up
// warnings about their settings go to `advice` when given.
Result<Backends> BuildBackends(const config::Config& cfg, std::vector<std::string>* advice = nullptr);

int Inspect(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int Simulate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
// `hami-scheduler explain NS/POD --cluster FILE ...`: why a pod of a snapshot is pending (cmd/simulate.cc).
int Explain(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int Serve(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int Demo(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int SimDevicePlugins(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int SimKubeScheduler(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

std::string VersionString();

}  // namespace hami::cmd
