#pragma once
// Runs a coroutine on an io_context until it finishes, within a time budget: a stuck coroutine fails the test
// instead of hanging CI. No sleeps.
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <exception>

namespace hami::testing {

inline void RunCoro(boost::asio::io_context& ioc, boost::asio::awaitable<void> body,
                    std::chrono::milliseconds budget = std::chrono::seconds(10)) {
  std::exception_ptr error;
  bool done = false;
  boost::asio::co_spawn(ioc, std::move(body), [&](std::exception_ptr e) {
    error = e;
    done = true;
  });
  ioc.restart();
  const auto deadline = std::chrono::steady_clock::now() + budget;
  while (!done && std::chrono::steady_clock::now() < deadline) ioc.run_one_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(done) << "coroutine still running after " << budget.count() << " ms";
  if (error) std::rethrow_exception(error);
}

}  // namespace hami::testing
