// GET /metrics: request latencies and decisions (ours), and HAMi's device, quota and per-pod gauges with
// HAMi's names and labels (reference/hami-scheduler.md §8.3), computed from the ledger at scrape time.
#include <fmt/format.h>

#include "k8s/controller.h"

namespace hami::k8s {
namespace {

constexpr double kBytesPerMiB = 1048576.0;

std::string Int(std::int64_t v) { return std::to_string(v); }

}  // namespace

std::string Controller::Metrics() const {
  using prom::Labels;
  prom::TextWriter w;
  const Labels zone{{"zone", "vGPU"}};
  const auto with_zone = [&](Labels l) {
    l.insert(l.begin(), zone.begin(), zone.end());
    return l;
  };

  w.Family("hami_build_info", "Build information of hami-scheduler (C++).", "gauge");
  w.Sample("hami_build_info", {{"version", HAMI_VERSION}, {"compiler", "gcc"}}, 1);

  w.Family("hami_scheduler_filter_duration_seconds", "Time to answer /filter, including the pod patch.",
           "histogram");
  filter_latency_.Write(w, "hami_scheduler_filter_duration_seconds", {});
  w.Family("hami_scheduler_bind_duration_seconds",
           "Time to answer /bind, including node locks and the binding.", "histogram");
  bind_latency_.Write(w, "hami_scheduler_bind_duration_seconds", {});
  w.Family("hami_scheduler_filter_decisions_total", "/filter answers by result.", "counter");
  for (const char* result : {"scheduled", "unschedulable", "passthrough", "error"}) {
    auto it = filter_results_.find(result);
    w.Sample("hami_scheduler_filter_decisions_total", {{"result", result}},
             static_cast<double>(it == filter_results_.end() ? 0 : it->second));
  }
  w.Family("hami_scheduler_bind_results_total", "/bind answers by result.", "counter");
  for (const char* result : {"success", "failure"}) {
    auto it = bind_results_.find(result);
    w.Sample("hami_scheduler_bind_results_total", {{"result", result}},
             static_cast<double>(it == bind_results_.end() ? 0 : it->second));
  }
  struct Counter {
    const char* name;
    const char* help;
    std::size_t value;
  };
  const Counter counters[] = {
      {"hami_scheduler_health_passes_total", "Health passes run.", stats_.health_passes},
      {"hami_scheduler_handshake_requests_total", "Requesting_ handshakes written to nodes.",
       stats_.handshake_patches},
      {"hami_scheduler_device_cleanups_total",
       "Times a vendor's devices were withheld from a node as unhealthy.", stats_.cleanups},
      {"hami_scheduler_reservations_expired_total",
       "Reservations of pods never bound within --reservation-timeout: freed, annotations removed.",
       stats_.expired},
      {"hami_scheduler_abandoned_locks_released_total",
       "Node locks of binds that never completed (owner unbound past --reservation-timeout, or bound "
       "elsewhere), released.",
       stats_.abandoned_locks},
      {"hami_scheduler_node_lock_waits_total", "Binds that waited for a node lock held by another pod.",
       stats_.lock_waits},
      {"hami_scheduler_filters_held_total",
       "Filters held back while the binds in flight needed too much of the --kube-qps budget.",
       stats_.filters_held},
      {"hami_scheduler_annotation_errors_total", "Pod events whose allocation annotations could not be read.",
       stats_.annotation_errors},
      {"hami_scheduler_registration_errors_total",
       "Device registrations that could not be read (once per node, vendor and value).",
       stats_.registration_errors},
      {"hami_scheduler_events_dropped_total", "Pod events dropped because too many were queued.",
       events_.stats().dropped},
  };
  for (const auto& c : counters) {
    w.Family(c.name, c.help, "counter");
    w.Sample(c.name, {}, static_cast<double>(c.value));
  }
  // What the API budget (--kube-qps/--kube-burst, one bucket per client) is spent on.
  std::vector<std::pair<const char*, const ApiClient*>> clients{{"scheduler", client_}};
  if (background_client_ != client_) clients.emplace_back("background", background_client_);
  if (event_client_ != client_) clients.emplace_back("events", event_client_);
  w.Family("hami_kube_requests_total",
           "API requests sent (every attempt), by client, verb and resource (pods/binding: the binding).",
           "counter");
  for (const auto& [name, client] : clients) {
    for (const auto& [kind, n] : client->requests_by_kind())
      w.Sample("hami_kube_requests_total",
               {{"client", name}, {"verb", kind.first}, {"resource", kind.second}}, static_cast<double>(n));
  }
  w.Family("hami_scheduler_filter_held_seconds_total",
           "Time filters were held back for the binds in flight (backpressure on kube-scheduler's queue).",
           "counter");
  w.Sample("hami_scheduler_filter_held_seconds_total", {}, filter_held_seconds_);
  w.Family("hami_kube_rate_limiter_wait_seconds_total",
           "Time requests waited for the client-side rate limit (--kube-qps, --kube-burst), summed.",
           "counter");
  for (const auto& [name, client] : clients)
    w.Sample("hami_kube_rate_limiter_wait_seconds_total", {{"client", name}}, client->throttled_seconds());

  w.Family("hami_scheduler_ready", "1 once the caches are synced and the first health pass ran.", "gauge");
  w.Sample("hami_scheduler_ready", {}, ready() ? 1 : 0);
  w.Family("hami_scheduler_unreadable_registrations",
           "Node and vendor pairs whose device registration cannot be read now (see kubectl describe node).",
           "gauge");
  w.Sample("hami_scheduler_unreadable_registrations", {}, static_cast<double>(unreadable_registrations()));
  w.Family("hami_scheduler_nodes", "Nodes in the registry.", "gauge");
  w.Sample("hami_scheduler_nodes", {}, static_cast<double>(state_.NodeCount()));
  w.Family("hami_scheduler_pods", "Pods holding devices in the ledger.", "gauge");
  w.Sample("hami_scheduler_pods", {}, static_cast<double>(state_.PodCount()));

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
  if (!options_.legacy_metrics) return w.Take();

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
  return w.Take();
}

}  // namespace hami::k8s
