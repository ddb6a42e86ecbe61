#include "cmd/sim_apiserver.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/json.hpp>
#include <charconv>
#include <csignal>
#include <cxxopts.hpp>
#include <functional>
#include <optional>
#include <ostream>
#include <utility>

#include "core/strings.h"
#include "k8s/event_loop.h"
#include "k8s/files.h"
#include "k8s/objects.h"
#include "sim/apiserver/api_server.h"
#include "sim/tls/tls.h"

namespace hami::cmd {
namespace asio = boost::asio;
namespace {

// Whether a task ended because we cancelled it (its operation aborted).
bool Aborted(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const boost::system::system_error& x) {
    return x.code() == asio::error::operation_aborted;
  } catch (...) {
    return false;
  }
}

constexpr std::string_view kUsage =
    R"(Usage: hami-scheduler sim-apiserver [--listen HOST:PORT] [--cluster FILE]...
                                     [--kubeconfig-out FILE] [--expired-watch http|event]
                                     [--bookmark-interval SECONDS] [--history EVENTS]
                                     [--generate-tls | --tls-cert-file FILE --tls-private-key-file FILE]
                                     [--client-ca-file FILE] [--token-auth-file FILE]
                                     [--fault-error-rate P] [--fault-conflict-rate P]
                                     [--fault-drop-rate P] [--fault-seed N] [--fault-paused]

Serves an in-memory Kubernetes API (nodes, pods with bindings, events, leases, resource quotas,
namespaces) until SIGINT/SIGTERM: over plain HTTP to anyone by default, or over HTTPS with
authentication. Point kubectl at it with the kubeconfig it writes.
  --listen HOST:PORT      address to listen on (default 127.0.0.1:0: a free loopback port)
  --cluster FILE          objects to start with: what `kubectl get nodes,pods,resourcequotas -A -o json|yaml`
                          prints (a List, or YAML documents); may be repeated; "-" reads standard input
  --kubeconfig-out FILE   write a kubeconfig whose current context points at this server
  --expired-watch MODE    how a watch from a compacted resourceVersion is refused: "event" (200 and
                          an ERROR event with a 410 Status, as kube-apiserver's watch cache does;
                          the default) or "http" (HTTP 410 before streaming)
  --bookmark-interval S   seconds between BOOKMARK events on watches that allow them (default 60)
  --history N             watch events kept for resuming watches (default 10000); older versions answer 410
  --generate-tls          serve HTTPS with a throwaway CA and serving certificate (127.0.0.1, ::1, localhost
                          and the --listen host) made in memory, and a client certificate for user "admin"
                          (group system:masters) signed by that CA; the kubeconfig trusts the CA and uses
                          the client certificate. Requests need it, or a token from --token-auth-file
  --tls-cert-file FILE    serve HTTPS with this certificate chain (PEM, the server certificate first); the
                          kubeconfig trusts the certificates in it (a self-signed certificate, or a chain
                          that ends with its CA)
  --tls-private-key-file FILE  the private key (PEM) of --tls-cert-file
  --client-ca-file FILE   accept client certificates signed by these CAs (needs TLS); the CN is the user
  --token-auth-file FILE  accept the bearer tokens of this kube-apiserver static token file (CSV lines
                          token,user,uid[,"group1,group2"]); the kubeconfig uses the first one
  --fault-error-rate P     fail this fraction (0 to 1) of requests with 500 InternalError, at random
  --fault-conflict-rate P  answer this fraction of PATCH and PUT requests 409 Conflict, at random
  --fault-drop-rate P      carry out this fraction of requests but close the connection instead of
                          answering (a lost answer)
  --fault-seed N          seed of the fault draws (default 1): the same requests draw the same faults
  --fault-paused          start with the random faults off; SIGUSR1 turns them on and off (a fault
                          run's setup and quiet phases)
With --generate-tls, --client-ca-file or --token-auth-file, requests without valid credentials answer
401 Unauthorized (except /version, /healthz, /livez and /readyz).
)";

struct Args {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  std::vector<std::string> clusters;
  std::string kubeconfig_out;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string client_ca_file;
  std::string token_auth_file;
  bool generate_tls = false;
  sim::ApiServerOptions options;
  sim::RandomFaults faults;
  bool faults_paused = false;
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

Result<double> ParseRate(std::string_view flag, std::string_view text) {
  double v = -1;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || !(v >= 0 && v <= 1))
    return Error{fmt::format("{} '{}': expected a fraction from 0 to 1", flag, text)};
  return v;
}

// The flags that take a value (the next argument, or the text after '='): those kept as given, and those
// read by ApplyFlag. Help and the switches take none.
constexpr std::pair<std::string_view, std::string Args::*> kTextFlags[] = {
    {"tls-cert-file", &Args::tls_cert_file},     {"tls-private-key-file", &Args::tls_key_file},
    {"client-ca-file", &Args::client_ca_file},   {"token-auth-file", &Args::token_auth_file},
    {"kubeconfig-out", &Args::kubeconfig_out}};
constexpr std::string_view kReadFlags[] = {"listen",           "cluster",          "expired-watch",
                                           "bookmark-interval", "history",         "fault-error-rate",
                                           "fault-conflict-rate", "fault-drop-rate", "fault-seed"};
constexpr std::string_view kSwitches[] = {"h,help", "generate-tls", "fault-paused"};
// What a switch holds when it is given bare (no argument can hold a NUL), so that `--generate-tls=true` is
// refused as before rather than read as a boolean.
const std::string kBare(1, '\0');

// One flag as cxxopts read it (`name` without dashes) into `a`; a bad value is a problem that names the flag.
void ApplyFlag(const std::string& name, const std::string& value, Args& a,
               std::vector<std::string>& problems) {
  const std::string flag = "--" + name;
  const auto integer = [&](std::int64_t lo, std::int64_t hi) -> std::optional<std::int64_t> {
    auto n = ParseIntInRange(value, flag, lo, hi);
    if (n) return *n;
    problems.push_back(n.error().message);
    return std::nullopt;
  };
  for (const auto& [text_flag, field] : kTextFlags) {
    if (name == text_flag) {
      a.*field = value;
      return;
    }
  }
  if (name == "help") {
    a.help = true;
  } else if (name == "generate-tls" || name == "fault-paused") {
    if (value != kBare) {
      problems.push_back(fmt::format("{} takes no value", flag));
    } else {
      (name == "generate-tls" ? a.generate_tls : a.faults_paused) = true;
    }
  } else if (name == "listen") {
    if (auto r = ParseListen(value, a); !r) problems.push_back(r.error().message);
  } else if (name == "cluster") {
    a.clusters.push_back(value);
  } else if (name == "expired-watch") {
    if (value == "http") {
      a.options.expired_watch_mode = sim::ExpiredWatchMode::kHttpStatus;
    } else if (value == "event") {
      a.options.expired_watch_mode = sim::ExpiredWatchMode::kErrorEvent;
    } else {
      problems.push_back(fmt::format("--expired-watch '{}': expected http or event", value));
    }
  } else if (name == "bookmark-interval") {
    if (auto s = integer(1, 86400)) a.options.bookmark_interval = std::chrono::seconds(*s);
  } else if (name == "fault-seed") {
    if (auto n = integer(0, 2'000'000'000)) a.faults.seed = static_cast<std::uint64_t>(*n);
  } else if (name == "history") {
    if (auto n = integer(1, 10'000'000)) a.options.store.history_limit = static_cast<std::size_t>(*n);
  } else {  // the three fault rates
    auto r = ParseRate(flag, value);
    if (!r) {
      problems.push_back(r.error().message);
    } else {
      (name == "fault-error-rate"      ? a.faults.error_rate
       : name == "fault-conflict-rate" ? a.faults.conflict_rate
                                       : a.faults.drop_rate) = *r;
    }
  }
}

Result<Args> ParseArgs(const std::vector<std::string>& args) {
  cxxopts::Options options("hami-scheduler sim-apiserver");
  options.allow_unrecognised_options();  // each one reported below, with every other problem
  auto add = options.add_options();
  for (const auto& [name, field] : kTextFlags) add(std::string(name), "", cxxopts::value<std::string>());
  for (const std::string_view name : kReadFlags) add(std::string(name), "", cxxopts::value<std::string>());
  for (const std::string_view name : kSwitches) {
    add(std::string(name), "", cxxopts::value<std::string>()->implicit_value(kBare));
  }
  std::vector<const char*> argv{"sim-apiserver"};
  for (const auto& arg : args) argv.push_back(arg.c_str());
  std::vector<std::string> problems;
  cxxopts::ParseResult parsed;
  try {
    try {
      parsed = options.parse(static_cast<int>(argv.size()), argv.data());
    } catch (const cxxopts::exceptions::missing_argument&) {
      // Only the last argument can be a flag without its value: name it, and read the others.
      problems.push_back(fmt::format("{}: missing value", args.back()));
      argv.pop_back();
      parsed = options.parse(static_cast<int>(argv.size()), argv.data());
    }
  } catch (const cxxopts::exceptions::exception& e) {
    return Error{fmt::format("flags: {}", e.what())};
  }
  Args a;
  std::size_t dashes_read_as_values = 0;
  for (const auto& kv : parsed.arguments()) {
    if (kv.value() == "--") ++dashes_read_as_values;
    ApplyFlag(kv.key(), kv.value(), a, problems);
  }
  // A bare "--" ends cxxopts' flags (what follows comes back unmatched); here it is no flag at all.
  if (static_cast<std::size_t>(std::count(args.begin(), args.end(), "--")) > dashes_read_as_values) {
    problems.push_back("unknown flag '--'");
  }
  for (const auto& extra : parsed.unmatched()) problems.push_back(fmt::format("unknown flag '{}'", extra));
  if (a.faults.error_rate + a.faults.conflict_rate > 1)
    problems.push_back("--fault-error-rate and --fault-conflict-rate add up to more than 1");
  if (a.tls_cert_file.empty() != a.tls_key_file.empty()) {
    problems.push_back("--tls-cert-file and --tls-private-key-file must be given together");
  }
  if (a.generate_tls && !a.tls_cert_file.empty()) {
    problems.push_back("--generate-tls and --tls-cert-file are alternatives; give one");
  }
  if (!a.client_ca_file.empty() && !a.generate_tls && a.tls_cert_file.empty()) {
    problems.push_back(
        "--client-ca-file needs TLS: add --generate-tls or --tls-cert-file and --tls-private-key-file");
  }
  if (!problems.empty()) return Error{Join(problems, "; ")};
  a.options.host = a.host;
  a.options.port = a.port;
  return a;
}

Result<std::string> ReadFile(const std::string& flag, const std::string& path) {
  auto text = k8s::ReadInput(path);
  if (!text) return Error{fmt::format("{}: {}", flag, text.error().message)};
  return text;
}

// Loads or generates the TLS material and the tokens into `a.options`; says what it set up on `out`.
Result<void> ConfigureSecurity(Args& a, std::ostream& out) {
  sim::ApiServerOptions& o = a.options;
  if (a.generate_tls) {
    std::vector<std::string> extra_hosts;
    if (!a.host.empty() && a.host != "0.0.0.0" && a.host != "::") extra_hosts.push_back(a.host);
    auto tls = sim::GenerateLoopbackTls("admin", extra_hosts);
    if (!tls) return Error{fmt::format("--generate-tls: {}", tls.error().message)};
    o.tls_cert_pem = tls->server.cert_pem;
    o.tls_key_pem = tls->server.key_pem;
    o.ca_pem = tls->ca.cert_pem;
    o.client_ca_pem = tls->ca.cert_pem;
    o.kubeconfig_client_cert_pem = tls->client.cert_pem;
    o.kubeconfig_client_key_pem = tls->client.key_pem;
    out << "sim-apiserver: TLS with a generated CA; the kubeconfig authenticates as user admin "
           "(client certificate)\n";
  } else if (!a.tls_cert_file.empty()) {
    auto cert = ReadFile("--tls-cert-file", a.tls_cert_file);
    if (!cert) return cert.error();
    auto key = ReadFile("--tls-private-key-file", a.tls_key_file);
    if (!key) return key.error();
    if (auto n = sim::CountCertificates(*cert, "--tls-cert-file " + a.tls_cert_file); !n) return n.error();
    o.tls_cert_pem = std::move(*cert);
    o.tls_key_pem = std::move(*key);
  }
  if (!a.client_ca_file.empty()) {
    auto ca = ReadFile("--client-ca-file", a.client_ca_file);
    if (!ca) return ca.error();
    if (auto n = sim::CountCertificates(*ca, "--client-ca-file " + a.client_ca_file); !n) return n.error();
    if (!o.client_ca_pem.empty() && !o.client_ca_pem.ends_with('\n')) o.client_ca_pem += '\n';
    o.client_ca_pem += *ca;
  }
  if (!a.token_auth_file.empty()) {
    auto csv = ReadFile("--token-auth-file", a.token_auth_file);
    if (!csv) return csv.error();
    auto tokens = ParseStaticTokens(*csv, a.token_auth_file);
    if (!tokens) return Error{fmt::format("--token-auth-file: {}", tokens.error().message)};
    if (tokens->empty()) return Error{fmt::format("--token-auth-file {}: no tokens", a.token_auth_file)};
    for (const auto& t : *tokens) o.tokens.push_back(t.token);
    if (o.kubeconfig_client_cert_pem.empty()) o.kubeconfig_token = tokens->front().token;
    out << fmt::format(
        "sim-apiserver: {} token(s) from {}{}\n", tokens->size(), a.token_auth_file,
        o.kubeconfig_token.empty()
            ? ""
            : fmt::format("; the kubeconfig authenticates as user {} (token)", tokens->front().user));
  }
  o.require_auth = a.generate_tls || !a.client_ca_file.empty() || !a.token_auth_file.empty();
  if (o.require_auth && o.kubeconfig_token.empty() && o.kubeconfig_client_cert_pem.empty()) {
    out << "sim-apiserver: the kubeconfig has no credentials: add a client certificate signed by "
           "--client-ca-file\n";
  }
  return {};
}

}  // namespace

Result<std::vector<StaticToken>> ParseStaticTokens(std::string_view csv, std::string_view file) {
  std::vector<StaticToken> out;
  std::size_t line_no = 0;
  std::size_t pos = 0;
  while (pos < csv.size()) {
    ++line_no;
    // One record: fields separated by commas; a field may be quoted ("" inside is a quote, and a quoted field
    // may hold commas and line breaks). Leading spaces of a field are skipped, as kube-apiserver does.
    std::vector<std::string> fields(1);
    const std::size_t record_line = line_no;
    bool quoted_field = false;
    bool at_field_start = true;
    bool in_quotes = false;
    for (; pos < csv.size(); ++pos) {
      const char c = csv[pos];
      if (in_quotes) {
        if (c == '"') {
          if (pos + 1 < csv.size() && csv[pos + 1] == '"') {
            fields.back() += '"';
            ++pos;
          } else {
            in_quotes = false;
          }
        } else {
          if (c == '\n') ++line_no;
          fields.back() += c;
        }
        continue;
      }
      if (c == '\n') {
        ++pos;
        break;
      }
      if (c == '\r' && (pos + 1 == csv.size() || csv[pos + 1] == '\n')) continue;
      if (c == ',') {
        fields.emplace_back();
        at_field_start = true;
        quoted_field = false;
        continue;
      }
      if (at_field_start && (c == ' ' || c == '\t')) continue;
      if (at_field_start && c == '"') {
        in_quotes = true;
        quoted_field = true;
        at_field_start = false;
        continue;
      }
      if (quoted_field) {
        return Error{fmt::format("{}:{}: unexpected '{}' after a quoted field", file, record_line, c)};
      }
      at_field_start = false;
      fields.back() += c;
    }
    if (in_quotes) return Error{fmt::format("{}:{}: unterminated quoted field", file, record_line)};
    if (fields.size() == 1 && fields[0].empty()) continue;  // blank line
    if (fields.size() < 3) {
      return Error{fmt::format("{}:{}: want token,user,uid[,\"group1,group2\"], got {} field(s)", file,
                               record_line, fields.size())};
    }
    if (fields[0].empty()) return Error{fmt::format("{}:{}: empty token", file, record_line)};
    if (fields[1].empty()) return Error{fmt::format("{}:{}: empty user name", file, record_line)};
    StaticToken t{fields[0], fields[1], fields[2], {}};
    if (fields.size() >= 4) {
      for (auto g : Split(fields[3], ',')) {
        if (auto trimmed = Trim(g); !trimmed.empty()) t.groups.emplace_back(trimmed);
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

int SimApiServer(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                 const SimApiServerHooks& hooks) {
  auto parsed = ParseArgs(args);
  if (!parsed) {
    err << "sim-apiserver: " << parsed.error().message << "\n" << kUsage;
    return 2;
  }
  if (parsed->help) {
    out << kUsage;
    return 0;
  }
  if (auto secured = ConfigureSecurity(*parsed, out); !secured) {
    err << "sim-apiserver: " << secured.error().message << "\n";
    return 2;
  }
  asio::io_context ioc(1);
  sim::ApiServer server(ioc, parsed->options);
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
  bool faults_on = parsed->faults.any() && !parsed->faults_paused;
  if (faults_on) server.SetRandomFaults(parsed->faults);
  if (parsed->faults.any())
    out << fmt::format("sim-apiserver: random faults: {} errors, {} conflicts, {} dropped answers "
                       "(seed {}){}; SIGUSR1 turns them {}\n",
                       parsed->faults.error_rate, parsed->faults.conflict_rate, parsed->faults.drop_rate,
                       parsed->faults.seed, faults_on ? "" : ", paused", faults_on ? "off" : "on");
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
  // SIGUSR1 turns the random faults on and off (the seed carries on: the draws do not repeat).
  asio::signal_set quiet(ioc, SIGUSR1);
  std::function<void()> await_quiet = [&] {
    quiet.async_wait([&](const boost::system::error_code& ec, int) {
      if (ec) return;
      faults_on = !faults_on;
      const auto s = server.random_fault_stats();
      if (faults_on) {
        sim::RandomFaults f = parsed->faults;
        f.seed += s.errors + s.conflicts + s.drops;
        server.SetRandomFaults(f);
        out << "sim-apiserver: random faults on\n";
      } else {
        server.SetRandomFaults({});
        out << fmt::format("sim-apiserver: random faults off; {} errors, {} conflicts, {} dropped answers "
                           "so far\n",
                           s.errors, s.conflicts, s.drops);
      }
      out.flush();
      await_quiet();
    });
  };
  await_quiet();
  asio::cancellation_signal stop;
  int exit_code = 1;
  asio::co_spawn(ioc, server.Serve(), asio::bind_cancellation_slot(stop.slot(), [&](std::exception_ptr e) {
                   exit_code = 0;
                   if (e && !Aborted(e)) {  // aborted: we asked it to stop
                     err << "sim-apiserver: stopped: " << ExceptionMessage(e) << "\n";
                     exit_code = 1;
                   }
                   signals.cancel();
                   quiet.cancel();
                 }));
  signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    out << "sim-apiserver: signal " << sig << ", shutting down\n";
    out.flush();
    server.Stop();
    stop.emit(asio::cancellation_type::terminal);
  });
  if (hooks.on_serving) hooks.on_serving(server, ioc);
  std::uint64_t loop_exceptions = 0;
  k8s::RunLoop(ioc, loop_exceptions, "sim-apiserver");
  if (loop_exceptions > 0) {
    err << "sim-apiserver: " << loop_exceptions
        << " exception(s) escaped the event loop (a bug; see the log)\n";
    return 1;
  }
  return exit_code;
}

}  // namespace hami::cmd
