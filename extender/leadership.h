#pragma once
// Leader election HAMi's way (reference/hami-scheduler.md §8.2): this process does not acquire a Lease; it
// follows the one the co-located kube-scheduler holds (--leader-elect-resource-namespace/-name) and is the
// leader while that Lease names a holder whose identity starts with ours (kube-scheduler's identity is
// "<hostname>_<uuid>") and the Lease was seen less than its leaseDurationSeconds ago. Without
// --leader-elect, always the leader. Time runs on the injected clock; an expiry needs no event.
#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "core/model.h"
#include "extender/cluster_writer.h"
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
  using Now = std::function<std::chrono::steady_clock::time_point()>;
  explicit Leadership(LeadershipOptions options, Now now = &std::chrono::steady_clock::now);

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
  Now now_;
  std::optional<LeaseView> lease_;
  std::chrono::steady_clock::time_point observed_at_{};
  k8s::Signal changed_;
};

// The ClusterWriter every service writes through: writes leave only while this replica leads (checked at
// each write, so a bind that waited for a lock, or a health pass under way, stops writing the moment
// leadership is lost); a follower's write is refused unsent, its events dropped. Reads always pass.
class LeaderFencedWriter final : public ClusterWriter {
 public:
  LeaderFencedWriter(ClusterWriter& inner, const Leadership& leadership)
      : inner_(&inner), leadership_(&leadership) {}

  boost::asio::awaitable<ApiResult<ObjectMeta>> PatchNode(const std::string& node,
                                                          const boost::json::value& patch,
                                                          Budget budget) override;
  boost::asio::awaitable<ApiResult<void>> PatchPod(const std::string& ns, const std::string& name,
                                                   const boost::json::value& patch, Budget budget) override;
  boost::asio::awaitable<ApiResult<ObjectMeta>> ReadNode(const std::string& node) override {
    return inner_->ReadNode(node);
  }
  boost::asio::awaitable<ApiResult<PodView>> ReadPod(const std::string& ns,
                                                     const std::string& name) override {
    return inner_->ReadPod(ns, name);
  }
  boost::asio::awaitable<ApiResult<void>> Bind(const BindingWrite& binding) override;
  void Event(const k8s::InvolvedObject& object, std::string_view type, std::string_view reason,
             std::string message) override;
  std::uint64_t refused() const { return refused_; }

 private:
  ApiError NotLeader(std::string_view what);

  ClusterWriter* inner_;
  const Leadership* leadership_;
  std::uint64_t refused_ = 0;
};

}  // namespace hami::extender
