#pragma once
// The Kubernetes API client: authentication (bearer token re-read when its file changes, client
// certificates), a client-side token-bucket rate limit, retries with capped exponential backoff and jitter on
// connection errors, 429 and 5xx (honouring Retry-After), and typed errors callers can branch on (404, 409,
// 410...). Every call is a coroutine on the caller's executor; the one event loop owns the client.
#include <boost/asio/awaitable.hpp>
#include <boost/beast/http/verb.hpp>
#include <boost/json/value.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include "core/result.h"
#include "k8s/http_client.h"
#include "k8s/rest_config.h"

namespace hami::k8s {

enum class ApiErrorKind {
  kTransport,        // no HTTP answer (connect, TLS, read, timeout)
  kRefused,          // not sent: the request would have been malformed (see ValidateRequest); never retried
  kBadRequest,       // 400
  kUnauthorized,     // 401 / 403
  kNotFound,         // 404
  kConflict,         // 409 (Conflict or AlreadyExists: see reason)
  kGone,             // 410, or an ERROR watch event with code 410 (Expired/Gone)
  kInvalid,          // 422
  kTooManyRequests,  // 429
  kServer,           // 5xx
  kOther,
};

struct ApiError {
  ApiErrorKind kind = ApiErrorKind::kOther;
  unsigned status = 0;  // HTTP status, 0 for transport errors
  std::string reason;   // Status.reason ("NotFound", "AlreadyExists", "Expired"...)
  std::string message;  // one line for logs: what was asked and what came back
};
template <class T>
using ApiResult = boost::system::result<T, ApiError>;
[[noreturn]] void throw_exception_from_error(const ApiError& e, const boost::source_location& where);
ApiError ErrorFromResponse(const HttpResponse& response, std::string_view what);

struct ClientOptions {
  double qps = 5;
  int burst = 10;
  std::chrono::milliseconds timeout{30000};  // per attempt of a non-streaming request
  int max_attempts = 5;
  std::chrono::milliseconds backoff_initial{200};
  std::chrono::milliseconds backoff_max{10000};
  std::string user_agent = "hami-scheduler";
  std::chrono::seconds token_reread{60};
  // Keep-alive connections kept open between requests. Binds, filters and events run concurrently: fewer
  // idle connections than requests in flight means new TCP (and TLS) handshakes under load.
  std::size_t max_idle_connections = 32;
  // A rate limit shared with other clients (then qps/burst above are not used): one --kube-qps budget for
  // the decisions and the background work of one process.
  std::shared_ptr<class RateLimiter> shared_limiter;
  // Background requests (health-pass handshakes, clean-ups) take a token only when one is free and no
  // decision has booked it: they never delay a filter or a bind.
  bool background = false;
};

// Token bucket: `qps` tokens per second, at most `burst` banked. Waits on the caller's executor.
class RateLimiter {
 public:
  RateLimiter(double qps, int burst);
  // How long the caller must wait before its request may go (and takes the token).
  std::chrono::steady_clock::duration Reserve(std::chrono::steady_clock::time_point now);
  // For a background request: takes a token if one is free now (nullopt), else says when to ask again.
  // Tokens booked by Reserve() are never free, so background requests only use what decisions leave.
  std::optional<std::chrono::steady_clock::duration> TryTake(std::chrono::steady_clock::time_point now);

 private:
  double qps_;
  double burst_;
  double tokens_;
  std::chrono::steady_clock::time_point last_;
  void Refill(std::chrono::steady_clock::time_point now);
};

// Capped exponential backoff with full jitter: attempt n waits a random time in [d/2, d], d =
// min(initial*2^n, cap).
std::chrono::milliseconds Backoff(int attempt, std::chrono::milliseconds initial,
                                  std::chrono::milliseconds cap, std::mt19937& rng);

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;  // "" = most recent, "0" = any
  std::int64_t limit = 0;
  std::string continue_token;
};

struct ListPage {
  boost::json::value list;  // the List object
  std::string resource_version;
  std::string continue_token;
};

struct WatchOptions {
  std::string resource_version;
  std::string label_selector;
  std::string field_selector;
  std::chrono::seconds timeout{300};  // timeoutSeconds sent to the server
  bool bookmarks = true;
};

struct WatchEvent {
  std::string type;  // ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
  boost::json::value object;
};

// Coroutine parameters are references: pass named objects that outlive the co_await (GCC 12 destroys
// temporaries bound to by-value coroutine parameters twice in some co_await expressions).
class ApiClient {
 public:
  static Result<std::unique_ptr<ApiClient>> Create(boost::asio::any_io_executor executor, RestConfig cfg,
                                                   ClientOptions options = {});

  boost::asio::awaitable<ApiResult<boost::json::value>> Get(const std::string& path);
  boost::asio::awaitable<ApiResult<ListPage>> List(const std::string& path, const ListOptions& options);
  boost::asio::awaitable<ApiResult<boost::json::value>> Create(const std::string& path,
                                                               const boost::json::value& object);
  boost::asio::awaitable<ApiResult<boost::json::value>> Update(const std::string& path,
                                                               const boost::json::value& object);
  // JSON merge patch (RFC 7386): `null` deletes a key; a metadata.resourceVersion makes it compare-and-swap.
  boost::asio::awaitable<ApiResult<boost::json::value>> MergePatch(const std::string& path,
                                                                   const boost::json::value& patch);
  boost::asio::awaitable<ApiResult<boost::json::value>> Delete(const std::string& path);
  // POST pods/<name>/binding with the pod's UID as precondition. The API server copies the Binding's
  // annotations onto the pod in the same update that sets spec.nodeName.
  boost::asio::awaitable<ApiResult<void>> Bind(const std::string& ns, const std::string& pod,
                                               const std::string& uid, const std::string& node);
  // ... and its labels too (from Kubernetes 1.35 on; older API servers ignore them).
  boost::asio::awaitable<ApiResult<void>> Bind(const std::string& ns, const std::string& pod,
                                               const std::string& uid, const std::string& node,
                                               const std::map<std::string, std::string>& annotations,
                                               const std::map<std::string, std::string>& labels);

  // Streams a watch; `on_event` runs on the loop for each event as it is parsed (JSON values are framed by a
  // streaming parser, never by lines). Returns when the server ends the stream (normally at its timeout), or
  // with an error: HTTP errors, transport errors, or an ERROR event (410 Expired -> kGone).
  boost::asio::awaitable<ApiResult<void>> Watch(const std::string& path, const WatchOptions& options,
                                                const std::function<void(WatchEvent&&)>& on_event);

  // Asked before every attempt of a request that writes (any verb but GET): a non-empty answer refuses the
  // attempt unsent (kRefused, reason "NotLeader") with that answer as the reason. Leader election fences
  // writes here, after the rate-limit wait and each retry's backoff, so a write let through near the end of a
  // term cannot leave after it.
  using WriteGate = std::function<std::string()>;
  void SetWriteGate(WriteGate gate) { write_gate_ = std::move(gate); }

  const RestConfig& config() const { return http_->config(); }
  const ClientOptions& options() const { return options_; }
  HttpClient& http() { return *http_; }
  std::size_t requests_sent() const { return requests_; }
  // Requests sent (every attempt), by verb and resource ("get pods", "create pods/binding", "watch nodes"):
  // what the rate limit is spent on.
  using RequestKey =
      std::pair<std::string, std::string>;  // verb (lower case, "watch" and "list" apart), resource
  const std::map<RequestKey, std::uint64_t>& requests_by_kind() const { return by_kind_; }
  // Time requests spent waiting for the client-side rate limit, summed over requests.
  double throttled_seconds() const { return throttled_seconds_; }

 private:
  ApiClient(boost::asio::any_io_executor executor, std::unique_ptr<HttpClient> http, ClientOptions options);
  // GCC 12 mishandles braced temporaries passed by value to coroutines: callers pass named objects.
  boost::asio::awaitable<ApiResult<HttpResponse>> Call(const HttpRequest& request, const std::string& what,
                                                       bool idempotent);
  // One request whose answer is a JSON object.
  boost::asio::awaitable<ApiResult<boost::json::value>> CallJson(boost::beast::http::verb verb,
                                                                 const std::string& path,
                                                                 const std::string& body,
                                                                 const std::string& content_type,
                                                                 bool idempotent);
  boost::asio::awaitable<void> WaitForToken();
  std::string Authorization();

  boost::asio::any_io_executor executor_;
  std::unique_ptr<HttpClient> http_;
  ClientOptions options_;
  std::shared_ptr<RateLimiter> limiter_;
  std::mt19937 rng_;
  WriteGate write_gate_;
  std::string token_;
  std::chrono::steady_clock::time_point token_read_{};
  std::size_t requests_ = 0;
  std::map<RequestKey, std::uint64_t> by_kind_;
  double throttled_seconds_ = 0;
};

// The resource a request path names: "/api/v1/namespaces/d/pods/p/binding" -> "pods/binding",
// "/apis/coordination.k8s.io/v1/namespaces/d/leases" -> "leases", "/api/v1/namespaces/d" -> "namespaces".
std::string ResourceOfPath(std::string_view path);

// Path helpers: "/api/v1/namespaces/<ns>/pods/<name>", "/apis/coordination.k8s.io/v1/...". The namespace and
// name are percent-escaped (EscapePathSegment); every path the client sends is built here.
std::string PathFor(std::string_view group_version, std::string_view resource, std::string_view ns = "",
                    std::string_view name = "");
// Percent-escapes everything but RFC 3986 unreserved characters.
std::string UrlEncode(std::string_view s);
// UrlEncode, and a segment of dots alone ("." or "..") has its dots escaped as well.
std::string EscapePathSegment(std::string_view s);

}  // namespace hami::k8s
