#include "extender/preempt_service.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>


namespace hami::extender {
namespace {

// The preemptors whose answers are remembered for their nomination, and per preemptor the nodes (those
// kube-scheduler is likeliest to pick); past it the oldest answer goes (its pod, if nominated, holds
// nothing: the requeue still tries it when its victims are gone).
constexpr std::size_t kRememberedPreemptors = 1024;
constexpr std::size_t kRememberedNodes = 8;

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

std::string PreemptService::NotReady() const {
  if (!readiness_->ready()) return "hami-scheduler is not ready: " + readiness_->NotReadyReason();
  if (!budgets_synced_()) return "the PodDisruptionBudget cache has not synced yet (can it list them?)";
  return "";
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

Result<const PodView*> PreemptService::Victim(const std::string& uid, const std::string& node,
                                              const PodView& preemptor) {
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
  if (pod == nullptr) return Error{fmt::format("victim uid {}: no such pod is known", uid)};
  if (pod->node_name != node) {
    return Error{fmt::format("victim uid {}: pod {} is {}", uid, pod->Key(),
                             pod->node_name.empty() ? "not bound to a node" : "on node " + pod->node_name)};
  }
  if (pod->priority >= preemptor.priority) {
    return Error{fmt::format("victim uid {}: pod {} has priority {}, not lower than the pod's {}", uid,
                             pod->Key(), pod->priority, preemptor.priority)};
  }
  return pod;
}

Result<VictimChoice> PreemptService::ChooseOn(const Preemptor& p, const std::string& node,
                                              const std::vector<std::string>& uids) {
  const NodeEntry* entry = state_->FindNode(node);
  if (entry == nullptr) return Error{"the node is not registered (it has no devices we know)"};
  std::vector<const PodView*> required;
  for (const std::string& uid : uids) {
    auto victim = Victim(uid, node, *p.pod);
    if (!victim) return victim.error();
    if (std::find(required.begin(), required.end(), *victim) != required.end())
      return Error{fmt::format("victim uid {} is listed twice", uid)};
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
  if (std::string why = NotReady(); !why.empty()) return Fail(std::move(why));
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
  std::map<std::string, VictimChoice> helped;
  std::vector<std::string> none;
  for (const auto& [node, uids] : args.victims) {
    auto choice = ChooseOn(p, node, uids);
    if (!choice) {
      // One stale or contradicted entry leaves out its node, not the others (kube-scheduler drops a node
      // left out; an error would end its preemption for the pod on every node).
      ++contradicted_;
      spdlog::warn("preempt {}: node {} left out, nothing changed: {}", pod.Key(), node,
                   choice.error().message);
      continue;
    }
    if (!choice->helps || choice->victims.empty()) {
      none.push_back(fmt::format("{}: {}", node, choice->helps ? "fits with no eviction" : choice->reason));
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
    helped.emplace(node, std::move(*choice));
  }
  if (!none.empty()) {
    const std::size_t shown = std::min<std::size_t>(none.size(), 10);
    spdlog::info("preempt {}: no eviction helps on {} node(s): {}{}", pod.Key(), none.size(),
                 fmt::join(none.begin(), none.begin() + static_cast<std::ptrdiff_t>(shown), "; "),
                 none.size() > shown ? "; ..." : "");
  }
  ++results_[out.empty() ? "none" : "victims"];
  Remember(pod, helped);
  return out;
}

void PreemptService::Remember(const PodView& pod, std::map<std::string, VictimChoice>& helped) {
  // Only for a pod the cache has with this uid: a request speaks for the pod it names (a made-up body's
  // answer is answered, not kept). Only the nodes kube-scheduler is likeliest to pick are kept.
  const std::string uid = pod.UidOrKey();
  const PodView* cached = Find(*pods_, pod.Key());
  if (cached == nullptr || cached->UidOrKey() != uid) return;
  std::map<std::string, PodAllocation> holds;
  while (!helped.empty() && holds.size() < kRememberedNodes) {
    const std::string node = *PickPreemptionNode(helped);
    auto it = helped.find(node);
    holds.emplace(node, AllocationOf(*cached, node, std::move(it->second.devices), state_->backends(), true));
    helped.erase(it);
  }
  if (!answered_.contains(uid)) {
    answer_order_.push_back(uid);
    if (answer_order_.size() > kRememberedPreemptors) {
      answered_.erase(answer_order_.front());
      answer_order_.pop_front();
    }
  }
  // Preempting again for a pod nominated already: where this answer places it is what it is to get.
  if (const PodAllocation* held = state_->NominationOf(uid)) {
    if (auto again = holds.find(held->node); again != holds.end())
      state_->Nominate(cached->priority, again->second);
  }
  answered_[uid] = std::move(holds);
}

void PreemptService::OnPod(const PodView& pod) {
  const std::string uid = pod.UidOrKey();
  if (!pod.node_name.empty() || pod.terminating || pod.Finished()) {
    Forget(uid);
    return;
  }
  const std::string& node = pod.nominated_node_name;
  const PodAllocation* held = state_->NominationOf(uid);
  if (held != nullptr && held->node == node) return;  // unchanged
  // Only a nomination that follows our answer holds devices: kube-scheduler also nominates pods it is
  // binding (the nominated node as an expectation), whose decision our ledger holds already.
  const PodAllocation* hold = nullptr;
  if (auto answered = answered_.find(uid); answered != answered_.end() && !node.empty()) {
    if (auto at = answered->second.find(node); at != answered->second.end()) hold = &at->second;
  }
  if (hold == nullptr) {
    state_->ClearNomination(uid);
    return;
  }
  ++nominations_;
  spdlog::info("pod {} is nominated to node {}: its devices there are held for it until it is bound",
               pod.Key(), node);
  state_->Nominate(pod.priority, *hold);
}

void PreemptService::Forget(const std::string& uid) {
  state_->ClearNomination(uid);
  if (answered_.erase(uid) > 0) std::erase(answer_order_, uid);
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
  w.Counter("hami_scheduler_preempt_nodes_contradicted_total",
            "Nodes left out of a /preempt answer because the request described them otherwise than the "
            "caches show (not registered, a victim unknown, elsewhere, not of lower priority, listed twice).",
            static_cast<double>(contradicted_));
  w.Counter("hami_scheduler_nomination_holds_total",
            "Devices held for pods kube-scheduler nominated to a node after a preemption.",
            static_cast<double>(nominations_));
}

}  // namespace hami::extender
