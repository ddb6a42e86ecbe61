// The extender's HTTP server, fed raw bytes over a real loopback connection (the same code path and parser
// settings as `serve`). Differential property: Beast's request parser, run on the same bytes with the
// server's limits, predicts exactly which responses come back, in order, with which status, HTTP version
// and echoed target and body. Also: nothing escapes the event loop, nothing hangs, no connection is left.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <memory>
#include <optional>

#include "k8s/http_server.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using asio::ip::tcp;
using namespace std::chrono_literals;

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
constexpr std::size_t kBodyLimit = 1024;
constexpr std::size_t kHeaderLimit = 2048;

asio::awaitable<hami::k8s::ServerResponse> Echo(const hami::k8s::ServerRequest& r) {
  hami::k8s::ServerResponse out;
  out.content_type = "text/plain";
  out.body = fmt::format("{} {} {}\n{}", http::to_string(r.method), r.target, r.body_too_large, r.body);
  co_return out;
}

asio::awaitable<hami::k8s::ServerResponse> Boom(const hami::k8s::ServerRequest&) {
  throw std::runtime_error("handler failure");
  co_return hami::k8s::ServerResponse{};
}

struct Harness {
  asio::io_context ioc;
  std::unique_ptr<hami::k8s::HttpServer> server;
  std::uint16_t port = 0;

  Harness() {
    hami::k8s::HttpServerOptions o;
    o.address = "127.0.0.1:0";
    o.body_limit = kBodyLimit;
    o.header_limit = kHeaderLimit;
    // Each input ends with the client's FIN, so no timeout is ever needed; a hang shows as a failure below.
    o.header_timeout = o.read_timeout = o.idle_timeout = o.write_timeout = 20s;
    server = std::make_unique<hami::k8s::HttpServer>(ioc.get_executor(), o);
    server->Route(http::verb::post, "/filter", Echo);
    server->Route(http::verb::post, "/bind", Echo);
    server->Route(http::verb::get, "/healthz", Echo);
    server->Route(http::verb::get, "/boom", Boom);
    port = server->Listen().value();
    asio::co_spawn(ioc, server->Serve(), [](std::exception_ptr e) {
      if (e) std::rethrow_exception(e);  // escapes ioc.run: the fuzzer reports it
    });
  }
};

Harness& TheHarness() {
  static Harness* h = new Harness();  // never destroyed: the fuzzer exits without unwinding
  return *h;
}

struct Expected {
  unsigned status = 0;
  unsigned version = 11;
  bool head = false;
  std::optional<std::string> echo;  // the echoed body for the echo routes
  // A chunked request with trailer fields whose bytes (with the head's) pass the header limit: the server
  // counts trailer fields itself (k8s/request_parser.cc) where Beast's parser does not, so 431 is right too.
  bool trailer_may_431 = false;
};

// What the server must answer, request by request, predicted by parsing the bytes with the server's limits.
std::vector<Expected> Predict(std::string_view input) {
  std::vector<Expected> out;
  while (!input.empty()) {
    // dynamic_body: string_body reserves a declared Content-Length up front, which fails for a huge one.
    http::request_parser<http::dynamic_body> p;
    p.header_limit(kHeaderLimit);
    p.body_limit(boost::none);
    p.eager(false);  // stops after the head, whose fields alone say keep-alive (see below)
    boost::beast::error_code ec;
    std::size_t used_total = 0;
    // Beast's parser adds trailer fields to the message; the server ignores them, and a Connection field
    // in a trailer must not change how the connection goes on (RFC 9110 section 6.5.1).
    bool keep_alive = false;
    for (;;) {
      const std::size_t used = p.put(asio::buffer(input.data(), input.size()), ec);
      used_total += used;
      input.remove_prefix(used);
      if (!p.eager() && p.is_header_done()) {
        keep_alive = p.get().keep_alive();
        p.eager(true);
      }
      if (ec || p.is_done() || used == 0 || input.empty()) break;
    }
    if (!ec && !p.is_done()) p.put_eof(ec);  // the client's FIN
    // The server stops reading one byte past the body limit and answers, whatever follows (or does not).
    const bool over_limit = p.is_header_done() && p.get().body().size() > kBodyLimit;
    if (over_limit) {
      ec = {};
    } else if (!p.is_done() && !ec) {
      return out;
    }
    if (ec == http::error::header_limit) {
      out.push_back({431, 11, false, std::nullopt});
      return out;
    }
    if (ec == http::error::need_more || ec == http::error::partial_message) return out;
    if (ec) {
      out.push_back({400, 11, false, std::nullopt});
      return out;
    }
    const auto& req = p.get();
    const std::string req_body = boost::beast::buffers_to_string(req.body().data());
    Expected e;
    e.trailer_may_431 = req.chunked() && used_total > kHeaderLimit;
    e.version = req.version();
    e.head = req.method() == http::verb::head;
    const std::string target(req.target());
    const std::string path = target.substr(0, target.find('?'));
    const bool too_large = req_body.size() > kBodyLimit;
    const bool post_route = path == "/filter" || path == "/bind";
    const bool get_route = path == "/healthz" || path == "/boom";
    if (!post_route && !get_route) {
      e.status = 404;
    } else if ((post_route && req.method() != http::verb::post) ||
               (get_route && req.method() != http::verb::get)) {
      e.status = 405;
    } else if (path == "/boom") {
      e.status = 500;
    } else {
      e.status = 200;
      const std::string body = too_large ? req_body.substr(0, kBodyLimit) : req_body;
      e.echo = fmt::format("{} {} {}\n{}", http::to_string(req.method()), target, too_large, body);
    }
    out.push_back(e);
    if (too_large || !keep_alive) return out;
  }
  return out;
}

asio::awaitable<void> Client(std::uint16_t port, std::string input, std::string& received, bool& done) {
  tcp::socket socket(co_await asio::this_coro::executor);
  co_await socket.async_connect({asio::ip::make_address("127.0.0.1"), port}, asio::use_awaitable);
  // Written concurrently with the reads below, then half-closed: the server sees the whole input and EOF.
  asio::co_spawn(
      socket.get_executor(),
      [&socket, input = std::move(input)]() -> asio::awaitable<void> {
        co_await asio::async_write(socket, asio::buffer(input), kTuple);
        boost::system::error_code ignored;
        socket.shutdown(tcp::socket::shutdown_send, ignored);
      },
      asio::detached);
  std::array<char, 16384> chunk;
  for (;;) {
    auto [ec, n] = co_await socket.async_read_some(asio::buffer(chunk), kTuple);
    received.append(chunk.data(), n);
    if (ec) break;
  }
  done = true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Harness& h = TheHarness();
  const std::string input(hami::fuzz::AsText(data, size));
  std::string received;
  bool done = false;
  asio::co_spawn(h.ioc, Client(h.port, input, received, done), [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  });
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!done || h.server->open_connections() != 0 || h.server->in_flight() != 0) {
    h.ioc.run_one_for(100ms);
    FUZZ_CHECK(std::chrono::steady_clock::now() < deadline, "the server did not end the connection in 10 s");
  }

  const std::vector<Expected> expected = Predict(input);
  std::string_view rest = received;
  std::size_t index = 0;
  while (!rest.empty()) {
    http::response_parser<http::string_body> p;
    p.eager(true);
    p.skip(index < expected.size() && expected[index].head);
    boost::beast::error_code ec;
    std::size_t used = p.put(asio::buffer(rest.data(), rest.size()), ec);
    rest.remove_prefix(used);
    while (!ec && !p.is_done() && used > 0 && !rest.empty()) {
      used = p.put(asio::buffer(rest.data(), rest.size()), ec);
      rest.remove_prefix(used);
    }
    FUZZ_CHECK(!ec && p.is_done(),
               fmt::format("response {} is not valid HTTP ({}):\n{}", index, ec.message(), received));
    const auto& res = p.get();
    if (res.result_int() == 100) continue;  // the interim answer to Expect: 100-continue
    FUZZ_CHECK(index < expected.size(), fmt::format("response {} is one too many:\n{}", index, received));
    const Expected& want = expected[index];
    if (want.trailer_may_431 && res.result_int() == 431) {
      FUZZ_CHECK(rest.empty(),
                 fmt::format("an answer after a 431, which closes the connection:\n{}", received));
      return 0;
    }
    FUZZ_CHECK(res.result_int() == want.status, fmt::format("response {}: status {}, want {}:\n{}", index,
                                                            res.result_int(), want.status, received));
    FUZZ_CHECK(res.version() == want.version,
               fmt::format("response {}: another HTTP version:\n{}", index, received));
    if (want.echo) {
      FUZZ_CHECK(res.body() == *want.echo, fmt::format("response {}: wrong echo:\n{}", index, received));
    }
    ++index;
  }
  FUZZ_CHECK(index == expected.size(),
             fmt::format("{} responses, want {}:\n{}", index, expected.size(), received));
  return 0;
}
