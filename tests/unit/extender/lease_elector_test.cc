// --leader-elect-mode=acquire: client-go's rules for taking, renewing and giving up a Lease, against an
// in-memory Lease with the API server's compare-and-swap (a PUT with an old resourceVersion is a 409).
#include "extender/lease_elector.h"

#include <gtest/gtest.h>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <optional>

#include "core/clock.h"
#include "tests/support/run_coro.h"

namespace hami {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using std::chrono::seconds;
using testing::RunCoro;

class FakeLease final : public extender::LeaseClient {
 public:
  asio::awaitable<k8s::ApiResult<json::value>> Get() override {
    ++gets;
    if (fail_next) co_return Fail();
    if (!lease) co_return k8s::ApiError{k8s::ApiErrorKind::kNotFound, 404, "NotFound", "lease not found"};
    co_return *lease;
  }
  asio::awaitable<k8s::ApiResult<json::value>> Create(const json::value& object) override {
    if (fail_next) co_return Fail();
    if (lease) co_return k8s::ApiError{k8s::ApiErrorKind::kConflict, 409, "AlreadyExists", "exists"};
    lease = object;
    Stamp();
    co_return *lease;
  }
  asio::awaitable<k8s::ApiResult<json::value>> Update(const json::value& object) override {
    ++updates;
    // The answer takes a turn of the loop: whatever else runs meanwhile (a Release()) runs first.
    if (yield_in_update) co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
    if (fail_next) co_return Fail();
    if (!lease) co_return k8s::ApiError{k8s::ApiErrorKind::kNotFound, 404, "NotFound", "lease not found"};
    if (object.at("metadata").at("resourceVersion") != lease->at("metadata").at("resourceVersion"))
      co_return k8s::ApiError{k8s::ApiErrorKind::kConflict, 409, "Conflict", "the object has been modified"};
    lease = object;
    Stamp();
    co_return *lease;
  }
  // Another holder's write, as the API server stores it.
  void Hold(const std::string& holder, std::int64_t duration = 15) {
    if (!lease) lease = json::value{{"metadata", {{"name", "hami-scheduler"}, {"namespace", "kube-system"}}}};
    lease->as_object()["spec"] = {
        {"holderIdentity", holder},
        {"leaseDurationSeconds", duration},
        {"renewTime", "2026-12-01T10:00:0" + std::to_string(version_ % 10) + ".000000Z"},
        {"leaseTransitions", 3}};
    Stamp();
  }
  json::value Spec() const { return lease ? lease->at("spec") : json::value(); }
  std::string Holder() const { return json::value_to<std::string>(Spec().at("holderIdentity")); }

  std::optional<json::value> lease;
  bool fail_next = false;
  bool yield_in_update = false;
  int gets = 0, updates = 0;

 private:
  static k8s::ApiError Fail() { return {k8s::ApiErrorKind::kTransport, 0, "", "connection refused"}; }
  void Stamp() { lease->as_object()["metadata"].as_object()["resourceVersion"] = std::to_string(++version_); }
  int version_ = 0;
};

class LeaseElectorTest : public ::testing::Test {
 protected:
  struct Replica {
    Replica(FakeLease& store, std::chrono::steady_clock::time_point& now, const Clock& wall,
            const std::string& identity)
        : leadership(extender::LeadershipOptions{.enabled = true,
                                                 .ns = "kube-system",
                                                 .name = "hami-scheduler",
                                                 .identity = identity,
                                                 .mode = extender::LeaderElectMode::kAcquire},
                     [&now] { return now; }),
          elector(store, leadership, wall) {}
    extender::Leadership leadership;
    extender::LeaseElector elector;
  };
  bool Round(Replica& r) {
    bool held = false;
    RunCoro(ioc_, [&]() -> asio::awaitable<void> { held = co_await r.elector.TryAcquireOrRenew(); }());
    return held;
  }
  void Release(Replica& r) {
    RunCoro(ioc_, [&]() -> asio::awaitable<void> { co_await r.elector.Release(); }());
  }

  asio::io_context ioc_;
  FakeLease store_;
  std::chrono::steady_clock::time_point now_{std::chrono::hours(1)};
  FixedClock wall_{std::chrono::system_clock::from_time_t(1796083200) + std::chrono::microseconds(42)};
};

TEST_F(LeaseElectorTest, CreatesTheLeaseRenewsItAndStopsLeadingAtTheRenewDeadline) {
  Replica a(store_, now_, wall_, "node-a");
  EXPECT_TRUE(a.leadership.holder_identity().starts_with("node-a_"));
  EXPECT_FALSE(a.leadership.leader());
  ASSERT_TRUE(Round(a));
  EXPECT_TRUE(a.leadership.leader());
  EXPECT_EQ(store_.Holder(), a.leadership.holder_identity());
  EXPECT_EQ(store_.Spec().at("leaseDurationSeconds"), 15);
  EXPECT_EQ(store_.Spec().at("leaseTransitions"), 0);
  EXPECT_EQ(store_.Spec().at("acquireTime"), "2026-12-01T00:00:00.000042Z");  // MicroTime: six digits
  EXPECT_EQ(store_.lease->at("kind"), "Lease");

  // Renewals keep the acquire time and the count, and cost one request (no read while leading).
  wall_.Advance(seconds(2));
  now_ += seconds(2);
  const int gets = store_.gets;
  ASSERT_TRUE(Round(a));
  EXPECT_EQ(store_.gets, gets);
  EXPECT_EQ(store_.Spec().at("renewTime"), "2026-12-01T00:00:02.000042Z");
  EXPECT_EQ(store_.Spec().at("acquireTime"), "2026-12-01T00:00:00.000042Z");

  // Renewals fail: the term lasts until the last renewal's send time + the renew deadline (10 s), which is
  // before anyone else may take the Lease (15 s after they last saw it change).
  store_.fail_next = true;
  now_ += seconds(9);
  EXPECT_FALSE(Round(a));
  EXPECT_TRUE(a.leadership.leader());
  now_ += seconds(1);
  EXPECT_FALSE(a.leadership.leader());
  EXPECT_EQ(
      a.leadership.Describe(),
      "follower: Lease kube-system/hami-scheduler not renewed within the renew deadline (10s): cannot read "
      "it: connection refused");
  // The API server is back: our own Lease is renewed (still ours: nobody took it).
  store_.fail_next = false;
  EXPECT_TRUE(Round(a));
  EXPECT_TRUE(a.leadership.leader());
}

TEST_F(LeaseElectorTest, AnotherHoldersLeaseIsTakenOnlyWhenUnchangedForItsDuration) {
  store_.Hold("node-b_77");
  Replica a(store_, now_, wall_, "node-a");
  EXPECT_FALSE(Round(a));
  EXPECT_EQ(a.leadership.Describe(),
            "follower: Lease kube-system/hami-scheduler is held by node-b_77 (we are " +
                a.leadership.holder_identity() + ")");
  now_ += seconds(10);
  store_.Hold("node-b_77");  // renewed: the wait starts again from when we saw the change
  EXPECT_FALSE(Round(a));
  now_ += seconds(14);
  EXPECT_FALSE(Round(a));
  EXPECT_EQ(store_.Holder(), "node-b_77");
  now_ += seconds(1);
  ASSERT_TRUE(Round(a));  // 15 s without a change: expired
  EXPECT_EQ(store_.Holder(), a.leadership.holder_identity());
  EXPECT_EQ(store_.Spec().at("leaseTransitions"), 4);

  // b comes back and takes it (its clock says otherwise, or it was partitioned): a stops at once.
  store_.Hold("node-b_77");
  EXPECT_FALSE(Round(a));
  EXPECT_FALSE(a.leadership.leader());
}

// client-go's rule: only the leader record counts. Annotating the Lease (a reconciler, kubectl annotate) every
// 3 s after its holder died moves its resourceVersion but renews nothing: it is taken 15 s after the last
// renewal all the same.
TEST_F(LeaseElectorTest, AWriteThatLeavesTheRecordAloneRenewsNothing) {
  store_.Hold("node-b_77");
  Replica a(store_, now_, wall_, "node-a");
  EXPECT_FALSE(Round(a));
  for (int i = 1; i <= 4; ++i) {
    now_ += seconds(3);
    store_.lease->as_object()["metadata"].as_object()["annotations"] = {{"touched", std::to_string(i)}};
    store_.lease->as_object()["metadata"].as_object()["resourceVersion"] = "annotated-" + std::to_string(i);
    EXPECT_FALSE(Round(a)) << i;
  }
  now_ += seconds(3);
  EXPECT_TRUE(Round(a));  // 15 s after the record last changed
  EXPECT_EQ(store_.Holder(), a.leadership.holder_identity());
}

// A duration of zero or less (which kube-apiserver refuses) is an expired record, as in client-go: taken at
// once, never a Lease that stops every replica from leading.
TEST_F(LeaseElectorTest, ALeaseWithANegativeDurationIsTakenAsExpired) {
  store_.Hold("node-b_77", -5);
  Replica a(store_, now_, wall_, "node-a");
  EXPECT_TRUE(Round(a));
  EXPECT_EQ(store_.Spec().at("leaseDurationSeconds"), 15);
}

// Of two replicas racing for an expired Lease, the compare-and-swap lets one win.
TEST_F(LeaseElectorTest, TwoReplicasNeverBothLead) {
  Replica a(store_, now_, wall_, "node-a");
  Replica b(store_, now_, wall_, "node-b");
  ASSERT_TRUE(Round(a));
  EXPECT_FALSE(Round(b));
  for (int i = 0; i < 20; ++i) {  // a renews every 2 s; b keeps trying
    now_ += seconds(2);
    wall_.Advance(seconds(2));  // each renewal writes a new renewTime: the record changes
    EXPECT_TRUE(Round(a));
    EXPECT_FALSE(Round(b));
    EXPECT_FALSE(a.leadership.leader() && b.leadership.leader());
  }
  // a stops renewing (SIGKILL): b waits the lease duration from the last change it saw, then takes over.
  int waited = 0;
  while (!Round(b)) {
    now_ += seconds(1);
    ++waited;
    EXPECT_FALSE(a.leadership.leader() && b.leadership.leader());
  }
  EXPECT_EQ(waited, 15);
  EXPECT_FALSE(a.leadership.leader());  // its renew deadline passed 5 s earlier

  // A stale write of a's (an old resourceVersion) is refused.
  json::value stale = *store_.lease;
  stale.as_object()["metadata"].as_object()["resourceVersion"] = "1";
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    auto r = co_await store_.Update(stale);
    EXPECT_FALSE(r);
  }());
  EXPECT_EQ(store_.Holder(), b.leadership.holder_identity());
}

// SIGTERM: the leader stops writing at once, empties the holder, and the next replica takes over at its next
// round instead of after the lease duration.
TEST_F(LeaseElectorTest, ReleaseOnShutdownHandsOverAtOnce) {
  Replica a(store_, now_, wall_, "node-a");
  Replica b(store_, now_, wall_, "node-b");
  ASSERT_TRUE(Round(a));
  EXPECT_FALSE(Round(b));
  Release(a);
  EXPECT_FALSE(a.leadership.leader());
  EXPECT_EQ(a.leadership.Describe(), "follower: Lease kube-system/hami-scheduler: released");
  EXPECT_EQ(store_.Holder(), "");
  EXPECT_EQ(store_.Spec().at("leaseDurationSeconds"), 1);
  EXPECT_EQ(store_.Spec().at("leaseTransitions"), 0);
  ASSERT_TRUE(Round(b));  // no wait: the Lease has no holder
  EXPECT_EQ(store_.Spec().at("leaseTransitions"), 1);
  // A released replica does not start a new term, and releasing again leaves b's Lease alone.
  EXPECT_FALSE(Round(a));
  Release(a);
  EXPECT_EQ(store_.Holder(), b.leadership.holder_identity());
}

// A renewal already sent when SIGTERM's Release() begins: Release waits for it, the round starts no new term,
// and the Lease ends released (not taken back by the round's fallback read, nor left to expire).
TEST_F(LeaseElectorTest, ARenewalInFlightDoesNotTakeBackTheReleasedLease) {
  Replica a(store_, now_, wall_, "node-a");
  ASSERT_TRUE(Round(a));
  store_.yield_in_update = true;
  bool renewed = true;
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    using namespace asio::experimental::awaitable_operators;
    auto round = [&]() -> asio::awaitable<void> { renewed = co_await a.elector.TryAcquireOrRenew(); };
    co_await (round() && a.elector.Release());
  }());
  EXPECT_FALSE(renewed);
  EXPECT_FALSE(a.leadership.leader());
  EXPECT_EQ(store_.Holder(), "");
  EXPECT_EQ(store_.Spec().at("leaseDurationSeconds"), 1);
}

// A Lease deleted while another replica's term runs (kubectl delete, a pruning tool) is not re-created
// before that term has run out: the other replica still leads until then.
TEST_F(LeaseElectorTest, ALeaseDeletedUnderItsLeaderIsWaitedOut) {
  store_.Hold("node-b_77");
  Replica a(store_, now_, wall_, "node-a");
  EXPECT_FALSE(Round(a));
  store_.lease.reset();
  now_ += seconds(5);
  EXPECT_FALSE(Round(a));
  EXPECT_FALSE(store_.lease.has_value());
  EXPECT_EQ(
      a.leadership.Describe(),
      "follower: Lease kube-system/hami-scheduler: deleted while held by node-b_77; waiting out its term");
  now_ += seconds(10);  // 15 s since the record was seen
  EXPECT_TRUE(Round(a));
  EXPECT_EQ(store_.Holder(), a.leadership.holder_identity());
}

// A Lease the API server returns that we cannot read is not taken over.
TEST_F(LeaseElectorTest, AnUnreadableLeaseIsNotTaken) {
  store_.lease = json::parse(
      R"({"metadata":{"name":"hami-scheduler","namespace":"kube-system","resourceVersion":"5"},
          "spec":{"holderIdentity":7,"leaseDurationSeconds":15}})");
  Replica a(store_, now_, wall_, "node-a");
  now_ += seconds(60);
  EXPECT_FALSE(Round(a));
  EXPECT_FALSE(a.leadership.leader());
  EXPECT_EQ(store_.updates, 0);
  EXPECT_EQ(a.leadership.Describe(),
            "follower: Lease kube-system/hami-scheduler: cannot read it: Lease kube-system/hami-scheduler: "
            "spec.holderIdentity: expected a string");
}

}  // namespace
}  // namespace hami
