#pragma once
// Waiting on the event loop: one sleep for every coroutine, and a Signal that wakes waiters when something
// they wait for happened (the caches synced, a bind finished) instead of having them poll for it.
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <vector>

namespace hami::k8s {

// Sleeps `d`; throws operation_aborted when the coroutine is cancelled meanwhile (so loops end).
boost::asio::awaitable<void> SleepFor(std::chrono::milliseconds d);

// Throws operation_aborted when the coroutine's caller cancelled it: loops that swallow the aborted wait of
// their own wake-up timer must still end on cancellation.
boost::asio::awaitable<void> ThrowIfCancelled();

// Wakes every coroutine waiting on it. Waiters re-check their condition after each wake-up, so a Notify()
// that nobody needed costs nothing but the re-check.
class Signal {
 public:
  // Until Notify() or `deadline` (whichever first). Never throws: a cancelled wait returns like a deadline.
  boost::asio::awaitable<void> WaitUntil(std::chrono::steady_clock::time_point deadline);
  void Notify();
  std::uint64_t notifications() const { return notifications_; }

 private:
  std::vector<boost::asio::steady_timer*> waiting_;
  std::uint64_t notifications_ = 0;
};

}  // namespace hami::k8s
