#pragma once
// An in-memory Kubernetes API server over HTTP/1.1, plain or TLS: the subset the scheduler, the demo, the
// integration tests and `kubectl` use. Objects live in a sim::Store. The connections (accept loop, TLS
// handshake, reading requests, writing answers, limits, timeouts) are the process's one HTTP server's
// (k8s::HttpServer); this layer is its handler: it authenticates (bearer tokens, the client certificate the
// server shows it), routes URLs, negotiates content types, streams watches as chunked JSON events, and
// injects faults on request.
//
// Thread rule: everything (the HTTP server, one coroutine per connection, the Store, the fault controls) runs
// on the one thread that runs the io_context given at construction. Call the methods from that thread (or
// while the io_context is not running).
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/result.h"
#include "sim/apiserver/store.h"

namespace hami::sim {

// How a watch from a compacted resourceVersion is refused: kube-apiserver's watch cache answers 200 and one
// ERROR event (Status 410 Expired); other paths answer HTTP 410 before streaming. Clients must handle both.
enum class ExpiredWatchMode { kHttpStatus, kErrorEvent };

struct ApiServerOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;                              // 0: the kernel picks; see ApiServer::port()
  std::size_t body_limit = 8 * 1024 * 1024;            // larger request bodies answer 413
  std::chrono::milliseconds read_timeout{30000};       // to receive a whole request (idle keep-alive too)
  std::chrono::milliseconds write_timeout{30000};      // per response write / watch chunk
  std::chrono::milliseconds bookmark_interval{60000};  // periodic BOOKMARKs on watches that allow them
  std::chrono::seconds default_watch_timeout{1800};    // watches without timeoutSeconds end after this
  ExpiredWatchMode expired_watch_mode = ExpiredWatchMode::kErrorEvent;
  StoreOptions store;

  // ---- TLS and authentication. The defaults serve plain HTTP to anyone.

  // Both set: serve HTTPS only (TLS 1.2+), with this certificate chain (leaf first) and key.
  std::string tls_cert_pem;
  std::string tls_key_pem;
  // Set (needs TLS): request client certificates; one that chains to these CAs authenticates the user named
  // by its CN. One that does not is refused with 401, as kube-apiserver does (the handshake still completes).
  std::string client_ca_pem;
  // Accepted bearer tokens ("Authorization: Bearer <token>").
  std::vector<std::string> tokens;
  // Requests without a valid token or verified client certificate answer 401 Unauthorized (the discovery
  // endpoints /version, /healthz, /livez and /readyz stay open).
  bool require_auth = false;
  std::chrono::milliseconds tls_handshake_timeout{10000};
  std::chrono::milliseconds tls_shutdown_timeout{2000};  // waiting for the client's close_notify

  // ---- What Kubeconfig() writes besides the server URL.

  // certificate-authority-data: the CA that signed tls_cert_pem. Empty: tls_cert_pem itself (right for a
  // self-signed certificate, or a chain file that ends with its CA).
  std::string ca_pem;
  // The user's credentials: a bearer token and/or a client certificate and key (PEM).
  std::string kubeconfig_token;
  std::string kubeconfig_client_cert_pem;
  std::string kubeconfig_client_key_pem;
};

// Fail the next `count` requests matching method and path prefix with `status` (500 InternalError, 429
// TooManyRequests with Retry-After, 503 ServiceUnavailable with Retry-After, or any other code).
struct FaultRule {
  int count = 1;
  int status = 500;
  std::string method;       // "" matches any ("GET", "PATCH", ...)
  std::string path_prefix;  // "" matches any ("/api/v1/namespaces/default/pods")
  int retry_after_seconds = 1;
  bool drop_answer = false;  // instead: carry the request out, then close without answering (answer lost)
};

// Faults drawn at random for every request but the discovery ones (/healthz, /version, ...), for fault
// runs; seeded, so the same seed and the same requests draw the same faults.
struct RandomFaults {
  double error_rate = 0;     // answer 500 InternalError without acting
  double conflict_rate = 0;  // PATCH and PUT answer 409 Conflict without acting
  double drop_rate = 0;      // act, then close the connection without answering (an answer lost)
  std::uint64_t seed = 1;
  bool any() const { return error_rate > 0 || conflict_rate > 0 || drop_rate > 0; }
};

class ApiServer {
 public:
  // `clock` (optional) dates creationTimestamps and continue tokens; it must outlive the server.
  explicit ApiServer(boost::asio::io_context& ioc, ApiServerOptions options = {},
                     const Clock* clock = nullptr);
  ~ApiServer();  // Stop()s; coroutines still queued on the io_context keep the shared state alive
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Checks the TLS material, binds and listens. Returns the bound port (useful with port 0). Errors name
  // the address or what is wrong with the certificates.
  Result<std::uint16_t> Listen();
  // Accepts connections until Stop() or cancellation, then closes every connection. Requires Listen().
  boost::asio::awaitable<void> Serve();
  // Listen() and co_spawn(Serve()) on the io_context; failure to bind is returned, a later failure of the
  // accept loop is kept in failure().
  Result<std::uint16_t> Start();
  // Stops accepting and closes every connection (open watches end abruptly). Idempotent.
  void Stop();
  std::exception_ptr failure() const;

  std::uint16_t port() const;
  std::string url() const;  // http://127.0.0.1:<port>, https://... with TLS
  bool tls() const;
  Store& store();
  const Store& store() const;

  // A kubeconfig (YAML) whose current context points at this server: with TLS it trusts
  // ApiServerOptions::ca_pem, and it carries the kubeconfig_* credentials.
  std::string Kubeconfig() const;
  Result<void> WriteKubeconfig(const std::string& path) const;

  // ---- Fault injection (test hooks).

  void FailNext(FaultRule rule);  // rules are consumed in the order given
  void SetRandomFaults(RandomFaults faults);  // all rates 0: none
  struct FaultStats {
    std::uint64_t errors = 0, conflicts = 0, drops = 0;
  };
  FaultStats random_fault_stats() const;
  void ClearFaults();
  // Delays every response whose path starts with `path_prefix` ("" = all) by `delay`; 0 removes the delay.
  void SetLatency(std::chrono::milliseconds delay, std::string path_prefix = "");
  // Ends every open watch by closing its connection without the final chunk.
  void DropWatches();
  // Forgets the event history: watches and exact lists from any older resourceVersion answer 410.
  void CompactHistory();
  // The next `n` watch requests answer 410 Expired (in the configured ExpiredWatchMode), whatever their
  // resourceVersion; the next `n` list requests likewise (HTTP 410).
  void ExpireNextWatches(int n);
  void ExpireNextLists(int n);
  void ExpireContinueTokens();
  void set_expired_watch_mode(ExpiredWatchMode mode);
  // Every open watch that allows bookmarks sends one BOOKMARK now (besides the periodic ones).
  void SendBookmarks();

  std::size_t open_watches() const;  // watch streams being served now
  std::size_t open_connections() const;
  std::uint64_t requests_served() const;
  // Connection coroutines that ended with an exception (logged; that connection closed, the server went on).
  std::uint64_t connection_failures() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace hami::sim
