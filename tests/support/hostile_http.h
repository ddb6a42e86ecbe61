#pragma once
// Hostile HTTP/1.1 requests for server tests (oversized heads, trailers, chunk lines and bodies), and a raw
// client that sends one and reports what the server did: answered with a status, or closed the connection.
// Every server facing clients must survive each of them and keep answering.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <string>
#include <utility>
#include <vector>

namespace hami::testing {

struct HostileRequest {
  std::string name;
  std::string bytes;
};

// `path` is the target of each request (a route the server has, so that only the hostile part is wrong).
inline std::vector<HostileRequest> HostileRequests(const std::string& path) {
  const std::string chunked = "POST " + path + " HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
  std::string many_fields;
  for (int i = 0; i < 20000; ++i) many_fields += "X-T" + std::to_string(i) + ": v\r\n";
  return {
      // Beast's basic_fields throws std::length_error for a value over 65533 bytes, from inside the read.
      {"a 70 KiB trailer field",
       chunked + "2\r\n{}\r\n0\r\nX-Trailer: " + std::string(70 * 1024, 't') + "\r\n\r\n"},
      {"a 300 KiB trailer of 20000 fields", chunked + "2\r\n{}\r\n0\r\n" + many_fields + "\r\n"},
      {"a 70 KiB header field",
       "GET " + path + " HTTP/1.1\r\nHost: t\r\nX-Big: " + std::string(70 * 1024, 'h') + "\r\n\r\n"},
      {"a 300 KiB head of 20000 fields", "GET " + path + " HTTP/1.1\r\nHost: t\r\n" + many_fields + "\r\n"},
      {"a 100 KiB request target", "GET /" + std::string(100 * 1024, 'p') + " HTTP/1.1\r\nHost: t\r\n\r\n"},
      {"a chunk size that overflows 64 bits", chunked + "1ffffffffffffffffffff\r\nx\r\n0\r\n\r\n"},
      {"a 200 KiB chunk extension", chunked + "2;" + std::string(200 * 1024, 'e') + "\r\n{}\r\n0\r\n\r\n"},
      {"a 9 MiB body", "POST " + path + " HTTP/1.1\r\nHost: t\r\nContent-Length: 9437184\r\n\r\n" +
                           std::string(9 * 1024 * 1024, 'b')},
      {"a 9 MiB chunked body", chunked + "900000\r\n" + std::string(9 * 1024 * 1024, 'c') + "\r\n0\r\n\r\n"},
      {"a Content-Length beyond 64 bits",
       "POST " + path + " HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999999999999999999\r\n\r\n"},
  };
}

// What the server did with one request: its status, or 0 when it closed the connection without one.
inline boost::asio::awaitable<unsigned> SendRaw(boost::asio::io_context& ioc, std::uint16_t port,
                                                std::string bytes) {
  namespace asio = boost::asio;
  namespace http = boost::beast::http;
  constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
  asio::ip::tcp::socket socket(ioc);
  auto [cec] = co_await socket.async_connect({asio::ip::make_address("127.0.0.1"), port}, kTuple);
  if (cec) co_return 0;
  // The server may answer and close before it read everything: a failed write is not the verdict.
  auto [wec, wn] = co_await asio::async_write(socket, asio::buffer(bytes), kTuple);
  (void)wec;
  (void)wn;
  boost::beast::flat_buffer buffer;
  http::response_parser<http::string_body> res;
  res.body_limit(16 * 1024 * 1024);
  auto [rec, rn] = co_await http::async_read(socket, buffer, res, kTuple);
  if (rec) co_return 0;
  co_return res.get().result_int();
}

}  // namespace hami::testing
