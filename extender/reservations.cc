#include "extender/reservations.h"

#include <spdlog/spdlog.h>

#include <charconv>
#include <unordered_set>

#include "core/bind_plan.h"
#include "core/keys.h"
#include "extender/ledger_feed.h"

namespace hami::extender {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// Unix seconds as the filter and bind write them; nullopt if absent or unreadable.
std::optional<TimePoint> UnixSeconds(const Annotations& a, std::string_view key) {
  auto it = a.find(std::string(key));
  if (it == a.end()) return std::nullopt;
  std::int64_t s = 0;
  const std::string& v = it->second;
  const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), s);
  // Beyond a few centuries the nanosecond clock would overflow.
  if (ec != std::errc() || ptr != v.data() + v.size() || s < 0 || s > (std::int64_t{1} << 33))
    return std::nullopt;
  return TimePoint(std::chrono::seconds(s));
}

}  // namespace

Reservations::Reservations(ClusterWriter& writer, const Backends& backends, const Clock& clock,
                           std::chrono::seconds timeout)
    : writer_(&writer), backends_(&backends), clock_(&clock), timeout_(timeout) {}

const Reservation* Reservations::Find(const std::string& uid) const {
  auto it = held_.find(uid);
  return it == held_.end() ? nullptr : &it->second;
}

void Reservations::Forget(const std::string& uid) {
  held_.erase(uid);
  undated_.erase(uid);
}

std::vector<Reservations::Due> Reservations::Expire(const std::map<std::string, PodView>& pods,
                                                    const BindRunning& running, const Release& release) {
  const TimePoint now = clock_->Now();
  // Pods carrying an allocation without spec.nodeName (an earlier decision's, or HAMi's: its filter writes
  // the pod before the bind).
  std::vector<Due> due;
  std::unordered_set<std::string> dated;
  for (const auto& [key, pod] : pods) {
    if (!pod.node_name.empty() || Finished(pod) || !pod.annotations.contains(keys::kAssignedNode)) continue;
    const std::string uid = UidOf(pod);
    if (held_.contains(uid)) continue;  // ours, in memory: expired below
    if (running(key, uid)) continue;    // a bind is using it
    // The latest of filter and bind; a stamp far in the future is no stamp (it would never expire).
    std::optional<TimePoint> since = UnixSeconds(pod.annotations, keys::kDecisionTime);
    if (auto bound = UnixSeconds(pod.annotations, keys::kBindTime); bound && (!since || *bound > *since))
      since = bound;
    if (since && *since > now + std::chrono::minutes(5)) since.reset();
    if (!since) since = undated_.try_emplace(uid, now).first->second;
    dated.insert(uid);
    if (now - *since < timeout_) continue;
    due.push_back({uid, pod.ns, pod.name, pod.resource_version});
  }
  // Our own decisions never bound: nothing was written on the pod, so freeing them is all there is to do.
  std::vector<std::string> stale;
  for (const auto& [uid, r] : held_) {
    if (now - r.decided >= timeout_ && !running(r.key, uid)) stale.push_back(uid);
  }
  for (const auto& uid : stale) {
    spdlog::warn("pod {}: not bound {}s after its filter: reservation freed", held_.at(uid).key,
                 timeout_.count());
    ++expired_;
    release(uid);
  }
  std::erase_if(undated_, [&](const auto& kv) { return !dated.contains(kv.first); });
  return due;
}

asio::awaitable<void> Reservations::Clear(const std::vector<Due>& due, const Release& release) {
  for (const Due& e : due) {
    json::object annotations{{keys::kBindPhase, nullptr}, {keys::kBindTime, nullptr}};
    for (const std::string_view k : AllocationKeys(*backends_)) annotations[k] = nullptr;
    // Compare-and-swap: a re-filter or a bind that wrote the pod since we looked wins.
    const json::value patch = {{"metadata",
                                {{"annotations", std::move(annotations)},
                                 {"labels", {{keys::kAssignedNode, nullptr}}},
                                 {"resourceVersion", e.resource_version}}}};
    auto patched = co_await writer_->PatchPod(e.ns, e.name, patch, Budget::kBackground);
    if (!patched) {
      if (patched.error().kind != ApiErrorKind::kConflict && patched.error().kind != ApiErrorKind::kNotFound)
        spdlog::warn("pod {}/{}: could not remove an expired reservation: {}", e.ns, e.name,
                     patched.error().message);
      continue;
    }
    ++expired_;
    spdlog::warn(
        "pod {}/{}: not bound {}s after its filter: reservation freed, allocation annotations "
        "removed",
        e.ns, e.name, timeout_.count());
    // A filter that decided while the patch was out holds a reservation of its own: it stays.
    if (!held_.contains(e.uid)) release(e.uid);
  }
}

void HoldRelease::operator()(const std::string& uid) const {
  feed_->Forget(uid);
  reservations_->Forget(uid);
}

}  // namespace hami::extender
