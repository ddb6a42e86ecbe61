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
  for (const auto& [node, reason] : outcome.failed_nodes) {
    if (outcome.unresolvable.contains(node)) continue;
    c.nodes.push_back(node);  // failed_nodes is ordered: so is this
    c.quota = c.quota || reason.find(ReasonName(Reason::kResourceQuotaNotFit)) != std::string::npos;
  }
  if (c.nodes.empty()) {
    Forget(uid);
    return;
  }
  c.key = pod.Key();
  c.ns = pod.ns;
  c.priority = pod.priority;
  c.order = ++refusals_;
  candidates_[uid] = std::move(c);
}

void Requeue::Forget(const std::string& uid) {
  candidates_.erase(uid);
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
    if (Pending(uid, key) != nullptr) Enqueue(uid, key);
  }
  locks_.erase(it);
  if (!queue_.empty()) Poke();
}

void Requeue::QuotaChanged(const std::string& ns) {
  quota_changed_.insert(ns);
  Poke();
}

void Requeue::Poke() {
  if (!state_->HasGrown() && quota_changed_.empty() && queue_.empty()) return;
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

void Requeue::Enqueue(const std::string& uid, const std::string& key) {
  if (queued_.insert(uid).second) queue_.emplace_back(uid, key);
}

void Requeue::Pass() {
  ++stats_.passes;
  ClusterState::Grown grown = state_->TakeGrown();
  grown.namespaces.merge(quota_changed_);
  quota_changed_.clear();
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
  std::vector<std::string> nudge;
  std::unordered_set<const Candidate*> taken;
  std::vector<const PodView*> pods;
  std::vector<Candidate*> who;
  // Per node that grew: its candidates, fitted one after another against what the ones before would take.
  for (const std::string& node : grown.nodes) {
    pods.clear();
    who.clear();
    for (const auto& [uid, c] : order) {
      if (taken.contains(c) || !std::binary_search(c->nodes.begin(), c->nodes.end(), node)) continue;
      if (const PodView* p = Pending(*uid, c->key)) {
        pods.push_back(p);
        who.push_back(c);
      }
    }
    if (pods.empty()) continue;
    const std::vector<bool> fits = scheduler_.FitInTurn(pods, node);
    for (std::size_t i = 0; i < fits.size(); ++i) {
      if (fits[i]) taken.insert(who[i]);
    }
  }
  // A namespace whose quota may allow more: its candidates refused for it, on any node they had.
  for (const auto& [uid, c] : order) {
    if (taken.contains(c) || !c->quota || !grown.namespaces.contains(c->ns)) continue;
    const PodView* p = Pending(*uid, c->key);
    if (p == nullptr) continue;
    const PodView* one[] = {p};
    for (const std::string& node : c->nodes) {
      if (scheduler_.FitInTurn(one, node).front()) {
        taken.insert(c);
        break;
      }
    }
  }
  for (const auto& [uid, c] : order) {
    if (!taken.contains(c)) continue;
    c->nudged = now;
    Enqueue(*uid, c->key);
    nudge.push_back(c->key);
  }
  if (!nudge.empty() && spdlog::should_log(spdlog::level::debug)) {
    spdlog::debug("requeue: {} node(s) and {} namespace(s) grew; nudging {} of {} refused pods: {}",
                  grown.nodes.size(), grown.namespaces.size(), nudge.size(), candidates_.size(),
                  fmt::join(nudge, ", "));
  }
}

asio::awaitable<void> Requeue::SendQueued() {
  const auto interval = std::chrono::duration_cast<steady_clock::duration>(
      std::chrono::duration<double>(options_.qps > 0 ? 1.0 / options_.qps : 0.0));
  while (!queue_.empty()) {
    const auto [uid, key] = std::move(queue_.front());
    queue_.pop_front();
    queued_.erase(uid);
    // Its turn may come late: it is nudged only if it still waits for kube-scheduler.
    const PodView* pod = Pending(uid, key);
    if (pod == nullptr) {
      ++stats_.skipped;
      continue;
    }
    if (const auto now = steady_clock::now(); next_send_ > now) {
      co_await k8s::SleepFor(std::chrono::duration_cast<std::chrono::milliseconds>(next_send_ - now));
      pod = Pending(uid, key);  // the cache may have moved on while this slept
      if (pod == nullptr) {
        ++stats_.skipped;
        continue;
      }
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
      if (auto again = candidates_.find(uid); again != candidates_.end()) again->second.nudged.reset();
      spdlog::warn("requeue: could not nudge pod {}/{}: {}", ns, name, done.error().message);
    }
  }
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
