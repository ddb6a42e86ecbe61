// Time-stamped values: the handshake (hami.io/node-handshake*) and the node lock (hami.io/mutex.lock),
// and the lock decision taken on them. Parsed stamps format back to the same time and owner; no stamp
// overflows the clock (UBSan); an unreadable or absurd lock is never a name to look up nor a wait forever.
#include <cstdlib>
#include <ctime>

#include "core/codec/stamps.h"
#include "core/names.h"
#include "core/node_lock.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using namespace std::chrono_literals;
using hami::TimePoint;

const TimePoint kNow = std::chrono::system_clock::from_time_t(1796083200);  // 2026-12-01T00:00:00Z

// What the API server accepts as a namespace and as a pod name (core's rules, which
// tests/unit/core/names_test pins to Kubernetes': a subdomain limits the whole name to 253, not each part to
// 63).
bool IsDnsLabel(std::string_view s) { return hami::IsDns1123Label(s); }
bool IsDnsSubdomain(std::string_view s) { return hami::IsDns1123Subdomain(s); }

void CheckRfc3339RoundTrip(TimePoint t, std::string_view from) {
  const std::string formatted = hami::codec::FormatRfc3339(t);
  if (formatted.size() != 20) return;  // a year outside 0000..9999 after the zone offset has no RFC 3339 form
  auto again = hami::codec::ParseRfc3339(formatted);
  FUZZ_CHECK(again.has_value(), "FormatRfc3339 wrote what ParseRfc3339 refuses: " + formatted);
  FUZZ_CHECK(*again == t, fmt::format("'{}' -> '{}' is another time", from, formatted));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("TZ", "UTC", 1);  // handshakes use the local zone; UTC has no DST gaps to break round trips
  tzset();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = hami::fuzz::AsText(data, size);
  const std::string value(text);

  const auto h = hami::codec::ParseHandshake(text, true);
  if (h.kind == hami::codec::Handshake::Kind::kRequesting) {
    const std::string formatted = hami::codec::FormatHandshakeRequest(h.requested_at);
    const auto again = hami::codec::ParseHandshake(formatted, true);
    FUZZ_CHECK(again.kind == hami::codec::Handshake::Kind::kRequesting, "formatted handshake unreadable");
    FUZZ_CHECK(again.requested_at == h.requested_at, "handshake " + value + " -> " + formatted + " moved");
  }
  FUZZ_CHECK(hami::codec::ParseHandshake(text, false).kind == hami::codec::Handshake::Kind::kAbsent,
             "an absent handshake is not absent");

  if (auto t = hami::codec::ParseRfc3339(text)) CheckRfc3339RoundTrip(*t, text);

  const auto lock = hami::codec::ParseNodeLock(text);
  if (lock) {
    CheckRfc3339RoundTrip(lock->taken_at, text);
    if (!lock->legacy) {
      const std::string formatted = hami::codec::FormatNodeLock(lock->taken_at, lock->ns, lock->pod);
      auto again = hami::codec::ParseNodeLock(formatted);
      FUZZ_CHECK(again.has_value(), "FormatNodeLock wrote what ParseNodeLock refuses: " + formatted);
      FUZZ_CHECK(!again->legacy && again->OwnedBy(lock->ns, lock->pod), "owner changed: " + formatted);
      if (hami::codec::FormatRfc3339(lock->taken_at).size() == 20)
        FUZZ_CHECK(again->taken_at == lock->taken_at, "time changed: " + formatted);
    }
  }

  // Unreadable for twice the timeout already: a correct decision steals a malformed lock rather than waits.
  const hami::NodeLockRule rule{true, std::nullopt};
  const auto decision = hami::DecideLock("node-a", value, "default", "me", kNow, 300s, rule, kNow - 600s);
  FUZZ_CHECK(!decision.why.empty(), "a decision without a reason");
  switch (decision.action) {
    case hami::LockAction::kCheckOwner:
      FUZZ_CHECK(lock.has_value() && IsDnsLabel(lock->ns) && IsDnsSubdomain(lock->pod),
                 "an owner that is no valid namespace/pod name is to be looked up: '" + value + "'");
      break;
    case hami::LockAction::kContended:
    case hami::LockAction::kReenter:
      FUZZ_CHECK(lock.has_value(), "an unreadable lock blocks the node: '" + value + "'");
      FUZZ_CHECK(lock->taken_at <= kNow + 1h, "a lock dated in the future blocks the node: " + value);
      break;
    case hami::LockAction::kTake:
      ::hami::fuzz::Violated("kTake for a present lock", value);
    case hami::LockAction::kStealExpired:
      FUZZ_CHECK(lock.has_value(), "an unreadable lock 'expired': '" + value + "'");
      break;
    case hami::LockAction::kStealMalformed:
      break;
  }
  hami::MayRelease(value, value, "default", "me", false);
  return 0;
}
