#pragma once
// The node lock on the cluster (docs/DECISIONS.md, "HAMi's protocol"), through the ClusterWriter port:
// decides with core's DecideLock from the node as the caller's cache shows it (or as our own last lock write
// left it, while the cache has not caught up), and writes with a compare-and-swap merge patch
// (metadata.resourceVersion): a lock taken on a fresh cache costs one request. A conflict (the cache was
// behind) reads the node from the API server and decides again, with capped backoff; a lost answer to our own
// patch is recognised by finding our value in place; a lock whose owner pod no longer exists is replaced (the
// pod cache answers "exists" without a request); a release never deletes a value someone else wrote.
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>

#include "core/backend.h"
#include "core/clock.h"
#include "extender/cluster_writer.h"

namespace hami::extender {

struct LockTarget {
  std::string node;
  std::string key;  // annotation, e.g. hami.io/mutex.lock
  NodeLockRule rule;
  std::string pod_ns;
  std::string pod_name;
};

// A node's lock annotation at one resourceVersion.
struct LockView {
  std::string resource_version;
  std::optional<std::string> value;
};

// Whether the pod cache holds pod <ns>/<name>: a lock owner found there exists (one not found is looked up).
using PodCached = std::function<bool(const std::string& ns, const std::string& name)>;

struct LockOutcome {
  bool acquired = false;
  bool contention = false;       // held by someone else: worth waiting for
  bool reentered = false;        // it was ours already (taken by an earlier bind of the same pod)
  std::string value;             // what we wrote (acquired), to release exactly that later
  std::string resource_version;  // the node's resourceVersion with our value in place (acquired)
  std::string message;           // why not, for the bind error and the event
};

// A node's lock annotation as one read saw it.
struct NodeLockRead {
  std::string resource_version;
  std::optional<std::string> value;
};

class NodeLocker {
 public:
  NodeLocker(ClusterWriter& writer, const Clock& clock, std::chrono::seconds timeout);

  // `seen`: the lock as the cache shows it (nullptr: read it from the API server first).
  boost::asio::awaitable<LockOutcome> Acquire(const LockTarget& target, const LockView* seen = nullptr,
                                              const PodCached& cached = {});
  // The lock as `cached_rv`/`cached_value` (the node cache) show it, unless our own later write is newer.
  LockView Current(const LockTarget& target, const std::string& cached_rv,
                   const std::optional<std::string>& cached_value);
  // Why a bind must wait for `seen` (held by a pod that exists, and not stale), or nullopt when taking it
  // is worth a request. Decides without a request.
  std::optional<std::string> BusyReason(const LockTarget& target, const LockView& seen,
                                        const PodCached& cached);
  // Removes the lock if it still holds `written` (or is ours); errors are logged, never thrown.
  boost::asio::awaitable<void> Release(const LockTarget& target, const std::string& written);

  struct Stats {
    std::size_t taken = 0, reentered = 0, stolen = 0, contended = 0, conflicts = 0, released = 0;
  };
  const Stats& stats() const { return stats_; }

 private:
  // When an unreadable lock value was first seen on (node, key) (stale after the timeout: D8).
  std::optional<TimePoint> MalformedSince(const LockTarget& target, const std::optional<std::string>& value);
  boost::asio::awaitable<void> Backoff(int attempt);
  void Wrote(const LockTarget& target, const std::string& resource_version, std::optional<std::string> value);

  // The lock's owner, if it no longer exists: nullopt and `why` says so (the lock may be taken over);
  // otherwise the outcome (contention, or the owner could not be checked).
  boost::asio::awaitable<std::optional<LockOutcome>> CheckOwner(const LockTarget& target,
                                                                const std::string& value,
                                                                const PodCached& cached, std::string& why);
  // One write of the lock over `read` (`free`: it was not held; else it is taken over).
  struct WriteAttempt {
    std::optional<LockOutcome> done;  // held
    bool retry = false;               // read the node again and decide again
    std::string error;
  };
  boost::asio::awaitable<WriteAttempt> Write(const LockTarget& target, const NodeLockRead& read, TimePoint now,
                                             bool free);

  ClusterWriter* writer_;
  const Clock* clock_;
  std::chrono::seconds timeout_;
  std::map<std::string, std::pair<std::string, TimePoint>> malformed_;  // node/key -> (value, first seen)
  std::map<std::string, LockView> written_;  // node/key -> our last lock write, until the cache shows it
  std::mt19937 rng_{std::random_device{}()};
  Stats stats_;
};

}  // namespace hami::extender
