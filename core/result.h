#pragma once
// Result<T>: a value or an Error phrased for the operator. Parsers of anything that comes from outside the
// process (annotations, requests, config, API objects) return it instead of throwing.
#include <boost/system/result.hpp>
#include <string>
#include <type_traits>
#include <utility>

namespace hami {

struct Error {
  std::string message;
};

// Found by Boost through ADL so that Result<T>::value() on an error throws a readable std::runtime_error.
[[noreturn]] void throw_exception_from_error(const Error& e, const boost::source_location& where);

template <class T>
using Result = boost::system::result<T, Error>;

// Wraps a value explicitly. Needed for Result<std::string>: a bare std::string would also convert to Error.
template <class T>
Result<std::decay_t<T>> Ok(T&& value) {
  return Result<std::decay_t<T>>(boost::system::in_place_value, std::forward<T>(value));
}

}  // namespace hami
