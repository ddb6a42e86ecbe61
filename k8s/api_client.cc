#include "k8s/api_client.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/verb.hpp>
#include <boost/json.hpp>
#include <stdexcept>

#include "core/strings.h"

namespace hami::k8s {
namespace asio = boost::asio;
namespace json = boost::json;
namespace http = boost::beast::http;
using Clock = std::chrono::steady_clock;

void throw_exception_from_error(const ApiError& e, const boost::source_location&) {
  throw std::runtime_error(e.message);
}

namespace {

ApiErrorKind KindOf(unsigned status) {
  switch (status) {
    case 400:
      return ApiErrorKind::kBadRequest;
    case 401:
    case 403:
      return ApiErrorKind::kUnauthorized;
    case 404:
      return ApiErrorKind::kNotFound;
    case 409:
      return ApiErrorKind::kConflict;
    case 410:
      return ApiErrorKind::kGone;
    case 422:
      return ApiErrorKind::kInvalid;
    case 429:
      return ApiErrorKind::kTooManyRequests;
    default:
      return status >= 500 ? ApiErrorKind::kServer : ApiErrorKind::kOther;
  }
}

// Status fields of an error body, when it is a metav1.Status.
void ReadStatus(const json::value& v, std::string& reason, std::string& message, unsigned& code) {
  if (!v.is_object()) return;
  const auto& o = v.get_object();
  if (const auto* r = o.if_contains("reason"); r && r->is_string()) reason = r->get_string();
  if (const auto* m = o.if_contains("message"); m && m->is_string()) message = m->get_string();
  if (const auto* c = o.if_contains("code"); c && c->is_int64()) code = static_cast<unsigned>(c->get_int64());
}

bool Retryable(const ApiError& e, bool idempotent, bool request_sent, bool has_retry_after) {
  switch (e.kind) {
    case ApiErrorKind::kTransport:
      return idempotent || !request_sent;
    case ApiErrorKind::kTooManyRequests:
      return true;  // the server did not process it
    case ApiErrorKind::kServer:
      return idempotent || has_retry_after;
    default:
      return false;
  }
}

}  // namespace

ApiError ErrorFromResponse(const HttpResponse& response, std::string_view what) {
  ApiError e;
  e.status = response.status;
  e.kind = KindOf(response.status);
  std::string message;
  unsigned code = response.status;
  boost::system::error_code ec;
  json::value body = json::parse(response.body, ec);
  if (!ec) ReadStatus(body, e.reason, message, code);
  if (message.empty()) message = response.body.substr(0, 200);
  e.message = fmt::format("{}: HTTP {}{}{}", what, response.status, e.reason.empty() ? "" : " " + e.reason,
                          message.empty() ? "" : ": " + message);
  return e;
}

RateLimiter::RateLimiter(double qps, int burst)
    : qps_(qps), burst_(std::max(1, burst)), tokens_(std::max(1, burst)), last_(Clock::now()) {}

void RateLimiter::Refill(Clock::time_point now) {
  const double elapsed = std::chrono::duration<double>(now - last_).count();
  if (elapsed <= 0) return;
  last_ = now;
  tokens_ = std::min(burst_, tokens_ + elapsed * qps_);
}

std::optional<Clock::duration> RateLimiter::TryTake(Clock::time_point now) {
  if (qps_ <= 0) return std::nullopt;  // unlimited
  Refill(now);
  if (tokens_ >= 1) {
    tokens_ -= 1;
    return std::nullopt;
  }
  // At most an hour: a tiny qps must not overflow the duration.
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(std::min((1 - tokens_) / qps_, 3600.0)));
}

Clock::duration RateLimiter::Reserve(Clock::time_point now) {
  if (qps_ <= 0) return Clock::duration::zero();  // unlimited
  Refill(now);
  tokens_ -= 1;
  if (tokens_ >= 0) return Clock::duration::zero();
  // Bounded, so that a tiny qps cannot overflow the duration.
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(std::min(-tokens_ / qps_, 1e6)));
}

std::chrono::milliseconds Backoff(int attempt, std::chrono::milliseconds initial,
                                  std::chrono::milliseconds cap, std::mt19937& rng) {
  std::int64_t d = initial.count();
  for (int i = 0; i < attempt && d < cap.count(); ++i) d *= 2;
  d = std::min<std::int64_t>(d, cap.count());
  std::uniform_int_distribution<std::int64_t> dist(d / 2, std::max<std::int64_t>(d / 2, d));
  return std::chrono::milliseconds(dist(rng));
}

std::string UrlEncode(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (alnum || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

std::string EscapePathSegment(std::string_view s) {
  // A segment of dots alone ("." or "..") is a relative step to any URL cleaner on the way: escape its dots.
  if (!s.empty() && s.find_first_not_of('.') == std::string_view::npos) {
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) out += "%2E";
    return out;
  }
  return UrlEncode(s);
}

std::string PathFor(std::string_view group_version, std::string_view resource, std::string_view ns,
                    std::string_view name) {
  // Names are escaped, so none can add segments, a query or a fragment to the path.
  std::string path = group_version == "v1" ? "/api/v1" : fmt::format("/apis/{}", group_version);
  if (!ns.empty()) path += fmt::format("/namespaces/{}", EscapePathSegment(ns));
  path += fmt::format("/{}", resource);
  if (!name.empty()) path += fmt::format("/{}", EscapePathSegment(name));
  return path;
}

std::string ResourceOfPath(std::string_view path) {
  path = path.substr(0, path.find('?'));
  std::vector<std::string_view> seg;
  for (std::size_t at = 0; at < path.size();) {
    const std::size_t next = std::min(path.find('/', at), path.size());
    if (next > at) seg.push_back(path.substr(at, next - at));
    at = next + 1;
  }
  // Past the group and version: "api/v1" or "apis/<group>/<version>".
  std::size_t i = !seg.empty() && seg[0] == "api" ? 2 : 3;
  if (seg.size() > i + 2 && seg[i] == "namespaces") i += 2;  // a namespaced resource, not a namespace
  if (i >= seg.size()) return "other";
  std::string resource(seg[i]);
  if (i + 2 < seg.size()) resource += "/" + std::string(seg[i + 2]);  // a subresource
  return resource;
}

Result<std::unique_ptr<ApiClient>> ApiClient::Create(asio::any_io_executor executor, RestConfig cfg,
                                                     ClientOptions options) {
  auto http = HttpClient::Create(executor, std::move(cfg), options.max_idle_connections);
  if (!http) return http.error();
  return std::unique_ptr<ApiClient>(new ApiClient(std::move(executor), std::move(*http), std::move(options)));
}

ApiClient::ApiClient(asio::any_io_executor executor, std::unique_ptr<HttpClient> http, ClientOptions options)
    : executor_(std::move(executor)),
      http_(std::move(http)),
      options_(std::move(options)),
      limiter_(options_.shared_limiter ? options_.shared_limiter
                                       : std::make_shared<RateLimiter>(options_.qps, options_.burst)),
      rng_(std::random_device{}()) {}

std::string ApiClient::Authorization() {
  const RestConfig& cfg = http_->config();
  if (!cfg.token_file.empty()) {
    // Service-account tokens rotate: re-read the file now and then (and after a 401, see Call).
    const auto now = Clock::now();
    if (token_.empty() || now - token_read_ >= options_.token_reread) {
      auto text = ConfigEnv::System().read_file(cfg.token_file);
      if (text && !Trim(*text).empty()) token_ = std::string(Trim(*text));
      token_read_ = now;
    }
  } else {
    token_ = cfg.token;
  }
  return token_.empty() ? std::string() : "Bearer " + token_;
}

asio::awaitable<void> ApiClient::WaitForToken() {
  if (options_.background) {
    // Only spare tokens, but not for ever: after 10 s a background request books one like a decision, so a
    // budget saturated by a long burst cannot stop the health pass and the clean-up sweeps.
    constexpr auto kMaxYield = std::chrono::seconds(10);
    const auto start = Clock::now();
    while (auto again = limiter_->TryTake(Clock::now())) {
      if (Clock::now() - start >= kMaxYield) {
        asio::steady_timer timer(executor_, limiter_->Reserve(Clock::now()));
        co_await timer.async_wait(asio::use_awaitable);
        break;
      }
      asio::steady_timer timer(executor_, *again);
      co_await timer.async_wait(asio::use_awaitable);
    }
    throttled_seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
    co_return;
  }
  const auto wait = limiter_->Reserve(Clock::now());
  if (wait > Clock::duration::zero()) {
    throttled_seconds_ += std::chrono::duration<double>(wait).count();
    asio::steady_timer timer(executor_, wait);
    co_await timer.async_wait(asio::use_awaitable);
  }
}

asio::awaitable<ApiResult<HttpResponse>> ApiClient::Call(const HttpRequest& in, const std::string& what,
                                                         bool idempotent) {
  HttpRequest request = in;
  request.user_agent = options_.user_agent;
  bool reread_token = false;
  for (int attempt = 0;; ++attempt) {
    co_await WaitForToken();
    if (write_gate_ && request.verb != http::verb::get) {
      if (std::string why = write_gate_(); !why.empty())
        co_return ApiError{ApiErrorKind::kRefused, 0, "NotLeader",
                           fmt::format("{}: not sent: {}", what, why)};
    }
    request.authorization = Authorization();
    ++requests_;
    ++by_kind_[{ToLower(what.substr(0, what.find(' '))), ResourceOfPath(request.target)}];
    auto sent = co_await http_->Send(request, options_.timeout);
    ApiError error;
    bool request_sent = true;
    std::optional<std::chrono::seconds> retry_after;
    if (!sent) {
      error = ApiError{sent.error().refused ? ApiErrorKind::kRefused : ApiErrorKind::kTransport, 0, "",
                       fmt::format("{}: {}", what, sent.error().message)};
      request_sent = sent.error().request_sent;
    } else if (sent->status >= 200 && sent->status < 300) {
      co_return std::move(*sent);
    } else {
      error = ErrorFromResponse(*sent, what);
      retry_after = sent->retry_after;
      if (sent->status == 401 && !reread_token && !http_->config().token_file.empty()) {
        reread_token = true;  // the token may have rotated under us
        token_.clear();
        --attempt;
        continue;
      }
    }
    if (attempt + 1 >= options_.max_attempts ||
        !Retryable(error, idempotent, request_sent, retry_after.has_value())) {
      co_return error;
    }
    auto wait = Backoff(attempt, options_.backoff_initial, options_.backoff_max, rng_);
    if (retry_after) wait = std::max<std::chrono::milliseconds>(wait, *retry_after);
    asio::steady_timer timer(executor_, wait);
    co_await timer.async_wait(asio::use_awaitable);
  }
}

namespace {

ApiResult<json::value> ParseBody(const HttpResponse& r, std::string_view what) {
  boost::system::error_code ec;
  json::value v = json::parse(r.body, ec);
  if (ec)
    return ApiError{ApiErrorKind::kOther, r.status, "",
                    fmt::format("{}: response is not JSON: {}", what, ec.message())};
  return v;
}

std::string Query(std::initializer_list<std::pair<std::string_view, std::string>> params) {
  std::string q;
  for (const auto& [k, v] : params) {
    if (v.empty()) continue;
    q += q.empty() ? '?' : '&';
    q += fmt::format("{}={}", k, UrlEncode(v));
  }
  return q;
}

}  // namespace

asio::awaitable<ApiResult<json::value>> ApiClient::CallJson(http::verb verb, const std::string& path,
                                                            const std::string& body,
                                                            const std::string& content_type,
                                                            bool idempotent) {
  const HttpRequest request{verb, path, body, content_type, "", ""};
  const std::string what = fmt::format("{} {}", std::string_view(http::to_string(verb)), path);
  auto r = co_await Call(request, what, idempotent);
  if (!r) co_return r.error();
  co_return ParseBody(*r, what);
}

// Each call awaits CallJson with named arguments: its reference parameters must outlive the suspension.
asio::awaitable<ApiResult<json::value>> ApiClient::Get(const std::string& path) {
  const std::string none;
  co_return co_await CallJson(http::verb::get, path, none, none, true);
}

asio::awaitable<ApiResult<ListPage>> ApiClient::List(const std::string& path, const ListOptions& o) {
  const std::string target = path + Query({{"labelSelector", o.label_selector},
                                           {"fieldSelector", o.field_selector},
                                           {"resourceVersion", o.resource_version},
                                           {"limit", o.limit > 0 ? std::to_string(o.limit) : std::string()},
                                           {"continue", o.continue_token}});
  const HttpRequest request{http::verb::get, target, "", "", "", ""};
  const std::string what = "LIST " + path;
  auto r = co_await Call(request, what, true);
  if (!r) co_return r.error();
  auto body = ParseBody(*r, "LIST " + path);
  if (!body) co_return body.error();
  ListPage page;
  page.list = std::move(*body);
  if (const auto* md = page.list.is_object() ? page.list.get_object().if_contains("metadata") : nullptr;
      md && md->is_object()) {
    if (const auto* rv = md->get_object().if_contains("resourceVersion"); rv && rv->is_string()) {
      page.resource_version = rv->get_string();
    }
    if (const auto* c = md->get_object().if_contains("continue"); c && c->is_string()) {
      page.continue_token = c->get_string();
    }
  }
  co_return page;
}

asio::awaitable<ApiResult<json::value>> ApiClient::Create(const std::string& path,
                                                          const json::value& object) {
  const std::string body = json::serialize(object), type = "application/json";
  co_return co_await CallJson(http::verb::post, path, body, type, false);
}

asio::awaitable<ApiResult<json::value>> ApiClient::Update(const std::string& path,
                                                          const json::value& object) {
  const std::string body = json::serialize(object), type = "application/json";
  co_return co_await CallJson(http::verb::put, path, body, type, false);
}

asio::awaitable<ApiResult<json::value>> ApiClient::MergePatch(const std::string& path,
                                                              const json::value& patch) {
  const std::string body = json::serialize(patch), type = "application/merge-patch+json";
  co_return co_await CallJson(http::verb::patch, path, body, type, false);
}

asio::awaitable<ApiResult<json::value>> ApiClient::Delete(const std::string& path) {
  const std::string none;
  co_return co_await CallJson(http::verb::delete_, path, none, none, true);
}

asio::awaitable<ApiResult<void>> ApiClient::Bind(const std::string& ns, const std::string& pod,
                                                 const std::string& uid, const std::string& node) {
  const std::map<std::string, std::string> none;
  co_return co_await Bind(ns, pod, uid, node, none, none);
}

asio::awaitable<ApiResult<void>> ApiClient::Bind(const std::string& ns, const std::string& pod,
                                                 const std::string& uid, const std::string& node,
                                                 const std::map<std::string, std::string>& annotations,
                                                 const std::map<std::string, std::string>& labels) {
  json::object metadata{{"name", pod}, {"namespace", ns}};
  if (!uid.empty()) metadata["uid"] = uid;
  for (const auto& [field, values] : {std::pair{"annotations", &annotations}, std::pair{"labels", &labels}}) {
    if (values->empty()) continue;
    json::object o;
    for (const auto& [k, v] : *values) o[k] = v;
    metadata[field] = std::move(o);
  }
  json::object binding{{"apiVersion", "v1"},
                       {"kind", "Binding"},
                       {"metadata", std::move(metadata)},
                       {"target", json::object{{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node}}}};
  const std::string path = PathFor("v1", "pods", ns, pod) + "/binding";
  const HttpRequest request{http::verb::post, path, json::serialize(binding), "application/json", "", ""};
  const std::string what = "POST " + path;
  auto r = co_await Call(request, what, false);
  if (!r) co_return r.error();
  co_return ApiResult<void>{};
}

asio::awaitable<ApiResult<void>> ApiClient::Watch(const std::string& path, const WatchOptions& o,
                                                  const std::function<void(WatchEvent&&)>& on_event) {
  const std::string target = path + Query({{"watch", "1"},
                                           {"resourceVersion", o.resource_version},
                                           {"labelSelector", o.label_selector},
                                           {"fieldSelector", o.field_selector},
                                           {"allowWatchBookmarks", o.bookmarks ? "true" : ""},
                                           {"timeoutSeconds", std::to_string(o.timeout.count())}});
  const std::string what = "WATCH " + path;
  co_await WaitForToken();
  HttpRequest req{http::verb::get, target, "", "", Authorization(), options_.user_agent};
  ++requests_;
  ++by_kind_[{"watch", ResourceOfPath(path)}];
  json::stream_parser parser;
  std::optional<ApiError> stream_error;
  const auto deliver = [&](json::value v) {
    WatchEvent ev;
    if (v.is_object()) {
      auto& obj = v.get_object();
      if (auto* t = obj.if_contains("type"); t && t->is_string()) ev.type = t->get_string();
      if (auto* ob = obj.if_contains("object")) ev.object = std::move(*ob);
    }
    if (ev.type == "ERROR") {
      std::string reason, message;
      unsigned code = 0;
      ReadStatus(ev.object, reason, message, code);
      stream_error = ApiError{KindOf(code), code, reason,
                              fmt::format("{}: ERROR event {} {}: {}", what, code, reason, message)};
      if (reason == "Expired" || reason == "Gone") stream_error->kind = ApiErrorKind::kGone;
      return;
    }
    on_event(std::move(ev));
  };
  const std::function<void(std::string_view)> on_data = [&](std::string_view data) {
    while (!data.empty() && !stream_error) {
      boost::system::error_code ec;
      const std::size_t used = parser.write_some(data.data(), data.size(), ec);
      if (ec) {
        stream_error = ApiError{ApiErrorKind::kOther, 200, "",
                                fmt::format("{}: bad event JSON: {}", what, ec.message())};
        return;
      }
      data.remove_prefix(used);
      if (parser.done()) {
        deliver(parser.release());
        parser.reset();
      }
    }
  };
  const std::chrono::milliseconds idle = o.timeout + std::chrono::seconds(30);
  auto r = co_await http_->Stream(req, options_.timeout, idle, on_data);
  if (!r) {
    co_return ApiError{r.error().refused ? ApiErrorKind::kRefused : ApiErrorKind::kTransport, 0, "",
                       fmt::format("{}: {}", what, r.error().message)};
  }
  if (r->status != 200) co_return ErrorFromResponse(*r, what);
  if (stream_error) co_return *stream_error;
  co_return ApiResult<void>{};
}

}  // namespace hami::k8s
