#include "k8s/request_parser.h"

#include <algorithm>
#include <boost/beast/http/error.hpp>

namespace hami::k8s {
namespace http = boost::beast::http;

namespace {
constexpr std::size_t kReadSlack = 16 * 1024;  // what one read may add beyond a whole head
}

BoundedRequestParser::BoundedRequestParser(RequestLimits limits) : limits_(limits) {
  limits_.header_limit = std::clamp<std::size_t>(limits_.header_limit, 1, kMaxHeaderLimit);
  header_limit(static_cast<std::uint32_t>(limits_.header_limit));
  body_limit(boost::none);  // enforced in Append, which keeps what fits
}

void BoundedRequestParser::on_request_impl(http::verb method, string_view method_str, string_view target,
                                           int version, error_code&) {
  if (method == http::verb::unknown) {
    message_.method_string(method_str);
  } else {
    message_.method(method);
  }
  message_.target(target);
  message_.version(version);
}

void BoundedRequestParser::on_response_impl(int, string_view, int, error_code& ec) {
  ec = http::error::bad_version;  // a request parser never sees a status line
}

void BoundedRequestParser::on_field_impl(http::field name, string_view name_string, string_view value,
                                         error_code& ec) {
  if (in_trailer_) {
    trailer_bytes_ += name_string.size() + value.size() + 4;  // ": " and CRLF
    if (trailer_bytes_ > limits_.header_limit) ec = http::error::header_limit;
    return;
  }
  // The head as a whole is within header_limit (Beast checks), so each field is too: basic_fields can
  // store it. Checked anyway, so that no input can reach its throw.
  if (name_string.size() > kMaxHeaderLimit || value.size() > kMaxHeaderLimit) {
    ec = http::error::header_limit;
    return;
  }
  message_.insert(name, name_string, value);
}

void BoundedRequestParser::on_header_impl(error_code&) { in_trailer_ = true; }

void BoundedRequestParser::on_body_init_impl(const boost::optional<std::uint64_t>& content_length,
                                             error_code&) {
  if (content_length && *content_length <= limits_.body_limit) {
    message_.body().reserve(static_cast<std::size_t>(*content_length));
  }
}

std::size_t BoundedRequestParser::Append(string_view body, error_code& ec) {
  std::string& kept = message_.body();
  const std::size_t room = limits_.body_limit - kept.size();
  if (body.size() > room) {
    kept.append(body.data(), room);
    body_too_large_ = true;
    ec = http::error::body_limit;
    return room;
  }
  kept.append(body.data(), body.size());
  return body.size();
}

std::size_t BoundedRequestParser::on_body_impl(string_view body, error_code& ec) { return Append(body, ec); }

void BoundedRequestParser::on_chunk_header_impl(std::uint64_t, string_view, error_code&) {}

std::size_t BoundedRequestParser::on_chunk_body_impl(std::uint64_t, string_view body, error_code& ec) {
  return Append(body, ec);
}

void BoundedRequestParser::on_finish_impl(error_code&) {}

boost::beast::flat_buffer MakeRequestBuffer(std::size_t header_limit) {
  return boost::beast::flat_buffer(std::clamp<std::size_t>(header_limit, 1, kMaxHeaderLimit) + kReadSlack);
}

}  // namespace hami::k8s
