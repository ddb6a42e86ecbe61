#pragma once
// The node lock's decisions, as pure functions (docs/DECISIONS.md, "HAMi's protocol" and D8). The
// caller reads the node, asks what to do, performs the compare-and-swap patch, and asks again on conflict.
#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "core/backend.h"
#include "core/clock.h"
#include "core/codec/stamps.h"
#include "core/result.h"

namespace hami {

enum class LockAction {
  kTake,            // no lock: write ours
  kReenter,         // already ours (a pod asking for two vendors locks twice)
  kStealExpired,    // older than the lock timeout: replace it
  kStealMalformed,  // unreadable for longer than the lock timeout (D8): replace it
  kCheckOwner,      // held by another pod: replace it only if that pod no longer exists
  kContended,       // held and valid: try later
};

struct LockDecision {
  LockAction action = LockAction::kContended;
  std::string why;  // for logs, events and the bind error
};

// The lock value as DecideLock reads it: ParseNodeLock, and a stamp more than codec::kMaxFutureSkew ahead of
// `now` is malformed too (D10), so that a lock dated in the future cannot block its node forever.
Result<codec::NodeLock> ReadNodeLock(std::string_view value, TimePoint now);

// `current`: the node's lock annotation, if any. `malformed_since`: when the caller first saw the current
// unreadable value (nullopt if it never has). `timeout`: --node-lock-timeout, unless the backend's rule fixes
// one.
LockDecision DecideLock(std::string_view node, const std::optional<std::string>& current,
                        std::string_view pod_ns, std::string_view pod_name, TimePoint now,
                        std::chrono::seconds timeout, const NodeLockRule& rule,
                        std::optional<TimePoint> malformed_since = std::nullopt);

// The value to write for `pod` at `now` ("<RFC3339>,<ns>,<pod>", or a bare timestamp for owner-less locks).
std::string LockValue(TimePoint now, std::string_view pod_ns, std::string_view pod_name,
                      const NodeLockRule& rule);

// Whether releasing for `pod` may delete `current`: only our own lock (or an owner-less/legacy one, or with
// `skip_owner_check`), and never a value that changed since `first_read` (someone re-stamped it meanwhile).
bool MayRelease(const std::optional<std::string>& current, const std::optional<std::string>& first_read,
                std::string_view pod_ns, std::string_view pod_name, bool skip_owner_check);

}  // namespace hami
