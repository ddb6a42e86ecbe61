#include "sim/apiserver/errors.h"

#include <fmt/format.h>

#include <stdexcept>

namespace hami::sim {
namespace json = boost::json;
namespace {

std::string Qualified(std::string_view group, std::string_view resource) {
  return group.empty() ? std::string(resource) : fmt::format("{}.{}", resource, group);
}

json::object Details(std::string_view group, std::string_view kind, std::string_view name) {
  json::object d;
  if (!name.empty()) d["name"] = name;
  if (!group.empty()) d["group"] = group;
  if (!kind.empty()) d["kind"] = kind;
  return d;
}

}  // namespace

void throw_exception_from_error(const ApiError& e, const boost::source_location&) {
  throw std::runtime_error(fmt::format("{} ({} {})", e.message, e.code, e.reason));
}

ApiError NotFound(std::string_view group, std::string_view resource, std::string_view name) {
  return {404, "NotFound", fmt::format("{} \"{}\" not found", Qualified(group, resource), name),
          Details(group, resource, name)};
}

ApiError AlreadyExists(std::string_view group, std::string_view resource, std::string_view name) {
  return {409, "AlreadyExists", fmt::format("{} \"{}\" already exists", Qualified(group, resource), name),
          Details(group, resource, name)};
}

ApiError Conflict(std::string_view group, std::string_view resource, std::string_view name,
                  std::string_view why) {
  return {
      409, "Conflict",
      fmt::format("Operation cannot be fulfilled on {} \"{}\": {}", Qualified(group, resource), name, why),
      Details(group, resource, name)};
}

ApiError StaleConflict(std::string_view group, std::string_view resource, std::string_view name) {
  return Conflict(
      group, resource, name,
      "the object has been modified; please apply your changes to the latest version and try again");
}

ApiError Expired(std::string message) { return {410, "Expired", std::move(message), {}}; }

ApiError Invalid(std::string_view group, std::string_view kind, std::string_view name, std::string_view field,
                 std::string_view detail) {
  json::object d = Details(group, kind, name);
  d["causes"] = json::array{json::object{{"reason", "FieldValueInvalid"},
                                         {"message", fmt::format("Invalid value: {}", detail)},
                                         {"field", field}}};
  return {422, "Invalid",
          fmt::format("{} \"{}\" is invalid: {}: Invalid value: {}", kind, name, field, detail),
          std::move(d)};
}

ApiError BadRequest(std::string message) { return {400, "BadRequest", std::move(message), {}}; }

ApiError Forbidden(std::string message) { return {403, "Forbidden", std::move(message), {}}; }

ApiError MethodNotAllowed(std::string_view method, std::string_view path) {
  return {
      405,
      "MethodNotAllowed",
      fmt::format("the server does not allow this method on the requested resource ({} {})", method, path),
      {}};
}

ApiError UnsupportedMediaType(std::string_view content_type, std::string_view accepted) {
  return {
      415,
      "UnsupportedMediaType",
      fmt::format("the body of the request was in an unknown format ({}) - accepted media types include: {}",
                  content_type.empty() ? "none" : content_type, accepted),
      {}};
}

ApiError RequestEntityTooLarge(std::string message) {
  return {413, "RequestEntityTooLarge", std::move(message), {}};
}

ApiError TooManyRequests(int retry_after_seconds) {
  ApiError e{429, "TooManyRequests", "Too many requests, please try again later.", {}};
  e.details["retryAfterSeconds"] = retry_after_seconds;
  e.retry_after_seconds = retry_after_seconds;
  return e;
}

ApiError InternalError(std::string message) {
  ApiError e{500, "InternalError", fmt::format("Internal error occurred: {}", message), {}};
  e.details["causes"] = json::array{json::object{{"message", message}}};
  return e;
}

ApiError TooLargeResourceVersion(std::uint64_t requested, std::uint64_t current) {
  ApiError e{504,
             "Timeout",
             fmt::format("Timeout: Too large resource version: {}, current: {}", requested, current),
             {}};
  e.details["causes"] = json::array{
      json::object{{"reason", "ResourceVersionTooLarge"}, {"message", "Too large resource version"}}};
  e.details["retryAfterSeconds"] = 1;
  e.retry_after_seconds = 1;
  return e;
}

json::object StatusJson(const ApiError& e) {
  json::object s{{"kind", "Status"},    {"apiVersion", "v1"},   {"metadata", json::object{}},
                 {"status", "Failure"}, {"message", e.message}, {"reason", e.reason}};
  if (!e.details.empty()) s["details"] = e.details;
  s["code"] = e.code;
  return s;
}

json::object SuccessStatus(int code, json::object details) {
  json::object s{
      {"kind", "Status"}, {"apiVersion", "v1"}, {"metadata", json::object{}}, {"status", "Success"}};
  if (!details.empty()) s["details"] = std::move(details);
  s["code"] = code;
  return s;
}

}  // namespace hami::sim
