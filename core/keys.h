#pragma once
// Protocol keys shared by every backend (vendor-specific keys live in each backend's BackendSpec).
#include <string_view>

namespace hami::keys {

inline constexpr std::string_view kAssignedNode = "hami.io/vgpu-node";  // pod annotation and label
inline constexpr std::string_view kDecisionTime = "hami.io/vgpu-time";
inline constexpr std::string_view kBindPhase = "hami.io/bind-phase";
inline constexpr std::string_view kBindTime = "hami.io/bind-time";
inline constexpr std::string_view kBindPhaseAllocating = "allocating";
inline constexpr std::string_view kBindPhaseSuccess = "success";
inline constexpr std::string_view kBindPhaseFailed = "failed";
// Pod annotation: when our requeue last asked kube-scheduler to try the pod again (ms since the epoch).
inline constexpr std::string_view kRequeue = "hami.io/requeue";
// Pod annotation (--refusal-annotation): why our filter last refused the pod, removed once it is bound.
inline constexpr std::string_view kFilterRefusal = "hami.io/filter-refusal";
inline constexpr std::string_view kMigAllocations = "hami.io/vgpu-mig-allocations";
inline constexpr std::string_view kDeviceCordon = "hami.io/device-cordon";        // node annotation
inline constexpr std::string_view kNodePolicy = "hami.io/node-scheduler-policy";  // pod annotation
inline constexpr std::string_view kGpuPolicy = "hami.io/gpu-scheduler-policy";    // pod annotation
inline constexpr std::string_view kScoringWeights = "hami.io/device-scoring-weights";
// The pod's opt-in to the device plugin's NUMA refit: best-effort or strict (read by the plugin alone).
inline constexpr std::string_view kNumaAlignment = "hami.io/numa-alignment";
inline constexpr std::string_view kPodGroupLabel = "scheduling.x-k8s.io/pod-group";

}  // namespace hami::keys
