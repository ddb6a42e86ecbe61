#pragma once
// What a /bind does, decided without I/O (as the lock and health decisions are): which node locks to take
// and in which order, then what the Binding writes on the pod and which keys of an earlier decision must be
// removed first. The bind service carries it out (extender/bind_service).
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/backend.h"
#include "core/clock.h"
#include "core/fit.h"
#include "core/model.h"

namespace hami {

struct BindLock {
  std::string key;  // node annotation, e.g. hami.io/mutex.lock
  NodeLockRule rule;
};
// The locks of the vendors the regular containers use, in vendor order (the same order for every bind, so
// two binds never wait on each other crosswise); a key shared by two vendors is taken once.
std::vector<BindLock> LocksToTake(const Backends& backends, const PodRequests& requests);

// What the Binding and the patch before it write, once the locks are held.
struct BindingWrites {
  // What the Binding writes with spec.nodeName: the decision, hami.io/bind-phase `allocating` and
  // hami.io/bind-time. Empty for a pod that asks for no device.
  std::map<std::string, std::string> annotations;
  std::map<std::string, std::string> labels;  // hami.io/vgpu-node, when the node name is a label value
  // Allocation keys the pod carries from an earlier decision that this one does not replace (a Binding only
  // sets keys), and whether its hami.io/vgpu-node label names another node: removed by one patch first.
  std::vector<std::string> clear_annotations;
  bool clear_label = false;

  bool NeedsClearing() const { return !clear_annotations.empty() || clear_label; }
};

// `decision`: the annotations of our filter's reservation for this pod, or null when its devices were read
// from its annotations (written by HAMi, or by an earlier version of ours) and stay as they are.
BindingWrites PlanBinding(const Backends& backends, const PodView& pod, const PodRequests& requests,
                          const Annotations* decision, const std::string& node, TimePoint now);

// The pod annotations a decision consists of (hami.io/vgpu-node, -time, the MIG list, every backend's
// allocated and to-allocate keys).
std::vector<std::string_view> AllocationKeys(const Backends& backends);

}  // namespace hami
