#pragma once
// Builders for test fixtures: devices, nodes as device plugins publish them, pods as users write them, and
// the built-in backends with chosen settings.
#include <gtest/gtest.h>

#include <chrono>
#include <initializer_list>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "backends/builtin.h"
#include "core/backend.h"
#include "core/cluster_state.h"
#include "core/codec/node_devices.h"
#include "core/model.h"
#include "core/scheduler.h"

namespace hami::testing {

inline DeviceInfo Gpu(std::string id, std::int32_t index, std::int64_t mem = 8000, std::int32_t count = 10,
                      std::string type = "NVIDIA", std::int32_t numa = 0) {
  DeviceInfo d;
  d.id = std::move(id);
  d.index = index;
  d.count = count;
  d.devmem = MiB(mem);
  d.devcore = Cores(100);
  d.type = std::move(type);
  d.numa = numa;
  d.mode = "hami-core";
  d.health = true;
  return d;
}

// A node whose NVIDIA device plugin registered `gpus` (and whose kubelet advertises them).
inline NodeView NvidiaNode(std::string name, const std::vector<DeviceInfo>& gpus) {
  NodeView n;
  n.name = std::move(name);
  n.annotations["hami.io/node-nvidia-register"] = codec::EncodeDeviceManifest(gpus);
  n.allocatable["nvidia.com/gpu"] = std::to_string(gpus.size() * 10);
  n.capacity["nvidia.com/gpu"] = std::to_string(gpus.size() * 10);
  return n;
}

inline ContainerView Ctr(std::string name, std::map<std::string, std::string> limits) {
  ContainerView c;
  c.name = std::move(name);
  for (auto& [k, v] : limits) c.limits[k] = v;
  return c;
}

inline PodView Pod(std::string name, std::vector<ContainerView> containers,
                   std::vector<ContainerView> init = {}, std::map<std::string, std::string> annotations = {},
                   std::string ns = "default") {
  PodView p;
  p.ns = std::move(ns);
  p.name = std::move(name);
  p.uid = "uid-" + p.name;
  p.containers = std::move(containers);
  p.init_containers = std::move(init);
  for (auto& [k, v] : annotations) p.annotations[k] = v;
  return p;
}

inline ContainerView GpuCtr(std::string name, int count, std::int64_t mem, int cores) {
  std::map<std::string, std::string> limits{{"nvidia.com/gpu", std::to_string(count)}};
  if (mem > 0) limits["nvidia.com/gpumem"] = std::to_string(mem);
  limits["nvidia.com/gpucores"] = std::to_string(cores);
  return Ctr(std::move(name), std::move(limits));
}

inline DeviceRequest Req(std::string vendor, std::int32_t count, std::int64_t mem, std::int32_t pct,
                         std::int64_t cores) {
  return DeviceRequest{std::move(vendor), count, MiB(mem), pct, Cores(cores)};
}

// RequestFor that must succeed; a failure is reported and yields nullopt.
inline std::optional<DeviceRequest> Request(const Backend& b, const ContainerView& c) {
  auto r = b.RequestFor(c);
  if (!r) {
    ADD_FAILURE() << "RequestFor failed: " << r.error().message;
    return std::nullopt;
  }
  return *r;
}

// nvidia.migProfileAllowlist as config reads it: one {models, profiles} record per entry.
inline std::vector<SettingRecord> MigAllowlist(
    std::initializer_list<std::pair<std::vector<std::string>, std::vector<std::string>>> entries) {
  std::vector<SettingRecord> out;
  for (const auto& [models, profiles] : entries) {
    SettingRecord r;
    r.Set("models", models).Set("profiles", profiles);
    out.push_back(std::move(r));
  }
  return out;
}

// The registry of the built-in vendors (their config schemas and factories).
inline const BackendRegistry& BuiltinVendors() {
  static const BackendRegistry registry = [] {
    BackendRegistry r;
    backends::RegisterBuiltinBackends(r).value();
    return r;
  }();
  return registry;
}

// The built-in backends a default configuration builds, and those of the sections `settings` names (by
// config section: "nvidia", "vnpus", ...).
inline Backends BuiltinBackends(const std::map<std::string, VendorSettings>& settings = {}) {
  BackendRegistry registry;
  backends::RegisterBuiltinBackends(registry).value();
  std::vector<BackendPtr> list;
  for (const auto& name : registry.Names()) {
    auto it = settings.find(name);
    if (it == settings.end() && !registry.EnabledByDefault(name)) continue;  // as the binary builds them
    for (auto& b : registry.Create(name, it == settings.end() ? VendorSettings{} : it->second).value())
      list.push_back(std::move(b));
  }
  return Backends(std::move(list));
}

// The index of a vendor's backend (by its config section) in `backends`.
inline std::size_t BackendIndex(const Backends& backends, std::string_view section) {
  for (std::size_t i = 0; i < backends.size(); ++i) {
    if (backends.at(i).Spec().config_section == section) return i;
  }
  throw std::invalid_argument("no backend for config section " + std::string(section));
}

// A pod's hold on one device: `slots` app containers on it, the first carrying `mem` and `cores`.
inline void Hold(ClusterState& state, const std::string& uid, const std::string& node,
                 const std::string& vendor, const std::string& uuid, int slots, std::int64_t mem,
                 std::int64_t cores, const std::string& ns = "default",
                 std::vector<codec::MigAllocation> mig = {}) {
  PodAllocation a;
  a.uid = uid;
  a.ns = ns;
  a.name = uid;
  a.node = node;
  PodVendorDevices containers;
  for (int i = 0; i < slots; ++i) {
    containers.push_back(
        {ContainerDevice{0, uuid, vendor, MiB(i == 0 ? mem : 0), Cores(i == 0 ? cores : 0), std::nullopt}});
  }
  a.devices[vendor] = std::move(containers);
  a.mig = std::move(mig);
  state.AddPod(std::move(a));
}

// A node whose device plugin lists `devices` in the register annotation `key` and whose kubelet advertises
// `slots` of `count_resource` per device.
inline NodeView ManifestNode(std::string name, const std::string& key, const std::vector<DeviceInfo>& devices,
                             const std::string& count_resource, int slots = 4) {
  NodeView n;
  n.name = std::move(name);
  n.annotations[key] = codec::EncodeDeviceManifest(devices);
  n.capacity[count_resource] = std::to_string(devices.size() * static_cast<std::size_t>(slots));
  n.allocatable = n.capacity;
  return n;
}

// The built-in backends and a cluster over them, to fit pods through the Scheduler.
struct FitCluster {
  FitCluster() : backends(BuiltinBackends()), state(backends) {}
  // The filter's decision over `nodes` (GPU policy spread, the node policy given).
  FilterOutcome Run(const PodView& pod, std::vector<std::string> nodes = {"n"},
                    const std::string& node_policy = "binpack") {
    Scheduler s(state, SchedulerOptions{"spread", node_policy});
    return s.Filter(pod, nodes, now);
  }
  Backends backends;
  ClusterState state;
  TimePoint now = std::chrono::system_clock::from_time_t(1716199325);
};

// Why `node` refused the pod, or "<fits>".
inline std::string Failure(const FilterOutcome& out, const std::string& node = "n") {
  auto it = out.failed_nodes.find(node);
  return it == out.failed_nodes.end() ? "<fits>" : it->second;
}

}  // namespace hami::testing
