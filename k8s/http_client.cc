#include "k8s/http_client.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cerrno>
#include <stdexcept>
#include <sys/socket.h>
#include <tuple>
#include <type_traits>
#include <variant>

#include "core/names.h"
#include "core/strings.h"

namespace hami::k8s {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

void throw_exception_from_error(const TransportError& e, const boost::source_location&) {
  throw std::runtime_error(e.message);
}

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

class Connection {
 public:
  using Plain = beast::tcp_stream;
  using Tls = beast::ssl_stream<beast::tcp_stream>;

  explicit Connection(const asio::any_io_executor& ex) : stream_(std::in_place_type<Plain>, ex) {}
  Connection(const asio::any_io_executor& ex, asio::ssl::context& ctx)
      : stream_(std::in_place_type<Tls>, ex, ctx) {}

  beast::tcp_stream& Lowest() {
    return std::visit([](auto& s) -> beast::tcp_stream& { return beast::get_lowest_layer(s); }, stream_);
  }
  Tls* tls() { return std::get_if<Tls>(&stream_); }
  template <class F>
  auto Visit(F&& f) {
    return std::visit(std::forward<F>(f), stream_);
  }
  beast::flat_buffer& buffer() { return buffer_; }
  // Bytes waiting on an idle connection answer no request of ours: whatever asked next would read them. With
  // TLS only decrypted application data counts (the server may send session tickets at any time).
  bool HasUnrequestedBytes() {
    if (buffer_.size() > 0) return true;
    if (Tls* t = tls()) return SSL_pending(t->native_handle()) > 0;
    boost::system::error_code ec;
    return Lowest().socket().available(ec) > 0;
  }
  // The server closed the connection while it sat idle: a request sent on it would be lost after leaving.
  // API servers close idle connections after a while (about 5 minutes). Over TCP the FIN is all there is to
  // read; over TLS its close_notify record comes first (the session tickets of the handshake were read with
  // the first answer), so any record waiting on an idle TLS connection retires it.
  bool ClosedByPeer() {
    char byte = 0;
    const ssize_t n = ::recv(Lowest().socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return tls() != nullptr && SSL_pending(tls()->native_handle()) == 0;
    return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }
  // Pending and later operations on the connection fail at once (see CloseOnCancel).
  void Close() {
    boost::system::error_code ignored;
    Lowest().socket().close(ignored);
  }
  bool open() { return Lowest().socket().is_open(); }
  bool reused = false;

 private:
  std::variant<Plain, Tls> stream_;
  beast::flat_buffer buffer_;
};

namespace {

// Awaits one of Beast's or Asio SSL's composed operations (a connect over a range, a handshake, an HTTP
// read or write) so that the caller's cancellation closes the connection. Their own per-operation
// cancellation reaches only the step in flight: one emitted while a step's completion waits in the queue is
// lost, and the next step waits for data or its timeout (minutes for a watch), so a cancelled informer did
// not end. A closed socket fails the step in flight and every later one at once.
template <class... Results, class Start>
asio::awaitable<std::tuple<Results...>> CloseOnCancel(Connection& c, Start start) {
  auto initiate = [&c, &start](auto handler) {
    auto slot = asio::get_associated_cancellation_slot(handler);
    if (slot.is_connected()) slot.assign([&c](asio::cancellation_type) { c.Close(); });
    auto executor = asio::get_associated_executor(handler, c.Lowest().get_executor());
    // The wrapper carries no cancellation slot: the operation's steps must not replace ours.
    try {
      start(asio::bind_executor(executor, [handler = std::move(handler), slot](Results... results) mutable {
        if (slot.is_connected()) slot.clear();
        std::move(handler)(std::move(results)...);
      }));
    } catch (...) {
      if (slot.is_connected()) slot.clear();  // nothing started: a later cancellation must not touch `c`
      throw;
    }
  };
  auto token = kTuple;
  co_return co_await asio::async_initiate<decltype(token), void(Results...)>(initiate, token);
}

bool HeaderSafe(std::string_view v) {
  return v.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
}

// A path segment that a URL cleaner would take as a relative step, once %2E is read as '.'.
bool DotSegment(std::string_view segment) {
  std::size_t dots = 0;
  for (std::size_t i = 0; i < segment.size();) {
    if (segment[i] == '.') {
      ++i;
    } else if (segment.size() - i >= 3 && segment[i] == '%' && segment[i + 1] == '2' &&
               (segment[i + 2] == 'e' || segment[i + 2] == 'E')) {
      i += 3;
    } else {
      return false;
    }
    ++dots;
  }
  return dots == 1 || dots == 2;
}

}  // namespace

Result<void> ValidateRequest(const HttpRequest& r) {
  const std::string_view target = r.target;
  if (target.empty() || target.front() != '/')
    return Error{fmt::format("request target {} is not a path", Quoted(target))};
  for (char c : target) {
    if (c <= ' ' || c >= 0x7f) {
      return Error{
          fmt::format("request target {} holds a character that must be percent-escaped", Quoted(target))};
    }
  }
  const std::string_view path = target.substr(0, target.find_first_of("?#"));
  for (std::string_view segment : Split(path.substr(1), '/')) {
    if (DotSegment(segment))
      return Error{fmt::format("request target {} has a '.' or '..' segment", Quoted(target))};
  }
  for (auto [name, value] : {std::pair<std::string_view, std::string_view>{"Authorization", r.authorization},
                             {"User-Agent", r.user_agent},
                             {"Content-Type", r.content_type}}) {
    if (!HeaderSafe(value)) return Error{fmt::format("{} header holds CR, LF or NUL", name)};
  }
  return {};
}

namespace {

http::request<http::string_body> MakeRequest(const HttpRequest& r, const RestConfig& cfg) {
  http::request<http::string_body> req{r.verb, r.target, 11};
  req.set(http::field::host, cfg.HostHeader());
  req.set(http::field::accept, "application/json");
  if (!r.user_agent.empty()) req.set(http::field::user_agent, r.user_agent);
  if (!r.authorization.empty()) req.set(http::field::authorization, r.authorization);
  if (!r.body.empty() || r.verb == http::verb::post || r.verb == http::verb::put ||
      r.verb == http::verb::patch) {
    req.set(http::field::content_type, r.content_type.empty() ? "application/json" : r.content_type);
    req.body() = r.body;
  }
  req.keep_alive(true);
  req.prepare_payload();
  return req;
}

std::optional<std::chrono::seconds> RetryAfter(const http::fields& f) {
  auto it = f.find(http::field::retry_after);
  if (it == f.end()) return std::nullopt;
  try {
    const long v = std::stol(std::string(it->value()));
    if (v >= 0) return std::chrono::seconds(v);
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

TransportError Refused(std::string message) {
  return TransportError{"refused to send: " + std::move(message), false, false, true};
}

TransportError Fail(std::string_view what, const boost::system::error_code& ec, bool sent) {
  const bool timed_out = ec == beast::error::timeout;
  return TransportError{fmt::format("{}: {}", what, timed_out ? "timed out" : ec.message()), sent, timed_out};
}

template <class Stream>
asio::awaitable<TransportResult<HttpResponse>> RoundTrip(Stream& s, Connection& c,
                                                         http::request<http::string_body>& req,
                                                         Clock::time_point deadline, bool& keep_alive) {
  c.Lowest().expires_at(deadline);
  auto [wec, wn] = co_await CloseOnCancel<boost::system::error_code, std::size_t>(
      c, [&](auto handler) { http::async_write(s, req, std::move(handler)); });
  (void)wn;
  if (wec) co_return Fail("sending request", wec, false);
  http::response_parser<http::string_body> parser;
  parser.body_limit(256 * 1024 * 1024);
  auto [rec, rn] = co_await CloseOnCancel<boost::system::error_code, std::size_t>(
      c, [&](auto handler) { http::async_read(s, c.buffer(), parser, std::move(handler)); });
  (void)rn;
  if (rec) {
    TransportError e = Fail("reading response", rec, true);
    e.answer_started = parser.got_some() || c.buffer().size() > 0;
    co_return e;
  }
  auto& res = parser.get();
  keep_alive = res.keep_alive();
  HttpResponse out;
  out.status = res.result_int();
  out.body = std::move(res.body());
  if (auto ct = res.find(http::field::content_type); ct != res.end())
    out.content_type = std::string(ct->value());
  out.retry_after = RetryAfter(res);
  co_return out;
}

template <class Stream>
asio::awaitable<TransportResult<HttpResponse>> StreamBody(
    Stream& s, Connection& c, http::request<http::string_body>& req, Clock::duration header_timeout,
    Clock::duration idle_timeout, const std::function<void(std::string_view)>& on_data) {
  c.Lowest().expires_after(header_timeout);
  auto [wec, wn] = co_await CloseOnCancel<boost::system::error_code, std::size_t>(
      c, [&](auto handler) { http::async_write(s, req, std::move(handler)); });
  (void)wn;
  if (wec) co_return Fail("sending watch request", wec, false);
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);
  auto [hec, hn] = co_await CloseOnCancel<boost::system::error_code, std::size_t>(
      c, [&](auto handler) { http::async_read_header(s, c.buffer(), parser, std::move(handler)); });
  (void)hn;
  if (hec) co_return Fail("reading watch response header", hec, true);
  HttpResponse out;
  out.status = parser.get().result_int();
  out.retry_after = RetryAfter(parser.get());
  const bool ok = out.status == 200;
  char chunk[16384];
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof(chunk);
    c.Lowest().expires_after(idle_timeout);
    // read_some: deliver each piece as it arrives (async_read would wait to fill the buffer).
    auto [ec, n] = co_await CloseOnCancel<boost::system::error_code, std::size_t>(
        c, [&](auto handler) { http::async_read_some(s, c.buffer(), parser, std::move(handler)); });
    (void)n;
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      if (ec == http::error::end_of_stream || ec == asio::error::eof) break;  // server closed the watch
      co_return Fail("reading watch stream", ec, true);
    }
    const std::size_t got = sizeof(chunk) - parser.get().body().size;
    if (got == 0) continue;
    if (ok) {
      on_data(std::string_view(chunk, got));
    } else {
      out.body.append(chunk, got);
    }
  }
  co_return out;
}

}  // namespace

Result<std::unique_ptr<HttpClient>> HttpClient::Create(asio::any_io_executor executor, RestConfig cfg,
                                                       std::size_t max_idle) {
  std::unique_ptr<HttpClient> client(new HttpClient(std::move(executor), std::move(cfg), max_idle));
  if (!client->cfg_.tls()) return client;
  auto ctx = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_client);
  boost::system::error_code ec;
  const RestConfig& c = client->cfg_;
  if (c.insecure_skip_tls_verify) {
    ctx->set_verify_mode(asio::ssl::verify_none);
  } else {
    ctx->set_verify_mode(asio::ssl::verify_peer);
    if (c.ca_pem.empty()) {
      ctx->set_default_verify_paths(ec);
    } else {
      ctx->add_certificate_authority(asio::buffer(c.ca_pem), ec);
    }
    if (ec) return Error{fmt::format("{}: certificate authority: {}", c.source, ec.message())};
    ctx->set_verify_callback(
        asio::ssl::host_name_verification(c.tls_server_name.empty() ? c.host : c.tls_server_name));
  }
  if (!c.client_cert_pem.empty()) {
    ctx->use_certificate_chain(asio::buffer(c.client_cert_pem), ec);
    if (ec) return Error{fmt::format("{}: client certificate: {}", c.source, ec.message())};
    ctx->use_private_key(asio::buffer(c.client_key_pem), asio::ssl::context::pem, ec);
    if (ec) return Error{fmt::format("{}: client key: {}", c.source, ec.message())};
  }
  client->ssl_ = std::move(ctx);
  return client;
}

HttpClient::HttpClient(asio::any_io_executor executor, RestConfig cfg, std::size_t max_idle)
    : executor_(std::move(executor)), cfg_(std::move(cfg)), max_idle_(max_idle) {}

HttpClient::~HttpClient() = default;

asio::awaitable<TransportResult<std::unique_ptr<Connection>>> HttpClient::Open(Clock::time_point deadline) {
  tcp::resolver resolver(executor_);
  auto [rec, endpoints] = co_await resolver.async_resolve(cfg_.host, cfg_.port, kTuple);
  if (rec) co_return Fail(fmt::format("resolving {}", cfg_.host), rec, false);
  auto conn =
      cfg_.tls() ? std::make_unique<Connection>(executor_, *ssl_) : std::make_unique<Connection>(executor_);
  conn->Lowest().expires_at(deadline);
  auto [cec, ep] = co_await CloseOnCancel<boost::system::error_code, tcp::endpoint>(
      *conn, [&](auto handler) { conn->Lowest().async_connect(endpoints, std::move(handler)); });
  (void)ep;
  if (cec) co_return Fail(fmt::format("connecting to {}", cfg_.HostHeader()), cec, false);
  conn->Lowest().socket().set_option(tcp::no_delay(true));
  if (auto* tls = conn->tls()) {
    const std::string& sni = cfg_.tls_server_name.empty() ? cfg_.host : cfg_.tls_server_name;
    if (!SSL_set_tlsext_host_name(tls->native_handle(), sni.c_str())) {
      co_return TransportError{fmt::format("TLS: cannot set server name '{}'", sni), false, false};
    }
    auto [hec] = co_await CloseOnCancel<boost::system::error_code>(*conn, [&](auto handler) {
      tls->async_handshake(asio::ssl::stream_base::client, std::move(handler));
    });
    if (hec) co_return Fail(fmt::format("TLS handshake with {}", cfg_.HostHeader()), hec, false);
  }
  ++opened_;
  co_return conn;
}

asio::awaitable<TransportResult<HttpResponse>> HttpClient::Send(const HttpRequest& request,
                                                                std::chrono::milliseconds timeout) {
  if (auto valid = ValidateRequest(request); !valid) co_return Refused(valid.error().message);
  if (!HeaderSafe(cfg_.HostHeader())) co_return Refused("Host header holds CR, LF or NUL");
  const auto deadline = Clock::now() + timeout;
  auto req = MakeRequest(request, cfg_);
  for (int attempt = 0;; ++attempt) {
    std::unique_ptr<Connection> conn;
    while (!idle_.empty() && !conn) {
      conn = std::move(idle_.back());
      idle_.pop_back();
      conn->reused = true;
      if (conn->ClosedByPeer()) {
        ++closed_while_idle_;
        conn.reset();
      } else if (conn->HasUnrequestedBytes()) {
        ++desynced_;
        spdlog::warn("API server {}: unrequested bytes on an idle connection; closing it", cfg_.HostHeader());
        conn.reset();
      }
    }
    if (!conn) {
      auto opened = co_await Open(deadline);
      if (!opened) co_return opened.error();
      conn = std::move(*opened);
    }
    bool keep_alive = false;
    Connection& c = *conn;
    auto result = co_await c.Visit([&](auto& s) { return RoundTrip(s, c, req, deadline, keep_alive); });
    if (!result) {
      // A kept-alive connection the server closed just before it was used fails the request with no answer
      // at all: try once more on a fresh one. That is safe when nothing was sent, for a read, and for any
      // request no byte of answer came for (every write of ours is a merge patch that sets values, a
      // compare-and-swap, or a Binding whose repeat answers 409 and is read back).
      const TransportError& e = result.error();
      const bool safe = !e.request_sent || request.verb == http::verb::get || !e.answer_started;
      const auto cancellation = co_await asio::this_coro::cancellation_state;
      const bool cancelled = cancellation.cancelled() != asio::cancellation_type::none;
      if (c.reused && attempt == 0 && safe && !e.timed_out && !cancelled) continue;
      co_return result;
    }
    if (c.buffer().size() > 0) {
      // More than one answer to one request: the connection is out of step with its requests.
      ++desynced_;
      spdlog::warn("API server {}: {} bytes after the answer to {}; closing the connection",
                   cfg_.HostHeader(), c.buffer().size(), Quoted(request.target));
      keep_alive = false;
    }
    if (keep_alive && c.open() && idle_.size() < max_idle_) {
      c.Lowest().expires_never();
      idle_.push_back(std::move(conn));
    }
    co_return result;
  }
}

asio::awaitable<TransportResult<HttpResponse>> HttpClient::Stream(
    const HttpRequest& request, std::chrono::milliseconds header_timeout,
    std::chrono::milliseconds idle_timeout, const std::function<void(std::string_view)>& on_data) {
  if (auto valid = ValidateRequest(request); !valid) co_return Refused(valid.error().message);
  if (!HeaderSafe(cfg_.HostHeader())) co_return Refused("Host header holds CR, LF or NUL");
  auto req = MakeRequest(request, cfg_);
  auto opened = co_await Open(Clock::now() + header_timeout);
  if (!opened) co_return opened.error();
  Connection& c = **opened;
  co_return co_await c.Visit(
      [&](auto& s) { return StreamBody(s, c, req, header_timeout, idle_timeout, on_data); });
}

}  // namespace hami::k8s
