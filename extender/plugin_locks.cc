#include "extender/plugin_locks.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>

#include "core/codec/stamps.h"
#include "core/keys.h"
#include "k8s/reflector.h"

namespace hami::extender {
namespace asio = boost::asio;

PluginLocks::PluginLocks(asio::any_io_executor executor, const ClusterState& state, const PodLedger& ledger,
                         const std::map<std::string, PodView>& pods, NodeLocker& locker, const Clock& clock,
                         std::chrono::seconds abandon_after)
    : executor_(std::move(executor)),
      state_(&state),
      ledger_(&ledger),
      pods_(&pods),
      locker_(&locker),
      clock_(&clock),
      abandon_after_(abandon_after) {}

void PluginLocks::Keep(const LockTarget& target, const LockOutcome& lock, const std::string& uid) {
  held_[target.node].push_back(HeldLock{target, lock.value, lock.resource_version, uid});
}

void PluginLocks::OnNodeSeen(const NodeView& node) {
  auto it = held_.find(node.name);
  if (it == held_.end()) return;
  std::erase_if(it->second, [&](const HeldLock& h) {
    // Only a node state from after our lock patch tells: an older event still lacks our value.
    if (!k8s::LaterOrSame(node.resource_version, h.resource_version)) return false;
    auto a = node.annotations.find(h.target.key);
    return a == node.annotations.end() || a->second != h.value;
  });
  if (it->second.empty()) held_.erase(it);
}

void PluginLocks::ReleaseLeftover(const std::string& uid) {
  for (auto& [node, locks] : held_) {
    for (auto it = locks.begin(); it != locks.end();) {
      if (it->uid != uid) {
        ++it;
        continue;
      }
      // Owners are named by namespace/name: a new pod of the same name may have re-entered this lock.
      if (auto now = pods_->find(it->target.pod_ns + "/" + it->target.pod_name);
          now != pods_->end() && now->second.uid != uid) {
        it = locks.erase(it);
        continue;
      }
      // The pod went away before its device plugin finished: nobody else would release this lock (a bare
      // timestamp, as Cambricon's, names no owner that could be found gone).
      spdlog::info("pod {}/{} is gone: releasing {} on node {}", it->target.pod_ns, it->target.pod_name,
                   it->target.key, node);
      ++background_;
      // The coroutine owns its copy: the entry is erased before the coroutine first runs.
      const auto release = [](NodeLocker& locker, HeldLock lock) -> asio::awaitable<void> {
        co_await locker.Release(lock.target, lock.value);
      };
      asio::co_spawn(executor_, release(*locker_, *it), [this](std::exception_ptr) { --background_; });
      it = locks.erase(it);
    }
  }
  std::erase_if(held_, [](const auto& kv) { return kv.second.empty(); });
}

asio::awaitable<void> PluginLocks::ReleaseAbandoned(const std::map<std::string, NodeView>& nodes) {
  const TimePoint now = clock_->Now();
  // Node locks left by a bind that never completed (the process was killed between lock and binding, or
  // the pod was bound elsewhere afterwards): nobody would release them before the lock timeout, and every
  // bind to the node waits meanwhile.
  std::vector<std::pair<LockTarget, std::string>> abandoned;
  for (const auto& [name, node] : nodes) {
    for (std::size_t b = 0; b < state_->backends().size(); ++b) {
      const BackendSpec& spec = state_->backends().at(b).Spec();
      if (spec.keys.node_lock.empty() || !spec.lock.owner_aware) continue;
      auto value = node.annotations.find(spec.keys.node_lock);
      if (value == node.annotations.end()) continue;
      if (std::any_of(abandoned.begin(), abandoned.end(), [&](const auto& a) {
            return a.first.node == node.name && a.first.key == spec.keys.node_lock;
          }))
        continue;
      auto lock = codec::ParseNodeLock(value->second);
      if (!lock || lock->legacy) continue;
      const std::string owner_key = lock->ns + "/" + lock->pod;
      if (ledger_->AnyBindOf(owner_key)) continue;  // a bind of ours is using it right now
      auto it = pods_->find(owner_key);
      const PodView* owner = it == pods_->end() ? nullptr : &it->second;
      // Held by us for another pod of that name than the cache shows (re-created, the cache behind).
      if (auto held = held_.find(node.name);
          held != held_.end() && owner != nullptr &&
          std::any_of(held->second.begin(), held->second.end(),
                      [&](const HeldLock& h) { return h.value == value->second && h.uid != owner->UidOrKey(); }))
        continue;
      const bool elsewhere = owner != nullptr && !owner->node_name.empty() && owner->node_name != node.name;
      // Unbound, gone, or allocated already (the device plugin's release was lost): nobody needs it now.
      bool idle = owner == nullptr || owner->node_name.empty();
      if (owner != nullptr) {
        auto phase = owner->annotations.find(std::string(keys::kBindPhase));
        idle |= phase != owner->annotations.end() &&
                (phase->second == keys::kBindPhaseSuccess || phase->second == keys::kBindPhaseFailed);
      }
      if (elsewhere || (idle && now - lock->taken_at >= abandon_after_))
        abandoned.push_back(
            {LockTarget{node.name, spec.keys.node_lock, spec.lock, lock->ns, lock->pod}, value->second});
    }
  }
  for (const auto& [target, value] : abandoned) {
    spdlog::warn(
        "node {}: lock {} of pod {}/{} is needed no more (its bind did not complete, or the device "
        "plugin's release was lost): releasing it",
        target.node, target.key, target.pod_ns, target.pod_name);
    ++abandoned_;
    co_await locker_->Release(target, value);  // only if it still holds that value
  }
}

}  // namespace hami::extender
