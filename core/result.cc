#include "core/result.h"

#include <stdexcept>

namespace hami {

void throw_exception_from_error(const Error& e, const boost::source_location&) {
  throw std::runtime_error(e.message);
}

}  // namespace hami
