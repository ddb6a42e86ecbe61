#pragma once
// POST /bind: takes the node locks of the plan (core/bind_plan) in vendor order, waiting first come first
// served behind binds of other pods, posts the Binding that carries the decision, and keeps the locks the
// device plugin will release. Owns the lock queues, the locks left for device plugins, and the binds in
// flight (which the filter's backpressure and the reservation sweep consult).
//
// Lock waits are driven by the watches: only the bind at the head of a lock's queue may ask the API server,
// and only once the caches show the lock free (or stale, or its owner gone); the node watch wakes the head.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/cluster_state.h"
#include "extender/cluster_writer.h"
#include "extender/node_locker.h"
#include "extender/reservations.h"
#include "k8s/extender.h"
#include "k8s/metrics.h"
#include "k8s/waits.h"

namespace hami::extender {

struct BindOptions {
  // How long a bind waits for a node lock held by another pod (every pod, not only PodGroup members as in
  // HAMi: kube-scheduler binds asynchronously, so waiting costs nothing while failing costs a requeue with
  // backoff). 0: fail at once.
  std::chrono::milliseconds node_lock_retry_timeout{28000};
  std::chrono::seconds reservation_timeout{300};  // a lock whose owner never bound is released after it
};

class BindService {
 public:
  using Release = std::function<void(const std::string& uid)>;
  // `pods`: the pod cache ("ns/name" -> pod), alive as long as the service. `release` frees a pod's hold
  // on devices (reservation and ledger entry) when its bind finds it gone or re-created; only ever for a uid
  // the ledger holds for the pod the bind names.
  BindService(boost::asio::any_io_executor executor, const ClusterState& state,
              const Reservations& reservations, const std::map<std::string, PodView>& pods,
              NodeLocker& locker, ClusterWriter& writer, const Clock& clock, BindOptions options,
              Release release);

  // The bind of one pod: "" on success, else the error kube-scheduler is told (an event says it too).
  boost::asio::awaitable<std::string> Bind(const k8s::ExtenderBindingArgs& args);
  // A request that could not be read: counted as a failed bind.
  void Refuse() {
    ++stats_.binds;
    Count("failure", 0);
  }

  // A /bind of pod `key` with `uid` is running.
  bool InFlight(const std::string& key, const std::string& uid) const;
  // The node a bind of ours bound pod `uid` to, while the pod cache does not show it bound yet (nullptr when
  // none): a filter of the pod meanwhile must not decide again.
  const std::string* BoundTo(const std::string& uid) const;
  // Binds in flight that spend the API budget now (not parked behind a lock's queue head).
  std::size_t BindsUsingBudget() const;
  // Notified whenever a bind ends or a lock queue moves (the filter's backpressure waits on it).
  k8s::Signal& progress() const { return progress_; }

  // Watch events.
  void OnNodeSeen(const NodeView& node);
  void OnNodeDeleted(const std::string& node);
  void OnPodGone(const std::string& uid);
  void OnPodBound(const std::string& uid) { bound_.erase(uid); }  // the cache shows spec.nodeName
  // Node locks nobody needs any more (their bind never completed, or the owner was bound elsewhere, or the
  // device plugin's release was lost), in the node cache `nodes`: released.
  boost::asio::awaitable<void> ReleaseAbandonedLocks(const std::map<std::string, NodeView>& nodes);

  // Ends lock waits at once (they answer that the scheduler is shutting down) and refuses new ones.
  void Stop();
  bool busy() const { return background_ > 0; }  // leftover-lock releases running: must outlive them

  struct Stats {
    std::size_t binds = 0;
    std::size_t lock_waits = 0;       // binds that waited for a node lock
    std::size_t rebinds = 0;          // binds of pods already bound to the node asked for
    std::size_t abandoned_locks = 0;  // node locks of binds that never completed, released
  };
  const Stats& stats() const { return stats_; }
  void WriteMetrics(k8s::prom::TextWriter& w) const;

 private:
  struct HeldLock {
    LockTarget target;
    std::string value;
    std::string resource_version;  // the node's, once our lock was written
    std::string uid;               // the pod it was taken for
  };
  struct LockWaiter {
    boost::asio::steady_timer* timer;
    std::string key;  // the lock annotation it waits for
  };

  boost::asio::awaitable<std::string> BindPod(const k8s::ExtenderBindingArgs& args);
  void Count(const char* result, double seconds);
  // The answer to a bind of a pod that already has spec.nodeName: success on that node, an error elsewhere.
  std::string AlreadyBound(const PodView& pod, const std::string& node);
  // The pod from the cache, or from the API server when the cache has none or one with another uid.
  boost::asio::awaitable<ApiResult<PodView>> LookupPod(const std::string& ns, const std::string& name,
                                                       const std::string& uid);
  boost::asio::awaitable<LockOutcome> AcquireWaiting(const LockTarget& target,
                                                     std::chrono::steady_clock::time_point deadline);
  // Wakes the first waiting bind of each lock on `node`.
  void WakeLockWaiters(const std::string& node);
  void WakeAllLockWaiters();
  // The lock as the node cache (or our own newer write) shows it.
  LockView CachedLock(const LockTarget& target);
  void ReleaseLeftoverLocks(const std::string& uid);
  // Frees the hold of `uid` if the ledger keeps it for pod `key` ("ns/name"); logs a uid of another pod.
  void ReleaseIfHeldBy(const std::string& uid, const std::string& key);
  void ForgetReleasedLocks(const NodeView& node);

  boost::asio::any_io_executor executor_;
  const ClusterState* state_;
  const Reservations* reservations_;
  const std::map<std::string, PodView>* pods_;
  NodeLocker* locker_;
  ClusterWriter* writer_;
  const Clock* clock_;
  BindOptions options_;
  Release release_;
  std::unordered_map<std::string, std::vector<LockWaiter>>
      lock_waiters_;                                             // node -> binds waiting, oldest first
  std::unordered_map<std::string, std::uint64_t> lock_wakeups_;  // node -> WakeLockWaiters() calls
  // node -> locks our binds left for the device plugin to release, until the node shows them gone.
  std::unordered_map<std::string, std::vector<HeldLock>> held_locks_;
  // "ns/name" -> uid of each /bind running now: the expiry sweep leaves their reservations and locks alone.
  std::unordered_multimap<std::string, std::string> in_flight_;
  // uid -> node of each pod our bind bound, until the pod cache shows it bound (or the pod is gone).
  std::unordered_map<std::string, std::string> bound_;
  mutable k8s::Signal progress_;
  std::size_t background_ = 0;
  bool stopping_ = false;
  Stats stats_;
  k8s::prom::Histogram latency_;
  std::map<std::string, std::uint64_t> results_;  // success, failure
};

}  // namespace hami::extender
