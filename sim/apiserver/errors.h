#pragma once
// API errors of the in-memory API server, shaped like kube-apiserver's metav1.Status failures
// ({"kind":"Status","status":"Failure","reason":"Conflict","code":409,...}).
#include <boost/json/object.hpp>
#include <boost/system/result.hpp>
#include <cstdint>
#include <string>
#include <string_view>

namespace hami::sim {

// One failed API operation: HTTP code, metav1.StatusReason, message and details as the apiserver phrases
// them.
struct ApiError {
  int code = 500;
  std::string reason = "InternalError";
  std::string message;
  boost::json::object details;  // {name, group, kind, causes, retryAfterSeconds}; empty when not applicable
  int retry_after_seconds = 0;  // > 0: also sent as the Retry-After header
};

// Found by Boost through ADL: ApiResult<T>::value() on an error throws std::runtime_error(message).
[[noreturn]] void throw_exception_from_error(const ApiError& e, const boost::source_location& where);

template <class T>
using ApiResult = boost::system::result<T, ApiError>;

// `resource` is the plural resource ("pods"), `group` its API group ("" for core).
ApiError NotFound(std::string_view group, std::string_view resource, std::string_view name);
ApiError AlreadyExists(std::string_view group, std::string_view resource, std::string_view name);
// 409 "Operation cannot be fulfilled on pods "p": <why>".
ApiError Conflict(std::string_view group, std::string_view resource, std::string_view name,
                  std::string_view why);
// The standard optimistic-concurrency conflict ("the object has been modified; ...").
ApiError StaleConflict(std::string_view group, std::string_view resource, std::string_view name);
// 410 with reason Expired (watch/list from a compacted resourceVersion, expired continue token).
ApiError Expired(std::string message);
// 422: `kind` is the Kind ("Pod"); `field` the offending field path.
ApiError Invalid(std::string_view group, std::string_view kind, std::string_view name, std::string_view field,
                 std::string_view detail);
ApiError BadRequest(std::string message);
ApiError Forbidden(std::string message);
ApiError MethodNotAllowed(std::string_view method, std::string_view path);
ApiError UnsupportedMediaType(std::string_view content_type, std::string_view accepted);
ApiError RequestEntityTooLarge(std::string message);
ApiError TooManyRequests(int retry_after_seconds);
ApiError InternalError(std::string message);
// 504 "Too large resource version" for a resourceVersion the store has not reached yet.
ApiError TooLargeResourceVersion(std::uint64_t requested, std::uint64_t current);

// The metav1.Status body for an error.
boost::json::object StatusJson(const ApiError& e);
// A Success Status ({"status":"Success","code":code}), optionally with details.
boost::json::object SuccessStatus(int code, boost::json::object details = {});

}  // namespace hami::sim
