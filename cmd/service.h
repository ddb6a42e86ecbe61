#pragma once
// The scheduler service as `serve` runs it, composed: the API clients, the extender's services
// (extender::Extender), its HTTP adapter on the extender listener (/filter, /bind, /healthz, /readyz,
// /metrics, and /webhook unless --webhook-bind gives it a listener of its own), on the metrics listener and
// on the webhook listener, on one io_context. `serve`, the demo and the integration tests all run this same
// object (the tests start, kill and restart it).
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>

#include "config/config.h"
#include "core/backend.h"
#include "core/clock.h"
#include "core/result.h"
#include "extender/extender.h"
#include "extender/http_routes.h"
#include "k8s/api_client.h"
#include "k8s/http_server.h"

namespace hami::cmd {

struct ServiceOptions {
  // Faster loops for the demo and tests; production takes these from the configuration.
  std::optional<std::chrono::milliseconds> health_interval;
  std::optional<std::chrono::milliseconds> reflector_backoff;  // first backoff of the watches
  std::string hostname;                                        // event source host ("" = gethostname)
  std::optional<std::chrono::milliseconds> bind_backlog;       // ExtenderOptions::bind_backlog
};

class SchedulerService {
 public:
  // Builds the clients and the extender; nothing is listened on or started yet.
  static Result<std::unique_ptr<SchedulerService>> Create(boost::asio::io_context& ioc,
                                                          const config::Config& cfg, const Backends& backends,
                                                          const k8s::RestConfig& rest, const Clock& clock,
                                                          ServiceOptions options = {});
  ~SchedulerService();

  // Binds the extender address (--http_bind) and the metrics address (unless empty or the same).
  Result<void> Listen();
  // Starts the watches, the health pass and both servers on the io_context.
  void Start();
  // Graceful stop: stop accepting, let requests in flight finish (at most `grace`), then stop the watches.
  void Shutdown(std::chrono::milliseconds grace);
  // Abrupt stop, as a killed process: every coroutine is cancelled where it stands.
  void Kill();
  // Everything Start() started has ended (after Shutdown() or Kill(), or a failure).
  bool stopped() const;
  // Why a service ended on its own (a failure, not a requested stop); null if none.
  std::exception_ptr failure() const { return failure_; }
  // Called once a service ended with a failure (serve kills the rest and exits).
  std::function<void()> on_failure;

  std::uint16_t port() const { return server_->port(); }
  std::uint16_t metrics_port() const { return metrics_ ? metrics_->port() : server_->port(); }
  // --webhook-bind's port; the extender's when /webhook is served there.
  std::uint16_t webhook_port() const { return webhook_ ? webhook_->port() : server_->port(); }
  std::string url() const;  // http(s)://127.0.0.1:<port>
  extender::Extender& extender() { return *extender_; }
  k8s::ApiClient& client() { return *client_; }
  // Exceptions that escaped the event loop running this service (k8s::RunLoop counts them; /metrics shows
  // them as hami_event_loop_exceptions_total).
  std::uint64_t& loop_exceptions() { return loop_exceptions_; }

 private:
  explicit SchedulerService(boost::asio::io_context& ioc);
  void Spawn(boost::asio::awaitable<void> task, const char* what, boost::asio::cancellation_slot slot = {});

  boost::asio::io_context* ioc_;
  std::unique_ptr<k8s::ApiClient> client_;
  // Events have a client (and so a rate limit) of their own, as kube-scheduler's event broadcaster does: a
  // burst of events never delays a filter or a bind.
  std::unique_ptr<k8s::ApiClient> event_client_;
  // Health-pass handshakes and clean-ups: client_'s rate limit, used only when no decision needs it.
  std::unique_ptr<k8s::ApiClient> background_client_;
  // --leader-elect-mode=acquire: the Lease's own client (its own rate limit, one attempt per round).
  std::unique_ptr<k8s::ApiClient> lease_client_;
  std::unique_ptr<k8s::ApiClient> review_client_;
  std::unique_ptr<extender::Extender> extender_;
  std::unique_ptr<extender::HttpRoutes> routes_;
  // Every listener: the extender's first, then the metrics and webhook ones when they are listeners of their
  // own (server_, metrics_ and webhook_ point into it; the latter two are null when not).
  std::vector<std::unique_ptr<k8s::HttpServer>> servers_;
  k8s::HttpServer* server_ = nullptr;
  k8s::HttpServer* metrics_ = nullptr;
  k8s::HttpServer* webhook_ = nullptr;
  boost::asio::cancellation_signal stop_;
  int running_ = 0;
  std::uint64_t loop_exceptions_ = 0;
  bool stopping_ = false;
  std::exception_ptr failure_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

// Runs `ioc` until `done` turns true (set by the caller's coroutines) or SIGINT/SIGTERM arrives, for the
// commands that run simulations in the foreground (demo, sim-device-plugins).
void RunUntilDoneOrSignal(boost::asio::io_context& ioc, bool& done);

}  // namespace hami::cmd
