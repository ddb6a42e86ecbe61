#include "k8s/event_loop.h"

#include <spdlog/spdlog.h>

#include <exception>
#include <string>

namespace hami::k8s {

void RunLoop(boost::asio::io_context& ioc, std::uint64_t& exceptions, std::string_view who) {
  for (;;) {
    std::string what;
    try {
      ioc.run();
      return;
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
      what = "a non-standard exception";
    }
    ++exceptions;
    spdlog::critical("{}: BUG: an exception escaped the event loop ({} so far), serving on: {}", who,
                     exceptions, what);
  }
}

}  // namespace hami::k8s
