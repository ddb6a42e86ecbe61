#include "core/preemption.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <tuple>
#include <unordered_set>

namespace hami {

bool MoreImportant(const PodView& a, const PodView& b) {
  if (a.priority != b.priority) return a.priority > b.priority;
  if (a.ns != b.ns) return a.ns < b.ns;
  return a.name < b.name;
}

std::vector<bool> PdbViolations(std::span<const PodView* const> pods,
                                std::span<const DisruptionBudgetView> budgets) {
  std::vector<std::int64_t> allowed;
  allowed.reserve(budgets.size());
  for (const DisruptionBudgetView& b : budgets) allowed.push_back(b.disruptions_allowed);
  std::vector<bool> violates(pods.size(), false);
  for (std::size_t p = 0; p < pods.size(); ++p) {
    const PodView& pod = *pods[p];
    for (std::size_t b = 0; b < budgets.size() && !violates[p]; ++b) {
      const DisruptionBudgetView& budget = budgets[b];
      if (budget.ns != pod.ns || !budget.selector || !budget.selector->Matches(pod.labels)) continue;
      // Disrupted already (being evicted): it was counted when it was.
      if (std::binary_search(budget.disrupted_pods.begin(), budget.disrupted_pods.end(), pod.name)) continue;
      violates[p] = --allowed[b] < 0;
    }
  }
  return violates;
}

std::vector<PodHolding> PodsHoldingDevices(const ClusterState& state, const NodeEntry& node,
                                           const std::function<const PodView*(const std::string&)>& find) {
  std::vector<PodHolding> out;
  state.ForEachPodOn(node, [&](const PodAllocation& charge, const std::vector<DeviceCharge>& charges) {
    const PodView* pod = find(charge.ns + "/" + charge.name);
    if (pod != nullptr && pod->UidOrKey() == charge.uid && pod->node_name == node.node.name)
      out.push_back(PodHolding{pod, &charge, &charges});
  });
  std::sort(out.begin(), out.end(), [](const PodHolding& a, const PodHolding& b) {
    return std::tie(a.pod->ns, a.pod->name) < std::tie(b.pod->ns, b.pod->name);
  });
  return out;
}

const std::string* PickPreemptionNode(const std::map<std::string, VictimChoice>& choices) {
  struct Rank {
    std::int64_t violations, top, sum;
    std::size_t count;
    auto operator<=>(const Rank&) const = default;
  };
  const std::string* best = nullptr;
  Rank best_rank{};
  for (const auto& [node, choice] : choices) {
    if (!choice.helps) continue;
    Rank rank{choice.pdb_violations, std::numeric_limits<std::int64_t>::min(), 0, choice.victims.size()};
    if (!choice.victims.empty()) rank.top = choice.victims.front()->priority;
    // Each priority counted from the lowest there is, as kube-scheduler sums them: more victims never sum
    // to less.
    constexpr std::int64_t kFromLowest = std::int64_t{std::numeric_limits<std::int32_t>::max()} + 1;
    for (const PodView* v : choice.victims) rank.sum += v->priority + kFromLowest;
    if (best == nullptr || rank < best_rank) {  // the map's order: ties go to the smaller name
      best = &node;
      best_rank = rank;
    }
  }
  return best;
}

void VictimChooser::Begin(const PreemptionQuery& q) {
  // A pod of the cluster's pool on a client node: its victims there free pool cards.
  const NodeEntry& node = engine_.Target(*q.node, *q.requests);
  usage_ = node.usage;
  mig_ = node.mig_in_use;
  classes_ = node.classes_in_use;
  totals_ = node.totals;
  const NodeUsage into{usage_, mig_, classes_, totals_};
  for (const PodAllocation* hold : q.nominated) {
    if (hold->node == q.node->node.name) ApplyCharges(node, *hold, +1, into);
  }
  const auto required = [&](const PodView* pod) {
    return std::any_of(q.required.begin(), q.required.end(),
                       [&](const PodView* r) { return r->UidOrKey() == pod->UidOrKey(); });
  };
  candidates_.clear();
  for (const PodHolding& h : q.on_node) {
    if (h.pod->Finished()) continue;
    if (required(h.pod) || h.pod->terminating) {
      // Leaving anyway (kube-scheduler's victims, pods being deleted): their devices are the preemptor's.
      ApplyCharges(node, *h.charge, *h.charges, -1, into);
    } else if (h.pod->priority < q.preemptor->priority) {
      candidates_.push_back(Candidate{h});
    }
  }
}

VictimChoice VictimChooser::ChooseOn(const PodView& preemptor, const PodContext& ctx,
                                    const PodRequests& requests, const NodeEntry& node,
                                    std::span<const PodView* const> required,
                                    const std::function<const PodView*(const std::string&)>& find,
                                    std::span<const DisruptionBudgetView> budgets) {
  const std::vector<PodHolding> on_node = PodsHoldingDevices(*state_, node, find);
  nominated_.clear();
  state_->NominatedHolds(node.node.name, preemptor.priority, preemptor.UidOrKey(), nominated_);
  return Choose(PreemptionQuery{.preemptor = &preemptor,
                                .ctx = &ctx,
                                .requests = &requests,
                                .node = &node,
                                .required = required,
                                .on_node = on_node,
                                .nominated = nominated_,
                                .budgets = budgets});
}

void VictimChooser::Evict(const PreemptionQuery& q, Candidate& c, bool evicted) {
  if (c.evicted == evicted) return;
  c.evicted = evicted;
  ApplyCharges(engine_.Target(*q.node, *q.requests), *c.charge, *c.charges, evicted ? -1 : +1,
               NodeUsage{usage_, mig_, classes_, totals_});
}

bool VictimChooser::Fits(const PreemptionQuery& q, PodDevices* out, std::string* reason) {
  return engine_.FitAgainst(*q.ctx, *q.requests, engine_.Target(*q.node, *q.requests),
                            NodeUsage{usage_, mig_, classes_, totals_}, out, reason);
}

VictimChoice VictimChooser::Choose(const PreemptionQuery& q) {
  VictimChoice out;
  Begin(q);
  if (Fits(q, &out.devices, &out.reason)) {
    out.helps = true;  // the victims kube-scheduler chose (or none) are enough
    out.reason.clear();
  } else if (candidates_.empty()) {
    out.reason = fmt::format("no pod of lower priority holds devices on the node ({})", out.reason);
    return out;
  } else {
    for (Candidate& c : candidates_) Evict(q, c, true);
    PodDevices all_gone;
    std::string reason;
    if (!Fits(q, &all_gone, &reason)) {
      out.reason = fmt::format("evicting all {} pods of lower priority that hold devices there leaves too "
                               "little ({})",
                               candidates_.size(), reason);
      return out;
    }
    Reprieve(q, all_gone);
    out.reason.clear();
    out.helps = Fits(q, &out.devices, &out.reason);
  }
  Conclude(q, out);
  return out;
}

void VictimChooser::Reprieve(const PreemptionQuery& q, const PodDevices& all_gone) {
  std::unordered_set<std::string_view> chosen_cards;
  for (const auto& [vendor, containers] : all_gone) {
    for (const ContainerDevices& devices : containers) {
      for (const ContainerDevice& d : devices) chosen_cards.insert(d.uuid);
    }
  }
  std::sort(candidates_.begin(), candidates_.end(),
            [](const Candidate& a, const Candidate& b) { return MoreImportant(*a.pod, *b.pod); });
  // The budgets kube-scheduler's own victims use go first: they leave in any case.
  std::vector<const PodView*> pods(q.required.begin(), q.required.end());
  const auto more_important = [](const PodView* a, const PodView* b) { return MoreImportant(*a, *b); };
  std::sort(pods.begin(), pods.end(), more_important);
  for (const Candidate& c : candidates_) pods.push_back(c.pod);
  const std::vector<bool> violates = PdbViolations(pods, q.budgets);
  for (std::size_t i = 0; i < candidates_.size(); ++i) {
    Candidate& c = candidates_[i];
    c.violates = violates[q.required.size() + i];
    for (const DeviceCharge& d : *c.charges) {
      c.mem += d.mem.value();
      c.on_chosen_cards = c.on_chosen_cards || chosen_cards.contains(d.uuid);
    }
  }
  // Given back first, so evicted last: pods that would violate a budget, the more important, those off the
  // cards the fit takes, the smaller (the fewer pods evicted, the better).
  std::stable_sort(candidates_.begin(), candidates_.end(), [](const Candidate& a, const Candidate& b) {
    if (a.violates != b.violates) return a.violates;
    if (a.pod->priority != b.pod->priority) return a.pod->priority > b.pod->priority;
    if (a.on_chosen_cards != b.on_chosen_cards) return !a.on_chosen_cards;
    return a.mem < b.mem;
  });
  // The pods off the cards the fit takes leave those cards as they are: they are given back together, with
  // one fit to make sure (a vendor that places several cards itself may choose otherwise); if it fails, one
  // by one with the others.
  bool off_cards = false;
  for (Candidate& c : candidates_) {
    if (!c.on_chosen_cards) {
      Evict(q, c, false);
      off_cards = true;
    }
  }
  if (off_cards && !Fits(q, nullptr, nullptr)) {
    for (Candidate& c : candidates_) Evict(q, c, true);
  }
  for (Candidate& c : candidates_) {
    if (!c.evicted) continue;
    Evict(q, c, false);
    if (!Fits(q, nullptr, nullptr)) Evict(q, c, true);
  }
}

void VictimChooser::Conclude(const PreemptionQuery& q, VictimChoice& out) {
  out.victims.assign(q.required.begin(), q.required.end());
  for (const Candidate& c : candidates_) {
    if (c.evicted) out.victims.push_back(c.pod);
  }
  std::sort(out.victims.begin(), out.victims.end(),
            [](const PodView* a, const PodView* b) { return MoreImportant(*a, *b); });
  const std::vector<bool> violates = PdbViolations(out.victims, q.budgets);
  out.pdb_violations = std::count(violates.begin(), violates.end(), true);
}

}  // namespace hami
