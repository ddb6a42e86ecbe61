// The ledger's gauges, computed from the registry and the ledger at scrape time: ours, and HAMi's device,
// quota and per-pod families with HAMi's names and labels (docs/DECISIONS.md, "Metrics under HAMi's names").
#include <fmt/format.h>

#include "extender/ledger_feed.h"

namespace hami::extender {
namespace {

namespace prom = k8s::prom;
using prom::Labels;
using Opt = std::optional<double>;

constexpr double kBytesPerMiB = 1048576.0;

std::string Int(std::int64_t v) { return std::to_string(v); }

// HAMi puts every sample of these families in zone "vGPU", first.
Labels InZone(Labels l) {
  l.insert(l.begin(), {"zone", "vGPU"});
  return l;
}

// One device of the registry, with its usage.
struct DeviceRow {
  const std::string* node;
  const DeviceInfo* device;
  const DeviceUsage* usage;
};

std::vector<DeviceRow> DeviceRows(const ClusterState& state) {
  std::vector<DeviceRow> rows;
  for (const auto& name : state.NodeNames()) {
    const NodeEntry* e = state.FindNode(name);
    for (std::size_t i = 0; i < e->devices.size(); ++i)
      rows.push_back({&e->node.name, &e->devices[i], &e->usage[i]});
  }
  return rows;
}

// One device a pod holds (init containers collapsed, so container_index is 0 as in HAMi).
struct PodRow {
  const PodAllocation* pod;
  const DeviceCharge* charge;
};

std::vector<PodRow> PodRows(const ClusterState& state) {
  std::vector<PodRow> rows;
  state.ForEachPod([&](const PodAllocation& a, const std::vector<DeviceCharge>& charges) {
    for (const auto& c : charges) {
      if (!c.uuid.empty()) rows.push_back({&a, &c});
    }
  });
  return rows;
}

// A gauge family with one sample per device row (one pass per family keeps each family contiguous); a row
// whose value is nullopt has no sample.
template <typename LabelsOf, typename ValueOf>
void DeviceFamily(prom::TextWriter& w, const std::vector<DeviceRow>& rows, const char* name, const char* help,
                  LabelsOf labels, ValueOf value) {
  w.Family(name, help, "gauge");
  for (const DeviceRow& r : rows) {
    if (Opt v = value(r)) w.Sample(name, labels(r), *v);
  }
}

Opt MemoryBytes(const DeviceRow& r) { return static_cast<double>(r.device->devmem.value()) * kBytesPerMiB; }
Opt Cores(const DeviceRow& r) { return static_cast<double>(r.device->devcore.value()); }
Opt AllocatedBytes(const DeviceRow& r) { return static_cast<double>(r.usage->mem.value()) * kBytesPerMiB; }
Opt Sharers(const DeviceRow& r) { return static_cast<double>(r.usage->used); }
Opt AllocatedCores(const DeviceRow& r) { return static_cast<double>(r.usage->cores.value()); }
Opt AllocatedMemoryShare(const DeviceRow& r) {
  if (r.device->devmem.value() <= 0) return std::nullopt;
  return static_cast<double>(r.usage->mem.value()) / static_cast<double>(r.device->devmem.value());
}

void WriteDeviceFamilies(prom::TextWriter& w, const std::vector<DeviceRow>& rows) {
  const auto device = [](const DeviceRow& r) {
    return InZone({{"node", *r.node},
                   {"device_uuid", r.device->id},
                   {"device_index", Int(r.device->index)},
                   {"device_type", r.device->type}});
  };
  const auto device_cores = [](const DeviceRow& r) {
    return InZone({{"node", *r.node},
                   {"device_uuid", r.device->id},
                   {"device_index", Int(r.device->index)},
                   {"device_cores", Int(r.device->devcore.value())},
                   {"device_type", r.device->type}});
  };
  const auto device_limits = [](const DeviceRow& r) {
    return InZone({{"node", *r.node},
                   {"device_uuid", r.device->id},
                   {"device_index", Int(r.device->index)},
                   {"device_cores", Int(r.device->devcore.value())},
                   {"device_memory_limit", Int(r.device->devmem.value())},
                   {"device_type", r.device->type}});
  };
  DeviceFamily(w, rows, "hami_gpu_memory_limit_bytes", "Device memory in bytes.", device, MemoryBytes);
  DeviceFamily(w, rows, "hami_gpu_core_limit_ratio", "Device cores (100 = one whole device).", device, Cores);
  DeviceFamily(w, rows, "hami_gpu_memory_allocated_bytes", "Device memory allocated to pods, in bytes.",
               device_cores, AllocatedBytes);
  DeviceFamily(w, rows, "hami_gpu_shared_count", "Tasks sharing the device.", device, Sharers);
  DeviceFamily(w, rows, "hami_gpu_core_allocated_ratio", "Device cores allocated to pods.", device,
               AllocatedCores);
  DeviceFamily(w, rows, "hami_node_gpu_overview",
               "Device memory allocated, with the device's limits as labels.", device_limits, AllocatedBytes);
  DeviceFamily(w, rows, "hami_node_gpu_memory_allocated_ratio", "Allocated share of the device memory.",
               device, AllocatedMemoryShare);
}

void WriteQuotaFamilies(prom::TextWriter& w, const std::vector<QuotaBook::Entry>& quota) {
  w.Family("hami_resource_quota_used", "Device resources used in a namespace, by HAMi's accounting.",
           "gauge");
  for (const auto& q : quota)
    w.Sample("hami_resource_quota_used",
             InZone({{"namespace", q.ns}, {"quota_name", q.resource}, {"limit", Int(q.limit.value_or(0))}}),
             static_cast<double>(q.used));
  w.Family("hami_resource_quota_limit", "Device resource limits of a namespace (limits.* of ResourceQuotas).",
           "gauge");
  for (const auto& q : quota) {
    if (q.limit)
      w.Sample("hami_resource_quota_limit", InZone({{"namespace", q.ns}, {"quota_name", q.resource}}),
               static_cast<double>(*q.limit));
  }
}

void WritePodFamilies(prom::TextWriter& w, const std::vector<PodRow>& rows) {
  const auto pod = [](const PodRow& r) {
    return InZone({{"namespace", r.pod->ns},
                   {"node", r.pod->node},
                   {"pod", r.pod->name},
                   {"container_index", "0"},
                   {"device_uuid", r.charge->uuid}});
  };
  w.Family("hami_vgpu_memory_allocated_bytes", "Device memory allocated to a pod, in bytes.", "gauge");
  for (const auto& r : rows)
    w.Sample("hami_vgpu_memory_allocated_bytes", pod(r),
             static_cast<double>(r.charge->mem.value()) * kBytesPerMiB);
  w.Family("hami_vgpu_core_allocated_ratio", "Device cores allocated to a pod.", "gauge");
  for (const auto& r : rows)
    w.Sample("hami_vgpu_core_allocated_ratio", pod(r), static_cast<double>(r.charge->cores.value()));
}

// --legacy-metrics: HAMi's older names and label names, besides the current ones.
void WriteLegacyFamilies(prom::TextWriter& w, const std::vector<DeviceRow>& rows,
                         const std::vector<QuotaBook::Entry>& quota, const std::vector<PodRow>& pod_rows) {
  const auto device = [](const DeviceRow& r) {
    return InZone({{"nodeid", *r.node},
                   {"deviceuuid", r.device->id},
                   {"deviceidx", Int(r.device->index)},
                   {"devicetype", r.device->type}});
  };
  const auto device_cores = [](const DeviceRow& r) {
    return InZone({{"nodeid", *r.node},
                   {"deviceuuid", r.device->id},
                   {"deviceidx", Int(r.device->index)},
                   {"devicecores", Int(r.device->devcore.value())},
                   {"devicetype", r.device->type}});
  };
  const auto device_limits = [](const DeviceRow& r) {
    return InZone({{"nodeid", *r.node},
                   {"deviceuuid", r.device->id},
                   {"deviceidx", Int(r.device->index)},
                   {"devicecores", Int(r.device->devcore.value())},
                   {"devicememorylimit", Int(r.device->devmem.value())},
                   {"devicetype", r.device->type}});
  };
  const auto device_short = [](const DeviceRow& r) {
    return InZone({{"nodeid", *r.node}, {"deviceuuid", r.device->id}, {"deviceidx", Int(r.device->index)}});
  };
  DeviceFamily(w, rows, "GPUDeviceMemoryLimit", "Device memory in bytes (legacy name).", device, MemoryBytes);
  DeviceFamily(w, rows, "GPUDeviceCoreLimit", "Device cores (legacy name).", device, Cores);
  DeviceFamily(w, rows, "GPUDeviceMemoryAllocated", "Device memory allocated, in bytes (legacy name).",
               device_cores, AllocatedBytes);
  DeviceFamily(w, rows, "GPUDeviceSharedNum", "Tasks sharing the device (legacy name).", device, Sharers);
  DeviceFamily(w, rows, "GPUDeviceCoreAllocated", "Device cores allocated (legacy name).", device,
               AllocatedCores);
  DeviceFamily(w, rows, "nodeGPUOverview",
               "Device memory allocated, with the device's limits as labels (legacy name).", device_limits,
               AllocatedBytes);
  DeviceFamily(w, rows, "nodeGPUMemoryPercentage", "Allocated share of the device memory (legacy name).",
               device_short, AllocatedMemoryShare);
  w.Family("QuotaUsed", "Device resources used in a namespace (legacy name).", "gauge");
  for (const auto& q : quota)
    w.Sample(
        "QuotaUsed",
        InZone({{"quotanamespace", q.ns}, {"quotaName", q.resource}, {"limit", Int(q.limit.value_or(0))}}),
        static_cast<double>(q.used));
  const auto pod = [](const PodRow& r) {
    return InZone({{"podnamespace", r.pod->ns},
                   {"nodename", r.pod->node},
                   {"podname", r.pod->name},
                   {"containeridx", "0"},
                   {"deviceuuid", r.charge->uuid}});
  };
  w.Family("vGPUMemoryAllocated", "Device memory allocated to a pod, in bytes (legacy name).", "gauge");
  for (const auto& r : pod_rows)
    w.Sample("vGPUMemoryAllocated", pod(r), static_cast<double>(r.charge->mem.value()) * kBytesPerMiB);
  w.Family("vGPUCoreAllocated", "Device cores allocated to a pod (legacy name).", "gauge");
  for (const auto& r : pod_rows)
    w.Sample("vGPUCoreAllocated", pod(r), static_cast<double>(r.charge->cores.value()));
}

// Free capacity (docs/DECISIONS.md, "Free capacity"): a series per node and vendor, one per node and
// configured shape, and one per shape for the cluster.
void WriteCapacityFamilies(prom::TextWriter& w, const ClusterState& state,
                           std::span<const CapacityShape> shapes, std::string_view gpu_policy) {
  struct Row {
    const std::string* node;
    VendorCapacity capacity;
  };
  std::vector<Row> rows;
  FreeCapacity counter(state, shapes, gpu_policy);
  for (const auto& name : state.NodeNames()) {
    const NodeEntry* e = state.FindNode(name);
    for (VendorCapacity& v : counter.Of(*e)) rows.push_back({&e->node.name, std::move(v)});
  }
  constexpr const char* kSlice = "hami_scheduler_node_largest_free_slice_mib";
  w.Family(kSlice,
           "The most free memory (MiB) one card of the vendor on the node can still give a pod: healthy, not "
           "cordoned, a task slot free; 0 when none can or the node takes no new pod of the vendor.",
           "gauge");
  for (const Row& r : rows)
    w.Sample(kSlice, {{"node", *r.node}, {"vendor", r.capacity.vendor}},
             static_cast<double>(r.capacity.largest_free_mib));
  if (shapes.empty()) return;
  constexpr const char* kFits = "hami_scheduler_node_shape_fits";
  w.Family(kFits,
           "Pods of a configured shape (--capacity-shape) that still fit on the node one after another, as "
           "/filter would place them (at most 64).",
           "gauge");
  for (const Row& r : rows) {
    for (const auto& [shape, fits] : r.capacity.fits)
      w.Sample(kFits, {{"node", *r.node}, {"vendor", r.capacity.vendor}, {"shape", shape}},
               static_cast<double>(fits));
  }
  constexpr const char* kTotal = "hami_scheduler_shape_fits_total";
  w.Family(kTotal, "hami_scheduler_node_shape_fits summed over the nodes.", "gauge");
  for (const CapacityShape& shape : shapes) {
    std::int64_t sum = 0;
    for (const Row& r : rows) {
      if (r.capacity.vendor != shape.vendor) continue;
      for (const auto& [name, fits] : r.capacity.fits) sum += name == shape.name ? fits : 0;
    }
    w.Sample(kTotal, {{"vendor", shape.vendor}, {"shape", shape.name}}, static_cast<double>(sum));
  }
}

}  // namespace

void LedgerFeed::WriteMetrics(k8s::prom::TextWriter& w, bool legacy, std::span<const CapacityShape> shapes,
                              std::string_view gpu_policy) const {
  w.Counter("hami_scheduler_annotation_errors_total",
            "Pod events whose allocation annotations could not be read.",
            static_cast<double>(stats_.annotation_errors));
  w.Counter("hami_scheduler_registration_errors_total",
            "Device registrations that could not be read (once per node, vendor and value).",
            static_cast<double>(stats_.registration_errors));
  w.Gauge("hami_scheduler_unreadable_registrations",
          "Node and vendor pairs whose device registration cannot be read now (see kubectl describe node).",
          static_cast<double>(unreadable_registrations()));
  w.Gauge("hami_scheduler_unreadable_allocations",
          "Bound pods whose allocation annotations cannot be read now; each closes its node to new pods of "
          "its vendors (see the node's UnreadableAllocation events).",
          static_cast<double>(unreadable_allocations()));
  w.Counter("hami_scheduler_uncharged_allocations_total",
            "Pod events whose allocation annotations were not charged: they name another node than the pod "
            "is bound to, or devices of a vendor the pod does not ask for.",
            static_cast<double>(stats_.foreign_charges));
  w.Gauge("hami_scheduler_nodes", "Nodes in the registry.", static_cast<double>(state_.NodeCount()));
  w.Gauge("hami_scheduler_pods", "Pods holding devices in the ledger.",
          static_cast<double>(state_.PodCount()));
  w.Gauge(
      "hami_scheduler_pods_waiting",
      "Pods of ours not bound yet that ask for devices (placed or not): the burst binpack's decision reads.",
      static_cast<double>(state_.WaitingPods()));

  const std::vector<DeviceRow> rows = DeviceRows(state_);
  const auto quota = state_.quotas().Entries();
  const std::vector<PodRow> pod_rows = PodRows(state_);
  WriteDeviceFamilies(w, rows);
  WriteQuotaFamilies(w, quota);
  WritePodFamilies(w, pod_rows);
  if (legacy) WriteLegacyFamilies(w, rows, quota, pod_rows);
  WriteCapacityFamilies(w, state_, shapes, gpu_policy);
}

}  // namespace hami::extender
