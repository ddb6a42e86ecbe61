#include "extender/readiness.h"

namespace hami::extender {

bool Readiness::synced() const {
  for (const auto& [what, cache] : caches_) {
    if (!cache->synced()) return false;
  }
  return true;
}

std::string Readiness::NotReadyReason() const {
  for (const auto& [what, cache] : caches_) {
    if (!cache->synced()) return "the " + what + " cache is not synced yet";
  }
  if (health_ == nullptr || health_->stats().passes == 0) return "the first health pass has not run yet";
  return "";
}

}  // namespace hami::extender
