// `hami-scheduler inspect node|pod FILE|-`: decodes what device plugins and the scheduler wrote on an object.
#include <fmt/format.h>

#include <boost/json.hpp>
#include <ostream>

#include "cmd/app.h"
#include "config/flags.h"
#include "core/codec/pod_devices.h"
#include "core/fit.h"
#include "core/health.h"
#include "core/keys.h"
#include "k8s/files.h"
#include "k8s/objects.h"

namespace hami::cmd {
namespace json = boost::json;
namespace {

constexpr std::string_view kInspectUsage = R"(Usage: hami-scheduler inspect node|pod FILE|- [config flags]

Reads one Node or Pod (JSON or YAML; `-` reads standard input, e.g. `kubectl get node n1 -o json | ...`)
and prints, as JSON, what the HAMi annotations on it mean:
  node: {"node", "devices": [{"vendor","id","index","count","devmem","devcore","type","numa","mode","health",
                              "network" (the interconnect group, when the plugin publishes one)}],
         "errors": [{"vendor","error"}], "health": [{"vendor","healthy","why"}] (the health pass's verdict now)}
  pod:  {"pod": "NS/NAME", "node", "bindPhase", "allocated": {VENDOR: [[{"uuid","type","usedmem","usedcores"}]
         per container]}, "toAllocate": {...}, "requests": [...], "errors": [...]}
Config flags (--config, --device-config-file, ...) change annotation keys and resource names.
)";

json::object DeviceJson(const DeviceInfo& d) {
  json::object o{{"vendor", d.vendor},
                 {"id", d.id},
                 {"index", d.index},
                 {"count", d.count},
                 {"devmem", d.devmem.value()},
                 {"devcore", d.devcore.value()},
                 {"type", d.type},
                 {"numa", d.numa},
                 {"mode", d.mode},
                 {"health", d.health}};
  if (d.network) o["network"] = *d.network;
  return o;
}

json::array ContainersJson(const PodVendorDevices& containers) {
  json::array out;
  for (const auto& ctr : containers) {
    json::array devices;
    for (const auto& d : ctr) {
      devices.push_back(json::object{
          {"uuid", d.uuid}, {"type", d.vendor}, {"usedmem", d.mem.value()}, {"usedcores", d.cores.value()}});
    }
    out.push_back(std::move(devices));
  }
  return out;
}

// Decoded lists end with an empty entry after the final ';'; show one entry per container of the pod.
PodVendorDevices AlignToPod(PodVendorDevices devices, std::size_t containers) {
  while (devices.size() > containers && devices.back().empty()) devices.pop_back();
  return devices;
}

json::object InspectNode(const NodeView& node, const Backends& backends, const config::Config& cfg) {
  json::array devices, errors, health;
  const TimePoint now = std::chrono::system_clock::now();
  for (const auto& b : backends) {
    // What the 15 s health pass would decide now, for vendors that publish something on this node.
    const auto& keys = b->Spec().keys;
    const bool publishes =
        (!keys.register_annotation.empty() && node.annotations.contains(keys.register_annotation)) ||
        (!b->Spec().resources.cores.empty() && node.capacity.contains(b->Spec().resources.cores));
    if (publishes) {
      const HealthVerdict v =
          EvaluateHealth(b->Spec(), node, HealthMemory{}, now, cfg.extender.handshake_timeout);
      health.push_back(json::object{{"vendor", b->Vendor()}, {"healthy", v.healthy}, {"why", v.why}});
    }
    auto found = b->Discover(node);
    if (!found) {
      errors.push_back(json::object{{"vendor", b->Vendor()}, {"error", found.error().message}});
      continue;
    }
    for (auto& d : *found) {
      d.vendor = b->Vendor();
      devices.push_back(DeviceJson(d));
    }
  }
  return json::object{{"node", node.name},
                      {"devices", std::move(devices)},
                      {"errors", std::move(errors)},
                      {"health", std::move(health)}};
}

json::object InspectPod(const PodView& pod, const Backends& backends) {
  json::object allocated, to_allocate;
  json::array errors;
  const auto decode = [&](const std::string& key, std::string_view vendor, json::object& into) {
    auto it = pod.annotations.find(key);
    if (key.empty() || it == pod.annotations.end()) return;
    auto devices = codec::DecodePodDevices(it->second);
    if (!devices) {
      errors.push_back(
          json::object{{"vendor", vendor}, {"error", fmt::format("{}: {}", key, devices.error().message)}});
      return;
    }
    into[vendor] = ContainersJson(AlignToPod(std::move(*devices), pod.ContainerCount()));
  };
  for (const auto& b : backends) {
    decode(b->Spec().keys.allocated, b->Vendor(), allocated);
    decode(b->Spec().keys.to_allocate, b->Vendor(), to_allocate);
  }
  json::array requests;
  for (std::size_t c = 0; c < pod.ContainerCount(); ++c) {
    const ContainerView& ctr = pod.ContainerAt(c);
    json::object per_vendor;
    for (const auto& b : backends) {
      auto r = b->RequestFor(ctr);
      if (!r) {
        errors.push_back(
            json::object{{"vendor", b->Vendor()},
                         {"error", fmt::format("container \"{}\": {}", ctr.name, r.error().message)}});
        continue;
      }
      if (!*r) continue;
      const DeviceRequest& q = **r;
      per_vendor[b->Vendor()] =
          json::object{{"count", q.count},
                       {"memory", q.memory.value()},
                       {"memoryPercent",
                        q.mem_percent == kPercentUnset ? json::value(nullptr) : json::value(q.mem_percent)},
                       {"cores", q.cores.value()}};
    }
    requests.push_back(json::object{{"container", ctr.name},
                                    {"init", c < pod.init_containers.size()},
                                    {"devices", std::move(per_vendor)}});
  }
  const auto annotation = [&](std::string_view key) -> json::value {
    auto it = pod.annotations.find(key);
    return it == pod.annotations.end() ? json::value(nullptr) : json::value(it->second);
  };
  json::value node = annotation(keys::kAssignedNode);
  if (node.is_null() && !pod.node_name.empty()) node = pod.node_name;
  return json::object{{"pod", pod.Key()},
                      {"node", node},
                      {"bindPhase", annotation(keys::kBindPhase)},
                      {"allocated", std::move(allocated)},
                      {"toAllocate", std::move(to_allocate)},
                      {"requests", std::move(requests)},
                      {"errors", std::move(errors)}};
}

}  // namespace

int Inspect(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    (args.empty() ? err : out) << kInspectUsage;
    return args.empty() ? kExitUsage : kExitOk;
  }
  const std::string& what = args[0];
  if ((what != "node" && what != "pod") || args.size() < 2) {
    err << "hami-scheduler inspect: want `inspect node FILE` or `inspect pod FILE`\n" << kInspectUsage;
    return kExitUsage;
  }
  const std::string& file = args[1];
  std::vector<std::string> flag_args{"hami-scheduler inspect"};
  flag_args.insert(flag_args.end(), args.begin() + 2, args.end());
  auto loaded = config::LoadConfig(flag_args, Vendors());
  if (!loaded) {
    err << "hami-scheduler inspect: " << loaded.error().message << "\n";
    return kExitUsage;
  }
  auto backends = BuildBackends(loaded->config);
  if (!backends) {
    err << "hami-scheduler inspect: " << backends.error().message << "\n";
    return kExitUsage;
  }
  auto text = k8s::ReadInput(file);
  if (!text) {
    err << "hami-scheduler inspect: " << text.error().message << "\n";
    return kExitUsage;
  }
  const std::string source = file == "-" ? "<stdin>" : file;
  auto docs = k8s::ParseDocuments(*text, source);
  if (!docs) {
    err << "hami-scheduler inspect: " << docs.error().message << "\n";
    return kExitUsage;
  }
  k8s::ObjectSet objects;
  for (const auto& d : *docs) {
    if (auto ok = k8s::CollectObjects(d, source, objects); !ok) {
      err << "hami-scheduler inspect: " << ok.error().message << "\n";
      return kExitUsage;
    }
  }
  json::value result;
  if (what == "node") {
    if (objects.nodes.size() != 1) {
      err << fmt::format("hami-scheduler inspect node: {} holds {} Node objects, want exactly one\n", source,
                         objects.nodes.size());
      return kExitUsage;
    }
    result = InspectNode(objects.nodes.front(), *backends, loaded->config);
  } else {
    if (objects.pods.size() != 1) {
      err << fmt::format("hami-scheduler inspect pod: {} holds {} Pod objects, want exactly one\n", source,
                         objects.pods.size());
      return kExitUsage;
    }
    result = InspectPod(objects.pods.front(), *backends);
  }
  out << json::serialize(result) << "\n";
  return kExitOk;
}

}  // namespace hami::cmd
