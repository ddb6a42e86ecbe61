#pragma once
// `hami-scheduler sim-apiserver`: the in-memory API server as a standalone process that kubectl can talk to.
#include <functional>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace hami::sim {
class ApiServer;
}  // namespace hami::sim

namespace hami::cmd {

// Test hook: `on_serving` runs on the command's io_context once the server listens and the kubeconfig is
// written. It may co_spawn work there; ApiServer::Stop() then ends the command with 0, as a signal does.
struct SimApiServerHooks {
  std::function<void(sim::ApiServer&, boost::asio::io_context&)> on_serving;
};

// Runs `sim-apiserver <args...>` (args[0] is the first argument after the subcommand): loads --cluster files
// and the TLS and authentication files (or generates throwaway TLS), listens, writes --kubeconfig-out, prints
// the URL and the kubeconfig path, then serves until SIGINT/SIGTERM. Returns 0 after a signal, 2 for bad
// flags or input files, 1 if it cannot listen or the server fails.
int SimApiServer(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                 const SimApiServerHooks& hooks = {});

// One line of kube-apiserver's --token-auth-file: token,user,uid[,"group1,group2"].
struct StaticToken {
  std::string token;
  std::string user;
  std::string uid;
  std::vector<std::string> groups;
};
// Parses a static token file (CSV: quoted fields may hold commas, "" is a quote; blank lines are skipped).
// Errors name the file and line.
Result<std::vector<StaticToken>> ParseStaticTokens(std::string_view csv, std::string_view file);

}  // namespace hami::cmd
