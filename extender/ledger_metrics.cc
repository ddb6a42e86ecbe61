// The ledger's gauges, computed from the registry and the ledger at scrape time: ours, and HAMi's device,
// quota and per-pod families with HAMi's names and labels (docs/DECISIONS.md, "Metrics under HAMi's names").
#include <fmt/format.h>

#include "extender/ledger_feed.h"

namespace hami::extender {
namespace {

constexpr double kBytesPerMiB = 1048576.0;

std::string Int(std::int64_t v) { return std::to_string(v); }

}  // namespace

void LedgerFeed::WriteMetrics(k8s::prom::TextWriter& w, bool legacy) const {
  namespace prom = k8s::prom;
  using prom::Labels;
  const Labels zone{{"zone", "vGPU"}};
  const auto with_zone = [&](Labels l) {
    l.insert(l.begin(), zone.begin(), zone.end());
    return l;
  };
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
  w.Gauge("hami_scheduler_pods_waiting",
          "Pods of ours not bound yet that ask for devices (placed or not): the burst binpack's decision reads.",
          static_cast<double>(state_.WaitingPods()));

  // Per device, HAMi's names. One pass over the registry per family keeps each family contiguous.
  struct Row {
    const std::string* node;
    const DeviceInfo* device;
    const DeviceUsage* usage;
  };
  std::vector<Row> rows;
  for (const auto& name : state_.NodeNames()) {
    const NodeEntry* e = state_.FindNode(name);
    for (std::size_t i = 0; i < e->devices.size(); ++i)
      rows.push_back({&e->node.name, &e->devices[i], &e->usage[i]});
  }
  const auto device_labels = [&](const Row& r) {
    return with_zone({{"node", *r.node},
                      {"device_uuid", r.device->id},
                      {"device_index", Int(r.device->index)},
                      {"device_type", r.device->type}});
  };
  const auto family = [&](const char* name, const char* help, auto labels, auto value) {
    w.Family(name, help, "gauge");
    for (const Row& r : rows) {
      if (auto v = value(r)) w.Sample(name, labels(r), *v);
    }
  };
  using Opt = std::optional<double>;
  family("hami_gpu_memory_limit_bytes", "Device memory in bytes.", device_labels,
         [](const Row& r) -> Opt { return static_cast<double>(r.device->devmem.value()) * kBytesPerMiB; });
  family("hami_gpu_core_limit_ratio", "Device cores (100 = one whole device).", device_labels,
         [](const Row& r) -> Opt { return static_cast<double>(r.device->devcore.value()); });
  family(
      "hami_gpu_memory_allocated_bytes", "Device memory allocated to pods, in bytes.",
      [&](const Row& r) {
        return with_zone({{"node", *r.node},
                          {"device_uuid", r.device->id},
                          {"device_index", Int(r.device->index)},
                          {"device_cores", Int(r.device->devcore.value())},
                          {"device_type", r.device->type}});
      },
      [](const Row& r) -> Opt { return static_cast<double>(r.usage->mem.value()) * kBytesPerMiB; });
  family("hami_gpu_shared_count", "Tasks sharing the device.", device_labels,
         [](const Row& r) -> Opt { return static_cast<double>(r.usage->used); });
  family("hami_gpu_core_allocated_ratio", "Device cores allocated to pods.", device_labels,
         [](const Row& r) -> Opt { return static_cast<double>(r.usage->cores.value()); });
  family(
      "hami_node_gpu_overview", "Device memory allocated, with the device's limits as labels.",
      [&](const Row& r) {
        return with_zone({{"node", *r.node},
                          {"device_uuid", r.device->id},
                          {"device_index", Int(r.device->index)},
                          {"device_cores", Int(r.device->devcore.value())},
                          {"device_memory_limit", Int(r.device->devmem.value())},
                          {"device_type", r.device->type}});
      },
      [](const Row& r) -> Opt { return static_cast<double>(r.usage->mem.value()) * kBytesPerMiB; });
  family("hami_node_gpu_memory_allocated_ratio", "Allocated share of the device memory.", device_labels,
         [](const Row& r) -> Opt {
           if (r.device->devmem.value() <= 0) return std::nullopt;
           return static_cast<double>(r.usage->mem.value()) / static_cast<double>(r.device->devmem.value());
         });

  const auto quota = state_.quotas().Entries();
  w.Family("hami_resource_quota_used", "Device resources used in a namespace, by HAMi's accounting.",
           "gauge");
  for (const auto& q : quota)
    w.Sample(
        "hami_resource_quota_used",
        with_zone({{"namespace", q.ns}, {"quota_name", q.resource}, {"limit", Int(q.limit.value_or(0))}}),
        static_cast<double>(q.used));
  w.Family("hami_resource_quota_limit", "Device resource limits of a namespace (limits.* of ResourceQuotas).",
           "gauge");
  for (const auto& q : quota) {
    if (q.limit)
      w.Sample("hami_resource_quota_limit", with_zone({{"namespace", q.ns}, {"quota_name", q.resource}}),
               static_cast<double>(*q.limit));
  }

  // Per pod and device (init containers collapsed, so container_index is 0 as in HAMi).
  struct PodRow {
    const PodAllocation* pod;
    const DeviceCharge* charge;
  };
  std::vector<PodRow> pod_rows;
  state_.ForEachPod([&](const PodAllocation& a, const std::vector<DeviceCharge>& charges) {
    for (const auto& c : charges) {
      if (!c.uuid.empty()) pod_rows.push_back({&a, &c});
    }
  });
  const auto pod_labels = [&](const PodRow& r) {
    return with_zone({{"namespace", r.pod->ns},
                      {"node", r.pod->node},
                      {"pod", r.pod->name},
                      {"container_index", "0"},
                      {"device_uuid", r.charge->uuid}});
  };
  w.Family("hami_vgpu_memory_allocated_bytes", "Device memory allocated to a pod, in bytes.", "gauge");
  for (const auto& r : pod_rows)
    w.Sample("hami_vgpu_memory_allocated_bytes", pod_labels(r),
             static_cast<double>(r.charge->mem.value()) * kBytesPerMiB);
  w.Family("hami_vgpu_core_allocated_ratio", "Device cores allocated to a pod.", "gauge");
  for (const auto& r : pod_rows)
    w.Sample("hami_vgpu_core_allocated_ratio", pod_labels(r), static_cast<double>(r.charge->cores.value()));
  if (!legacy) return;

  // --legacy-metrics: HAMi's older names and label names, besides the current ones.
  const auto legacy_device = [&](const Row& r) {
    return with_zone({{"nodeid", *r.node},
                      {"deviceuuid", r.device->id},
                      {"deviceidx", Int(r.device->index)},
                      {"devicetype", r.device->type}});
  };
  const auto legacy_device_cores = [&](const Row& r) {
    return with_zone({{"nodeid", *r.node},
                      {"deviceuuid", r.device->id},
                      {"deviceidx", Int(r.device->index)},
                      {"devicecores", Int(r.device->devcore.value())},
                      {"devicetype", r.device->type}});
  };
  family("GPUDeviceMemoryLimit", "Device memory in bytes (legacy name).", legacy_device,
         [](const Row& r) -> Opt { return static_cast<double>(r.device->devmem.value()) * kBytesPerMiB; });
  family("GPUDeviceCoreLimit", "Device cores (legacy name).", legacy_device,
         [](const Row& r) -> Opt { return static_cast<double>(r.device->devcore.value()); });
  family("GPUDeviceMemoryAllocated", "Device memory allocated, in bytes (legacy name).", legacy_device_cores,
         [](const Row& r) -> Opt { return static_cast<double>(r.usage->mem.value()) * kBytesPerMiB; });
  family("GPUDeviceSharedNum", "Tasks sharing the device (legacy name).", legacy_device,
         [](const Row& r) -> Opt { return static_cast<double>(r.usage->used); });
  family("GPUDeviceCoreAllocated", "Device cores allocated (legacy name).", legacy_device,
         [](const Row& r) -> Opt { return static_cast<double>(r.usage->cores.value()); });
  family(
      "nodeGPUOverview", "Device memory allocated, with the device's limits as labels (legacy name).",
      [&](const Row& r) {
        return with_zone({{"nodeid", *r.node},
                          {"deviceuuid", r.device->id},
                          {"deviceidx", Int(r.device->index)},
                          {"devicecores", Int(r.device->devcore.value())},
                          {"devicememorylimit", Int(r.device->devmem.value())},
                          {"devicetype", r.device->type}});
      },
      [](const Row& r) -> Opt { return static_cast<double>(r.usage->mem.value()) * kBytesPerMiB; });
  family(
      "nodeGPUMemoryPercentage", "Allocated share of the device memory (legacy name).",
      [&](const Row& r) {
        return with_zone(
            {{"nodeid", *r.node}, {"deviceuuid", r.device->id}, {"deviceidx", Int(r.device->index)}});
      },
      [](const Row& r) -> Opt {
        if (r.device->devmem.value() <= 0) return std::nullopt;
        return static_cast<double>(r.usage->mem.value()) / static_cast<double>(r.device->devmem.value());
      });
  w.Family("QuotaUsed", "Device resources used in a namespace (legacy name).", "gauge");
  for (const auto& q : quota)
    w.Sample(
        "QuotaUsed",
        with_zone({{"quotanamespace", q.ns}, {"quotaName", q.resource}, {"limit", Int(q.limit.value_or(0))}}),
        static_cast<double>(q.used));
  const auto legacy_pod = [&](const PodRow& r) {
    return with_zone({{"podnamespace", r.pod->ns},
                      {"nodename", r.pod->node},
                      {"podname", r.pod->name},
                      {"containeridx", "0"},
                      {"deviceuuid", r.charge->uuid}});
  };
  w.Family("vGPUMemoryAllocated", "Device memory allocated to a pod, in bytes (legacy name).", "gauge");
  for (const auto& r : pod_rows)
    w.Sample("vGPUMemoryAllocated", legacy_pod(r), static_cast<double>(r.charge->mem.value()) * kBytesPerMiB);
  w.Family("vGPUCoreAllocated", "Device cores allocated to a pod (legacy name).", "gauge");
  for (const auto& r : pod_rows)
    w.Sample("vGPUCoreAllocated", legacy_pod(r), static_cast<double>(r.charge->cores.value()));
}

}  // namespace hami::extender
