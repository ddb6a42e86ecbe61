#include "extender/preempt_service.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>


namespace hami::extender {
namespace {

// The preemptors whose answers are remembered for their nomination; past it the oldest answer goes (its pod
// then gets the fit computed anew when nominated).
constexpr std::size_t kRememberedPreemptors = 4096;

const PodView* Find(const std::map<std::string, PodView>& pods, const std::string& key) {
  auto it = pods.find(key);
  return it == pods.end() ? nullptr : &it->second;
}

}  // namespace

PreemptService::PreemptService(ClusterState& state, const std::map<std::string, PodView>& pods,
                               const std::map<std::string, DisruptionBudgetView>& budgets,
                               std::function<bool()> budgets_synced, const Readiness& readiness,
                               PreemptOptions options)
    : state_(&state),
      pods_(&pods),
      budgets_(&budgets),
      budgets_synced_(std::move(budgets_synced)),
      readiness_(&readiness),
      options_(std::move(options)),
      chooser_(state),
      latency_(k8s::prom::Histogram::LatencyBuckets()) {}

std::function<const PodView*(const std::string&)> PreemptService::FindPod() const {
  return [pods = pods_](const std::string& key) { return Find(*pods, key); };
}

Error PreemptService::Fail(std::string message) {
  ++results_["error"];
  spdlog::warn("preempt refused, nothing changed: {}", message);
  return Error{std::move(message)};
}

Error PreemptService::Refuse(std::string error) {
  latency_.Observe(0);
  return Fail(std::move(error));
}

Result<const PodView*> PreemptService::Victim(const std::string& uid, const std::string& node) {
  const PodView* pod = nullptr;
  if (const PodAllocation* charge = state_->FindPod(uid)) pod = Find(*pods_, charge->ns + "/" + charge->name);
  if (pod == nullptr || pod->UidOrKey() != uid) {
    // A victim holding no device: looked up by uid over the whole cache, once per request.
    if (by_uid_.empty()) {
      for (const auto& [key, p] : *pods_) by_uid_.emplace(p.UidOrKey(), &p);
    }
    auto it = by_uid_.find(uid);
    pod = it == by_uid_.end() ? nullptr : it->second;
  }
  if (pod == nullptr) return Error{fmt::format("victim uid {} on node {}: no such pod is known", uid, node)};
  if (pod->node_name != node) {
    return Error{fmt::format("victim uid {} on node {}: pod {} is {}", uid, node, pod->Key(),
                             pod->node_name.empty() ? "not bound to a node" : "on node " + pod->node_name)};
  }
  return pod;
}

Result<VictimChoice> PreemptService::ChooseOn(const Preemptor& p, const std::string& node,
                                              const std::vector<std::string>& uids) {
  const NodeEntry* entry = state_->FindNode(node);
  if (entry == nullptr)
    return Error{fmt::format("node {} is not registered (it has no devices we know)", node)};
  std::vector<const PodView*> required;
  for (const std::string& uid : uids) {
    auto victim = Victim(uid, node);
    if (!victim) return victim.error();
    if (std::find(required.begin(), required.end(), *victim) != required.end())
      return Error{fmt::format("victim uid {} is listed twice on node {}", uid, node)};
    required.push_back(*victim);
  }
  return chooser_.ChooseOn(*p.pod, p.ctx, p.requests, *entry, required, FindPod(), budget_list_);
}

Result<std::map<std::string, k8s::MetaVictims>> PreemptService::Preempt(
    const k8s::ExtenderPreemptionArgs& args) {
  const auto start = std::chrono::steady_clock::now();
  struct Timed {
    k8s::prom::Histogram* h;
    std::chrono::steady_clock::time_point start;
    ~Timed() { h->Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()); }
  } timed{&latency_, start};
  const PodView& pod = args.pod;
  if (!readiness_->ready()) return Fail("hami-scheduler is not ready: " + readiness_->NotReadyReason());
  if (!budgets_synced_()) return Fail("the PodDisruptionBudget cache has not synced yet (can it list them?)");
  std::map<std::string, k8s::MetaVictims> unchanged;  // kube-scheduler's own choice, as it came
  for (const auto& [node, uids] : args.victims)
    unchanged[node] = k8s::MetaVictims{uids, args.pdb_violations.at(node)};
  const Result<PodRequests> requests = CollectRequests(pod, state_->backends());
  if (!requests) return Fail(fmt::format("pod {}: {}", pod.Key(), requests.error().message));
  const bool others = !options_.scheduler_name.empty() && pod.scheduler_name != options_.scheduler_name;
  if (!requests->Any() || others) {
    ++results_["passthrough"];  // no device of ours to make room for, or another scheduler's pod
    return unchanged;
  }
  if (pod.never_preempts) {
    ++results_["none"];
    spdlog::info("preempt {}: its preemptionPolicy is Never; no pod is evicted for it", pod.Key());
    return std::map<std::string, k8s::MetaVictims>{};
  }
  auto ctx = DecisionContext(pod, *state_, options_.policies);
  if (!ctx) return Fail(fmt::format("pod {}: {}", pod.Key(), ctx.error().message));
  const Preemptor p{&pod, std::move(*ctx), *requests};

  budget_list_.clear();
  for (const auto& [key, budget] : *budgets_) budget_list_.push_back(budget);
  by_uid_.clear();
  std::map<std::string, k8s::MetaVictims> out;
  std::map<std::string, PodAllocation> holds;
  std::vector<std::string> refused;
  for (const auto& [node, uids] : args.victims) {
    auto choice = ChooseOn(p, node, uids);
    if (!choice) return Fail(fmt::format("preempt of pod {}: {}", pod.Key(), choice.error().message));
    if (!choice->helps || choice->victims.empty()) {
      refused.push_back(
          fmt::format("{}: {}", node, choice->helps ? "fits with no eviction" : choice->reason));
      continue;
    }
    k8s::MetaVictims& victims = out[node];
    std::vector<std::string> names;
    for (const PodView* v : choice->victims) {
      victims.uids.push_back(v->UidOrKey());
      names.push_back(v->Key());
    }
    victims.pdb_violations = choice->pdb_violations;
    spdlog::info("preempt {}: on node {} evict {} ({} PodDisruptionBudget violations)", pod.Key(), node,
                 fmt::join(names, ", "), victims.pdb_violations);
    holds.emplace(node, AllocationOf(pod, node, std::move(choice->devices), state_->backends(), true));
  }
  if (!refused.empty())
    spdlog::info("preempt {}: no eviction helps on {}", pod.Key(), fmt::join(refused, "; "));
  ++results_[out.empty() ? "none" : "victims"];
  if (answered_.size() >= kRememberedPreemptors && !answered_.contains(pod.UidOrKey()))
    answered_.erase(answered_.begin());
  answered_[pod.UidOrKey()] = std::move(holds);
  return out;
}

std::optional<PodAllocation> PreemptService::HoldFor(const PodView& pod, const std::string& node) {
  if (auto it = answered_.find(pod.UidOrKey()); it != answered_.end()) {
    if (auto at = it->second.find(node); at != it->second.end()) return at->second;
  }
  // Nominated without our answer (kube-scheduler's own victims, or before a restart): the fit once the pods
  // of lower priority it needs gone are gone.
  const NodeEntry* entry = state_->FindNode(node);
  const Result<PodRequests> requests = CollectRequests(pod, state_->backends());
  if (entry == nullptr || !requests || !requests->Any()) return std::nullopt;
  auto ctx = DecisionContext(pod, *state_, options_.policies);
  if (!ctx) return std::nullopt;
  VictimChoice choice = chooser_.ChooseOn(pod, *ctx, *requests, *entry, {}, FindPod(), {});
  if (!choice.helps) {
    spdlog::info("pod {} is nominated to node {}, where it fits nowhere even with evictions ({}); it holds "
                 "nothing there",
                 pod.Key(), node, choice.reason);
    return std::nullopt;
  }
  return AllocationOf(pod, node, std::move(choice.devices), state_->backends(), true);
}

void PreemptService::OnPod(const PodView& pod) {
  const std::string uid = pod.UidOrKey();
  if (!pod.node_name.empty() || pod.terminating || pod.Finished()) {
    Forget(uid);
    return;
  }
  const std::string& node = pod.nominated_node_name;
  const PodAllocation* held = state_->NominationOf(uid);
  if (node.empty()) {
    state_->ClearNomination(uid);
    return;
  }
  if (held != nullptr && held->node == node) return;  // unchanged
  if (auto hold = HoldFor(pod, node)) {
    ++nominations_;
    spdlog::info("pod {} is nominated to node {}: its devices there are held for it until it is bound",
                 pod.Key(), node);
    state_->Nominate(pod.priority, std::move(*hold));
  } else {
    state_->ClearNomination(uid);
  }
}

void PreemptService::Forget(const std::string& uid) {
  state_->ClearNomination(uid);
  answered_.erase(uid);
}

void PreemptService::WriteMetrics(k8s::prom::TextWriter& w) const {
  w.Family("hami_scheduler_preempt_duration_seconds", "Time to answer /preempt.", "histogram");
  latency_.Write(w, "hami_scheduler_preempt_duration_seconds", {});
  w.Family("hami_scheduler_preempt_answers_total",
           "/preempt answers by result: victims named on some node, no node helps, passed through unchanged "
           "(no device of ours asked, another scheduler's pod), refused with an error.",
           "counter");
  for (const char* result : {"victims", "none", "passthrough", "error"}) {
    auto it = results_.find(result);
    w.Sample("hami_scheduler_preempt_answers_total", {{"result", result}},
             static_cast<double>(it == results_.end() ? 0 : it->second));
  }
  w.Counter("hami_scheduler_nomination_holds_total",
            "Devices held for pods kube-scheduler nominated to a node after a preemption.",
            static_cast<double>(nominations_));
}

}  // namespace hami::extender
