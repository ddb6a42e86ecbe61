#include "extender/reservation_expiry.h"

#include <spdlog/spdlog.h>

#include <charconv>
#include <unordered_set>

#include "core/bind_plan.h"
#include "core/keys.h"

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

ReservationExpiry::ReservationExpiry(PodLedger& ledger, ClusterWriter& writer, const Backends& backends,
                                     const Clock& clock, std::chrono::seconds timeout)
    : ledger_(&ledger), writer_(&writer), backends_(&backends), clock_(&clock), timeout_(timeout) {}

std::vector<ReservationExpiry::Due> ReservationExpiry::Expire(const std::map<std::string, PodView>& pods) {
  const TimePoint now = clock_->Now();
  // Pods carrying an allocation without spec.nodeName (an earlier decision's, or HAMi's: its filter writes
  // the pod before the bind).
  std::vector<Due> due;
  std::unordered_set<std::string> dated;
  for (const auto& [key, pod] : pods) {
    if (!pod.node_name.empty() || pod.Finished() || !pod.annotations.contains(keys::kAssignedNode)) continue;
    const std::string uid = pod.UidOrKey();
    if (ledger_->reserved(uid)) continue;     // ours, in memory: expired below
    if (ledger_->Binding(key, uid)) continue;  // a bind is using it
    // The latest of filter and bind; a stamp far in the future is no stamp (it would never expire).
    std::optional<TimePoint> since = UnixSeconds(pod.annotations, keys::kDecisionTime);
    if (auto bound = UnixSeconds(pod.annotations, keys::kBindTime); bound && (!since || *bound > *since))
      since = bound;
    if (since && *since > now + std::chrono::minutes(5)) since.reset();
    if (!since) since = ledger_->FirstSeenUndated(uid, now);
    dated.insert(uid);
    if (now - *since < timeout_) continue;
    due.push_back({uid, pod.ns, pod.name, pod.resource_version});
  }
  // Our own decisions never bound: nothing was written on the pod, so freeing them is all there is to do.
  std::vector<std::pair<std::string, std::string>> stale;  // uid, "ns/name"
  ledger_->ForEachReservation([&](const std::string& uid, const Reservation& r) {
    if (now - r.decided >= timeout_ && !ledger_->Binding(r.key, uid)) stale.emplace_back(uid, r.key);
  });
  for (const auto& [uid, key] : stale) {
    spdlog::warn("pod {}: not bound {}s after its filter: reservation freed", key, timeout_.count());
    ++expired_;
    ledger_->Release(uid);
  }
  ledger_->ForgetUndatedUnless([&](const std::string& uid) { return dated.contains(uid); });
  return due;
}

asio::awaitable<void> ReservationExpiry::Clear(const std::vector<Due>& due) {
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
    if (!ledger_->reserved(e.uid)) ledger_->Release(e.uid);
  }
}

}  // namespace hami::extender
