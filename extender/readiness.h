#pragma once
// Whether this replica may decide, and what it reports: /filter answers once every watched cache has synced
// and the first health pass ran; /readyz and hami_scheduler_ready say so too, and a follower (--leader-elect)
// reports ready once its caches are warm, since that is all it needs to take over. changed() wakes whoever
// waits for this to change (a cache synced, a health pass ended, Stop()).
#include <string>
#include <utility>
#include <vector>

#include "extender/health_service.h"
#include "extender/leadership.h"
#include "k8s/reflector.h"
#include "k8s/waits.h"

namespace hami::extender {

class Readiness {
 public:
  explicit Readiness(const Leadership& leadership) : leadership_(&leadership) {}
  Readiness(const Readiness&) = delete;
  Readiness& operator=(const Readiness&) = delete;

  // A cache that must have synced at least once; `what` names it in NotReadyReason().
  void RequireSynced(std::string what, const k8s::Reflector& cache) {
    caches_.emplace_back(std::move(what), &cache);
  }
  // The health pass that must have run once (never ready without one).
  void RequireHealthPass(const HealthService& health) { health_ = &health; }

  bool synced() const;
  bool ready() const { return synced() && health_ != nullptr && health_->stats().passes > 0; }
  bool reports_ready() const { return ready() || (synced() && !leadership_->leader()); }
  std::string NotReadyReason() const;
  // With --leader-elect: why this replica must not decide or write now ("" = it is the leader).
  std::string NotLeaderReason() const { return leadership_->leader() ? "" : leadership_->Describe(); }
  // /readyz's words for this replica's role: "" without --leader-elect.
  std::string Role() const { return leadership_->options().enabled ? leadership_->Describe() : ""; }

  k8s::Signal& changed() { return changed_; }
  // Ends the waits at once and refuses new ones: for shutdown.
  void Stop() {
    stopping_ = true;
    changed_.Notify();
  }
  bool stopping() const { return stopping_; }

 private:
  const Leadership* leadership_;
  std::vector<std::pair<std::string, const k8s::Reflector*>> caches_;
  const HealthService* health_ = nullptr;
  k8s::Signal changed_;
  bool stopping_ = false;
};

}  // namespace hami::extender
