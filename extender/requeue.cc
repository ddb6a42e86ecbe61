#include "extender/requeue.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/json.hpp>

#include "core/fit.h"
#include "core/keys.h"

namespace hami::extender {
namespace asio = boost::asio;
namespace json = boost::json;
using std::chrono::steady_clock;

Requeue::Requeue(ClusterState& state, const std::map<std::string, PodView>& pods, ClusterWriter& writer,
                 const Clock& clock, RequeueOptions options)
    : state_(&state),
      pods_(&pods),
      writer_(&writer),
      clock_(&clock),
      options_(std::move(options)),
      scheduler_(state, options_.policies) {}

void Requeue::Refused(const PodView& pod, const FilterOutcome& outcome) {
  const std::string uid = pod.UidOrKey();
  Candidate c;
  for (const auto& [node, reason] : outcome.failed_nodes) {  // ordered: so are both lists
    (outcome.unresolvable.contains(node) ? c.unfit_idle : c.freeable).push_back(node);
    c.quota = c.quota || reason.find(ReasonName(Reason::kResourceQuotaNotFit)) != std::string::npos;
    if (c.last.reasons.size() < kShownReasons) c.last.reasons.emplace_back(node, reason);
  }
  c.last.at = clock_->Now();
  c.last.nodes = outcome.failed_nodes.size();
  if (c.freeable.empty() && c.unfit_idle.empty()) {
    Forget(uid);
    return;
  }
  ++changes_;
  c.key = pod.Key();
  c.ns = pod.ns;
  c.priority = pod.priority;
  auto [it, first] = candidates_.try_emplace(uid);
  c.order = first ? ++refusals_ : it->second.order;  // its place among the refused is its first refusal's
  it->second = std::move(c);
}

void Requeue::Forget(const std::string& uid) {
  if (candidates_.erase(uid) > 0) ++changes_;  // a nudge still queued for it is not sent (SendQueued)
  for (auto it = locks_.begin(); it != locks_.end();) {
    it->second.erase(uid);
    it = it->second.empty() ? locks_.erase(it) : std::next(it);
  }
}

void Requeue::WaitsForLock(const PodView& pod, const std::string& node) {
  locks_[node][pod.UidOrKey()] = pod.Key();
}

void Requeue::NodeSeen(const NodeView& node) {
  auto it = locks_.find(node.name);
  if (it == locks_.end()) return;
  for (const auto& b : state_->backends()) {
    const std::string& key = b->Spec().keys.node_lock;
    if (!key.empty() && node.annotations.contains(key)) return;  // still locked
  }
  for (const auto& [uid, key] : it->second) {
    if (Pending(uid, key) != nullptr) Enqueue(Nudge{uid, key, "", true});
  }
  locks_.erase(it);
  if (!queue_.empty()) Poke();
}

void Requeue::QuotaChanged(const std::string& ns) {
  quota_changed_.insert(ns);
  Poke();
}

void Requeue::Poke() {
  if (!state_->HasGrown() && quota_changed_.empty() && queue_.empty() && given_back_.empty()) return;
  pending_ = true;
  wake_.Notify();
}

const PodView* Requeue::Pending(const std::string& uid, const std::string& key) const {
  auto it = pods_->find(key);
  if (it == pods_->end()) return nullptr;
  const PodView& p = it->second;
  if (p.UidOrKey() != uid || !p.node_name.empty() || p.scheduling_gated || p.terminating || p.Finished() ||
      p.scheduler_name != options_.scheduler_name)
    return nullptr;
  return &p;
}

bool Requeue::MayNudge(const Candidate& c, TimePoint now) const {
  return !c.nudged || now - *c.nudged >= options_.renudge_after;
}

void Requeue::Enqueue(Nudge nudge) {
  if (queued_.insert(nudge.uid).second) queue_.push_back(std::move(nudge));
}

template <typename Take>
void Requeue::FitOn(const std::string& node,
                    const std::vector<std::pair<const std::string*, Candidate*>>& order, Take&& take,
                    std::unordered_map<const Candidate*, std::string>& fitted) {
  std::vector<const PodView*> pods;
  std::vector<const Candidate*> who;
  for (const auto& [uid, c] : order) {
    if (fitted.contains(c) || !take(*c)) continue;
    if (const PodView* p = Pending(*uid, c->key)) {
      pods.push_back(p);
      who.push_back(c);
    }
  }
  if (pods.empty()) return;
  const std::vector<bool> fits = scheduler_.FitInTurn(pods, node);
  for (std::size_t i = 0; i < fits.size(); ++i) {
    if (fits[i]) fitted.emplace(who[i], node);
  }
}

void Requeue::Pass() {
  ++stats_.passes;
  ClusterState::Grown grown = state_->TakeGrown();
  grown.freed.merge(given_back_);
  given_back_.clear();
  grown.namespaces.merge(quota_changed_);
  quota_changed_.clear();
  // A pod the cache no longer has (deleted while no watch showed it) waits for nothing.
  const auto gone = std::erase_if(candidates_, [&](const auto& entry) {
    auto p = pods_->find(entry.second.key);
    return p == pods_->end() || p->second.UidOrKey() != entry.first;
  });
  if (gone > 0) ++changes_;
  if (candidates_.empty()) return;
  const TimePoint now = clock_->Now();
  // The candidates to look at, in the order they are fitted: higher priority first, then the older refusal.
  std::vector<std::pair<const std::string*, Candidate*>> order;
  for (auto& [uid, c] : candidates_) {
    if (MayNudge(c, now) && !queued_.contains(uid)) order.emplace_back(&uid, &c);
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    if (a.second->priority != b.second->priority) return a.second->priority > b.second->priority;
    return a.second->order < b.second->order;
  });
  const auto listed = [](const std::vector<std::string>& nodes, const std::string& node) {
    return std::binary_search(nodes.begin(), nodes.end(), node);
  };
  std::unordered_map<const Candidate*, std::string> fitted;  // -> the node whose room it takes
  // A node whose devices changed: every pod refused on it; then a node with a hold released: the pods that
  // pods leaving could make room for there.
  for (const std::string& node : grown.changed) {
    grown.freed.erase(node);
    FitOn(
        node, order,
        [&](const Candidate& c) { return listed(c.freeable, node) || listed(c.unfit_idle, node); }, fitted);
  }
  for (const std::string& node : grown.freed)
    FitOn(node, order, [&](const Candidate& c) { return listed(c.freeable, node); }, fitted);
  // A namespace whose quota may allow more: its candidates refused for it, on a node they were refused on
  // where pods leaving could make room (the first that takes it).
  for (const auto& [uid, c] : order) {
    if (fitted.contains(c) || !c->quota || !grown.namespaces.contains(c->ns)) continue;
    for (const std::string& node : c->freeable) {
      FitOn(node, order, [&](const Candidate& other) { return &other == c; }, fitted);
      if (fitted.contains(c)) break;
    }
  }
  std::vector<std::string> nudged;
  for (const auto& [uid, c] : order) {
    auto f = fitted.find(c);
    if (f == fitted.end()) continue;
    c->nudged = now;
    Enqueue(Nudge{*uid, c->key, f->second, false});
    nudged.push_back(c->key);
  }
  if (!nudged.empty() && spdlog::should_log(spdlog::level::debug)) {
    spdlog::debug("requeue: {} node(s) freed, {} changed, {} namespace(s); nudging {} of {} refused pods: {}",
                  grown.freed.size(), grown.changed.size(), grown.namespaces.size(), nudged.size(),
                  candidates_.size(), fmt::join(nudged, ", "));
  }
}

asio::awaitable<void> Requeue::SendQueued() {
  // At least one nudge every 1,000 s, whatever the setting (a tiny rate would overflow the interval).
  const auto interval = std::chrono::duration_cast<steady_clock::duration>(
      std::chrono::duration<double>(options_.qps > 0 ? 1.0 / std::max(options_.qps, 0.001) : 0.0));
  // Its turn may come late: a nudge is sent only if its pod still waits for kube-scheduler, and (but for a
  // bind that waited for a lock) is still a candidate our filter has not decided meanwhile.
  const auto still_wanted = [this](const Nudge& n) {
    return (n.lock || candidates_.contains(n.uid)) ? Pending(n.uid, n.key) : nullptr;
  };
  while (!queue_.empty()) {
    const Nudge nudge = std::move(queue_.front());
    queue_.pop_front();
    queued_.erase(nudge.uid);
    const PodView* pod = still_wanted(nudge);
    if (pod != nullptr && next_send_ > steady_clock::now()) {
      const auto wait = next_send_ - steady_clock::now();
      co_await k8s::SleepFor(std::chrono::duration_cast<std::chrono::milliseconds>(wait));
      pod = still_wanted(nudge);  // the cache may have moved on while this slept
    }
    if (pod == nullptr) {
      ++stats_.skipped;
      if (!nudge.node.empty()) given_back_.insert(nudge.node);  // its room is for the next pass
      continue;
    }
    next_send_ = steady_clock::now() + interval;
    const std::string ns = pod->ns, name = pod->name;
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(clock_->Now().time_since_epoch()).count();
    const json::value patch = {
        {"metadata", {{"annotations", {{std::string(keys::kRequeue), std::to_string(ms)}}}}}};
    auto done = co_await writer_->PatchPod(ns, name, patch, Budget::kBackground);
    if (done) {
      ++stats_.nudges;
    } else {
      ++stats_.nudge_errors;
      if (auto again = candidates_.find(nudge.uid); again != candidates_.end()) again->second.nudged.reset();
      if (!nudge.node.empty()) given_back_.insert(nudge.node);
      spdlog::warn("requeue: could not nudge pod {}/{}: {}", ns, name, done.error().message);
    }
  }
  if (!given_back_.empty()) Poke();
}

asio::awaitable<void> Requeue::Run() {
  for (;;) {
    while (!pending_) {
      co_await wake_.WaitUntil(steady_clock::now() + std::chrono::hours(1));
      co_await k8s::ThrowIfCancelled();
    }
    co_await k8s::SleepFor(options_.settle);  // the rest of a burst of events joins this pass
    pending_ = false;
    Pass();
    if (options_.qps > 0) {
      co_await SendQueued();
    } else {
      queue_.clear();
      queued_.clear();
    }
  }
}

void Requeue::WriteMetrics(k8s::prom::TextWriter& w) const {
  w.Counter("hami_scheduler_requeue_nudges_total",
            "Pods our filter refused that kube-scheduler was asked to try again (an annotation patched) once "
            "the ledger could take them.",
            static_cast<double>(stats_.nudges));
  w.Counter("hami_scheduler_requeue_nudge_errors_total", "Requeue nudges whose patch failed.",
            static_cast<double>(stats_.nudge_errors));
  w.Gauge("hami_scheduler_requeue_candidates",
          "Pods our filter refused for reasons freed capacity can lift, waiting for it.",
          static_cast<double>(candidates_.size()));
}

}  // namespace hami::extender
