#pragma once
// HTTP/1.1 to the API server over TCP or TLS, with keep-alive connections reused from a small pool. Every
// operation has a deadline. Coroutines on the caller's executor (the one event loop); not thread-safe.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/beast/http/verb.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "k8s/rest_config.h"

namespace hami::k8s {

struct HttpRequest {
  boost::beast::http::verb verb = boost::beast::http::verb::get;
  std::string target;  // path and query
  std::string body;
  std::string content_type;   // for bodies
  std::string authorization;  // full header value, or ""
  std::string user_agent;
};

struct HttpResponse {
  unsigned status = 0;
  std::string body;
  std::string content_type;
  std::optional<std::chrono::seconds> retry_after;
};

// A transport failure (no HTTP status): connect, TLS, write or read errors and timeouts.
struct TransportError {
  std::string message;
  bool request_sent = false;  // the request may have reached the server
  bool timed_out = false;
  bool refused = false;  // not sent: the request line or a header would have been malformed (never retry)
  // Some byte of an answer arrived before the failure: the server did read the request.
  bool answer_started = false;
};
template <class T>
using TransportResult = boost::system::result<T, TransportError>;
[[noreturn]] void throw_exception_from_error(const TransportError& e, const boost::source_location& where);

class Connection;

// Whether `request` can go on the wire as exactly one request for exactly the object it names: the target is
// an origin-form path of visible ASCII (anything else must be percent-escaped) without "." or ".." segments
// (escaped or not), and no header value holds CR, LF or NUL. The error says what is wrong, with the value
// escaped.
Result<void> ValidateRequest(const HttpRequest& request);

class HttpClient {
 public:
  // Builds the TLS context from `cfg` (CA, client certificate, verification); an error names what is wrong.
  static Result<std::unique_ptr<HttpClient>> Create(boost::asio::any_io_executor executor, RestConfig cfg,
                                                    std::size_t max_idle = 4);
  ~HttpClient();

  // One request and its whole response, within `timeout` (connect + write + read).
  boost::asio::awaitable<TransportResult<HttpResponse>> Send(const HttpRequest& request,
                                                             std::chrono::milliseconds timeout);

  // A streaming request (watch): the header must arrive within `header_timeout`; then `on_data` gets each
  // piece of the body as it arrives, with at most `idle_timeout` between pieces. Returns the status and, for
  // a non-200 status, the body. The connection is not reused afterwards.
  boost::asio::awaitable<TransportResult<HttpResponse>> Stream(
      const HttpRequest& request, std::chrono::milliseconds header_timeout,
      std::chrono::milliseconds idle_timeout, const std::function<void(std::string_view)>& on_data);

  const RestConfig& config() const { return cfg_; }
  std::size_t connections_opened() const { return opened_; }
  // Connections closed because the server sent bytes no request of ours asked for (an answer too many, e.g.
  // after a request that the server read as two): their next answer would belong to another request.
  std::size_t desynced_connections() const { return desynced_; }
  // Idle connections found closed by the server when their turn came, and not used.
  std::size_t closed_while_idle() const { return closed_while_idle_; }

 private:
  HttpClient(boost::asio::any_io_executor executor, RestConfig cfg, std::size_t max_idle);
  boost::asio::awaitable<TransportResult<std::unique_ptr<Connection>>> Open(
      std::chrono::steady_clock::time_point deadline);

  boost::asio::any_io_executor executor_;
  RestConfig cfg_;
  std::unique_ptr<boost::asio::ssl::context> ssl_;
  std::vector<std::unique_ptr<Connection>> idle_;
  std::size_t max_idle_;
  std::size_t opened_ = 0;
  std::size_t desynced_ = 0;
  std::size_t closed_while_idle_ = 0;
};

}  // namespace hami::k8s
