#include "sim/cli.h"

#include <fmt/format.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/json.hpp>
#include <csignal>
#include <ostream>

#include "core/strings.h"
#include "k8s/objects.h"
#include "sim/api_server.h"

namespace hami::sim {
namespace asio = boost::asio;
namespace {

constexpr std::string_view kUsage =
    R"(Usage: hami-scheduler sim-apiserver [--listen HOST:PORT] [--cluster FILE]...
                                     [--kubeconfig-out FILE] [--expired-watch http|event]
                                     [--bookmark-interval SECONDS] [--history EVENTS]

Serves an in-memory Kubernetes API (nodes, pods with bindings, events, leases, resource quotas,
namespaces) over plain HTTP until SIGINT/SIGTERM. Point kubectl at it with the kubeconfig it writes.
  --listen HOST:PORT      address to listen on (default 127.0.0.1:0: a free loopback port)
  --cluster FILE          objects to start with: what `kubectl get nodes,pods,resourcequotas -A -o json|yaml`
                          prints (a List, or YAML documents); may be repeated; "-" reads standard input
  --kubeconfig-out FILE   write a kubeconfig whose current context points at this server
  --expired-watch MODE    how a watch from a compacted resourceVersion is refused: "event" (200 and
                          an ERROR event with a 410 Status, as kube-apiserver's watch cache does;
                          the default) or "http" (HTTP 410 before streaming)
  --bookmark-interval S   seconds between BOOKMARK events on watches that allow them (default 60)
  --history N             watch events kept for resuming watches (default 10000); older versions answer 410
)";

struct Args {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  std::vector<std::string> clusters;
  std::string kubeconfig_out;
  ApiServerOptions options;
  bool help = false;
};

Result<void> ParseListen(std::string_view text, Args& a) {
  std::string_view host;
  std::string_view port;
  if (text.starts_with("[")) {
    const std::size_t close = text.find(']');
    if (close == std::string_view::npos) return Error{fmt::format("--listen '{}': missing ']'", text)};
    host = text.substr(1, close - 1);
    if (close + 1 < text.size() && text[close + 1] != ':') {
      return Error{fmt::format("--listen '{}': expected ':' after ']'", text)};
    }
    port = close + 2 <= text.size() ? text.substr(close + 2) : std::string_view();
  } else if (const std::size_t colon = text.rfind(':'); colon != std::string_view::npos) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  } else {
    port = text;
  }
  if (!host.empty()) a.host = std::string(host);
  if (port.empty()) return Error{fmt::format("--listen '{}': expected HOST:PORT", text)};
  auto p = ParseIntInRange(port, "--listen port", 0, 65535);
  if (!p) return p.error();
  a.port = static_cast<std::uint16_t>(*p);
  return {};
}

Result<Args> ParseArgs(const std::vector<std::string>& args) {
  Args a;
  std::vector<std::string> problems;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    std::string value;
    bool has_value = false;
    if (auto eq = flag.find('='); flag.starts_with("--") && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      has_value = true;
    }
    const auto take = [&]() -> bool {
      if (has_value) return true;
      if (i + 1 < args.size()) {
        value = args[++i];
        return true;
      }
      problems.push_back(fmt::format("{}: missing value", flag));
      return false;
    };
    if (flag == "-h" || flag == "--help") {
      a.help = true;
    } else if (flag == "--listen") {
      if (take()) {
        if (auto r = ParseListen(value, a); !r) problems.push_back(r.error().message);
      }
    } else if (flag == "--cluster") {
      if (take()) a.clusters.push_back(value);
    } else if (flag == "--kubeconfig-out" || flag == "--kubeconfig") {
      if (take()) a.kubeconfig_out = value;
    } else if (flag == "--expired-watch") {
      if (take()) {
        if (value == "http") {
          a.options.expired_watch_mode = ExpiredWatchMode::kHttpStatus;
        } else if (value == "event") {
          a.options.expired_watch_mode = ExpiredWatchMode::kErrorEvent;
        } else {
          problems.push_back(fmt::format("--expired-watch '{}': expected http or event", value));
        }
      }
    } else if (flag == "--bookmark-interval") {
      if (take()) {
        auto s = ParseIntInRange(value, "--bookmark-interval", 1, 86400);
        if (s) {
          a.options.bookmark_interval = std::chrono::seconds(*s);
        } else {
          problems.push_back(s.error().message);
        }
      }
    } else if (flag == "--history") {
      if (take()) {
        auto n = ParseIntInRange(value, "--history", 1, 10'000'000);
        if (n) {
          a.options.store.history_limit = static_cast<std::size_t>(*n);
        } else {
          problems.push_back(n.error().message);
        }
      }
    } else {
      problems.push_back(fmt::format("unknown flag '{}'", args[i]));
    }
  }
  if (!problems.empty()) return Error{Join(problems, "; ")};
  a.options.host = a.host;
  a.options.port = a.port;
  return a;
}

}  // namespace

int RunApiServerCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  auto parsed = ParseArgs(args);
  if (!parsed) {
    err << "sim-apiserver: " << parsed.error().message << "\n" << kUsage;
    return 2;
  }
  if (parsed->help) {
    out << kUsage;
    return 0;
  }
  asio::io_context ioc(1);
  ApiServer server(ioc, parsed->options);
  for (const auto& file : parsed->clusters) {
    auto text = k8s::ReadInput(file);
    if (!text) {
      err << "sim-apiserver: " << text.error().message << "\n";
      return 2;
    }
    auto docs = k8s::ParseDocuments(*text, file);
    if (!docs) {
      err << "sim-apiserver: " << docs.error().message << "\n";
      return 2;
    }
    std::vector<std::string> skipped;
    auto loaded = server.store().Load(*docs, &skipped);
    if (!loaded) {
      err << "sim-apiserver: " << file << ": " << loaded.error().message << "\n";
      return 2;
    }
    out << fmt::format("sim-apiserver: loaded {} object(s) from {}", *loaded, file);
    if (!skipped.empty()) out << fmt::format(" (skipped {}: {})", skipped.size(), Join(skipped, ", "));
    out << "\n";
  }
  auto port = server.Listen();
  if (!port) {
    err << port.error().message << "\n";
    return 1;
  }
  if (!parsed->kubeconfig_out.empty()) {
    if (auto written = server.WriteKubeconfig(parsed->kubeconfig_out); !written) {
      err << "sim-apiserver: " << written.error().message << "\n";
      return 1;
    }
  }
  out << "sim-apiserver: serving " << server.url() << "\n";
  out << "kubeconfig: "
      << (parsed->kubeconfig_out.empty() ? std::string("(not written; pass --kubeconfig-out FILE)")
                                         : parsed->kubeconfig_out)
      << "\n";
  out.flush();

  asio::signal_set signals(ioc, SIGINT, SIGTERM);
  asio::cancellation_signal stop;
  int exit_code = 1;
  asio::co_spawn(ioc, server.Serve(), asio::bind_cancellation_slot(stop.slot(), [&](std::exception_ptr e) {
                   exit_code = 0;
                   if (e) {
                     try {
                       std::rethrow_exception(e);
                     } catch (const boost::system::system_error& x) {
                       if (x.code() != asio::error::operation_aborted) {  // aborted: we asked it to stop
                         err << "sim-apiserver: stopped: " << x.what() << "\n";
                         exit_code = 1;
                       }
                     } catch (const std::exception& x) {
                       err << "sim-apiserver: stopped: " << x.what() << "\n";
                       exit_code = 1;
                     }
                   }
                   signals.cancel();
                 }));
  signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    out << "sim-apiserver: signal " << sig << ", shutting down\n";
    out.flush();
    server.Stop();
    stop.emit(asio::cancellation_type::terminal);
  });
  ioc.run();
  return exit_code;
}

}  // namespace hami::sim
