#include "core/bind_plan.h"

#include <algorithm>
#include <chrono>

#include "core/keys.h"
#include "core/strings.h"

namespace hami {

std::vector<std::string_view> AllocationKeys(const Backends& backends) {
  std::vector<std::string_view> out{keys::kAssignedNode, keys::kDecisionTime, keys::kMigAllocations};
  for (const auto& backend : backends) {
    const BackendKeys& k = backend->Spec().keys;
    if (!k.allocated.empty()) out.push_back(k.allocated);
    if (!k.to_allocate.empty()) out.push_back(k.to_allocate);
  }
  return out;
}

std::vector<BindLock> LocksToTake(const Backends& backends, const PodRequests& requests) {
  std::vector<BindLock> locks;
  if (!requests.Any()) return locks;
  for (std::size_t b = 0; b < backends.size(); ++b) {
    const BackendSpec& spec = backends.at(b).Spec();
    if (spec.keys.node_lock.empty()) continue;
    bool used = false;
    for (std::size_t c = requests.num_init; c < requests.containers.size() && !used; ++c) {
      for (const auto& [backend, request] : requests.containers[c]) used |= backend == static_cast<int>(b);
    }
    if (!used) continue;
    if (std::any_of(locks.begin(), locks.end(),
                    [&](const BindLock& l) { return l.key == spec.keys.node_lock; }))
      continue;
    locks.push_back({spec.keys.node_lock, spec.lock});
  }
  return locks;
}

BindingWrites PlanBinding(const Backends& backends, const PodView& pod, const PodRequests& requests,
                          const Annotations* decision, const std::string& node, TimePoint now) {
  BindingWrites plan;
  if (!requests.Any()) return plan;
  if (decision != nullptr) {
    for (const auto& [k, v] : *decision) plan.annotations[k] = v;
    // The label lets selectors find a node's pods (a node name too long for a label value is named by the
    // annotation alone). The API server copies a Binding's labels from Kubernetes 1.35 on.
    if (IsLabelValue(node)) plan.labels[std::string(keys::kAssignedNode)] = node;
    for (const std::string_view k : AllocationKeys(backends)) {
      if (pod.annotations.contains(k) && !plan.annotations.contains(std::string(k)))
        plan.clear_annotations.emplace_back(k);
    }
    // API servers before 1.35 do not copy a Binding's labels: a label naming another node goes first.
    if (auto l = pod.labels.find(keys::kAssignedNode); l != pod.labels.end() && l->second != node)
      plan.clear_label = true;
  }
  plan.annotations[std::string(keys::kBindPhase)] = std::string(keys::kBindPhaseAllocating);
  plan.annotations[std::string(keys::kBindTime)] =
      std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count());
  return plan;
}

}  // namespace hami
