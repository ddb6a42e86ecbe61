#include "core/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/keys.h"

namespace hami {

std::string_view FilterModeName(FilterMode mode) {
  return mode == FilterMode::kAllFitting ? "all-fitting" : "one-node";
}

Result<FilterMode> ParseFilterMode(std::string_view text) {
  if (text == "one-node") return FilterMode::kOneNode;
  if (text == "all-fitting") return FilterMode::kAllFitting;
  return Error{"expected one-node or all-fitting"};
}

Result<PodContext> DecisionContext(const PodView& pod, const ClusterState& state,
                                   const SchedulerOptions& options) {
  auto ctx = MakePodContext(pod, state.backends(), state.quotas(), options.gpu_policy);
  if (!ctx) return ctx;
  auto np = pod.annotations.find(keys::kNodePolicy);
  ctx->spread = (np != pod.annotations.end() ? np->second : options.node_policy) == kPolicySpread;
  return ctx;
}

Scheduler::Scheduler(ClusterState& state, SchedulerOptions options)
    : state_(&state), options_(std::move(options)), engine_(state.backends(), state.quotas()) {}

FilterOutcome Scheduler::Filter(const PodView& pod, const std::vector<std::string>& candidates,
                                TimePoint now) {
  return Filter(pod, CollectRequests(pod, state_->backends()), candidates, now);
}

FilterOutcome Scheduler::Filter(const PodView& pod, const Result<PodRequests>& requests,
                                const std::vector<std::string>& candidates, TimePoint now) {
  return Decide(pod, requests, candidates, now, options_.filter_mode);
}

FilterOutcome Scheduler::PlaceOn(const PodView& pod, const Result<PodRequests>& requests,
                                 const std::string& node, TimePoint now) {
  return Decide(pod, requests, {node}, now, FilterMode::kOneNode);
}

FilterOutcome Scheduler::Decide(const PodView& pod, const Result<PodRequests>& requests,
                                const std::vector<std::string>& candidates, TimePoint now, FilterMode mode) {
  FilterOutcome out;
  if (!requests) {
    out.error = requests.error().message;
    return out;
  }
  if (!requests->Any()) {
    out.kind = FilterOutcome::Kind::kPassThrough;
    return out;
  }
  auto ctx = DecisionContext(pod, *state_, options_);
  if (!ctx) {
    out.error = ctx.error().message;
    return out;
  }

  FitCandidates(*ctx, *requests, candidates, out);
  out.fitting_count = fitting_.size();
  if (fitting_.empty()) {
    out.kind = FilterOutcome::Kind::kUnschedulable;
    MarkUnresolvable(*ctx, *requests, candidates, out);
    return out;
  }
  if (mode == FilterMode::kAllFitting) {  // fitting_ is in the candidates' order until Rank
    out.fitting.reserve(fitting_.size());
    for (const Fitting& f : fitting_) out.fitting.push_back(candidates[f.index]);
    // kube-scheduler preempts for nodes that fail; those are every candidate but the fitting ones here.
    MarkUnresolvable(*ctx, *requests, candidates, out);
  }
  Rank(pod, *ctx, *requests, candidates, out);
  for (std::size_t i = 0; i < std::min<std::size_t>(10, fitting_.size()); ++i)
    out.best.emplace_back(candidates[fitting_[i].index], fitting_[i].score);
  out.node = candidates[fitting_.front().index];
  WriteDecision(pod, *ctx, *requests, now, mode, out);
  return out;
}

Scheduler::Scores Scheduler::Prioritize(const PodView& pod, const Result<PodRequests>& requests,
                                        const std::vector<std::string>& candidates,
                                        const PendingFits& pending) {
  Scores out;
  out.scores.reserve(candidates.size());
  for (const std::string& c : candidates) out.scores.emplace_back(c, 0);
  if (!requests) {
    out.error = requests.error().message;
    return out;
  }
  if (!requests->Any()) return out;
  auto ctx = DecisionContext(pod, *state_, options_);
  if (!ctx) {
    out.error = ctx.error().message;
    return out;
  }
  const auto pending_on = [&](const std::string& node) -> std::span<const PodAllocation* const> {
    auto it = pending.find(node);
    return it == pending.end() ? std::span<const PodAllocation* const>{} : it->second;
  };
  // As the filter does: every name resolved first, a few nodes prefetched ahead while fitting.
  resolved_.resize(candidates.size());
  for (std::size_t i = 0; i < candidates.size(); ++i) resolved_[i] = state_->FindNode(candidates[i]);
  const std::size_t first_asked = requests->BackendsAsked().front();
  std::vector<std::pair<std::size_t, double>> fits;  // candidate, the policy's score
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    PrefetchAhead(i, first_asked);
    const NodeEntry* node = resolved_[i];
    if (node != nullptr && FitNode(*ctx, *requests, *node, nullptr, nullptr, pending_on(candidates[i])))
      fits.emplace_back(i, engine_.Score());
  }
  if (fits.empty()) return out;
  const auto [lo, hi] = std::minmax_element(fits.begin(), fits.end(),
                                            [](const auto& a, const auto& b) { return a.second < b.second; });
  const double low = lo->second, high = hi->second;
  std::size_t best = fits.front().first;
  for (const auto& [i, score] : fits) {
    // Binpack ranks the fuller node first, spread the emptier; equal scores all rank first.
    const double rank = high == low ? 1.0 : (ctx->spread ? high - score : score - low) / (high - low);
    out.scores[i].second = 1 + static_cast<int>(std::lround(rank * (kMaxExtenderScore - 1)));
    if (out.scores[i].second > out.scores[best].second) best = i;
  }
  out.best = candidates[best];
  FitNode(*ctx, *requests, *state_->FindNode(out.best), &out.devices, nullptr, pending_on(out.best));
  return out;
}

void Scheduler::FitCandidates(const PodContext& ctx, const PodRequests& requests,
                              const std::vector<std::string>& candidates, FilterOutcome& out) {
  // Resolve every name first: the lookups are independent, so the CPU overlaps their cache misses; then
  // prefetch a few nodes ahead while fitting. This keeps large clusters near the cost of small ones.
  resolved_.resize(candidates.size());
  for (std::size_t i = 0; i < candidates.size(); ++i) resolved_[i] = state_->FindNode(candidates[i]);
  fitting_.clear();
  fitting_.reserve(candidates.size());
  std::string reason;
  const std::size_t first_asked = requests.BackendsAsked().front();
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    PrefetchAhead(i, first_asked);
    const NodeEntry* node = resolved_[i];
    if (node == nullptr) {
      out.failed_nodes[candidates[i]] = std::string(kNodeUnregistered);
      continue;
    }
    if (!FitNode(ctx, requests, *node, nullptr, &reason)) {
      out.failed_nodes[candidates[i]] = reason;
      continue;
    }
    fitting_.push_back({i, engine_.Score(),
                        options_.busy_node_threshold > 0 &&
                            node->allocations_in_flight >= options_.busy_node_threshold});
  }
}

bool Scheduler::FitNode(const PodContext& ctx, const PodRequests& requests, const NodeEntry& node,
                        PodDevices* out, std::string* reason, std::span<const PodAllocation* const> pending) {
  if (!state_->HasNominations() && pending.empty()) return engine_.Fit(ctx, requests, node, out, reason);
  held_.assign(pending.begin(), pending.end());
  if (state_->HasNominations())
    state_->NominatedHolds(node.node.name, ctx.pod->priority, ctx.pod->UidOrKey(), held_);
  if (held_.empty()) return engine_.Fit(ctx, requests, node, out, reason);
  return engine_.FitWith(ctx, requests, node, UsageOverlay{{}, held_}, out, reason);
}

[[gnu::always_inline]] inline void Scheduler::PrefetchAhead(std::size_t i, std::size_t first_asked) const {
  // Three stages: the entry's first line (the vectors' headers) far ahead, then the vendor ranges, then the
  // devices of the first backend the pod asks for (on a node of several vendors they need not come first).
  constexpr std::size_t kPrefetchDistance = 4;
  constexpr std::size_t kRangePrefetchDistance = 6;
  constexpr std::size_t kEntryPrefetchDistance = 2 * kPrefetchDistance;
  if (i + kEntryPrefetchDistance < resolved_.size() && resolved_[i + kEntryPrefetchDistance] != nullptr)
    __builtin_prefetch(resolved_[i + kEntryPrefetchDistance]);
  if (i + kRangePrefetchDistance < resolved_.size() && resolved_[i + kRangePrefetchDistance] != nullptr)
    __builtin_prefetch(resolved_[i + kRangePrefetchDistance]->vendor_range.data() + first_asked);
  if (i + kPrefetchDistance < resolved_.size() && resolved_[i + kPrefetchDistance] != nullptr) {
    const NodeEntry* ahead = resolved_[i + kPrefetchDistance];
    const auto begin = static_cast<std::size_t>(
        first_asked < ahead->vendor_range.size() ? ahead->vendor_range[first_asked].first : 0);
    __builtin_prefetch(ahead->caps.data() + begin);
    __builtin_prefetch(ahead->usage.data() + begin);
  }
}

void Scheduler::MarkUnresolvable(const PodContext& ctx, const PodRequests& requests,
                                 const std::vector<std::string>& candidates, FilterOutcome& out) {
  // Which refusals no pod leaving can lift: kube-scheduler keeps those nodes out of its preemption and
  // our requeue never waits on them. The quota is the namespace's: it counts here as resolvable.
  PodContext idle = ctx;
  idle.quota_active = false;
  const bool all_failed = fitting_.empty();
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    if (!all_failed && !out.failed_nodes.contains(candidates[i])) continue;
    if (resolved_[i] == nullptr || !engine_.FitsIdle(idle, requests, *resolved_[i]))
      out.unresolvable.insert(candidates[i]);
  }
}

void Scheduler::Rank(const PodView& pod, const PodContext& ctx, const PodRequests& requests,
                     const std::vector<std::string>& candidates, FilterOutcome& out) {
  // The policy's order: binpack the most used node first, spread the least used; ties go to the smaller
  // node name. Spread also ranks busy nodes below the others (it spreads a burst anyway); binpack diverts
  // from a busy node only within the nodes it fills with the burst (PickPastBusy).
  const bool spread = ctx.spread;
  const auto by_policy = [&](const Fitting& a, const Fitting& b) {
    if (a.score != b.score) return spread ? a.score < b.score : a.score > b.score;
    return candidates[a.index] < candidates[b.index];
  };
  const auto better = [&](const Fitting& a, const Fitting& b) {
    if (spread && a.busy != b.busy) return b.busy;
    return by_policy(a, b);
  };
  const std::size_t top = std::min<std::size_t>(10, fitting_.size());
  std::partial_sort(fitting_.begin(), fitting_.begin() + static_cast<std::ptrdiff_t>(top), fitting_.end(),
                    better);
  if (spread || !fitting_.front().busy) return;
  const std::size_t pick = PickPastBusy(pod, ctx, requests, candidates, top, by_policy, out);
  // The chosen node first, then the policy's order.
  if (pick != 0) {
    const auto at = fitting_.begin() + static_cast<std::ptrdiff_t>(pick);
    std::rotate(fitting_.begin(), at, at + 1);
  }
}

std::size_t Scheduler::PickPastBusy(const PodView& pod, const PodContext& ctx, const PodRequests& requests,
                                    const std::vector<std::string>& candidates, std::size_t top,
                                    const std::function<bool(const Fitting&, const Fitting&)>& by_policy,
                                    FilterOutcome& out) {
  // Walk the policy's order as far as this pod and the waiting pods like it reach; the first node on that
  // way that is not busy takes the pod if it is in use already, or if the burst left over fills it (an
  // empty node is not opened for part of a node's worth). The nodes past the burst's reach stay as binpack
  // leaves them.
  const int burst =
      static_cast<int>(std::min<std::size_t>(BurstShare(pod, requests, candidates.size()), 1u << 20));
  out.busy_best = candidates[fitting_.front().index];
  out.burst = burst;
  int covered = 0;  // pods of the burst the nodes walked so far take
  for (std::size_t i = 0; i < fitting_.size() && covered < burst; ++i) {
    // The first `top` are in the policy's order already (binpack ranks by it alone).
    if (i == top) std::sort(fitting_.begin() + static_cast<std::ptrdiff_t>(top), fitting_.end(), by_policy);
    const NodeEntry& node = *resolved_[fitting_[i].index];
    if (!fitting_[i].busy) {
      const bool in_use = node.totals.used > 0;
      if (in_use || covered + engine_.Capacity(ctx, requests, node, burst - covered + 1) <= burst) return i;
      return 0;
    }
    covered += engine_.Capacity(ctx, requests, node, burst - covered);
  }
  return 0;
}

void Scheduler::WriteDecision(const PodView& pod, const PodContext& ctx, const PodRequests& requests,
                              TimePoint now, FilterMode mode, FilterOutcome& out) {
  const Backends& backends = state_->backends();
  const NodeEntry* chosen = state_->FindNode(out.node);
  FitNode(ctx, requests, *chosen, &out.devices, nullptr);
  const NodeEntry& cards_on = engine_.Target(*chosen, requests);  // a client's cards are the pool's
  if (mode == FilterMode::kAllFitting) {  // nothing is written before kube-scheduler chooses
    out.kind = FilterOutcome::Kind::kFitting;
    return;
  }
  out.kind = FilterOutcome::Kind::kScheduled;
  out.annotations[std::string(keys::kAssignedNode)] = out.node;
  out.annotations[std::string(keys::kDecisionTime)] =
      std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count());
  for (std::size_t b = 0; b < backends.size(); ++b) {
    auto d = out.devices.find(backends.at(b).Vendor());
    if (d == out.devices.end()) continue;
    const Annotations written = out.annotations;
    const auto [begin, end] = cards_on.vendor_range[b];
    const std::span<const DeviceInfo> cards(cards_on.devices.data() + begin,
                                            static_cast<std::size_t>(end - begin));
    backends.at(b).AnnotateOnNode(pod, d->second, cards, written, now, out.annotations);
  }
}

std::size_t Scheduler::BurstShare(const PodView& pod, const PodRequests& requests,
                                  std::size_t candidates) const {
  // Pods that ask for a vendor this pod asks for; the burst is taken as made of pods like this one.
  std::size_t waiting = 0;
  std::size_t nodes = 0;  // nodes that could hold such a pod: those with every vendor it asks for, at most
  bool first = true;
  for (std::size_t backend : requests.BackendsAsked()) {
    waiting = std::max(waiting, state_->WaitingFor(backend));
    nodes = first ? state_->NodesWith(backend) : std::min(nodes, state_->NodesWith(backend));
    first = false;
  }
  const std::string uid = pod.UidOrKey();
  if (waiting > 0 && state_->CountsAsWaiting(uid)) --waiting;  // itself, counted below
  std::size_t burst = 1 + waiting;
  // kube-scheduler hands an extender a window of the nodes that pass its own filters (at least 100 of them
  // in clusters of more), the next window for the next pod: the burst spreads over the windows, and this
  // one fills only its part of it, rounded down (docs/DECISIONS.md "Bursts under binpack").
  if (candidates > 0 && nodes > candidates) burst = std::max<std::size_t>(1, burst * candidates / nodes);
  return burst;
}

std::vector<bool> Scheduler::FitInTurn(std::span<const PodView* const> pods, const std::string& node) {
  std::vector<bool> fits(pods.size(), false);
  const NodeEntry* entry = state_->FindNode(node);
  if (entry == nullptr) return fits;
  std::vector<DeviceUsage> usage = entry->usage;
  std::vector<std::vector<MigInUse>> mig = entry->mig_in_use;
  // The devices held for the pods nominated here are taken, but for the pods that outrank them; and the pods
  // nominated here are fitted first, in their own place (kube-scheduler tries them there first).
  std::vector<std::pair<std::int32_t, const PodAllocation*>> holds;
  state_->ForEachNominated(node, [&](std::int32_t priority, const PodAllocation& hold) {
    holds.emplace_back(priority, &hold);
  });
  std::vector<CardClasses> classes = entry->classes_in_use;
  NodeTotals totals = entry->totals;
  const NodeUsage into{usage, mig, classes, totals};
  const auto apply = [&](const PodView& pod, int sign) {
    for (const auto& [priority, hold] : holds) {
      if (priority < pod.priority || hold->uid == pod.UidOrKey()) ApplyCharges(*entry, *hold, sign, into);
    }
  };
  for (const auto& [priority, hold] : holds) ApplyCharges(*entry, *hold, +1, into);
  std::vector<std::size_t> order(pods.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_partition(order.begin(), order.end(),
                        [&](std::size_t i) { return pods[i]->nominated_node_name == node; });
  for (const std::size_t i : order) {
    const auto requests = CollectRequests(*pods[i], state_->backends());
    if (!requests || !requests->Any()) continue;
    auto ctx = MakePodContext(*pods[i], state_->backends(), state_->quotas(), options_.gpu_policy);
    if (!ctx) continue;
    apply(*pods[i], -1);
    // A pod of the cluster's pool is fit against the pool as the ledger has it, not this node's usage.
    fits[i] = &engine_.Target(*entry, *requests) != entry
                  ? engine_.Fit(*ctx, *requests, *entry, nullptr, nullptr)
                  : engine_.FitOnto(*ctx, *requests, *entry, usage, mig);
    if (fits[i]) {  // it takes its own place instead of its hold, which is gone from here on
      std::erase_if(holds, [&](const auto& h) { return h.second->uid == pods[i]->UidOrKey(); });
    }
    apply(*pods[i], +1);
  }
  return fits;
}

void Scheduler::Reserve(const PodView& pod, const FilterOutcome& outcome, Hold hold) {
  if (outcome.kind != FilterOutcome::Kind::kScheduled) return;
  state_->AddPod(Decision(pod, outcome, hold));
}

PodAllocation Scheduler::Decision(const PodView& pod, const FilterOutcome& outcome, Hold hold) const {
  return AllocationOf(pod, outcome.node, outcome.devices, state_->backends(), hold == Hold::kInFlight);
}

}  // namespace hami
