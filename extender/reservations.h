#pragma once
// The decisions our filter holds in memory until a Binding writes them on the pod, and their expiry: a
// reservation never bound is freed after --reservation-timeout, and so is an allocation another scheduler
// (HAMi's filter writes the pod before its bind) or an earlier run left on a pod that never got a node.
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/backend.h"
#include "core/clock.h"
#include "core/model.h"
#include "extender/cluster_writer.h"

namespace hami::extender {

struct Reservation {
  std::string key;  // "ns/name"
  std::string node;
  TimePoint decided;
  Annotations annotations;  // the allocation, as the Binding writes it
};

class Reservations {
 public:
  Reservations(ClusterWriter& writer, const Backends& backends, const Clock& clock,
               std::chrono::seconds timeout);

  void Hold(const std::string& uid, Reservation r) { held_[uid] = std::move(r); }
  const Reservation* Find(const std::string& uid) const;
  bool contains(const std::string& uid) const { return held_.contains(uid); }
  // The pod is gone: its reservation and what the sweep knew of it.
  void Forget(const std::string& uid);
  // A re-filter: the reservation goes (a new decision may replace it).
  void Drop(const std::string& uid) { held_.erase(uid); }

  // Whether a /bind of pod `key` (uid) is running: its reservation is not expired under it.
  using BindRunning = std::function<bool(const std::string& key, const std::string& uid)>;
  using Release = std::function<void(const std::string& uid)>;
  struct Due {
    std::string uid, ns, name, resource_version;
  };
  // Frees (through `release`) our reservations older than the timeout, and returns the pods of the cache
  // whose written allocation is older than the timeout without spec.nodeName.
  std::vector<Due> Expire(const std::map<std::string, PodView>& pods, const BindRunning& running,
                          const Release& release);
  // Removes the allocation annotations of each due pod with a compare-and-swap patch (a re-filter or a bind
  // that wrote the pod since wins) and frees it unless our filter reserved it meanwhile.
  boost::asio::awaitable<void> Clear(const std::vector<Due>& due, const Release& release);

  std::size_t expired() const { return expired_; }

 private:
  ClusterWriter* writer_;
  const Backends* backends_;
  const Clock* clock_;
  std::chrono::seconds timeout_;
  std::unordered_map<std::string, Reservation> held_;  // pod uid -> made by our filter, not yet bound
  // Pods whose decision time is unreadable (or far in the future): when this process first saw them.
  std::unordered_map<std::string, TimePoint> undated_;
  std::size_t expired_ = 0;
};

class LedgerFeed;

// Ends a pod's hold on devices in both places a decision lives: its ledger entry (and what was reported of
// it) and its reservation. Every release (a pod finished or gone, a reservation expired, a failed bind, an
// orphaned ledger entry) goes through this one function.
class HoldRelease {
 public:
  HoldRelease(LedgerFeed& feed, Reservations& reservations) : feed_(&feed), reservations_(&reservations) {}
  void operator()(const std::string& uid) const;

 private:
  LedgerFeed* feed_;
  Reservations* reservations_;
};

}  // namespace hami::extender
