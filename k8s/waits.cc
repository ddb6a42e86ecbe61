#include "k8s/waits.h"

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace hami::k8s {
namespace asio = boost::asio;

asio::awaitable<void> SleepFor(std::chrono::milliseconds d) {
  asio::steady_timer timer(co_await asio::this_coro::executor, d);
  co_await timer.async_wait(asio::use_awaitable);
}

asio::awaitable<void> ThrowIfCancelled() {
  asio::cancellation_state state = co_await asio::this_coro::cancellation_state;
  if (state.cancelled() != asio::cancellation_type::none) {
    throw boost::system::system_error(asio::error::operation_aborted);
  }
}

asio::awaitable<void> Signal::WaitUntil(std::chrono::steady_clock::time_point deadline) {
  asio::steady_timer timer(co_await asio::this_coro::executor, deadline);
  waiting_.push_back(&timer);
  // Leaves the list however the frame ends (also destroyed unresumed, when the loop is torn down).
  struct Leave {
    std::vector<asio::steady_timer*>& waiting;
    asio::steady_timer* timer;
    ~Leave() { std::erase(waiting, timer); }
  } leave{waiting_, &timer};
  co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
}

void Signal::Notify() {
  ++notifications_;
  for (auto* timer : waiting_) timer->cancel();
}

}  // namespace hami::k8s
