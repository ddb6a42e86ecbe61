#pragma once
// The process's event loop as `serve` and `sim-apiserver` run it. A handler that throws out of
// io_context::run() is a bug (every coroutine is meant to contain its own failures); it must neither end
// the process nor pass unnoticed: it is logged with what it threw, counted, and the loop goes on (asio lets
// run() be called again after a handler threw).
#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <string_view>

namespace hami::k8s {

// Runs `ioc` until run() returns normally (stopped, or out of work). Each exception that escaped a handler
// is logged as "<who>: ..." and adds one to `exceptions`.
void RunLoop(boost::asio::io_context& ioc, std::uint64_t& exceptions, std::string_view who);

}  // namespace hami::k8s
