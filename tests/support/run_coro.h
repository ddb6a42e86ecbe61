#pragma once
// Runs a coroutine on an io_context until it finishes, within a time budget: a stuck coroutine fails the test
// instead of hanging CI. No sleeps.
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <exception>
#include <functional>

// ASSERT_* returns, which a coroutine may not: this ends the test coroutine with co_return instead.
#define CO_ASSERT_TRUE(condition)                          \
  do {                                                     \
    if (!(condition)) {                                    \
      ADD_FAILURE() << "condition failed: " << #condition; \
      co_return;                                           \
    }                                                      \
  } while (false)
#define CO_ASSERT_EQ(a, b)        \
  do {                            \
    EXPECT_EQ(a, b);              \
    if (!((a) == (b))) co_return; \
  } while (false)

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

// Lets other coroutines on the loop run for `d` (used to pace a workload, not to wait for a result).
inline boost::asio::awaitable<void> Pause(std::chrono::milliseconds d) {
  boost::asio::steady_timer t(co_await boost::asio::this_coro::executor, d);
  co_await t.async_wait(boost::asio::use_awaitable);
}

// Checks `done` every `step` until it holds or `budget` has passed; says whether it held. For conditions
// another coroutine on the same loop makes true. Pass a named std::function: GCC 12 mishandles temporaries
// bound to coroutine parameters.
inline boost::asio::awaitable<bool> WaitUntil(
    const std::function<bool()>& done, std::chrono::milliseconds budget = std::chrono::seconds(5),
    std::chrono::milliseconds step = std::chrono::milliseconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + budget;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) co_return false;
    co_await Pause(step);
  }
  co_return true;
}

}  // namespace hami::testing
