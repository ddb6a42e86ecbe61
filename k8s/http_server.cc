#include "k8s/http_server.h"

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <map>
#include <optional>
#include <type_traits>

#include "core/strings.h"
#include "k8s/files.h"
#include "k8s/request_parser.h"

namespace hami::k8s {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

namespace {

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
using namespace asio::experimental::awaitable_operators;
// How long a refused connection waits for the client to finish (HttpServerOptions::linger_timeout's default).
constexpr std::chrono::milliseconds kLingerTimeout{500};
constexpr std::size_t kReadChunk = 16 * 1024;
// A certificate chain, key or CA bundle is a few kilobytes; anything past this is not one.
constexpr std::size_t kMaxTlsFileBytes = std::size_t{16} << 20;

// What identifies a file's content for reload detection: it changes when the file is rewritten and when it is
// replaced by a rename (Kubernetes secret volumes swap a symlink; stat follows it).
struct FileStamp {
  std::int64_t mtime_ns = -1;
  ino_t inode = 0;
  off_t size = -1;
  bool operator==(const FileStamp&) const = default;
};

FileStamp StampOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return {static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec, st.st_ino,
          st.st_size};
}

// `what` "<path>": <reason>, as the operator's flags name the file.
Result<std::string> ReadFile(std::string_view what, const std::string& path) {
  auto text = ReadWholeFile(path, kMaxTlsFileBytes);
  if (!text) return Error{fmt::format("{} \"{}\": {}", what, path, text.error().reason)};
  return Ok(std::move(*text));
}

// A TLS 1.2+ server context from the PEM files, checked: the key must belong to the certificate.
Result<std::shared_ptr<asio::ssl::context>> LoadTlsContext(const HttpServerOptions& o) {
  auto cert = ReadFile("TLS certificate", o.cert_file);
  if (!cert) return cert.error();
  auto key = ReadFile("TLS private key", o.key_file);
  if (!key) return key.error();
  auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_server);
  ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                   asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                   asio::ssl::context::no_tlsv1_1 | asio::ssl::context::single_dh_use);
  SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_2_VERSION);
  boost::system::error_code ec;
  // The key first: OpenSSL refuses a key that does not match a loaded certificate with a vague message, while
  // a certificate loaded after a foreign key just leaves no key, which the check below names.
  ctx->use_private_key(asio::buffer(*key), asio::ssl::context::pem, ec);
  if (ec) {
    return Error{fmt::format("TLS private key \"{}\": not a PEM private key ({})", o.key_file, ec.message())};
  }
  ctx->use_certificate_chain(asio::buffer(*cert), ec);
  if (ec) {
    return Error{
        fmt::format("TLS certificate \"{}\": not a PEM certificate chain ({})", o.cert_file, ec.message())};
  }
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
    return Error{fmt::format("TLS private key \"{}\" does not belong to the certificate \"{}\"", o.key_file,
                             o.cert_file)};
  }
  if (!o.client_ca_file.empty()) {
    auto ca = ReadFile("client CA file", o.client_ca_file);
    if (!ca) return ca.error();
    ctx->add_certificate_authority(asio::buffer(*ca), ec);
    if (ec) {
      return Error{
          fmt::format("client CA file \"{}\": not PEM certificates ({})", o.client_ca_file, ec.message())};
    }
    // Named in the certificate request too: a Go client presents its certificate only to a CA it names.
    BIO* bio = BIO_new_mem_buf(ca->data(), static_cast<int>(ca->size()));
    while (X509* ca_cert = bio ? PEM_read_bio_X509(bio, nullptr, nullptr, nullptr) : nullptr) {
      SSL_CTX_add_client_CA(ctx->native_handle(), ca_cert);
      X509_free(ca_cert);
    }
    if (bio) BIO_free(bio);
    ERR_clear_error();  // the loop ends on "no start line"
    ctx->set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
  }
  return ctx;
}

struct BindAddress {
  std::string host;  // without brackets; "" = all interfaces
  std::string port;
};

// "host:port", ":port", "[v6]:port".
Result<BindAddress> ParseAddress(const std::string& flag, const std::string& address) {
  auto bad = [&](std::string_view why) { return Error{fmt::format("{} \"{}\": {}", flag, address, why)}; };
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) return bad("expected host:port");
  BindAddress out{address.substr(0, colon), address.substr(colon + 1)};
  if (out.host.starts_with('[')) {
    if (!out.host.ends_with(']')) return bad("expected [IPv6 address]:port");
    out.host = out.host.substr(1, out.host.size() - 2);
  } else if (out.host.find(':') != std::string::npos) {
    return bad("expected host:port (an IPv6 address goes in brackets: [::1]:port)");
  }
  const bool digits =
      !out.port.empty() && out.port.size() <= 5 &&
      std::all_of(out.port.begin(), out.port.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || std::stoul(out.port) > 65535) return bad("expected host:port with a port from 0 to 65535");
  return out;
}

// Where to bind, best first: a wildcard host tries dual-stack IPv6, then IPv4 (a host without IPv6).
Result<std::vector<tcp::endpoint>> Endpoints(const asio::any_io_executor& executor, const std::string& flag,
                                             const std::string& address, const BindAddress& a) {
  const auto port = static_cast<std::uint16_t>(std::stoul(a.port));
  if (a.host.empty()) return std::vector<tcp::endpoint>{{tcp::v6(), port}, {tcp::v4(), port}};
  boost::system::error_code ec;
  const auto ip = asio::ip::make_address(a.host, ec);
  if (!ec) return std::vector<tcp::endpoint>{{ip, port}};
  // A host name: resolved once, at startup (blocking is fine there).
  tcp::resolver resolver(executor);
  const auto found =
      resolver.resolve(a.host, a.port, tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || found.empty()) {
    return Error{fmt::format("{} \"{}\": cannot resolve \"{}\": {}", flag, address, a.host,
                             ec ? ec.message() : "no address")};
  }
  return std::vector<tcp::endpoint>{found.begin()->endpoint()};
}

bool OwnedByServer(std::string_view header) {
  return beast::iequals(header, "Content-Length") || beast::iequals(header, "Transfer-Encoding") ||
         beast::iequals(header, "Connection") || beast::iequals(header, "Content-Type");
}

ServerResponse TextResponse(unsigned status, std::string body) {
  ServerResponse r;
  r.status = status;
  r.content_type = "text/plain; charset=utf-8";
  r.body = std::move(body);
  return r;
}

enum class ReadStatus { kOk, kClosed, kTimeout, kMalformed, kHeaderTooLarge };

ReadStatus Classify(const boost::system::error_code& ec) {
  if (ec == beast::error::timeout) return ReadStatus::kTimeout;
  // A head, trailer or chunk line larger than the read buffer holds is a head too large as well.
  if (ec == http::error::header_limit || ec == http::error::buffer_overflow)
    return ReadStatus::kHeaderTooLarge;
  if (ec == http::error::end_of_stream || ec == http::error::partial_message) return ReadStatus::kClosed;
  // Every other parser error is a request that is not HTTP/1.x as it should be.
  if (ec.category() == http::make_error_code(http::error::bad_method).category())
    return ReadStatus::kMalformed;
  return ReadStatus::kClosed;  // reset, aborted, TLS failures: the connection is gone
}

// What the client certificate of a finished server handshake says. `chain_ok` is false when the verify
// callback saw a failure.
PeerCertificate PeerCertificateOf(SSL* ssl, bool chain_ok) {
  PeerCertificate out;
  X509* peer = ssl ? SSL_get0_peer_certificate(ssl) : nullptr;
  if (peer == nullptr) return out;
  out.presented = true;
  const long result = SSL_get_verify_result(ssl);
  if (result != X509_V_OK || !chain_ok) return out;
  X509_NAME* subject = X509_get_subject_name(peer);
  const int index = subject ? X509_NAME_get_index_by_NID(subject, NID_commonName, -1) : -1;
  ASN1_STRING* cn = index >= 0 ? X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, index)) : nullptr;
  unsigned char* utf8 = nullptr;
  const int len = cn ? ASN1_STRING_to_UTF8(&utf8, cn) : -1;
  if (len <= 0) {  // no CN: no name to authenticate
    OPENSSL_free(utf8);
    return out;
  }
  out.common_name.assign(reinterpret_cast<const char*>(utf8), static_cast<std::size_t>(len));
  OPENSSL_free(utf8);
  out.verified = true;
  return out;
}

// One accepted connection as the server sees it, for Shutdown() and the deadline of Drained().
struct ConnectionState {
  explicit ConnectionState(beast::tcp_stream& stream)
      : lowest(stream), wake(stream.get_executor()), idle_since(Clock::now()) {}
  void Close() {
    closing = true;
    lowest.close();  // pending reads and writes complete with an error
    wake.cancel();   // and a streamed answer's wait
  }
  beast::tcp_stream& lowest;
  asio::steady_timer wake;       // a streamed answer's waits (ResponseStream::WaitUntil)
  bool busy = false;             // a request is in flight on it (from its first byte)
  bool handling = false;         // its request was read whole: the handler runs or the answer is written
  Clock::time_point idle_since;  // when it last finished a request (or was accepted)
  Clock::time_point read_since;  // when its request in flight began to arrive
  bool closing = false;          // closed by the server: nothing more to say on it
  bool streaming = false;        // its answer in flight is a stream whose head is written
  bool stopping = false;         // the server is shutting down: a stream's waits end (Woke::kStopping)
};

}  // namespace

bool BodyBudget::TryTake(std::size_t n) {
  if (in_use_ != 0 && n > bytes_ - std::min(bytes_, in_use_)) return false;
  in_use_ += n;
  peak_ = std::max(peak_, in_use_);
  return true;
}

void BodyBudget::Give(std::size_t n) {
  in_use_ -= std::min(n, in_use_);
  freed_.Notify();
}

struct HttpServer::Impl {
  Impl(asio::any_io_executor ex, HttpServerOptions o)
      : executor(std::move(ex)), options(std::move(o)), acceptor(executor) {}

  Result<void> LoadTls() {
    const FileStamp cert = StampOf(options.cert_file);
    const FileStamp key = StampOf(options.key_file);
    const FileStamp ca = StampOf(options.client_ca_file);
    auto ctx = LoadTlsContext(options);
    if (!ctx) return ctx.error();
    tls_context = std::move(*ctx);
    cert_stamp = cert;
    key_stamp = key;
    ca_stamp = ca;
    return {};
  }

  // Before a new connection's handshake: a rotated certificate is served from the next connection on.
  void ReloadTlsIfChanged() {
    const FileStamp cert = StampOf(options.cert_file);
    const FileStamp key = StampOf(options.key_file);
    const FileStamp ca = StampOf(options.client_ca_file);
    if (cert == cert_stamp && key == key_stamp && ca == ca_stamp) return;
    // Remembered even when loading fails: one log line per change, not one per connection. A half-written
    // pair (new certificate, old key) fails here and loads when the key changes too.
    cert_stamp = cert;
    key_stamp = key;
    ca_stamp = ca;
    auto ctx = LoadTlsContext(options);
    if (!ctx) {
      spdlog::error("{}: TLS reload failed, still serving the previous certificate: {}", options.address,
                    ctx.error().message);
      return;
    }
    tls_context = std::move(*ctx);
    ++tls_reloads;
    spdlog::info("{}: TLS certificate{} reloaded from {}", options.address,
                 options.client_ca_file.empty() ? "" : " and client CA", options.cert_file);
  }

  void RequestStarted(ConnectionState& conn) {
    conn.busy = true;
    conn.read_since = Clock::now();
    ++in_flight;
  }
  void RequestFinished(ConnectionState& conn) {
    conn.busy = false;
    conn.handling = false;
    conn.idle_since = Clock::now();
    if (--in_flight == 0) {
      for (auto* waiter : drain_waiters) waiter->cancel();
    }
  }
  void CloseConnections(bool idle_only) {
    for (auto& [id, conn] : connections) {
      if (!idle_only || !conn->busy) conn->Close();
    }
  }

  // Closes the connection idle the longest; with none idle and `reading_too`, the one whose request has been
  // arriving the longest (at the cap, clients that trickle heads or bodies must not hold every slot against
  // health checks). A request read whole is never cut. False if there is none to close.
  bool EvictIdlest(bool reading_too) {
    ConnectionState* idlest = nullptr;
    ConnectionState* slowest = nullptr;
    for (auto& [id, conn] : connections) {
      if (conn->closing || conn->handling) continue;
      if (!conn->busy) {
        if (!idlest || conn->idle_since < idlest->idle_since) idlest = conn;
      } else if (!slowest || conn->read_since < slowest->read_since) {
        slowest = conn;
      }
    }
    if (!idlest && reading_too) idlest = slowest;
    if (!idlest) return false;
    idlest->Close();
    ++evicted;
    return true;
  }

  // Room for one more connection under max_connections, evicting the idlest if need be; false if every
  // connection is busy with a request.
  bool MakeRoom() {
    if (options.max_connections == 0) return true;
    std::size_t live = 0;
    for (auto& [id, conn] : connections) live += conn->closing ? 0 : 1;
    if (live < options.max_connections) return true;
    const bool evicted_one = EvictIdlest(/*reading_too=*/true);
    if (!evicted_one) ++refused;
    LogAtTheCap();
    return evicted_one;
  }

  // At most one line a second, with what happened since the last one.
  void LogAtTheCap() {
    const auto now = Clock::now();
    if (now - last_cap_log < std::chrono::seconds(1)) return;
    last_cap_log = now;
    spdlog::warn(
        "{}: at the connection cap ({} = {}): {} idle connections closed, {} refused with 503 so far",
        options.address, options.max_connections_flag, options.max_connections, evicted, refused);
  }

  asio::any_io_executor executor;
  HttpServerOptions options;
  std::map<std::string, std::map<http::verb, RouteHandler>, std::less<>> routes;
  RouteHandler fallback;  // for paths no route has
  tcp::acceptor acceptor;
  std::shared_ptr<asio::ssl::context> tls_context;  // each connection keeps the one it started with
  FileStamp cert_stamp, key_stamp, ca_stamp;
  std::uint16_t port = 0;
  bool stopping = false;
  std::map<std::uint64_t, ConnectionState*> connections;
  std::uint64_t next_connection = 1;
  std::size_t in_flight = 0;
  std::uint64_t timeouts = 0;
  std::uint64_t requests = 0;
  std::uint64_t tls_reloads = 0;
  std::uint64_t connection_failures = 0;
  std::uint64_t evicted = 0;
  std::uint64_t refused = 0;
  Clock::time_point last_cap_log{};
  Clock::time_point last_accept_log{};
  std::vector<asio::steady_timer*> drain_waiters;
};

namespace {

using Impl = HttpServer::Impl;

// Marks a request in flight on a connection for the lifetime of the object.
class InFlight {
 public:
  InFlight(Impl& server, ConnectionState& conn) : server_(server), conn_(conn) {
    server_.RequestStarted(conn_);
  }
  ~InFlight() { server_.RequestFinished(conn_); }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  Impl& server_;
  ConnectionState& conn_;
};

// Keeps a connection in the server's table while it lives.
class Registration {
 public:
  Registration(Impl& server, ConnectionState& conn) : server_(server), id_(server.next_connection++) {
    server_.connections[id_] = &conn;
  }
  ~Registration() { server_.connections.erase(id_); }
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;

 private:
  Impl& server_;
  std::uint64_t id_;
};

// Bytes of the body budget a request holds, given back when it is destroyed (its response written, or the
// connection gone).
class BodyReservation {
 public:
  BodyReservation() = default;
  BodyReservation(const BodyReservation&) = delete;
  BodyReservation& operator=(const BodyReservation&) = delete;
  ~BodyReservation() { Reset(); }
  void Hold(std::shared_ptr<BodyBudget> budget, std::size_t bytes) {
    Reset();
    budget_ = std::move(budget);
    bytes_ = bytes;
  }
  void Reset() {
    if (budget_) budget_->Give(bytes_);
    budget_.reset();
    bytes_ = 0;
  }

 private:
  std::shared_ptr<BodyBudget> budget_;
  std::size_t bytes_ = 0;
};

struct IncomingRequest {
  ServerRequest request;
  unsigned version = 11;
  bool keep_alive = false;
  BodyReservation body_bytes;
};

// Reads one request: the head within header_timeout of `start`, the whole request within read_timeout. At
// most body_limit bytes of body are kept; one byte more marks it too large and stops reading.
template <class Stream>
asio::awaitable<ReadStatus> ReadRequest(const HttpServerOptions& o, Stream& stream, ConnectionState& conn,
                                        beast::flat_buffer& buffer, Clock::time_point start,
                                        IncomingRequest& in) {
  BoundedRequestParser parser({.header_limit = o.header_limit, .body_limit = o.body_limit});
  const auto request_deadline = start + o.read_timeout;
  conn.lowest.expires_at(std::min(start + o.header_timeout, request_deadline));
  auto [hec, hn] = co_await http::async_read_header(stream, buffer, parser, kTuple);
  if (hec) co_return Classify(hec);
  auto& req = parser.get();
  if (req.version() >= 11 && !parser.is_done() && beast::iequals(req[http::field::expect], "100-continue")) {
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    conn.lowest.expires_at(request_deadline);
    auto [cec, cn] = co_await asio::async_write(stream, asio::buffer(kContinue), kTuple);
    if (cec) co_return Classify(cec);
  }
  conn.lowest.expires_at(request_deadline);
  if (!parser.is_done()) {
    const std::string_view target(req.target().data(), req.target().size());
    const std::string_view path = target.substr(0, target.find('?'));
    std::size_t limit = o.body_limit;
    if (auto l = o.path_body_limits.find(path); l != o.path_body_limits.end()) limit = l->second;
    parser.set_body_limit(limit);
    std::shared_ptr<BodyBudget> budget = o.body_budget;
    if (auto b = o.path_body_budgets.find(path); b != o.path_body_budgets.end()) budget = b->second;
    if (budget) {
      // Room for the body before a byte of it is read; unread, a waiting body costs nothing but its socket.
      const auto length = parser.content_length();
      const std::size_t want = length && *length < limit ? static_cast<std::size_t>(*length) : limit;
      if (!budget->TryTake(want)) {
        budget->CountWait();
        do {
          if (Clock::now() >= request_deadline) co_return ReadStatus::kTimeout;
          // Woken when room is given back; a second at most, so that a connection the server closed (the
          // connection cap, shutdown) stops waiting too.
          const auto slice = std::min(request_deadline, Clock::now() + std::chrono::seconds(1));
          co_await budget->freed().WaitUntil(slice);
          if (conn.closing) co_return ReadStatus::kClosed;
        } while (!budget->TryTake(want));
      }
      in.body_bytes.Hold(budget, want);
    }
    auto [ec, n] = co_await http::async_read(stream, buffer, parser, kTuple);
    if (ec && !(ec == http::error::body_limit && parser.body_too_large())) co_return Classify(ec);
  }
  in.request.body = std::move(req.body());
  in.request.body_too_large = parser.body_too_large();
  in.request.method = req.method();
  in.request.method_string = std::string(req.method_string());
  in.request.target = std::string(req.target());
  in.request.path = in.request.target.substr(0, in.request.target.find('?'));
  in.request.content_type = std::string(req[http::field::content_type]);
  in.version = req.version();
  in.keep_alive = req.keep_alive();
  in.request.headers = std::move(req.base());
  co_return ReadStatus::kOk;
}

std::string AllowedMethods(const std::map<http::verb, RouteHandler>& methods) {
  std::vector<std::string> names;
  for (const auto& [verb, handler] : methods) names.emplace_back(http::to_string(verb));
  std::sort(names.begin(), names.end());
  return fmt::format("{}", fmt::join(names, ", "));
}

// Calls the request's handler; `threw` says whether it ended with an exception (answered 500).
asio::awaitable<ServerResponse> Dispatch(Impl& server, const ServerRequest& request, bool& threw) {
  RouteHandler handler;  // a copy: Route() may change the table while it runs
  const auto path = server.routes.find(request.path);
  if (path == server.routes.end()) {
    if (!server.fallback) co_return TextResponse(404, "404 page not found\n");
    handler = server.fallback;
  } else {
    const auto method = path->second.find(request.method);
    if (method == path->second.end()) {
      ServerResponse r = TextResponse(405, "Method Not Allowed\n");
      r.headers.emplace_back("Allow", AllowedMethods(path->second));
      co_return r;
    }
    handler = method->second;
  }
  std::string failure;
  try {
    co_return co_await handler(request);
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    failure = "unknown exception";
  }
  threw = true;
  spdlog::error("{} {}: handler failed: {}", std::string(http::to_string(request.method)), request.target,
                failure);
  co_return TextResponse(500, failure + "\n");
}

// Status, the handler's headers (not those the server owns, nor any that would inject a line), Content-Type
// and Connection.
template <class Body>
void SetHead(http::response<Body>& res, const ServerResponse& r, unsigned version, bool keep_alive) {
  res.version(version);
  res.result(r.status);
  for (const auto& [name, value] : r.headers) {
    const bool injects =
        name.find_first_of("\r\n:") != std::string::npos || value.find_first_of("\r\n") != std::string::npos;
    if (name.empty() || injects || OwnedByServer(name)) continue;
    res.insert(name, value);
  }
  res.set(http::field::content_type, r.content_type.empty() ? "text/plain; charset=utf-8" : r.content_type);
  res.keep_alive(keep_alive);
}

// Writes `r` (its body is moved out). Content-Type and Content-Length always, except Content-Length on 204
// and 304, which have no body.
template <class Stream>
asio::awaitable<bool> WriteResponse(Stream& stream, ConnectionState& conn, ServerResponse& r,
                                    unsigned version, bool keep_alive, std::chrono::milliseconds timeout) {
  if (r.status < 200 || r.status > 999) {
    spdlog::error("handler answered the invalid HTTP status {}", r.status);
    r = TextResponse(500, fmt::format("invalid HTTP status {}\n", r.status));
  }
  http::response<http::string_body> res;
  SetHead(res, r, version, keep_alive);
  if (r.status != 204 && r.status != 304) {
    res.content_length(r.body.size());
    if (!r.body_omitted) res.body() = std::move(r.body);
  }
  conn.lowest.expires_after(timeout);
  auto [ec, n] = co_await http::async_write(stream, res, kTuple);
  co_return !ec;
}

// Ends a connection the server chose to close, without resetting it under the client's feet.
template <class Stream>
asio::awaitable<void> CloseGracefully(Stream& stream, ConnectionState& conn,
                                      std::chrono::milliseconds linger) {
  conn.lowest.expires_after(linger);
  if constexpr (std::is_same_v<Stream, TlsStream>) {
    co_await stream.async_shutdown(kTuple);  // close_notify both ways; its outcome does not matter
  } else {
    beast::error_code ignored;
    conn.lowest.socket().shutdown(tcp::socket::shutdown_send, ignored);
    std::array<char, 4096> sink;
    for (;;) {
      auto [ec, n] = co_await stream.async_read_some(asio::buffer(sink), kTuple);
      if (ec) break;
    }
  }
}

// The connection's ResponseStream: a streamed answer written on the session's stream. What a pipelining
// client sends meanwhile waits in the session's read buffer for the next request.
template <class Stream>
class SessionStream final : public ResponseStream {
 public:
  SessionStream(Stream& stream, ConnectionState& conn, beast::flat_buffer& buffer,
                std::chrono::milliseconds write_timeout)
      : stream_(stream), conn_(conn), buffer_(buffer), write_timeout_(write_timeout) {}

  // Before each request: its HTTP version, and whether the connection stays open after its answer.
  void Begin(unsigned version, bool keep_alive) {
    version_ = version;
    keep_alive_ = keep_alive;
    head_written_ = failed_ = notified_ = false;
    conn_.streaming = false;
    watch_peer_ = true;
  }
  bool head_written() const { return head_written_; }
  bool keep_alive() const { return keep_alive_; }

  asio::awaitable<bool> WriteHead(const ServerResponse& head) override {
    if (head_written_ || conn_.closing) co_return false;
    head_written_ = true;
    conn_.streaming = true;
    http::response<http::empty_body> res;
    SetHead(res, head, version_, keep_alive_);
    res.chunked(true);
    http::response_serializer<http::empty_body> serializer{res};
    conn_.lowest.expires_after(write_timeout_);
    auto [ec, n] = co_await http::async_write_header(stream_, serializer, kTuple);
    failed_ = failed_ || ec;
    co_return !ec;
  }

  asio::awaitable<bool> WriteChunk(std::string_view data) override {
    if (!head_written_ || failed_ || conn_.closing) co_return false;
    if (data.empty()) co_return true;  // an empty chunk would end the stream
    conn_.lowest.expires_after(write_timeout_);
    auto [ec, n] = co_await asio::async_write(stream_, http::make_chunk(asio::buffer(data)), kTuple);
    failed_ = failed_ || ec;
    co_return !ec;
  }

  asio::awaitable<Woke> WaitUntil(Clock::time_point deadline) override {
    if (conn_.closing) co_return Woke::kClosed;
    if (conn_.stopping) co_return Woke::kStopping;
    if (std::exchange(notified_, false)) co_return Woke::kNotified;
    conn_.wake.expires_at(deadline);
    if (head_written_ && watch_peer_) {
      // Also notice a client that goes away while nothing happens: its socket turns readable (EOF).
      auto woke = co_await (conn_.wake.async_wait(kTuple) ||
                            conn_.lowest.socket().async_wait(tcp::socket::wait_read, kTuple));
      if (woke.index() == 1 && !std::get<0>(std::get<1>(woke))) {
        if (!co_await PeerStillThere()) co_return Woke::kPeerGone;
        watch_peer_ = false;  // the client sent more (pipelining): stop watching the socket, or we would spin
      }
    } else {
      co_await conn_.wake.async_wait(kTuple);
    }
    if (conn_.closing) co_return Woke::kClosed;
    if (conn_.stopping) co_return Woke::kStopping;
    if (std::exchange(notified_, false)) co_return Woke::kNotified;
    co_return Clock::now() >= deadline ? Woke::kDeadline : Woke::kNotified;
  }

  void Notify() override {
    notified_ = true;
    conn_.wake.cancel();
  }
  void Abort() override { conn_.Close(); }
  bool closed() const override { return conn_.closing; }

  // After the handler: the last chunk. False when the connection cannot carry another request.
  asio::awaitable<bool> Finish() {
    if (failed_ || conn_.closing) co_return false;
    conn_.lowest.expires_after(write_timeout_);
    auto [ec, n] = co_await asio::async_write(stream_, http::make_chunk_last(), kTuple);
    co_return !ec && !conn_.closing;
  }

 private:
  // The client's socket turned readable: false if the client has gone (end of stream, or a TLS
  // close_notify); true if it sent more (pipelining), which then waits in the buffer for the next request.
  asio::awaitable<bool> PeerStillThere() {
    std::array<char, 1> peek;
    beast::error_code pec;
    const std::size_t n = conn_.lowest.socket().receive(asio::buffer(peek), tcp::socket::message_peek, pec);
    if (pec || n == 0) co_return false;
    if constexpr (std::is_same_v<Stream, TlsStream>) {
      // TLS 1.3 hides the record type (an alert looks like data): decrypt what came. The record is already
      // arriving, so this read does not wait long; the deadline bounds it anyway.
      // The buffer holds at most the header limit and a chunk: with pipelined bytes already near that, read
      // only what fits (none: the client is still there, and sent more than the next request may hold).
      const std::size_t room = std::min(kReadChunk, buffer_.max_size() - buffer_.size());
      if (room == 0) co_return true;
      conn_.lowest.expires_after(write_timeout_);
      auto [ec, got] = co_await stream_.async_read_some(buffer_.prepare(room), kTuple);
      if (ec) co_return false;
      buffer_.commit(got);
    }
    co_return true;
  }

  Stream& stream_;
  ConnectionState& conn_;
  beast::flat_buffer& buffer_;
  std::chrono::milliseconds write_timeout_;
  unsigned version_ = 11;
  bool keep_alive_ = false;
  bool head_written_ = false;
  bool failed_ = false;     // a write failed: the stream cannot be ended cleanly
  bool notified_ = false;   // a Notify() since the last wait
  bool watch_peer_ = true;  // the socket is watched for the client going away
};

std::optional<ServerResponse> DefaultBadRequestAnswer(BadRequest bad) {
  return bad == BadRequest::kMalformed ? TextResponse(400, "400 Bad Request\n")
                                       : TextResponse(431, "431 Request Header Fields Too Large\n");
}

// Requests in turn on one connection (keep-alive, pipelining), until the client or the server ends it.
template <class Stream>
asio::awaitable<void> RunSession(std::shared_ptr<Impl> self, Stream& stream, ConnectionState& conn,
                                 Clock::time_point connected, const PeerCertificate* peer) {
  const HttpServerOptions& o = self->options;
  beast::flat_buffer buffer = MakeRequestBuffer(o.header_limit);
  SessionStream<Stream> answer(stream, conn, buffer, o.write_timeout);
  for (bool first = true; !conn.closing && !self->stopping; first = false) {
    const Clock::time_point waiting_since = first ? connected : Clock::now();
    // The first byte of the next request (unless pipelined bytes already wait): a new connection gets the
    // header timeout for its whole first head, a kept-alive one waits up to the idle timeout.
    if (buffer.size() == 0) {
      conn.lowest.expires_after(first ? o.header_timeout : o.idle_timeout);
      auto [ec, n] = co_await stream.async_read_some(buffer.prepare(kReadChunk), kTuple);
      if (ec) {
        if (first && ec == beast::error::timeout) ++self->timeouts;
        break;
      }
      buffer.commit(n);
    }
    InFlight in_flight(*self, conn);
    IncomingRequest in;
    const Clock::time_point start = first || o.read_timeout_counts_idle_wait ? waiting_since : Clock::now();
    const ReadStatus status = co_await ReadRequest(o, stream, conn, buffer, start, in);
    if (status == ReadStatus::kClosed) break;
    if (status == ReadStatus::kTimeout) {
      ++self->timeouts;
      spdlog::debug("{}: dropped a request that did not arrive in time", o.address);
      break;
    }
    if (status == ReadStatus::kMalformed || status == ReadStatus::kHeaderTooLarge) {
      const BadRequest bad =
          status == ReadStatus::kMalformed ? BadRequest::kMalformed : BadRequest::kHeadTooLarge;
      std::optional<ServerResponse> refusal =
          o.bad_request_answer ? o.bad_request_answer(bad) : DefaultBadRequestAnswer(bad);
      if (refusal) co_await WriteResponse(stream, conn, *refusal, 11, false, o.write_timeout);
      break;
    }
    ++self->requests;
    conn.handling = true;
    in.request.peer_certificate = peer;
    in.request.stream = &answer;
    answer.Begin(in.version, in.keep_alive && !in.request.body_too_large && !self->stopping);
    bool handler_threw = false;
    ServerResponse response = co_await Dispatch(*self, in.request, handler_threw);
    if (answer.head_written()) {        // a streamed answer
      if (handler_threw) conn.Close();  // cut mid-stream: the client must not take it for a whole answer
      if (!co_await answer.Finish() || !answer.keep_alive()) break;
      continue;
    }
    if (response.close_without_answer) break;
    // A response to HEAD has no body (its Content-Length still says how long it would be): bytes after the
    // head would be read by the client as the next response.
    if (in.request.method == http::verb::head) response.body_omitted = true;
    // A body cut at the limit leaves the rest unread: the connection cannot carry another request.
    const bool keep_alive = in.keep_alive && !in.request.body_too_large && !self->stopping;
    if (conn.closing) break;
    if (!co_await WriteResponse(stream, conn, response, in.version, keep_alive, o.write_timeout)) break;
    if (!keep_alive) break;
  }
  if (!conn.closing) co_await CloseGracefully(stream, conn, o.linger_timeout);
}

asio::awaitable<void> RunConnection(std::shared_ptr<Impl> self, tcp::socket socket,
                                    std::shared_ptr<asio::ssl::context> tls) {
  const HttpServerOptions& o = self->options;
  if (!tls) {
    beast::tcp_stream stream(std::move(socket));
    ConnectionState conn(stream);
    Registration registration(*self, conn);
    co_await RunSession(self, stream, conn, Clock::now(), nullptr);
    co_return;
  }
  TlsStream stream(std::move(socket), *tls);
  ConnectionState conn(beast::get_lowest_layer(stream));
  Registration registration(*self, conn);
  bool chain_ok = true;
  if (o.unverified_client_certificates_complete_handshake) {
    stream.set_verify_callback([&chain_ok](bool preverified, asio::ssl::verify_context&) {
      if (!preverified) chain_ok = false;
      return true;  // finish the handshake; the certificate is shown to the handler as not verified
    });
  }
  conn.lowest.expires_after(o.handshake_timeout.count() > 0 ? o.handshake_timeout : o.header_timeout);
  auto [ec] = co_await stream.async_handshake(asio::ssl::stream_base::server, kTuple);
  if (ec) {
    if (ec == beast::error::timeout) ++self->timeouts;
    spdlog::debug("{}: TLS handshake failed: {}", o.address, ec.message());
    co_return;
  }
  const PeerCertificate peer = PeerCertificateOf(stream.native_handle(), chain_ok);
  co_await RunSession(self, stream, conn, Clock::now(), &peer);
}

// A connection coroutine that threw: a bug, or an input no limit caught. That connection is gone (its
// socket closed as the coroutine unwound); the server goes on.
void RecordConnectionFailure(const std::weak_ptr<Impl>& server, const std::string& address,
                             std::exception_ptr e) {
  if (!e) return;
  if (auto self = server.lock()) ++self->connection_failures;
  spdlog::error("{}: HTTP connection failed: {}", address, ExceptionMessage(e));
}

// Every connection is busy at the cap: a short 503 on plain HTTP (a TLS client would need a handshake
// first, so it is just closed), then the socket closes.
asio::awaitable<void> Refuse(tcp::socket socket, bool tls) {
  beast::tcp_stream stream(std::move(socket));
  if (!tls) {
    static constexpr std::string_view kBusy =
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: "
        "31\r\nRetry-After: 1\r\nConnection: close\r\n\r\nserver at its connection limit\n";
    stream.expires_after(kLingerTimeout);
    auto [ec, n] = co_await asio::async_write(stream, asio::buffer(kBusy), kTuple);
    if (!ec) {
      beast::error_code ignored;
      stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
      std::array<char, 4096> sink;  // until the client closes, so that closing does not reset the answer
      for (;;) {
        auto [rec, rn] = co_await stream.async_read_some(asio::buffer(sink), kTuple);
        if (rec) break;
      }
    }
  }
}

}  // namespace

HttpServer::HttpServer(asio::any_io_executor executor, HttpServerOptions options)
    : impl_(std::make_shared<Impl>(std::move(executor), std::move(options))) {}

HttpServer::~HttpServer() { Close(); }

void HttpServer::Route(http::verb method, std::string path, RouteHandler handler) {
  impl_->routes[std::move(path)][method] = std::move(handler);
}

void HttpServer::Fallback(RouteHandler handler) { impl_->fallback = std::move(handler); }

Result<std::uint16_t> HttpServer::Listen() {
  Impl& s = *impl_;
  if (s.acceptor.is_open()) return s.port;
  const HttpServerOptions& o = s.options;
  if (o.tls_context && !(o.cert_file.empty() && o.key_file.empty() && o.client_ca_file.empty())) {
    return Error{
        fmt::format("{} \"{}\": a TLS context and certificate, key or client CA files are "
                    "alternatives; give one",
                    o.address_flag, o.address)};
  }
  if (!o.client_ca_file.empty() && o.cert_file.empty()) {
    return Error{
        fmt::format("{} \"{}\": a client CA file (client certificates) needs TLS: set a certificate "
                    "and a key file too",
                    o.address_flag, o.address)};
  }
  if (o.cert_file.empty() != o.key_file.empty()) {
    return Error{fmt::format("{} \"{}\": TLS needs both a certificate file and a key file, only {} is set",
                             o.address_flag, o.address, o.cert_file.empty() ? "the key" : "the certificate")};
  }
  const auto address = ParseAddress(o.address_flag, o.address);
  if (!address) return address.error();
  const auto endpoints = Endpoints(s.executor, o.address_flag, o.address, *address);
  if (!endpoints) return endpoints.error();
  if (o.tls_context) {
    s.tls_context = o.tls_context;
  } else if (!o.cert_file.empty()) {
    if (auto loaded = s.LoadTls(); !loaded) return loaded.error();
  }
  boost::system::error_code ec;
  for (const tcp::endpoint& endpoint : *endpoints) {
    ec.clear();
    s.acceptor.open(endpoint.protocol(), ec);
    if (!ec && endpoint.address().is_v6() && endpoint.address().is_unspecified()) {
      s.acceptor.set_option(asio::ip::v6_only(false), ec);  // ":port" means IPv4 too
    }
    if (!ec) s.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) s.acceptor.bind(endpoint, ec);
    if (!ec) s.acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (!ec) break;
    boost::system::error_code ignored;
    s.acceptor.close(ignored);
    // Only a wildcard without IPv6 support falls back to IPv4; a port in use stays an error.
    if (ec == asio::error::address_in_use || ec == asio::error::access_denied) break;
  }
  if (ec) return Error{fmt::format("cannot listen on {}: {}", o.address, ec.message())};
  s.port = s.acceptor.local_endpoint().port();
  s.stopping = false;
  spdlog::info("listening on {} (port {}, {})", o.address, s.port, s.tls_context ? "HTTPS" : "HTTP");
  return s.port;
}

asio::awaitable<void> HttpServer::Serve() {
  const std::shared_ptr<Impl> self = impl_;
  if (!self->acceptor.is_open()) {
    spdlog::error("{}: Serve() without a successful Listen()", self->options.address);
    co_return;
  }
  const auto cancellation = co_await asio::this_coro::cancellation_state;
  while (!self->stopping && cancellation.cancelled() == asio::cancellation_type::none) {
    auto [ec, socket] = co_await self->acceptor.async_accept(kTuple);
    if (self->stopping || ec == asio::error::operation_aborted) break;
    if (ec) {
      // Out of descriptors: the idlest connection makes room and the next accept gets its descriptor at
      // once; with none idle, pause instead of spinning. Logged once a second at most; the server stays up.
      const bool out_of_descriptors = ec == asio::error::no_descriptors || ec.value() == ENFILE ||
                                      ec == asio::error::no_buffer_space || ec == asio::error::no_memory;
      const bool made_room = out_of_descriptors && self->EvictIdlest(/*reading_too=*/false);
      if (const auto now = Clock::now(); now - self->last_accept_log >= std::chrono::seconds(1)) {
        self->last_accept_log = now;
        spdlog::warn("{}: accept failed: {}{}", self->options.address, ec.message(),
                     made_room ? "; closing idle connections to make room" : "");
      }
      if (made_room) continue;
      asio::steady_timer pause(self->executor, std::chrono::milliseconds(50));
      co_await pause.async_wait(kTuple);
      continue;
    }
    boost::system::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    if (!self->MakeRoom()) {
      asio::co_spawn(self->executor, Refuse(std::move(socket), self->tls_context != nullptr), asio::detached);
      continue;
    }
    if (self->tls_context && !self->options.cert_file.empty()) self->ReloadTlsIfChanged();
    asio::co_spawn(self->executor, RunConnection(self, std::move(socket), self->tls_context),
                   [weak = std::weak_ptr<Impl>(self), address = self->options.address](std::exception_ptr e) {
                     RecordConnectionFailure(weak, address, e);
                   });
  }
}

void HttpServer::Shutdown() {
  Impl& s = *impl_;
  s.stopping = true;
  boost::system::error_code ignored;
  s.acceptor.close(ignored);
  s.CloseConnections(/*idle_only=*/true);
  // A streamed answer has no end of its own the server knows of (a watch lasts as long as its client asks):
  // its waits end now, so that its handler ends it and the drain does not wait for it.
  for (auto& [id, conn] : s.connections) {
    conn->stopping = true;
    if (conn->streaming) conn->wake.cancel();
  }
}

void HttpServer::Close() {
  Shutdown();
  impl_->CloseConnections(/*idle_only=*/false);
}

asio::awaitable<void> HttpServer::Drained(std::chrono::steady_clock::time_point deadline) {
  const std::shared_ptr<Impl> self = impl_;
  asio::steady_timer wake(self->executor);
  self->drain_waiters.push_back(&wake);
  struct Unregister {
    Impl& server;
    asio::steady_timer* timer;
    ~Unregister() { std::erase(server.drain_waiters, timer); }
  } unregister{*self, &wake};
  const auto cancellation = co_await asio::this_coro::cancellation_state;
  while (self->in_flight > 0 && Clock::now() < deadline &&
         cancellation.cancelled() == asio::cancellation_type::none) {
    wake.expires_at(deadline);
    co_await wake.async_wait(kTuple);  // cancelled by the last request to finish
  }
  if (self->in_flight > 0 && Clock::now() >= deadline) self->CloseConnections(/*idle_only=*/false);
}

std::uint16_t HttpServer::port() const { return impl_->port; }
bool HttpServer::tls() const { return impl_->tls_context != nullptr; }
std::size_t HttpServer::in_flight() const { return impl_->in_flight; }
std::size_t HttpServer::open_connections() const { return impl_->connections.size(); }
std::uint64_t HttpServer::timeouts() const { return impl_->timeouts; }
std::uint64_t HttpServer::requests_served() const { return impl_->requests; }
std::uint64_t HttpServer::tls_reloads() const { return impl_->tls_reloads; }
std::uint64_t HttpServer::connection_failures() const { return impl_->connection_failures; }
std::uint64_t HttpServer::connections_evicted() const { return impl_->evicted; }
std::uint64_t HttpServer::connections_refused() const { return impl_->refused; }

}  // namespace hami::k8s
