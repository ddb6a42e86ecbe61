#pragma once
// Command-line flags of `hami-scheduler serve` (and of the configuration shared by every subcommand).
// HAMi's scheduler flag names are accepted as they are, including Go's single-dash spelling
// (`-http_bind=...`), `--flag=value` and klog's `-v=4`, so an existing deployment can swap binaries.
#include <string>
#include <vector>

#include "config/config.h"
#include "core/result.h"

namespace hami::config {

struct LoadedConfig {
  Config config;
  bool print_config = false;  // --print-config: print the effective configuration and exit
  bool help = false;          // --help: `help_text` holds the text to print
  std::string help_text;
};

// Parses flags (argv[0] is the program or subcommand name), reads --config and --device-config-file, then
// applies the flags on top. Every problem is collected into one error (exit code 2 in main).
// `vendors` holds the schema of each vendor section the files may have.
Result<LoadedConfig> LoadConfig(const std::vector<std::string>& args, const BackendRegistry& vendors);

// The help text for the configuration flags (the vendors' among them), for `--help` of serve and other
// subcommands.
std::string FlagsHelp(const std::string& program, const BackendRegistry& vendors);

}  // namespace hami::config
