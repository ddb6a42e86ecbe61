#pragma once
// An HTTP/1.1 request parser for servers that face untrusted clients: every size is bounded and nothing
// throws. Beast's own request parser stores every field, trailer fields included, in basic_fields, which
// throws std::length_error for a name or value over 65533 bytes; it does so from inside the read's
// completion handler, where the reading coroutine cannot catch it, so it escapes io_context::run(). Beast
// also bounds neither the trailer nor chunk extensions. This parser refuses a head or trailer over the
// header limit (http::error::header_limit), ignores trailer fields (no route reads them), and keeps at most
// body_limit bytes of body: one more ends the read with http::error::body_limit and body_too_large().
//
// Read with a buffer from MakeRequestBuffer(): Beast parses a chunk line or a trailer only once it is whole
// in the buffer, so the buffer's maximum is what bounds them (a larger one ends the read with
// http::error::buffer_overflow).
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstddef>

namespace hami::k8s {

struct RequestLimits {
  std::size_t header_limit = 64 * 1024;  // request line and fields, and separately the trailer
  std::size_t body_limit = 1 << 20;
};

// The largest header limit a parser takes: Beast cannot store a field value longer than this.
inline constexpr std::size_t kMaxHeaderLimit = 65533;

class BoundedRequestParser : public boost::beast::http::basic_parser<true> {
 public:
  // header_limit is clamped to kMaxHeaderLimit.
  explicit BoundedRequestParser(RequestLimits limits);

  // The request so far: method, target, version and header fields once the head is read, then the body.
  boost::beast::http::request<boost::beast::http::string_body>& get() { return message_; }
  // The body exceeded body_limit; get().body() holds its first body_limit bytes, the rest was not read.
  bool body_too_large() const { return body_too_large_; }
  // Another body limit for this request (its route's), set once the head is read and before the body.
  void set_body_limit(std::size_t limit) { limits_.body_limit = limit; }

 private:
  using error_code = boost::beast::error_code;
  using string_view = boost::beast::string_view;
  void on_request_impl(boost::beast::http::verb method, string_view method_str, string_view target,
                       int version, error_code& ec) override;
  void on_response_impl(int, string_view, int, error_code& ec) override;
  void on_field_impl(boost::beast::http::field name, string_view name_string, string_view value,
                     error_code& ec) override;
  void on_header_impl(error_code& ec) override;
  void on_body_init_impl(const boost::optional<std::uint64_t>& content_length, error_code& ec) override;
  std::size_t on_body_impl(string_view body, error_code& ec) override;
  void on_chunk_header_impl(std::uint64_t size, string_view extensions, error_code& ec) override;
  std::size_t on_chunk_body_impl(std::uint64_t remain, string_view body, error_code& ec) override;
  void on_finish_impl(error_code& ec) override;
  std::size_t Append(string_view body, error_code& ec);

  RequestLimits limits_;
  boost::beast::http::request<boost::beast::http::string_body> message_;
  bool in_trailer_ = false;
  std::size_t trailer_bytes_ = 0;
  bool body_too_large_ = false;
};

// A read buffer for BoundedRequestParser: room for a whole head or trailer and one read beyond it.
boost::beast::flat_buffer MakeRequestBuffer(std::size_t header_limit);

}  // namespace hami::k8s
