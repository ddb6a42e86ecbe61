#pragma once
// Who leads, from one of two sources (--leader-elect-mode):
// - follow (HAMi's way; docs/DECISIONS.md, "Leadership"): this process acquires nothing; it follows the
//   Lease the co-located kube-scheduler holds (--leader-elect-resource-namespace/-name) and is the leader
//   while that Lease names a holder whose identity starts with ours (kube-scheduler's identity is
//   "<hostname>_<uuid>") and the Lease was seen less than its leaseDurationSeconds ago.
// - acquire: a LeaseElector takes and renews the Lease itself (client-go's rules) and reports each round;
//   this process leads until its last successful renewal is --leader-elect-renew-deadline old, which is
//   shorter than the lease duration another replica waits, so two replicas never both lead.
// Without --leader-elect, always the leader. Time runs on the injected monotonic clock; an expiry needs no
// event.
#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "core/model.h"
#include "extender/cluster_writer.h"
#include "extender/options.h"
#include "k8s/waits.h"

namespace hami::extender {

class Leadership {
 public:
  using Now = std::function<std::chrono::steady_clock::time_point()>;
  explicit Leadership(LeadershipOptions options, Now now = &std::chrono::steady_clock::now);

  // Follow mode: the Lease as a watch shows it (added or updated), or nullptr once deleted. Leases of
  // another name are ignored.
  void Observe(const LeaseView* lease);
  // Acquire mode, from the elector: we hold `lease` since a write sent at `sent_at` succeeded; ...
  void Acquired(const LeaseView& lease, std::chrono::steady_clock::time_point sent_at);
  // ... another holder has it (`lease`), or it could not be read or written (nullptr, `why`);
  void NotAcquired(const LeaseView* lease, std::string why);
  // ... or we give it up (on shutdown): no write leaves from now on.
  void Released();
  bool leader() const;
  std::chrono::steady_clock::time_point now() const { return now_(); }
  // "leader", or why not: "follower: Lease kube-system/hami-scheduler is held by node-b_1f3...".
  std::string Describe() const;
  // Notified when leader() turns, by an event (an expiry is noticed by whoever asks next).
  k8s::Signal& changed() { return changed_; }
  const LeadershipOptions& options() const { return options_; }
  // Acquire mode: the holder identity the elector writes, "<identity>_<random>" (a restarted process is a new
  // holder, which waits for its predecessor's Lease to expire, as kube-scheduler does).
  const std::string& holder_identity() const { return holder_identity_; }

 private:
  bool Holds(const LeaseView& lease) const;
  bool Leads() const;
  void NotifyIfTurned(bool was);

  LeadershipOptions options_;
  Now now_;
  std::string holder_identity_;
  std::optional<LeaseView> lease_;
  // Follow: when the Lease was last seen. Acquire: when the write that renewed it was sent.
  std::chrono::steady_clock::time_point observed_at_{};
  bool acquired_ = false;     // acquire mode: the last round won (until a later one fails or Released())
  std::string not_acquired_;  // acquire mode: why the last round did not win, when no Lease says it
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
  // A question, not a write: it passes as the reads do.
  boost::asio::awaitable<ApiResult<TokenReviewStatus>> ReviewToken(const std::string& token) override {
    return inner_->ReviewToken(token);
  }
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
