#include "core/scheduler.h"

#include <algorithm>
#include <chrono>

#include "core/keys.h"

namespace hami {

Scheduler::Scheduler(ClusterState& state, SchedulerOptions options)
    : state_(&state), options_(std::move(options)), fitter_(state.backends(), state.quotas()) {}

FilterOutcome Scheduler::Filter(const PodView& pod, const std::vector<std::string>& candidates,
                                TimePoint now) {
  return Filter(pod, CollectRequests(pod, state_->backends()), candidates, now);
}

FilterOutcome Scheduler::Filter(const PodView& pod, const Result<PodRequests>& requests,
                                const std::vector<std::string>& candidates, TimePoint now) {
  FilterOutcome out;
  const Backends& backends = state_->backends();
  if (!requests) {
    out.error = requests.error().message;
    return out;
  }
  if (!requests->Any()) {
    out.kind = FilterOutcome::Kind::kPassThrough;
    return out;
  }
  auto ctx = MakePodContext(pod, backends, state_->quotas(), options_.gpu_policy);
  if (!ctx) {
    out.error = ctx.error().message;
    return out;
  }
  auto np = pod.annotations.find(keys::kNodePolicy);
  const bool spread = (np != pod.annotations.end() ? np->second : options_.node_policy) == kPolicySpread;
  ctx->spread = spread;

  // Resolve every name first: the lookups are independent, so the CPU overlaps their cache misses; then
  // prefetch a few nodes ahead while fitting. This keeps large clusters near the cost of small ones.
  resolved_.resize(candidates.size());
  for (std::size_t i = 0; i < candidates.size(); ++i) resolved_[i] = state_->FindNode(candidates[i]);
  struct Fitting {
    std::size_t index;  // into candidates
    double score;
    bool busy;  // allocations in flight at the threshold
  };
  std::vector<Fitting> fitting;
  fitting.reserve(candidates.size());
  std::string reason;
  // Three stages: the entry's first line (the vectors' headers) far ahead, then the vendor ranges, then the
  // devices of the first backend the pod asks for (on a node of several vendors they need not come first).
  constexpr std::size_t kPrefetchDistance = 4;
  constexpr std::size_t kRangePrefetchDistance = 6;
  constexpr std::size_t kEntryPrefetchDistance = 2 * kPrefetchDistance;
  const std::size_t first_asked = requests->BackendsAsked().front();
  for (std::size_t i = 0; i < candidates.size(); ++i) {
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
    const NodeEntry* node = resolved_[i];
    if (node == nullptr) {
      out.failed_nodes[candidates[i]] = std::string(kNodeUnregistered);
      continue;
    }
    if (!fitter_.Fit(*ctx, *requests, *node, nullptr, &reason)) {
      out.failed_nodes[candidates[i]] = reason;
      continue;
    }
    // The chosen cards' own score (interconnect groups kept together) counts for either policy: spread,
    // which takes the lowest score, has it subtracted (docs/DECISIONS.md "Interconnect groups").
    // A vendor's packing score counts as the node's usage does (docs/DECISIONS.md "Packing scores").
    const double allocation = fitter_.AllocationScore();
    fitting.push_back(
        {i, node->totals.Score() + (spread ? -allocation : allocation) + fitter_.PackingScore(),
         options_.busy_node_threshold > 0 && node->allocations_in_flight >= options_.busy_node_threshold});
  }
  out.fitting_count = fitting.size();
  if (fitting.empty()) {
    out.kind = FilterOutcome::Kind::kUnschedulable;
    // Which refusals no pod leaving can lift: kube-scheduler keeps those nodes out of its preemption and
    // our requeue never waits on them. The quota is the namespace's: it counts here as resolvable.
    PodContext idle = *ctx;
    idle.quota_active = false;
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      if (resolved_[i] == nullptr || !fitter_.FitsIdle(idle, *requests, *resolved_[i]))
        out.unresolvable.insert(candidates[i]);
    }
    return out;
  }
  // The policy's order: binpack the most used node first, spread the least used; ties go to the smaller
  // node name. Spread also ranks busy nodes below the others (it spreads a burst anyway); binpack diverts
  // from a busy node only within the nodes it fills with the burst (below).
  const auto by_policy = [&](const Fitting& a, const Fitting& b) {
    if (a.score != b.score) return spread ? a.score < b.score : a.score > b.score;
    return candidates[a.index] < candidates[b.index];
  };
  const auto better = [&](const Fitting& a, const Fitting& b) {
    if (spread && a.busy != b.busy) return b.busy;
    return by_policy(a, b);
  };
  std::size_t pick = 0;  // into fitting, once ordered
  const std::size_t top = std::min<std::size_t>(10, fitting.size());
  std::partial_sort(fitting.begin(), fitting.begin() + static_cast<std::ptrdiff_t>(top), fitting.end(),
                    better);
  if (!spread && fitting.front().busy) {
    // Walk the policy's order as far as this pod and the waiting pods like it reach; the first node on that
    // way that is not busy takes the pod if it is in use already, or if the burst left over fills it (an
    // empty node is not opened for part of a node's worth). The nodes past the burst's reach stay as binpack
    // leaves them.
    const int burst =
        static_cast<int>(std::min<std::size_t>(BurstShare(pod, *requests, candidates.size()), 1u << 20));
    out.busy_best = candidates[fitting.front().index];
    out.burst = burst;
    int covered = 0;  // pods of the burst the nodes walked so far take
    for (std::size_t i = 0; i < fitting.size() && covered < burst; ++i) {
      // The first `top` are in the policy's order already (binpack ranks by it alone).
      if (i == top) std::sort(fitting.begin() + static_cast<std::ptrdiff_t>(top), fitting.end(), by_policy);
      if (!fitting[i].busy) {
        const NodeEntry& node = *resolved_[fitting[i].index];
        const bool in_use = node.totals.used > 0;
        const auto fills = [&] {
          return covered + fitter_.Capacity(*ctx, *requests, node, burst - covered + 1) <= burst;
        };
        if (in_use || fills()) pick = i;
        break;
      }
      covered += fitter_.Capacity(*ctx, *requests, *resolved_[fitting[i].index], burst - covered);
    }
  }
  // The chosen node first, then the policy's order.
  if (pick != 0) {
    const auto at = fitting.begin() + static_cast<std::ptrdiff_t>(pick);
    std::rotate(fitting.begin(), at, at + 1);
  }
  for (std::size_t i = 0; i < top; ++i) out.best.emplace_back(candidates[fitting[i].index], fitting[i].score);

  out.node = candidates[fitting.front().index];
  const NodeEntry* chosen = state_->FindNode(out.node);
  fitter_.Fit(*ctx, *requests, *chosen, &out.devices, nullptr);
  out.kind = FilterOutcome::Kind::kScheduled;
  out.annotations[std::string(keys::kAssignedNode)] = out.node;
  out.annotations[std::string(keys::kDecisionTime)] =
      std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count());
  for (std::size_t b = 0; b < backends.size(); ++b) {
    auto d = out.devices.find(backends.at(b).Vendor());
    if (d == out.devices.end()) continue;
    const Annotations written = out.annotations;
    const auto [begin, end] = chosen->vendor_range[b];
    const std::span<const DeviceInfo> cards(chosen->devices.data() + begin,
                                            static_cast<std::size_t>(end - begin));
    backends.at(b).AnnotateOnNode(pod, d->second, cards, written, now, out.annotations);
  }
  return out;
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
  for (std::size_t i = 0; i < pods.size(); ++i) {
    const auto requests = CollectRequests(*pods[i], state_->backends());
    if (!requests || !requests->Any()) continue;
    auto ctx = MakePodContext(*pods[i], state_->backends(), state_->quotas(), options_.gpu_policy);
    if (!ctx) continue;
    fits[i] = fitter_.FitOnto(*ctx, *requests, *entry, usage, mig);
  }
  return fits;
}

void Scheduler::Reserve(const PodView& pod, const FilterOutcome& outcome, Hold hold) {
  if (outcome.kind != FilterOutcome::Kind::kScheduled) return;
  PodAllocation a;
  a.uid = pod.UidOrKey();
  a.ns = pod.ns;
  a.name = pod.name;
  a.node = outcome.node;
  a.num_init = pod.init_containers.size();
  a.devices = outcome.devices;
  for (const auto& [vendor, containers] : outcome.devices) {
    for (auto& m : codec::MigAllocationsOf(containers)) a.mig.push_back(std::move(m));
  }
  a.classes = PodClassesOf(pod, state_->backends(), a.devices);
  a.in_flight = hold == Hold::kInFlight;
  state_->AddPod(std::move(a));
}

}  // namespace hami
