#pragma once
// Time-stamped protocol values: the health handshake and the node lock.
#include <string>
#include <string_view>

#include "core/clock.h"
#include "core/result.h"

namespace hami::codec {

// A handshake or lock stamp further ahead of our clock than this is malformed (docs/DECISIONS.md, D8 and
// D10), not a promise to wait for: a lock dated years ahead would otherwise block its node forever.
inline constexpr std::chrono::minutes kMaxFutureSkew{5};

// hami.io/node-handshake*: the scheduler writes `Requesting_YYYY-MM-DD HH:MM:SS` (its local time zone, UTC in
// the container); any value without "Requesting" is a report from the device plugin.
struct Handshake {
  enum class Kind { kAbsent, kRequesting, kMalformedRequest, kReported };
  Kind kind = Kind::kAbsent;
  TimePoint requested_at{};  // valid for kRequesting
};
Handshake ParseHandshake(std::string_view value, bool present);
std::string FormatHandshakeRequest(TimePoint now);

// RFC 3339 (`2026-08-21T06:20:39Z`, `...+08:00`, optional fractional seconds), years 1970 to 2200.
Result<TimePoint> ParseRfc3339(std::string_view text);
std::string FormatRfc3339(TimePoint t);  // UTC, seconds precision, "Z"
// Kubernetes' MicroTime (a Lease's acquireTime/renewTime): UTC, exactly six fractional digits, "Z".
std::string FormatRfc3339Micro(TimePoint t);

// Node lock value: `<RFC3339>,<namespace>,<pod>`, or a bare RFC3339 timestamp (legacy, no owner). An owner
// that is not a valid namespace and pod name makes the value malformed.
struct NodeLock {
  TimePoint taken_at{};
  std::string ns;
  std::string pod;
  bool legacy = false;
  bool OwnedBy(std::string_view pod_ns, std::string_view pod_name) const {
    return !legacy && ns == pod_ns && pod == pod_name;
  }
};
Result<NodeLock> ParseNodeLock(std::string_view value);
std::string FormatNodeLock(TimePoint now, std::string_view ns, std::string_view pod);

}  // namespace hami::codec
