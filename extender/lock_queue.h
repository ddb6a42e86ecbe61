#pragma once
// The node locks' waiting lines: a bind takes each lock of its plan through Acquire, first come first served
// behind the binds of other pods, driven by the watches. Only the bind at the head of a lock's queue may ask
// the API server, and only once the caches show the lock free (or stale, or its owner gone); the others wait
// without a request. The node watch wakes the head (Wake); its timer re-checks the caches for expiry.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/cluster_state.h"
#include "extender/node_locker.h"
#include "k8s/waits.h"

namespace hami::extender {

class LockQueue {
 public:
  // `pods`: the pod cache ("ns/name" -> pod); `retry_timeout`: how long a bind may wait for locks held by
  // other pods (0: fail at once).
  LockQueue(boost::asio::any_io_executor executor, const ClusterState& state,
            const std::map<std::string, PodView>& pods, NodeLocker& locker,
            std::chrono::milliseconds retry_timeout);

  // Takes `target`, waiting in its queue until `deadline`; a lock it could not take says why.
  boost::asio::awaitable<LockOutcome> Acquire(const LockTarget& target,
                                              std::chrono::steady_clock::time_point deadline);
  // Wakes the first waiting bind of each lock on `node` (the node changed, or a lock holder went away).
  void Wake(const std::string& node);
  void WakeAll();
  // Binds parked behind their lock's queue head: they wait for a device plugin, not for the API budget.
  std::size_t parked() const;
  // Ends every wait at once (they answer that the scheduler is shutting down) and refuses new ones.
  void Stop();
  // Notified whenever a queue moves (and, by BindService, whenever a bind ends).
  k8s::Signal& progress() const { return progress_; }

  std::size_t waits() const { return waits_; }  // binds that waited for a lock held by another pod

 private:
  struct Waiter {
    boost::asio::steady_timer* timer;
    std::string key;  // the lock annotation it waits for
  };
  bool FirstFor(const LockTarget& target, const boost::asio::steady_timer& timer);
  void Leave(const LockTarget& target, const boost::asio::steady_timer& timer);
  // The lock as the node cache (or our own newer write) shows it.
  LockView CachedLock(const LockTarget& target);

  boost::asio::any_io_executor executor_;
  const ClusterState* state_;
  const std::map<std::string, PodView>* pods_;
  NodeLocker* locker_;
  mutable k8s::Signal progress_;
  std::chrono::milliseconds retry_timeout_;
  std::unordered_map<std::string, std::vector<Waiter>> waiters_;  // node -> binds waiting, oldest first
  std::unordered_map<std::string, std::uint64_t> wakeups_;        // node -> Wake() calls while binds wait
  bool stopping_ = false;
  std::size_t waits_ = 0;
};

}  // namespace hami::extender
