#pragma once
// A loopback server for client tests: each accepted connection gets the next scripted answer, written as raw
// bytes in the pieces given (so a test can split a chunked body or a JSON value anywhere). It records the
// request heads it received.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <deque>
#include <string>
#include <vector>

namespace hami::testing {

class RawHttpServer {
 public:
  struct Answer {
    std::vector<std::string> pieces;  // written in order, each with its own write
    bool close_after = true;
  };

  explicit RawHttpServer(boost::asio::io_context& ioc)
      : acceptor_(ioc, {boost::asio::ip::make_address("127.0.0.1"), 0}) {
    boost::asio::co_spawn(ioc, Serve(), boost::asio::detached);
  }
  unsigned short port() const { return acceptor_.local_endpoint().port(); }
  void Add(Answer a) { answers_.push_back(std::move(a)); }
  const std::vector<std::string>& requests() const { return requests_; }
  // Connections this server has closed (or whose client left).
  std::size_t sessions_ended() const { return sessions_ended_; }

  // "HTTP/1.1 <status>" with a JSON body of fixed length.
  static Answer Json(int status, const std::string& body, const std::string& extra_headers = "") {
    return Answer{{"HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: application/json\r\n" +
                   extra_headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body},
                  false};
  }
  // A chunked 200 whose body is the concatenation of `parts`, each part sent as one chunk.
  static Answer Chunked(const std::vector<std::string>& parts) {
    Answer a;
    a.pieces.push_back(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (const auto& p : parts) {
      char len[32];
      std::snprintf(len, sizeof len, "%zx\r\n", p.size());
      a.pieces.push_back(std::string(len) + p + "\r\n");
    }
    a.pieces.push_back("0\r\n\r\n");
    return a;
  }

 private:
  boost::asio::awaitable<void> Serve() {
    for (;;) {
      auto [ec, socket] = co_await acceptor_.async_accept(boost::asio::as_tuple(boost::asio::use_awaitable));
      if (ec) co_return;
      boost::asio::co_spawn(acceptor_.get_executor(), Session(std::move(socket)), boost::asio::detached);
    }
  }
  boost::asio::awaitable<void> Session(boost::asio::ip::tcp::socket socket) {
    struct Ended {
      std::size_t& count;
      boost::asio::ip::tcp::socket& socket;
      ~Ended() {
        boost::system::error_code ignored;
        socket.close(ignored);  // the close reaches the client before this counts
        ++count;
      }
    } ended{sessions_ended_, socket};
    boost::asio::streambuf buf;
    for (;;) {
      auto [ec, n] = co_await boost::asio::async_read_until(
          socket, buf, "\r\n\r\n", boost::asio::as_tuple(boost::asio::use_awaitable));
      if (ec) co_return;
      std::string head(static_cast<const char*>(buf.data().data()), n);
      buf.consume(n);
      // Skip a request body, if any.
      if (auto cl = head.find("Content-Length: "); cl != std::string::npos) {
        const std::size_t len = std::stoul(head.substr(cl + 16));
        while (buf.size() < len) {
          auto [rec, rn] = co_await boost::asio::async_read(
              socket, buf.prepare(len - buf.size()), boost::asio::as_tuple(boost::asio::use_awaitable));
          if (rec) co_return;
          buf.commit(rn);
        }
        buf.consume(len);
      }
      requests_.push_back(head);
      if (answers_.empty()) co_return;
      Answer a = std::move(answers_.front());
      answers_.pop_front();
      for (const auto& piece : a.pieces) {
        auto [wec, wn] = co_await boost::asio::async_write(socket, boost::asio::buffer(piece),
                                                           boost::asio::as_tuple(boost::asio::use_awaitable));
        (void)wn;
        if (wec) co_return;
      }
      if (a.close_after) co_return;
    }
  }

  boost::asio::ip::tcp::acceptor acceptor_;
  std::deque<Answer> answers_;
  std::vector<std::string> requests_;
  std::size_t sessions_ended_ = 0;
};

}  // namespace hami::testing
