#pragma once
// The domain model: Kubernetes objects as the scheduler sees them (views, no JSON), devices, requests and
// allocations. Plain data; every field is in the units the protocol uses.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/units.h"

namespace hami {

using StringMap = std::map<std::string, std::string, std::less<>>;
using Annotations = StringMap;
using Labels = StringMap;
using ResourceList = StringMap;  // resource name -> quantity text as written in the object

// --- Kubernetes views -------------------------------------------------------------------------------------

struct EnvVar {
  std::string name;
  std::string value;
  // valueFrom.fieldRef.fieldPath: the value is the pod's field (the downward API); "" = none.
  std::string field_path = {};
  bool other_source = false;  // valueFrom of another kind (a secret, a config map, a resource field)
  bool FromSource() const { return !field_path.empty() || other_source; }
  friend bool operator==(const EnvVar&, const EnvVar&) = default;
};

struct VolumeMount {
  std::string name;
  std::string mount_path;
  friend bool operator==(const VolumeMount&, const VolumeMount&) = default;
};

struct ContainerView {
  std::string name;
  ResourceList limits;
  ResourceList requests;
  bool privileged = false;
  std::vector<EnvVar> env;
  std::vector<std::string> volume_mounts = {};  // the names of the container's volumeMounts, as written
  std::vector<VolumeMount> added_mounts = {};   // volumeMounts admission appends
};

// A container admission appends to the pod's init containers (after the pod's own).
struct AddedContainer {
  std::string name;
  std::string image;
  std::vector<std::string> command;
  std::vector<VolumeMount> mounts;
  friend bool operator==(const AddedContainer&, const AddedContainer&) = default;
};

struct ContainerStatusView {
  std::string name;
  bool terminated = false;
  int exit_code = 0;
};

struct NodeView {
  std::string name;
  std::string uid;
  std::string resource_version;
  Labels labels;
  Annotations annotations;
  ResourceList capacity;
  ResourceList allocatable;
  std::string internal_ip;  // status.addresses: the first InternalIP ("" = none)
};

// The pod's PodScheduled condition as kube-scheduler last wrote it (all empty: none).
struct SchedulingCondition {
  std::string status;  // "True", "False"
  std::string reason;  // "Unschedulable", "SchedulerError", ...
  std::string message;
  std::string last_transition_time;
  bool Refused() const { return status == "False"; }
  friend bool operator==(const SchedulingCondition&, const SchedulingCondition&) = default;
};

struct PodView {
  std::string ns;
  std::string name;
  std::string uid;
  std::string resource_version;
  std::string node_name;       // spec.nodeName
  std::string phase;           // status.phase
  std::string created;         // metadata.creationTimestamp, as written (shown, never compared)
  std::string scheduler_name;  // spec.schedulerName
  std::optional<std::string> runtime_class_name;
  std::string pod_group;     // label scheduling.x-k8s.io/pod-group or spec.schedulingGroup.podGroupName
  bool terminating = false;  // metadata.deletionTimestamp set
  bool scheduling_gated = false;    // spec.schedulingGates lists a gate: kube-scheduler does not try it
  std::int32_t priority = 0;        // spec.priority
  bool never_preempts = false;      // spec.preemptionPolicy is Never: it evicts no pod to make room
  std::string nominated_node_name;  // status.nominatedNodeName (preemption's choice)
  SchedulingCondition scheduled;    // status.conditions[type=PodScheduled]
  Labels labels;
  Annotations annotations;
  std::vector<ContainerView> init_containers;
  std::vector<ContainerView> containers;
  std::vector<ContainerStatusView> init_container_statuses;
  std::vector<std::string> volumes;  // the names of spec.volumes, as written
  // What admission appends, kept apart from the lists above so that a container being admitted (a reference
  // into them) never moves: emptyDir volumes by name, and init containers.
  std::vector<std::string> added_empty_dirs;
  std::vector<AddedContainer> added_init_containers;

  std::string Key() const { return ns + "/" + name; }
  // The pod's identity in the ledger and the reservations: its uid, or Key() for a pod without one.
  std::string UidOrKey() const { return uid.empty() ? Key() : uid; }
  // In phase Succeeded or Failed: its containers have ended and it holds no devices any more.
  bool Finished() const { return phase == "Succeeded" || phase == "Failed"; }
  std::size_t ContainerCount() const { return init_containers.size() + containers.size(); }
  // Container i in annotation order: init containers first, then regular containers.
  const ContainerView& ContainerAt(std::size_t i) const {
    return i < init_containers.size() ? init_containers[i] : containers[i - init_containers.size()];
  }
};

// A coordination.k8s.io/v1 Lease, as leader election reads it.
struct LeaseView {
  std::string ns;
  std::string name;
  std::optional<std::string> holder_identity;  // spec.holderIdentity (absent = released)
  // spec.leaseDurationSeconds; one below 1 (kube-apiserver refuses it) reads as expired, as in client-go
  std::int64_t lease_duration_seconds = 0;
  std::string acquire_time, renew_time;  // spec.acquireTime, spec.renewTime, as written (compared, not read)
  std::int64_t lease_transitions = 0;    // spec.leaseTransitions

  // The leader record client-go compares: a write that changes none of it (a label, an annotation) is no
  // renewal.
  bool SameRecord(const LeaseView& o) const {
    return holder_identity == o.holder_identity && lease_duration_seconds == o.lease_duration_seconds &&
           acquire_time == o.acquire_time && renew_time == o.renew_time &&
           lease_transitions == o.lease_transitions;
  }
};

// A label selector (metav1.LabelSelector): every matchLabels pair and every expression must hold.
struct LabelSelector {
  struct Requirement {
    enum class Op { kIn, kNotIn, kExists, kDoesNotExist };
    std::string key;
    Op op = Op::kExists;
    std::vector<std::string> values;
  };
  Labels match_labels;
  std::vector<Requirement> expressions;
  bool Empty() const { return match_labels.empty() && expressions.empty(); }
  bool Matches(const Labels& labels) const;
};

// A policy/v1 PodDisruptionBudget, as preemption counts it: the pods it covers and how many of them may be
// disrupted now.
struct DisruptionBudgetView {
  std::string ns;
  std::string name;
  // spec.selector: absent covers no pod, present (even empty: every pod of the namespace) as it says, as
  // kube-scheduler counts.
  std::optional<LabelSelector> selector;
  std::int32_t disruptions_allowed = 0;     // status.disruptionsAllowed
  std::vector<std::string> disrupted_pods;  // status.disruptedPods: names being disrupted already, sorted
};

struct ResourceQuotaView {
  std::string ns;
  std::string name;
  ResourceList hard;  // spec.hard
};

// --- Devices
// ------------------------------------------------------------------------------------------------

struct MigPlacement {
  int start = 0;
  int size = 0;
  friend bool operator==(const MigPlacement&, const MigPlacement&) = default;
};

struct MigProfile {
  std::string name;  // e.g. "1g.10gb"
  std::int64_t memory_mib = 0;
  std::int32_t core = 0;
  std::int32_t slice_count = 0;
  std::vector<MigPlacement> placements;
  friend bool operator==(const MigProfile&, const MigProfile&) = default;
};

// One device as registered by its device plugin (or synthesized from node capacity).
// What a vendor's discovery derives from a card's published facts, parsed once (e.g. the partition profiles
// a card offers): the vendor's own type, read back by its own hooks. Built at discovery, never changed.
struct CardFacts {
  virtual ~CardFacts() = default;
};
// A card's CardFacts, shared between the copies of the card. It is derived from what the plugin published
// (DeviceInfo::custom_info), so it takes no part in comparing cards.
struct VendorFacts {
  std::shared_ptr<const CardFacts> data;
  friend bool operator==(const VendorFacts&, const VendorFacts&) { return true; }
};

struct DeviceInfo {
  std::string id;  // UUID
  std::int32_t index = 0;
  std::int32_t count = 0;  // split count: how many tasks may share it
  MiB devmem;
  Cores devcore;
  std::string type;  // card model
  std::int32_t numa = 0;
  std::string mode;  // hami-core | mig | mps | ""
  bool health = false;
  std::vector<MigProfile> mig_profiles;
  std::string vendor;                                            // backend vendor key that discovered it
  std::map<std::string, std::int64_t, std::less<>> pair_scores;  // topology score to other device UUIDs
  // The interconnect group the card belongs to (the manifest's custominfo.NetworkID, e.g. an NPU ring);
  // nullopt when the plugin publishes none.
  std::optional<std::int32_t> network;
  // The manifest's other custominfo entries whose values are strings, sorted by key: facts a vendor's own
  // rules read (e.g. that the device is one part of a larger card, and which card).
  std::vector<std::pair<std::string, std::string>> custom_info;
  VendorFacts facts;  // the vendor's parse of custom_info (null: none, or not discovered)
  // The custominfo string under `key`, or null.
  const std::string* CustomInfo(std::string_view key) const {
    for (const auto& [k, v] : custom_info) {
      if (k == key) return &v;
    }
    return nullptr;
  }
  friend bool operator==(const DeviceInfo&, const DeviceInfo&) = default;
};

// --- Requests and allocations ------------------------------------------------------------------------------

// Memory-percentage sentinel meaning "not given" (HAMi's 101).
inline constexpr std::int32_t kPercentUnset = 101;

// What one container asks of one vendor.
struct DeviceRequest {
  std::string vendor;
  std::int32_t count = 0;
  MiB memory;                                // per device, already scaled by the memory factor
  std::int32_t mem_percent = kPercentUnset;  // 0..100, or kPercentUnset
  Cores cores;                               // per device
  // A hard partition of this many slices of a card, named directly rather than by memory and cores (0 =
  // none): the vendor's rules size it (FitRules::vendor_sizes).
  std::int32_t partition = 0;
  friend bool operator==(const DeviceRequest&, const DeviceRequest&) = default;
};

struct MigSlot {
  std::string profile;
  MigPlacement placement;
  friend bool operator==(const MigSlot&, const MigSlot&) = default;
};

// One device given to one container.
struct ContainerDevice {
  std::int32_t index = 0;  // device index on the node (not encoded)
  std::string uuid;
  std::string vendor;
  MiB mem;
  Cores cores;
  std::optional<MigSlot> mig;  // MIG instance chosen on a MIG-mode GPU
  friend bool operator==(const ContainerDevice&, const ContainerDevice&) = default;
};

using ContainerDevices = std::vector<ContainerDevice>;
// One vendor's devices, one entry per container (init containers first), index-aligned with the pod.
using PodVendorDevices = std::vector<ContainerDevices>;
// vendor key -> per-container devices.
using PodDevices = std::map<std::string, PodVendorDevices, std::less<>>;

// What a pod consumes on one device once init containers are collapsed: max(sum(app), max(init)).
struct DeviceCharge {
  std::string vendor;
  std::string uuid;
  MiB mem;
  Cores cores;
  std::int32_t slots = 1;
  friend bool operator==(const DeviceCharge&, const DeviceCharge&) = default;
};

}  // namespace hami
