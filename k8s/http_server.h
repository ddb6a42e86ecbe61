#pragma once
// The HTTP/1.1 server of the process: the extender's (POST /filter, /bind, /webhook; GET /healthz, /readyz,
// /metrics) and the embedded API server's (sim/apiserver, which routes by itself and streams watches).
// Plain TCP or TLS with certificate hot reload (or a TLS context made by the caller), keep-alive and
// pipelined requests, exact-path routes and a fallback, the request timeouts of HAMi's Go server, a body
// limit that hands the handler the truncated body instead of failing, head and trailer limits
// (k8s/request_parser.h), a connection cap, client certificates (required, or requested and shown to the
// handler), answers whole or streamed (chunked), and a graceful shutdown. One coroutine per connection on
// the caller's executor (the one event loop); not thread-safe.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/verb.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/result.h"
#include "k8s/waits.h"

namespace boost::asio::ssl {
class context;
}

namespace hami::k8s {

// Memory for request bodies, shared by the listeners that hold it: a request takes its body's size (its
// Content-Length, or its route's limit when the length is not given) before the body is read, and gives it
// back once its response is written. A request that does not fit waits, unread, until bodies in flight
// finish (within its read timeout): the bytes that bodies hold at once stay under the budget, however many
// connections send.
class BodyBudget {
 public:
  explicit BodyBudget(std::size_t bytes) : bytes_(bytes) {}
  // Takes `n` bytes if they are free (a request larger than the whole budget may take it when it is idle).
  bool TryTake(std::size_t n);
  void Give(std::size_t n);
  Signal& freed() { return freed_; }
  std::size_t bytes() const { return bytes_; }
  std::size_t in_use() const { return in_use_; }
  std::size_t peak() const { return peak_; }
  std::uint64_t waits() const { return waits_; }  // requests that waited for room
  void CountWait() { ++waits_; }

 private:
  std::size_t bytes_;
  std::size_t in_use_ = 0;
  std::size_t peak_ = 0;
  std::uint64_t waits_ = 0;
  Signal freed_;
};

// A TLS client's certificate, read once after the connection's handshake.
struct PeerCertificate {
  bool presented = false;
  bool verified = false;    // chains to the client CA, in its validity period, usable for client auth
  std::string common_name;  // its subject CN, when verified
};

struct ServerResponse;
class ResponseStream;

struct ServerRequest {
  boost::beast::http::verb method = boost::beast::http::verb::unknown;
  std::string method_string;  // as sent (a method Beast does not know is verb::unknown)
  std::string target;         // as sent ("/filter?x=1")
  std::string path;           // target without the query
  std::string content_type;
  boost::beast::http::fields headers;  // every field of the head
  std::string body;
  // The body exceeded HttpServerOptions::body_limit; `body` holds its first body_limit bytes. The rest was
  // not read, so the connection closes after the response.
  bool body_too_large = false;
  // TLS: the client's certificate (null on plain TCP). Lives as long as the connection.
  const PeerCertificate* peer_certificate = nullptr;
  // The connection's answer as a stream, for a handler that answers with one (never null).
  ResponseStream* stream = nullptr;
};

// An answer written as it happens (chunked transfer encoding), e.g. a watch's events: the handler writes the
// head, then chunks, and returns; the server then writes the last chunk (unless the connection failed or
// was aborted) and goes on with the next request. What the handler returns is not sent. Used on the
// server's executor only, while its request is handled.
class ResponseStream {
 public:
  // kStopping: the server is shutting down (Shutdown()); the handler ends its answer, and the server writes
  // the last chunk.
  enum class Woke { kDeadline, kNotified, kPeerGone, kClosed, kStopping };
  virtual ~ResponseStream() = default;
  // Writes the head (status, content type and headers of `head`; its body is ignored), at most once, within
  // the write timeout. False: the connection failed.
  virtual boost::asio::awaitable<bool> WriteHead(const ServerResponse& head) = 0;
  // One chunk, within the write timeout. False: the connection failed or was closed.
  virtual boost::asio::awaitable<bool> WriteChunk(std::string_view data) = 0;
  // Waits until `deadline`, a Notify() (one since the last wait counts), the server closing the connection
  // or shutting down, or, once the head is written, the client going away (then Abort() is the caller's to
  // call).
  virtual boost::asio::awaitable<Woke> WaitUntil(std::chrono::steady_clock::time_point deadline) = 0;
  // Ends the current or next WaitUntil(); for callbacks on the server's executor.
  virtual void Notify() = 0;
  // Closes the connection at once: the client sees the stream end without its last chunk.
  virtual void Abort() = 0;
  // The connection was closed by the server (Close(), Abort(), the drain deadline): nothing more is sent.
  virtual bool closed() const = 0;
};

struct ServerResponse {
  unsigned status = 200;
  std::string content_type = "application/json";
  std::string body;
  // Extra headers. Content-Type comes from `content_type`; Content-Length, Transfer-Encoding and Connection
  // belong to the server. Those, and names or values with CR/LF, are ignored here.
  std::vector<std::pair<std::string, std::string>> headers;
  bool body_omitted = false;  // set by the server for HEAD: Content-Length of `body`, no body sent
  // Fault injection: the request was carried out, but the connection closes without an answer.
  bool close_without_answer = false;
};

// Handlers run on the server's executor; they may co_await (e.g. API calls). The request outlives the call.
// An exception becomes a 500 with its message.
using RouteHandler = std::function<boost::asio::awaitable<ServerResponse>(const ServerRequest&)>;

// A request the server cannot read, answered before any handler sees it.
enum class BadRequest { kMalformed, kHeadTooLarge };
// nullopt: the connection closes without an answer.
using BadRequestAnswer = std::function<std::optional<ServerResponse>(BadRequest)>;

struct HttpServerOptions {
  std::string address =
      "127.0.0.1:8080";  // "host:port", ":port" (all interfaces), "[::1]:port"; port 0 = any
  std::string address_flag = "--http_bind";  // names the address in Listen() errors
  std::size_t body_limit = 1 << 20;          // 1 MiB, as HAMi
  // Paths whose body limit is another than body_limit ("/webhook": an AdmissionReview of a large pod).
  std::map<std::string, std::size_t, std::less<>> path_body_limits{};
  // Shared by the listeners of the process (nullptr: bodies are bounded per request only); a path listed
  // in path_body_budgets takes from its own pool instead (reviews cannot starve /filter, nor the reverse).
  std::shared_ptr<BodyBudget> body_budget{};
  std::map<std::string, std::shared_ptr<BodyBudget>, std::less<>> path_body_budgets{};
  std::size_t header_limit = 64 * 1024;      // request line and fields, or trailer; larger -> 431 (max 65533)
  std::chrono::milliseconds header_timeout{15000};  // HAMi ReadHeaderTimeout; also the TLS handshake
  std::chrono::milliseconds read_timeout{60000};    // whole request (head + body), HAMi ReadTimeout
  std::chrono::milliseconds idle_timeout{120000};   // keep-alive wait for the next request
  std::chrono::milliseconds write_timeout{60000};
  // The TLS handshake's deadline (0: header_timeout).
  std::chrono::milliseconds handshake_timeout{0};
  // How long a closing connection waits for the client to finish (its close_notify, or the end of what it
  // was still sending), so that closing does not reset the connection before the client read the answer.
  std::chrono::milliseconds linger_timeout{500};
  // The next request on a kept-alive connection arrives whole within read_timeout of when the server began
  // waiting for it (the idle wait counts; idle_timeout still bounds the wait for its first byte). False:
  // read_timeout counts from its first byte, as Go's server does.
  bool read_timeout_counts_idle_wait = false;
  // Open connections at most (0 = no cap). At the cap, a new connection closes the one idle the longest;
  // when every one is busy with a request, the new one gets a 503 and is closed. Logged once a second.
  std::size_t max_connections = 1024;
  std::string max_connections_flag = "--max-connections";  // names the cap in that log line
  // Both set: HTTPS only (TLS 1.2+); the files are read again when either changes (certificate rotation).
  std::string cert_file{};
  std::string key_file{};
  // Set (needs TLS): clients must present a certificate that chains to one of these PEM CAs, else the
  // handshake fails. Reloaded with the certificate.
  std::string client_ca_file{};
  // Instead of cert_file and key_file: this context (made by the caller, e.g. from PEM in memory; not
  // reloaded). Its verify mode says whether client certificates are required, requested or ignored.
  std::shared_ptr<boost::asio::ssl::context> tls_context{};
  // A client certificate that does not verify still completes the handshake; the handler sees it as not
  // verified (ServerRequest::peer_certificate) and answers as it sees fit (kube-apiserver answers 401).
  bool unverified_client_certificates_complete_handshake = false;
  // How a request that cannot be read is answered (null: 400 or 431 in text, then the connection closes).
  BadRequestAnswer bad_request_answer{};
};

class HttpServer {
 public:
  HttpServer(boost::asio::any_io_executor executor, HttpServerOptions options);
  // Closes the listener and every connection; handlers still running finish on their own.
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Exact-path routes. Unknown path -> 404 text/plain; known path, other method -> 405 with `Allow`.
  void Route(boost::beast::http::verb method, std::string path, RouteHandler handler);
  // Every request no route's path matches goes to `handler` instead of the 404 (a server that routes by
  // itself, like the embedded API server).
  void Fallback(RouteHandler handler);
  // Parses the address, loads TLS material, binds, listens. Errors name the address or the file and what is
  // wrong. Returns the port (the kernel's choice for port 0).
  Result<std::uint16_t> Listen();
  // Accepts until Shutdown() or cancellation of the awaiting coroutine. Connections run on their own
  // coroutines and outlive it.
  boost::asio::awaitable<void> Serve();
  // Graceful stop: closes the listener, lets in-flight requests finish and answers them with
  // `Connection: close`, closes idle keep-alive connections at once.
  void Shutdown();
  // Completes when no request is in flight any more, or at `deadline` (then open connections are closed).
  boost::asio::awaitable<void> Drained(std::chrono::steady_clock::time_point deadline);
  // Abrupt stop: closes the listener and every connection at once (streams end without their last chunk).
  void Close();

  std::uint16_t port() const;
  bool tls() const;
  // Requests from their first byte until their response is written.
  std::size_t in_flight() const;
  std::size_t open_connections() const;
  // Requests dropped because their head or body did not arrive in time, and TLS handshakes that timed out.
  std::uint64_t timeouts() const;
  std::uint64_t requests_served() const;
  // Successful certificate reloads after the first load.
  std::uint64_t tls_reloads() const;
  // Connection coroutines that ended with an exception (logged; that connection closed, the server went on).
  std::uint64_t connection_failures() const;
  // At the connection cap: idle connections closed to make room, and connections refused with a 503.
  std::uint64_t connections_evicted() const;
  std::uint64_t connections_refused() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace hami::k8s
