#pragma once
// An HTTP/1.1 server for the extender (POST /filter, /bind, /webhook; GET /healthz, /readyz, /metrics):
// plain TCP or TLS with certificate hot reload, keep-alive and pipelined requests, exact-path routes, the
// request timeouts of HAMi's Go server, a body limit that hands the handler the truncated body instead of
// failing, head and trailer limits (k8s/request_parser.h), a connection cap, optional client certificates
// (mTLS), and a graceful shutdown. One coroutine per connection on the caller's executor (the one event
// loop); not thread-safe.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/beast/http/verb.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/result.h"
#include "k8s/waits.h"

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

struct ServerRequest {
  boost::beast::http::verb method = boost::beast::http::verb::unknown;
  std::string target;  // as sent ("/filter?x=1")
  std::string path;    // target without the query
  std::string content_type;
  std::string body;
  // The body exceeded HttpServerOptions::body_limit; `body` holds its first body_limit bytes. The rest was
  // not read, so the connection closes after the response.
  bool body_too_large = false;
};

struct ServerResponse {
  unsigned status = 200;
  std::string content_type = "application/json";
  std::string body;
  // Extra headers. Content-Type comes from `content_type`; Content-Length, Transfer-Encoding and Connection
  // belong to the server. Those, and names or values with CR/LF, are ignored here.
  std::vector<std::pair<std::string, std::string>> headers;
  bool body_omitted = false;  // set by the server for HEAD: Content-Length of `body`, no body sent
};

// Handlers run on the server's executor; they may co_await (e.g. API calls). The request outlives the call.
// An exception becomes a 500 with its message.
using RouteHandler = std::function<boost::asio::awaitable<ServerResponse>(const ServerRequest&)>;

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
