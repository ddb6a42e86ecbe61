#pragma once
// `hami-scheduler sim-apiserver`: the in-memory API server as a standalone process that kubectl can talk to.
#include <iosfwd>
#include <string>
#include <vector>

namespace hami::sim {

// Runs `sim-apiserver <args...>` (args[0] is the first argument after the subcommand): loads --cluster files,
// listens, writes --kubeconfig-out, prints the URL and the kubeconfig path, then serves until SIGINT/SIGTERM.
// Returns 0 after a signal, 2 for bad flags or input files, 1 if it cannot listen or the server fails.
int RunApiServerCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace hami::sim
