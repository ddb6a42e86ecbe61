#pragma once
// Leader election HAMi's way (reference/hami-scheduler.md §8.2): this process does not acquire a Lease; it
// follows the one the co-located kube-scheduler holds (--leader-elect-resource-namespace/-name) and is the
// leader while that Lease names a holder whose identity starts with ours (kube-scheduler's identity is
// "<hostname>_<uuid>") and the Lease was seen less than its leaseDurationSeconds ago. Without
// --leader-elect, always the leader. Time runs on the injected clock; an expiry needs no event.
#include <optional>
#include <string>

#include "core/clock.h"
#include "core/model.h"
#include "k8s/waits.h"

namespace hami::extender {

struct LeadershipOptions {
  bool enabled = false;  // --leader-elect
  std::string ns;        // --leader-elect-resource-namespace
  std::string name;      // --leader-elect-resource-name
  std::string identity;  // our host name: the holder identity's prefix
};

class Leadership {
 public:
  Leadership(LeadershipOptions options, const Clock& clock);

  // The Lease as a watch shows it (added or updated), or nullptr once deleted. Leases of another name are
  // ignored.
  void Observe(const LeaseView* lease);
  bool leader() const;
  // "leader", or why not: "follower: Lease kube-system/hami-scheduler is held by node-b_1f3...".
  std::string Describe() const;
  // Notified when leader() turns, by an event (an expiry is noticed by whoever asks next).
  k8s::Signal& changed() { return changed_; }
  const LeadershipOptions& options() const { return options_; }

 private:
  bool Holds(const LeaseView& lease) const;

  LeadershipOptions options_;
  const Clock* clock_;
  std::optional<LeaseView> lease_;
  TimePoint observed_at_{};
  k8s::Signal changed_;
};

}  // namespace hami::extender
