#pragma once
// The node lock on the wire (PROTOCOL.md §5): reads the node from the API server, asks core's DecideLock what
// to do, and writes with a compare-and-swap merge patch (metadata.resourceVersion). Conflicts are retried
// with capped backoff; a lost answer to our own patch is recognised by finding our value in place; a lock
// whose owner pod no longer exists is replaced; a release never deletes a value someone else wrote.
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <map>
#include <optional>
#include <random>
#include <string>

#include "core/backend.h"
#include "core/clock.h"
#include "k8s/api_client.h"

namespace hami::k8s {

struct LockTarget {
  std::string node;
  std::string key;  // annotation, e.g. hami.io/mutex.lock
  NodeLockRule rule;
  std::string pod_ns;
  std::string pod_name;
};

struct LockOutcome {
  bool acquired = false;
  bool contention = false;       // held by someone else: worth waiting for
  bool reentered = false;        // it was ours already (taken by an earlier bind of the same pod)
  std::string value;             // what we wrote (acquired), to release exactly that later
  std::string resource_version;  // the node's resourceVersion with our value in place (acquired)
  std::string message;           // why not, for the bind error and the event
};

class NodeLocker {
 public:
  NodeLocker(ApiClient& client, const Clock& clock, std::chrono::seconds timeout);

  boost::asio::awaitable<LockOutcome> Acquire(const LockTarget& target);
  // Removes the lock if it still holds `written` (or is ours); errors are logged, never thrown.
  boost::asio::awaitable<void> Release(const LockTarget& target, const std::string& written);

  struct Stats {
    std::size_t taken = 0, reentered = 0, stolen = 0, contended = 0, conflicts = 0, released = 0;
  };
  const Stats& stats() const { return stats_; }

 private:
  // When an unreadable lock value was first seen on (node, key) (D8: stale after the timeout).
  std::optional<TimePoint> MalformedSince(const LockTarget& target, const std::optional<std::string>& value);
  boost::asio::awaitable<void> Backoff(int attempt);

  ApiClient* client_;
  const Clock* clock_;
  std::chrono::seconds timeout_;
  std::map<std::string, std::pair<std::string, TimePoint>> malformed_;  // node/key -> (value, first seen)
  std::mt19937 rng_{std::random_device{}()};
  Stats stats_;
};

}  // namespace hami::k8s
