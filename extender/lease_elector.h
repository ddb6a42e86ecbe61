#pragma once
// --leader-elect-mode=acquire: this process takes and renews a coordination.k8s.io/v1 Lease itself, with
// client-go's rules, for an extender run without a co-located kube-scheduler whose Lease it could follow.
// Each round (every --leader-elect-retry-period; jittered up to 1.2x while not leading):
// - no Lease: create it, holding it (unless we last saw another holder's term running: a Lease deleted under
//   its leader is waited out, not taken from it);
// - held by another holder whose record has not changed for its leaseDurationSeconds (timed on our monotonic
//   clock from when we first saw that record, never from the times written in it): take it over
//   (leaseTransitions + 1, a new acquireTime); still changing: wait;
// - held by us, or released (empty holder): write a new renewTime.
// Every write is a PUT carrying the resourceVersion read (a compare-and-swap), so of two replicas racing for
// an expired Lease one wins. Leadership counts the term from when the winning write was sent; it ends at the
// renew deadline unless renewed. On shutdown Release() empties the holder, so a successor takes over within
// its retry period instead of waiting for the lease duration.
#include <boost/asio/awaitable.hpp>
#include <boost/json/value.hpp>
#include <optional>
#include <random>
#include <string>

#include "core/clock.h"
#include "extender/leadership.h"
#include "k8s/api_client.h"

namespace hami::extender {

// The port for one Lease object: the elector's tests keep it in memory.
class LeaseClient {
 public:
  virtual ~LeaseClient() = default;
  virtual boost::asio::awaitable<k8s::ApiResult<boost::json::value>> Get() = 0;
  virtual boost::asio::awaitable<k8s::ApiResult<boost::json::value>> Create(
      const boost::json::value& lease) = 0;
  // PUT; the object's metadata.resourceVersion makes it a compare-and-swap (409 when it moved on).
  virtual boost::asio::awaitable<k8s::ApiResult<boost::json::value>> Update(
      const boost::json::value& lease) = 0;
};

class ApiLeaseClient final : public LeaseClient {
 public:
  ApiLeaseClient(k8s::ApiClient& client, const std::string& ns, const std::string& name);
  boost::asio::awaitable<k8s::ApiResult<boost::json::value>> Get() override;
  boost::asio::awaitable<k8s::ApiResult<boost::json::value>> Create(const boost::json::value& lease) override;
  boost::asio::awaitable<k8s::ApiResult<boost::json::value>> Update(const boost::json::value& lease) override;

 private:
  k8s::ApiClient* client_;
  std::string collection_, object_;
};

class LeaseElector {
 public:
  // `wall` stamps acquireTime/renewTime (for people reading the Lease); decisions run on Leadership's
  // monotonic clock.
  LeaseElector(LeaseClient& client, Leadership& leadership, const Clock& wall);

  // One round; true when we hold the Lease after it.
  boost::asio::awaitable<bool> TryAcquireOrRenew();
  // Rounds until cancelled or Release().
  boost::asio::awaitable<void> Run();
  // Stops the rounds, ends the term at once (no write leaves after this), waits for a round in flight (its
  // write could otherwise land after ours and take the Lease back), then writes the Lease released if we
  // still hold it. Only a term of ours is released.
  boost::asio::awaitable<void> Release();

 private:
  boost::asio::awaitable<bool> Round();
  // The Lease is gone: created again, unless another replica's term is still running.
  boost::asio::awaitable<bool> Recreate(std::chrono::steady_clock::time_point sent_at);
  // The Lease our write returned: ours from `sent_at` on, unless it cannot be read or we are releasing.
  bool Won(const boost::json::value& lease, std::chrono::steady_clock::time_point sent_at);
  boost::json::value Spec(const boost::json::value* old_spec, bool ours) const;
  void Observed(const LeaseView& view);
  void LogTurn();

  LeaseClient* client_;
  Leadership* leadership_;
  const Clock* wall_;
  // The leader record last seen and when it changed (client-go's observedRecord/observedTime): another
  // holder's term is counted from here.
  std::optional<LeaseView> observed_record_;
  std::chrono::steady_clock::time_point observed_at_{};
  boost::json::value last_written_;           // the Lease as our last successful write returned it
  bool releasing_ = false;
  bool in_round_ = false;
  k8s::Signal round_done_;
  bool logged_leader_ = false;
  std::string logged_reason_;
  k8s::Signal wake_;
  std::mt19937 rng_{std::random_device{}()};
};

}  // namespace hami::extender
