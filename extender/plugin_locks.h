#pragma once
// The node locks our binds leave for the device plugin, which releases each once it has set the pod's
// devices up. They are remembered until the node shows them gone, so that a pod deleted before its
// allocation does not leave one behind; and the leader's sweep releases locks nobody needs any more (their
// bind never completed, the owner was bound elsewhere, or the device plugin's release was lost).
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/cluster_state.h"
#include "extender/node_locker.h"
#include "extender/pod_ledger.h"

namespace hami::extender {

class PluginLocks {
 public:
  // `pods`: the pod cache ("ns/name" -> pod); `abandon_after`: how long a lock of an unbound (or allocated)
  // owner stays before the sweep releases it (--reservation-timeout).
  PluginLocks(boost::asio::any_io_executor executor, const ClusterState& state, const PodLedger& ledger,
              const std::map<std::string, PodView>& pods, NodeLocker& locker, const Clock& clock,
              std::chrono::seconds abandon_after);

  // A lock our bind of pod `uid` took, left held for the device plugin.
  void Keep(const LockTarget& target, const LockOutcome& lock, const std::string& uid);
  // The node as the watch shows it: locks it shows released are forgotten.
  void OnNodeSeen(const NodeView& node);
  void OnNodeDeleted(const std::string& node) { held_.erase(node); }
  // The pod went away before its device plugin finished: its locks are released (in the background).
  void ReleaseLeftover(const std::string& uid);
  // The sweep: locks on the nodes of the cache `nodes` that nobody needs any more, released.
  boost::asio::awaitable<void> ReleaseAbandoned(const std::map<std::string, NodeView>& nodes);

  bool busy() const { return background_ > 0; }  // leftover releases running: must outlive them
  std::size_t abandoned() const { return abandoned_; }

 private:
  struct HeldLock {
    LockTarget target;
    std::string value;
    std::string resource_version;  // the node's, once our lock was written
    std::string uid;               // the pod it was taken for
  };

  boost::asio::any_io_executor executor_;
  const ClusterState* state_;
  const PodLedger* ledger_;
  const std::map<std::string, PodView>* pods_;
  NodeLocker* locker_;
  const Clock* clock_;
  std::chrono::seconds abandon_after_;
  std::unordered_map<std::string, std::vector<HeldLock>> held_;  // node -> locks left for its plugin
  std::size_t background_ = 0;
  std::size_t abandoned_ = 0;
};

}  // namespace hami::extender
