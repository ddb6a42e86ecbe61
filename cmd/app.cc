#include "cmd/app.h"

#include <fmt/format.h>

#include <map>
#include <ostream>
#include <stdexcept>

#include "backends/builtin.h"
#include "cmd/sim_apiserver.h"
#include "config/flags.h"
#include "core/free_capacity.h"
#include "k8s/logging.h"

namespace hami::cmd {
namespace {

constexpr std::string_view kUsage =
    R"(hami-scheduler: GPU-sharing scheduler extender for Kubernetes (a drop-in for HAMi's)

Usage:
  hami-scheduler [serve] [flags]              the scheduler extender (/filter, /bind, /webhook, /metrics);
                                              HAMi's flags are accepted (`hami-scheduler serve --help`);
                                              installed as `scheduler` too, HAMi's entry point
  hami-scheduler demo [--keep] [--json]       the whole system on an embedded in-memory cluster
  hami-scheduler inspect node|pod FILE|-      decode a Node's or Pod's HAMi annotations (JSON or YAML)
  hami-scheduler simulate --cluster FILE [--pods FILE] [-o json|table] [config flags]
                                              place pods offline against a cluster snapshot
                                              (what `kubectl get nodes,pods -A -o json` prints)
  hami-scheduler explain NAMESPACE/POD --cluster FILE [--pods FILE] [-o table|json] [config flags]
                                              why a pod of that snapshot is pending, down to the card
  hami-scheduler sim-apiserver --listen HOST:PORT [--cluster FILE] [--kubeconfig-out FILE]
                             [--generate-tls | --tls-cert-file F --tls-private-key-file F]
                             [--client-ca-file F] [--token-auth-file F]
                                              an in-memory Kubernetes API server (kubectl works against it)
  hami-scheduler sim-device-plugins --kubeconfig FILE --node NAME=VENDOR:COUNTxMIB...  simulated device plugins
  hami-scheduler sim-kube-scheduler --kubeconfig FILE --extender URL   a kube-scheduler stand-in
  hami-scheduler config [flags]               print the effective configuration (same as --print-config)
  hami-scheduler version

Run `hami-scheduler <command> --help` for the command's flags, `hami-scheduler config --help` for every
configuration flag (HAMi's flag names are accepted).
)";

// The program name HAMi's image and chart run the extender as.
constexpr std::string_view kHamiEntryPoint = "scheduler";

}  // namespace

std::string VersionString() { return fmt::format("hami-scheduler {}", HAMI_VERSION); }

const BackendRegistry& Vendors() {
  static const BackendRegistry registry = [] {
    BackendRegistry r;
    // The list is fixed at build time: a duplicate section is a programming error caught by every test.
    if (auto ok = backends::RegisterBuiltinBackends(r); !ok) throw std::logic_error(ok.error().message);
    return r;
  }();
  return registry;
}

Result<Backends> BuildBackends(const config::Config& cfg, std::vector<std::string>* advice) {
  const BackendRegistry& registry = Vendors();
  std::vector<BackendPtr> list;
  std::map<std::string, std::string> built_by;  // vendor key -> section
  std::map<std::string, std::string> key_owner;  // protocol annotation key -> vendor key
  std::vector<std::string> problems;
  for (const auto& name : registry.Names()) {
    VendorSettings settings;
    settings.enabled = registry.EnabledByDefault(name);
    if (auto it = cfg.vendors.find(name); it != cfg.vendors.end()) settings = it->second;
    if (!settings.enabled) continue;
    if (advice != nullptr) {
      for (auto& a : registry.Advise(name, settings)) advice->push_back(std::move(a));
    }
    auto built = registry.Create(name, settings);
    if (!built) {
      problems.push_back(built.error().message);
      continue;
    }
    for (auto& backend : *built) {
      // A vendor key names one backend in pod annotations, locks and requests: two would be one.
      if (auto earlier = built_by.try_emplace(backend->Vendor(), name); !earlier.second) {
        problems.push_back(fmt::format("vendor key '{}' is built by section {} and again by section {}",
                                       backend->Vendor(), earlier.first->second, name));
        continue;
      }
      // Two backends reading one annotation would both charge (or register) what it lists. The node lock is
      // shared on purpose, and so are UUID selectors.
      const BackendKeys& k = backend->Spec().keys;
      for (const std::string* key : {&k.register_annotation, &k.handshake, &k.allocated, &k.to_allocate}) {
        // A pool's servers are read, never charged as nodes: it may read another vendor's registration.
        if (key->empty() || (key == &k.register_annotation && backend->Spec().pool.Active())) continue;
        if (auto owner = key_owner.try_emplace(*key, backend->Vendor()); !owner.second) {
          problems.push_back(fmt::format("annotation {} is used by vendor key '{}' (section {}) and by '{}'",
                                         *key, backend->Vendor(), name, owner.first->second));
        }
      }
      list.push_back(std::move(backend));
    }
  }
  if (!problems.empty()) return config::ProblemsError(problems);
  Backends backends(std::move(list));
  // A shape's vendor and resources are known only now.
  if (auto shapes = CheckCapacityShapes(cfg.extender.capacity_shapes, backends); !shapes)
    return config::ProblemsError(
        {fmt::format("--capacity-shape (scheduler.capacityShapes): {}", shapes.error().message)});
  return backends;
}

int RunProgram(std::string_view program, const std::vector<std::string>& args, std::ostream& out,
               std::ostream& err) {
  k8s::InstallLogEscaping();  // before anything logs, whichever way the program runs
  const std::string_view name = program.substr(program.find_last_of('/') + 1);
  if (name == kHamiEntryPoint && args.empty()) return Serve(args, out, err);
  return Run(args, out, err);
}

int Run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  // Before any subcommand logs: every record of the binary is one line, whatever names it carries.
  k8s::InstallLogEscaping();
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    out << kUsage;
    return args.empty() ? kExitUsage : kExitOk;
  }
  const std::string& command = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (command == "version" || command == "--version") {
    out << VersionString() << "\n";
    return kExitOk;
  }
  if (command == "inspect") return Inspect(rest, out, err);
  if (command == "simulate") return Simulate(rest, out, err);
  if (command == "explain") return Explain(rest, out, err);
  if (command == "sim-apiserver") return SimApiServer(rest, out, err);
  if (command == "serve") return Serve(rest, out, err);
  if (command == "demo") return Demo(rest, out, err);
  if (command == "sim-device-plugins") return SimDevicePlugins(rest, out, err);
  if (command == "sim-kube-scheduler") return SimKubeScheduler(rest, out, err);
  // Bare flags run the extender, as HAMi's `scheduler --http_bind=... ` does (--print-config prints).
  if (command.starts_with("-")) return Serve(args, out, err);
  if (command == "config") {
    // `config [flags]`: load, validate, print.
    std::vector<std::string> flag_args{"hami-scheduler"};
    flag_args.insert(flag_args.end(), rest.begin(), rest.end());
    auto loaded = config::LoadConfig(flag_args, Vendors());
    if (!loaded) {
      err << "hami-scheduler: " << loaded.error().message << "\n";
      return kExitUsage;
    }
    if (loaded->help) {
      out << loaded->help_text;
      return kExitOk;
    }
    std::vector<std::string> warnings = loaded->config.warnings;
    auto backends = BuildBackends(loaded->config, &warnings);
    for (const auto& w : warnings) err << "warning: " << w << "\n";
    if (!backends) {
      err << "hami-scheduler: " << backends.error().message << "\n";
      return kExitUsage;
    }
    out << config::ToYaml(loaded->config, Vendors());
    return kExitOk;
  }
  err << "hami-scheduler: unknown command '" << command << "'\n" << kUsage;
  return kExitUsage;
}

}  // namespace hami::cmd
