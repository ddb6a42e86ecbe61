#include "extender/leadership.h"

#include <fmt/format.h>

#include <random>

namespace hami::extender {

namespace {

std::string RandomSuffix() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}", rd(), rd());
}

std::string Seconds(std::chrono::milliseconds d) { return fmt::format("{:g}s", d.count() / 1000.0); }

}  // namespace

Leadership::Leadership(LeadershipOptions options, Now now)
    : options_(std::move(options)),
      now_(std::move(now)),
      holder_identity_(options_.mode == LeaderElectMode::kAcquire ? options_.identity + "_" + RandomSuffix()
                                                                  : "") {}

bool Leadership::Holds(const LeaseView& lease) const {
  if (!lease.holder_identity || options_.identity.empty()) return false;
  if (options_.mode == LeaderElectMode::kAcquire) return *lease.holder_identity == holder_identity_;
  return lease.holder_identity->starts_with(options_.identity + "_");
}

void Leadership::NotifyIfTurned(bool was) {
  if (leader() != was) changed_.Notify();
}

void Leadership::Observe(const LeaseView* lease) {
  if (options_.mode != LeaderElectMode::kFollow) return;
  if (lease != nullptr && (lease->name != options_.name || lease->ns != options_.ns)) return;
  const bool was = leader();
  if (lease == nullptr) {
    lease_.reset();
  } else {
    // The term counts from when the record last changed: annotating the Lease renews nothing.
    if (!lease_ || !lease_->SameRecord(*lease)) observed_at_ = now_();
    lease_ = *lease;
  }
  NotifyIfTurned(was);
}

void Leadership::Acquired(const LeaseView& lease, std::chrono::steady_clock::time_point sent_at) {
  const bool was = leader();
  lease_ = lease;
  observed_at_ = sent_at;
  acquired_ = true;
  not_acquired_.clear();
  NotifyIfTurned(was);
}

void Leadership::NotAcquired(const LeaseView* lease, std::string why) {
  const bool was = leader();
  if (lease != nullptr) lease_ = *lease;
  // A failed renewal does not end the term: it ends when the last renewal is the renew deadline old.
  if (lease != nullptr && !Holds(*lease)) acquired_ = false;
  not_acquired_ = std::move(why);
  NotifyIfTurned(was);
}

void Leadership::Released() {
  const bool was = leader();
  acquired_ = false;
  not_acquired_ = "released";
  NotifyIfTurned(was);
}

bool Leadership::Leads() const {
  if (options_.mode == LeaderElectMode::kAcquire)
    return acquired_ && observed_at_ + options_.renew_deadline > now_();
  if (!lease_ || !Holds(*lease_)) return false;
  return observed_at_ + std::chrono::seconds(lease_->lease_duration_seconds) > now_();
}

bool Leadership::leader() const { return !options_.enabled || Leads(); }

std::string Leadership::Describe() const {
  if (leader()) return "leader";
  const std::string where = fmt::format("Lease {}/{}", options_.ns, options_.name);
  if (options_.mode == LeaderElectMode::kAcquire) {
    if (acquired_)
      return fmt::format("follower: {} not renewed within the renew deadline ({}){}", where,
                         Seconds(options_.renew_deadline), not_acquired_.empty() ? "" : ": " + not_acquired_);
    // The last round's failure is the freshest news; "" when the last round found another holder.
    if (!not_acquired_.empty()) return fmt::format("follower: {}: {}", where, not_acquired_);
  }
  if (!lease_) return fmt::format("follower: {} not seen", where);
  if (!lease_->holder_identity || lease_->holder_identity->empty())
    return fmt::format("follower: {} has no holder", where);
  if (Holds(*lease_) && lease_->lease_duration_seconds <= 0)
    return fmt::format("follower: {} held by {} has no leaseDurationSeconds", where,
                       *lease_->holder_identity);
  if (Holds(*lease_))
    return fmt::format("follower: {} held by {} expired (not renewed)", where, *lease_->holder_identity);
  return fmt::format("follower: {} is held by {} (we are {})", where, *lease_->holder_identity,
                     holder_identity_.empty() ? options_.identity : holder_identity_);
}

ApiError LeaderFencedWriter::NotLeader(std::string_view what) {
  ++refused_;
  return ApiError{
      ApiErrorKind::kRefused, 0, "NotLeader",
      fmt::format("{} not sent: this replica is not the leader ({})", what, leadership_->Describe())};
}

boost::asio::awaitable<ApiResult<ObjectMeta>> LeaderFencedWriter::PatchNode(const std::string& node,
                                                                            const boost::json::value& patch,
                                                                            Budget budget) {
  if (!leadership_->leader()) co_return NotLeader("patch of node " + node);
  co_return co_await inner_->PatchNode(node, patch, budget);
}

boost::asio::awaitable<ApiResult<void>> LeaderFencedWriter::PatchPod(const std::string& ns,
                                                                     const std::string& name,
                                                                     const boost::json::value& patch,
                                                                     Budget budget) {
  if (!leadership_->leader()) co_return NotLeader("patch of pod " + ns + "/" + name);
  co_return co_await inner_->PatchPod(ns, name, patch, budget);
}

boost::asio::awaitable<ApiResult<void>> LeaderFencedWriter::Bind(const BindingWrite& binding) {
  if (!leadership_->leader()) co_return NotLeader("binding of pod " + binding.ns + "/" + binding.name);
  co_return co_await inner_->Bind(binding);
}

void LeaderFencedWriter::Event(const k8s::InvolvedObject& object, std::string_view type,
                               std::string_view reason, std::string message) {
  if (!leadership_->leader()) {
    ++refused_;
    return;
  }
  inner_->Event(object, type, reason, std::move(message));
}

}  // namespace hami::extender
