#include "extender/leadership.h"

#include <fmt/format.h>

namespace hami::extender {

Leadership::Leadership(LeadershipOptions options, Now now)
    : options_(std::move(options)), now_(std::move(now)) {}

bool Leadership::Holds(const LeaseView& lease) const {
  return lease.holder_identity && !options_.identity.empty() &&
         lease.holder_identity->starts_with(options_.identity + "_");
}

void Leadership::Observe(const LeaseView* lease) {
  if (lease != nullptr && (lease->name != options_.name || lease->ns != options_.ns)) return;
  const bool was = leader();
  if (lease == nullptr) {
    lease_.reset();
  } else {
    lease_ = *lease;
    observed_at_ = now_();
  }
  if (leader() != was) changed_.Notify();
}

bool Leadership::leader() const {
  if (!options_.enabled) return true;
  if (!lease_ || !Holds(*lease_)) return false;
  return observed_at_ + std::chrono::seconds(lease_->lease_duration_seconds) > now_();
}

std::string Leadership::Describe() const {
  if (leader()) return "leader";
  const std::string where = fmt::format("Lease {}/{}", options_.ns, options_.name);
  if (!lease_) return fmt::format("follower: {} not seen", where);
  if (!lease_->holder_identity || lease_->holder_identity->empty())
    return fmt::format("follower: {} has no holder", where);
  if (Holds(*lease_) && lease_->lease_duration_seconds <= 0)
    return fmt::format("follower: {} held by {} has no leaseDurationSeconds", where,
                       *lease_->holder_identity);
  if (Holds(*lease_))
    return fmt::format("follower: {} held by {} expired (not renewed)", where, *lease_->holder_identity);
  return fmt::format("follower: {} is held by {} (we are {})", where, *lease_->holder_identity,
                     options_.identity);
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
