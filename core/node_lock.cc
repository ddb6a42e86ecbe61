#include "core/node_lock.h"

#include <fmt/format.h>

#include "core/codec/stamps.h"

namespace hami {

Result<codec::NodeLock> ReadNodeLock(std::string_view value, TimePoint now) {
  auto lock = codec::ParseNodeLock(value);
  if (lock && lock->taken_at > now + codec::kMaxFutureSkew) {
    return Error{
        fmt::format("node lock '{}': taken at {}, more than {} minutes ahead of this scheduler's clock",
                    value, codec::FormatRfc3339(lock->taken_at), codec::kMaxFutureSkew.count())};
  }
  return lock;
}

LockDecision DecideLock(std::string_view node, const std::optional<std::string>& current,
                        std::string_view pod_ns, std::string_view pod_name, TimePoint now,
                        std::chrono::seconds timeout, const NodeLockRule& rule,
                        std::optional<TimePoint> malformed_since) {
  const std::chrono::seconds limit = rule.fixed_expiry.value_or(timeout);
  if (!current) return {LockAction::kTake, fmt::format("node {} is not locked", node)};
  auto lock = ReadNodeLock(*current, now);
  if (!lock) {
    if (malformed_since && now - *malformed_since >= limit) {
      return {LockAction::kStealMalformed,
              fmt::format("node {}: unreadable lock '{}' seen for {}s or more: treated as stale", node,
                          *current, limit.count())};
    }
    return {LockAction::kContended,
            fmt::format(
                "node {}: unreadable lock '{}' ({}); it is treated as stale after {}s: node lock contention",
                node, *current, lock.error().message, limit.count())};
  }
  if (now - lock->taken_at > limit) {
    return {LockAction::kStealExpired,
            fmt::format("node {}: lock '{}' is older than {}s: expired", node, *current, limit.count())};
  }
  if (rule.owner_aware && lock->OwnedBy(pod_ns, pod_name)) {
    return {LockAction::kReenter, fmt::format("node {} is already locked by {}/{}", node, pod_ns, pod_name)};
  }
  if (rule.owner_aware && !lock->legacy && !lock->ns.empty() && !lock->pod.empty()) {
    return {LockAction::kCheckOwner,
            fmt::format("node {} is locked by {}/{}: replace it only if that pod is gone", node, lock->ns,
                        lock->pod)};
  }
  return {LockAction::kContended,
          fmt::format("node {} has been locked within {}s: node lock contention", node, limit.count())};
}

std::string LockValue(TimePoint now, std::string_view pod_ns, std::string_view pod_name,
                      const NodeLockRule& rule) {
  return rule.owner_aware ? codec::FormatNodeLock(now, pod_ns, pod_name) : codec::FormatRfc3339(now);
}

bool MayRelease(const std::optional<std::string>& current, const std::optional<std::string>& first_read,
                std::string_view pod_ns, std::string_view pod_name, bool skip_owner_check) {
  if (!current) return false;  // already gone
  if (first_read && *current != *first_read) {
    // Changed since we first read it: only still ours if it is our owner suffix (a re-stamp of our own lock).
    auto lock = codec::ParseNodeLock(*current);
    return !skip_owner_check && lock && lock->OwnedBy(pod_ns, pod_name);
  }
  if (skip_owner_check) return true;
  auto lock = codec::ParseNodeLock(*current);
  if (!lock) return false;  // unreadable: leave it to expiry handling (docs/DECISIONS.md, D8)
  return lock->legacy || lock->OwnedBy(pod_ns, pod_name);
}

}  // namespace hami
