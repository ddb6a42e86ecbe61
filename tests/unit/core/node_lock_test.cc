#include "core/node_lock.h"

#include <gtest/gtest.h>

#include "core/codec/stamps.h"

namespace hami {
namespace {

using namespace std::chrono_literals;

const TimePoint kNow = std::chrono::system_clock::from_time_t(1787293239);  // 2026-08-21T06:20:39Z
const NodeLockRule kShared{true, std::nullopt};
const NodeLockRule kCambricon{false, std::chrono::minutes(2)};

LockAction Act(std::optional<std::string> current, std::string_view ns = "ns", std::string_view pod = "pod-a",
               const NodeLockRule& rule = kShared, std::optional<TimePoint> malformed_since = std::nullopt) {
  return DecideLock("n1", current, ns, pod, kNow, 300s, rule, malformed_since).action;
}

TEST(NodeLock, DecisionsFollowTheProtocol) {
  EXPECT_EQ(Act(std::nullopt), LockAction::kTake);
  EXPECT_EQ(Act(codec::FormatNodeLock(kNow - 10s, "ns", "pod-a")), LockAction::kReenter);
  EXPECT_EQ(Act(codec::FormatNodeLock(kNow - 10s, "ns", "pod-b")), LockAction::kCheckOwner);
  EXPECT_EQ(Act(codec::FormatNodeLock(kNow - 301s, "ns", "pod-b")), LockAction::kStealExpired);
  EXPECT_EQ(Act(codec::FormatRfc3339(kNow - 10s)), LockAction::kContended);  // legacy: no owner to check
  EXPECT_EQ(Act(codec::FormatRfc3339(kNow - 400s)), LockAction::kStealExpired);
  const auto d = DecideLock("n1", codec::FormatRfc3339(kNow - 10s), "ns", "p", kNow, 300s, kShared);
  EXPECT_EQ(d.why, "node n1 has been locked within 300s: node lock contention");
}

TEST(NodeLock, MalformedValuesNeverBlockForever) {
  // docs/DECISIONS.md, D8: upstream fails forever on "lock"; here it is contention until seen for the
  // timeout, then stale.
  EXPECT_EQ(Act("lock"), LockAction::kContended);
  EXPECT_EQ(Act("lock", "ns", "pod-a", kShared, kNow - 299s), LockAction::kContended);
  EXPECT_EQ(Act("lock", "ns", "pod-a", kShared, kNow - 300s), LockAction::kStealMalformed);
  EXPECT_EQ(Act("2026-08-21T06:20:39Z,only-two"), LockAction::kContended);
  EXPECT_NE(DecideLock("n1", std::string("lock"), "ns", "p", kNow, 300s, kShared)
                .why.find("unreadable lock 'lock'"),
            std::string::npos);
}

TEST(NodeLock, CambriconBareTimestampWithTwoMinutes) {
  EXPECT_EQ(Act(codec::FormatRfc3339(kNow - 60s), "ns", "pod-a", kCambricon), LockAction::kContended);
  EXPECT_EQ(Act(codec::FormatRfc3339(kNow - 3600s), "ns", "pod-a", kCambricon), LockAction::kStealExpired);
  EXPECT_EQ(LockValue(kNow, "ns", "pod-a", kCambricon), "2026-08-21T06:20:39Z");
  EXPECT_EQ(LockValue(kNow, "ns", "pod-a", kShared), "2026-08-21T06:20:39Z,ns,pod-a");
}

TEST(NodeLock, ReleaseOnlyWhatIsOurs) {
  const std::string ours = "2026-07-29T13:00:00Z,ns,pod-a";
  const std::string theirs = "2026-07-29T13:00:00Z,ns,pod-b";
  const std::string legacy = "2026-08-01T06:00:00Z";
  EXPECT_TRUE(MayRelease(ours, ours, "ns", "pod-a", false));
  EXPECT_FALSE(MayRelease(theirs, theirs, "ns", "pod-a", false));
  EXPECT_TRUE(MayRelease(theirs, theirs, "ns", "pod-a", true));  // forced (expired or dangling)
  EXPECT_TRUE(MayRelease(legacy, legacy, "ns", "pod-a", false));
  EXPECT_FALSE(MayRelease(std::nullopt, ours, "ns", "pod-a", false));
  // Changed hands between the first read and now: pod-b's lock is kept.
  EXPECT_FALSE(MayRelease(theirs, ours, "ns", "pod-a", false));
  // A legacy lock replaced meanwhile is kept too.
  EXPECT_FALSE(MayRelease("2026-08-01T06:00:01Z", legacy, "ns", "pod-a", false));
  // Our own lock re-stamped meanwhile is still ours.
  EXPECT_TRUE(MayRelease("2026-07-29T13:00:01Z,ns,pod-a", ours, "ns", "pod-a", false));
}

// A lock dated in the far future would block its node forever; an owner that is no pod name would
// be looked up as a path.
TEST(NodeLock, FutureStampsAndForgedOwnersAreMalformed) {
  EXPECT_EQ(Act(codec::FormatNodeLock(kNow + 4min, "ns", "pod-b")), LockAction::kCheckOwner);  // clock skew
  EXPECT_EQ(Act(codec::FormatNodeLock(kNow + 6min, "ns", "pod-b")), LockAction::kContended);
  EXPECT_EQ(Act(codec::FormatNodeLock(kNow + 6min, "ns", "pod-b"), "ns", "pod-a", kShared, kNow - 300s),
            LockAction::kStealMalformed);
  EXPECT_EQ(Act("2200-01-01T00:00:00Z,ns,pod-b", "ns", "pod-a", kShared, kNow - 300s),
            LockAction::kStealMalformed);
  EXPECT_EQ(Act("9999-01-01T00:00:00Z,ns,pod-b", "ns", "pod-a", kShared, kNow - 300s),
            LockAction::kStealMalformed);
  EXPECT_EQ(Act(codec::FormatRfc3339(kNow + 1h), "ns", "pod-a", kCambricon, kNow - 2min),
            LockAction::kStealMalformed);
  const std::string forged = codec::FormatRfc3339(kNow - 10s) + ",default,victim\r\nDELETE /api/v1/nodes/n2";
  EXPECT_EQ(Act(forged), LockAction::kContended);  // never kCheckOwner: no lookup of that "name"
  EXPECT_EQ(Act(forged, "ns", "pod-a", kShared, kNow - 300s), LockAction::kStealMalformed);
  EXPECT_FALSE(ReadNodeLock(codec::FormatNodeLock(kNow + 6min, "ns", "p"), kNow));
  EXPECT_TRUE(ReadNodeLock(codec::FormatNodeLock(kNow + 4min, "ns", "p"), kNow));
}

}  // namespace
}  // namespace hami
