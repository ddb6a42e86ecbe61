#include "extender/leadership.h"

#include <fmt/format.h>

namespace hami::extender {

Leadership::Leadership(LeadershipOptions options, const Clock& clock)
    : options_(std::move(options)), clock_(&clock) {}

bool Leadership::Holds(const LeaseView& lease) const {
  // A plain prefix, as HAMi checks it (no "_" separator required).
  return lease.holder_identity && !options_.identity.empty() &&
         lease.holder_identity->starts_with(options_.identity);
}

void Leadership::Observe(const LeaseView* lease) {
  if (lease != nullptr && (lease->name != options_.name || lease->ns != options_.ns)) return;
  const bool was = leader();
  if (lease == nullptr) {
    lease_.reset();
  } else {
    lease_ = *lease;
    observed_at_ = clock_->Now();
  }
  if (leader() != was) changed_.Notify();
}

bool Leadership::leader() const {
  if (!options_.enabled) return true;
  if (!lease_ || !Holds(*lease_)) return false;
  return observed_at_ + std::chrono::seconds(lease_->lease_duration_seconds) > clock_->Now();
}

std::string Leadership::Describe() const {
  if (leader()) return "leader";
  const std::string where = fmt::format("Lease {}/{}", options_.ns, options_.name);
  if (!lease_) return fmt::format("follower: {} not seen", where);
  if (!lease_->holder_identity || lease_->holder_identity->empty())
    return fmt::format("follower: {} has no holder", where);
  if (Holds(*lease_))
    return fmt::format("follower: {} held by {} expired (not renewed)", where, *lease_->holder_identity);
  return fmt::format("follower: {} is held by {} (we are {})", where, *lease_->holder_identity,
                     options_.identity);
}

}  // namespace hami::extender
