// `hami-scheduler sim-kube-scheduler`: the kube-scheduler stand-in (sim/scheduler/kube_scheduler.h) as a process, so
// that `serve` can be run, killed and restarted under it (tests/integration/fault_run_test.sh). It schedules
// the pending pods of --scheduler-name through the extender at --extender until SIGINT/SIGTERM, and prints
// one line per pod that ends bound, then its counters.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <ostream>

#include "cmd/app.h"
#include "cmd/service.h"
#include "cmd/subcommand_flags.h"
#include "config/config.h"
#include "core/strings.h"
#include "k8s/api_client.h"
#include "k8s/rest_config.h"
#include "sim/scheduler/kube_scheduler.h"

namespace hami::cmd {
namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

constexpr std::string_view kHelp =
    R"(Usage: hami-scheduler sim-kube-scheduler --kubeconfig FILE --extender URL [flags]

A stand-in for kube-scheduler driving a scheduler extender over HTTP: it watches nodes and the pending pods
of --scheduler-name, POSTs /filter one pod at a time and /bind asynchronously, and retries failures with
per-pod backoff, until SIGINT/SIGTERM. A bound pod prints "bound <ns>/<name> <node>".
  --kubeconfig FILE        the API server
  --extender URL           the extender's base URL (http://127.0.0.1:8080)
  --scheduler-name NAME    pods with this spec.schedulerName (default hami-scheduler)
  --http-timeout DURATION  per extender call, as KubeSchedulerConfiguration's httpTimeout (default 30s)
  --max-backoff DURATION   longest per-pod retry backoff (default 2s)
)";

struct Flags {
  std::string kubeconfig, extender, scheduler_name = "hami-scheduler";
  std::chrono::milliseconds http_timeout{30000}, max_backoff{2000};
  bool help = false;
};

Result<Flags> ParseFlags(const std::vector<std::string>& args) {
  const SubcommandFlags declared("hami-scheduler sim-kube-scheduler",
                                 {"kubeconfig", "extender", "scheduler-name", "http-timeout", "max-backoff"});
  auto given = declared.Parse(args);
  if (!given) return given.error();
  if (!given->undeclared.empty()) return declared.Unexpected(given->undeclared.front());
  Flags f;
  f.help = given->help;
  for (const auto& [name, value] : given->flags) {
    const std::string flag = "--" + name;
    const auto duration = [&](std::chrono::milliseconds& out) -> Result<void> {
      auto d = config::ParseDuration(value);
      if (!d || d->count() <= 0)
        return Error{fmt::format("{} '{}': expected a positive duration such as 30s", flag, value)};
      out = *d;
      return {};
    };
    if (name == "kubeconfig") {
      f.kubeconfig = value;
    } else if (name == "extender") {
      f.extender = value;
    } else if (name == "scheduler-name") {
      f.scheduler_name = value;
    } else if (name == "http-timeout") {
      if (auto r = duration(f.http_timeout); !r) return r.error();
    } else {  // max-backoff
      if (auto r = duration(f.max_backoff); !r) return r.error();
    }
  }
  if (f.help) return f;
  if (f.kubeconfig.empty()) return Error{"--kubeconfig is required"};
  if (f.extender.empty()) return Error{"--extender is required"};
  if (auto e = sim::ParseExtenderUrl(f.extender); !e)
    return Error{fmt::format("--extender '{}': {}", f.extender, e.error().message)};
  return f;
}

}  // namespace

int SimKubeScheduler(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  auto flags = ParseFlags(args);
  if (!flags) {
    err << "hami-scheduler sim-kube-scheduler: " << flags.error().message << "\n" << kHelp;
    return kExitUsage;
  }
  if (flags->help) {
    out << kHelp;
    return kExitOk;
  }
  auto rest = k8s::ResolveRestConfig(flags->kubeconfig, k8s::ConfigEnv::System());
  if (!rest) {
    err << "hami-scheduler sim-kube-scheduler: --kubeconfig " << flags->kubeconfig << ": "
        << rest.error().message << "\n";
    return kExitUsage;
  }
  spdlog::set_level(spdlog::level::warn);
  asio::io_context ioc(1);
  k8s::ClientOptions options;
  options.user_agent = "hami-sim-kube-scheduler";
  options.qps = 100;
  options.burst = 200;
  auto client = k8s::ApiClient::Create(ioc.get_executor(), *rest, options);
  if (!client) {
    err << "hami-scheduler sim-kube-scheduler: " << client.error().message << "\n";
    return kExitFailure;
  }
  sim::StandInOptions so;
  so.scheduler_name = flags->scheduler_name;
  so.extender_url = flags->extender;
  so.http_timeout = flags->http_timeout;
  so.max_backoff = flags->max_backoff;
  sim::KubeSchedulerStandIn stand_in(**client, so);
  stand_in.on_outcome = [&](const sim::PodOutcome& o) {
    if (o.state == sim::PodOutcome::State::kBound)
      out << "bound " << o.key << " " << o.node << "\n" << std::flush;
  };
  bool done = false, finished = false, requested = false;
  int exit_code = kExitOk;
  asio::cancellation_signal stop;
  asio::co_spawn(ioc, stand_in.Run(), asio::bind_cancellation_slot(stop.slot(), [&](std::exception_ptr e) {
                   finished = true;
                   done = true;
                   if (e && !requested) {  // after a requested stop the cancellation is expected
                     err << "hami-scheduler sim-kube-scheduler: stopped: " << ExceptionMessage(e) << "\n";
                     exit_code = kExitFailure;
                   }
                 }));
  out << fmt::format("sim-kube-scheduler: scheduling {} pods through {} (SIGINT/SIGTERM stops)\n",
                     flags->scheduler_name, flags->extender)
      << std::flush;
  RunUntilDoneOrSignal(ioc, done);
  const bool ended_alone = finished;
  if (!finished) {
    requested = true;
    stop.emit(asio::cancellation_type::terminal);
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!finished && std::chrono::steady_clock::now() < deadline) ioc.run_one_for(50ms);
  }
  const auto& s = stand_in.stats();
  out << fmt::format("sim-kube-scheduler: {} filters ({} errors, {} unschedulable), {} binds ({} failed){}\n",
                     s.filters, s.filter_errors, s.unschedulable, s.binds, s.bind_failures,
                     ended_alone ? ", ended on its own" : "")
      << std::flush;
  return ended_alone ? kExitFailure : exit_code;
}

}  // namespace hami::cmd
