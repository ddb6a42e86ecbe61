#pragma once
// The flags of the tool subcommands (simulate, sim-device-plugins, sim-kube-scheduler), read with cxxopts:
// `--flag value`, `--flag=value`, a one-letter `-f value`, `-h`/`--help`. Each tool checks the values itself
// (its errors name the flag and what was expected); this reads the command line and names what is wrong
// with it. `serve` and the HAMi flags are config/flags.h's.
#include <string>
#include <utility>
#include <vector>

#include "core/result.h"

namespace hami::cmd {

// One value flag as given: its long name ("kubeconfig", also for `-o` when declared "o,output") and value.
struct GivenFlag {
  std::string name;
  std::string value;
};

struct GivenArgs {
  std::vector<GivenFlag> flags;         // the declared ones, in command-line order (repeated: each time)
  std::vector<std::string> undeclared;  // every other argument, verbatim and in order
  bool help = false;                    // -h or --help
};

class SubcommandFlags {
 public:
  // `command` names the subcommand in cxxopts' own messages ("hami-scheduler simulate"); `value_flags` are
  // the flags that take a value: "kubeconfig", or "o,output" for one with a one-letter form.
  SubcommandFlags(std::string command, std::vector<std::string> value_flags)
      : command_(std::move(command)), specs_(std::move(value_flags)) {}

  // Reads `args` (the arguments after the subcommand). A value flag given last with no value is an error
  // ("--kubeconfig needs a value"). Arguments no declared flag takes are returned in `undeclared`, verbatim:
  // a single-dash word ("-v4", "-config") is one argument, never a group of one-letter flags, so a tool
  // can hand it on (simulate hands them to the configuration's flags, which read Go's single-dash forms).
  Result<GivenArgs> Parse(const std::vector<std::string>& args) const;

  // The error for an argument in `undeclared` when the tool takes no others: "unknown flag '--nodes';
  // expected --kubeconfig, --node or ..." for a flag (named without its value), "unexpected argument
  // 'stray'" for anything else.
  Error Unexpected(const std::string& arg) const;

 private:
  std::string command_;
  std::vector<std::string> specs_;  // as declared
};

}  // namespace hami::cmd
