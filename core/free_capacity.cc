#include "core/free_capacity.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <set>

#include "core/names.h"
#include "core/strings.h"

namespace hami {
namespace {

constexpr std::string_view kShapeForm =
    "NAME=VENDOR:COUNTxMEMORY[:CORES] (e.g. a10-quarter=NVIDIA:1x6000:25)";
constexpr std::int32_t kMaxShapeCards = 64;
constexpr std::int64_t kMaxShapeMemory = std::numeric_limits<std::int32_t>::max();

Error ShapeError(std::string_view text, std::string_view what) {
  return Error{fmt::format("capacity shape {}: {}", Quoted(text), what)};
}

Result<std::int64_t> ShapeNumber(std::string_view text, std::string_view value, std::string_view field,
                                 std::int64_t lo, std::int64_t hi, std::string_view want) {
  auto v = ParseInt64(value, field);
  if (!v || *v < lo || *v > hi)
    return ShapeError(text, fmt::format("{} {} is not {}", field, Quoted(value), want));
  return *v;
}

// The pod a shape stands for: one container whose limits ask for it with the vendor's resource names, the
// memory in the vendor's units rounded up (the pod gets at least the MiB the shape names).
PodView ShapePod(const CapacityShape& shape, const ResourceNames& names) {
  PodView pod;
  pod.ns = "capacity";
  pod.name = shape.name;
  pod.uid = "capacity-shape-" + shape.name;
  ContainerView c;
  c.name = "shape";
  c.limits[names.count] = std::to_string(shape.count);
  const std::int64_t factor = std::max<std::int64_t>(1, names.memory_factor);
  if (!names.memory.empty())
    c.limits[names.memory] = std::to_string((shape.memory_mib + factor - 1) / factor);
  if (shape.cores > 0 && !names.cores.empty()) c.limits[names.cores] = std::to_string(shape.cores);
  pod.containers.push_back(std::move(c));
  return pod;
}

// What keeps the backend from asking for the shape; "" when nothing does.
std::string ShapeProblem(const CapacityShape& shape, const Backends& backends) {
  const Backend* backend = backends.Find(shape.vendor);
  if (backend == nullptr) {
    std::vector<std::string> vendors;
    for (const auto& b : backends) vendors.push_back(b->Vendor());
    return fmt::format("vendor {} is not one this scheduler runs (want one of: {})", Quoted(shape.vendor),
                       Join(vendors, ", "));
  }
  const ResourceNames& names = backend->Spec().resources;
  if (names.memory.empty())
    return fmt::format("vendor {} takes no memory request (its pods ask for whole cards)", shape.vendor);
  if (shape.cores > 0 && names.cores.empty())
    return fmt::format("vendor {} takes no cores request (leave CORES out)", shape.vendor);
  auto requests = CollectRequests(ShapePod(shape, names), backends);
  if (!requests) return requests.error().message;
  const auto asked = requests->BackendsAsked();
  if (asked.size() != 1 || &backends.at(asked[0]) != backend)
    return fmt::format("vendor {} does not read it as a request for its cards", shape.vendor);
  return "";
}

}  // namespace

Result<CapacityShape> ParseCapacityShape(std::string_view text) {
  const std::string_view trimmed = Trim(text);
  const auto eq = trimmed.find('=');
  const std::vector<std::string_view> parts =
      Split(eq == std::string_view::npos ? std::string_view() : trimmed.substr(eq + 1), ':');
  if (eq == std::string_view::npos || parts.size() < 2 || parts.size() > 3)
    return ShapeError(text, fmt::format("expected {}", kShapeForm));
  CapacityShape shape;
  shape.name = std::string(trimmed.substr(0, eq));
  if (!IsDns1123Label(shape.name))
    return ShapeError(text, fmt::format("name {} is not a lowercase DNS label (at most 63 of a-z, 0-9 and "
                                        "'-', starting and ending alphanumeric)",
                                        Quoted(shape.name)));
  shape.vendor = std::string(parts[0]);
  if (shape.vendor.empty()) return ShapeError(text, fmt::format("no vendor; expected {}", kShapeForm));
  const auto x = parts[1].find('x');
  if (x == std::string_view::npos)
    return ShapeError(text,
                      fmt::format("{} is not COUNTxMEMORY; expected {}", Quoted(parts[1]), kShapeForm));
  auto count =
      ShapeNumber(text, parts[1].substr(0, x), "count", 1, kMaxShapeCards, "a number of cards, 1 to 64");
  if (!count) return count.error();
  auto memory = ShapeNumber(text, parts[1].substr(x + 1), "memory", 1, kMaxShapeMemory,
                            "MiB per card, 1 to 2147483647");
  if (!memory) return memory.error();
  shape.count = static_cast<std::int32_t>(*count);
  shape.memory_mib = *memory;
  if (parts.size() == 3) {
    auto cores = ShapeNumber(text, parts[2], "cores", 0, 100, "percent of a card, 0 to 100");
    if (!cores) return cores.error();
    shape.cores = static_cast<std::int32_t>(*cores);
  }
  return shape;
}

std::string FormatCapacityShape(const CapacityShape& shape) {
  std::string out = fmt::format("{}={}:{}x{}", shape.name, shape.vendor, shape.count, shape.memory_mib);
  if (shape.cores > 0) out += fmt::format(":{}", shape.cores);
  return out;
}

Result<void> CheckCapacityShapes(std::span<const CapacityShape> shapes, const Backends& backends) {
  if (shapes.size() > kMaxCapacityShapes)
    return Error{fmt::format("{} capacity shapes given; at most {} (each adds a series per node)",
                             shapes.size(), kMaxCapacityShapes)};
  std::set<std::string_view> names;
  for (const CapacityShape& shape : shapes) {
    const std::string written = FormatCapacityShape(shape);
    if (!names.insert(shape.name).second)
      return ShapeError(written, fmt::format("name {} is given twice", Quoted(shape.name)));
    if (auto problem = ShapeProblem(shape, backends); !problem.empty()) return ShapeError(written, problem);
  }
  return {};
}

FreeCapacity::FreeCapacity(const ClusterState& state, std::span<const CapacityShape> shapes,
                           std::string_view gpu_policy)
    : state_(&state), engine_(state.backends(), state.quotas()) {
  const Backends& backends = state.backends();
  shapes_.reserve(shapes.size());
  for (const CapacityShape& shape : shapes) {
    Prepared& p = shapes_.emplace_back();
    p.name = shape.name;
    if (!ShapeProblem(shape, backends).empty()) continue;
    p.pod = ShapePod(shape, backends.Find(shape.vendor)->Spec().resources);
    auto requests = CollectRequests(p.pod, backends);
    auto context = MakePodContext(p.pod, backends, state.quotas(), gpu_policy);
    if (!requests || !context) continue;
    p.requests = std::move(*requests);
    p.context = std::move(*context);
    // A namespace's quota is no part of what a node can still take.
    p.context.quota_active = false;
    p.backend = backends.IndexOf(shape.vendor);
  }
  for (Prepared& p : shapes_) p.context.pod = &p.pod;
}

std::vector<VendorCapacity> FreeCapacity::Of(const NodeEntry& node) {
  const Backends& backends = state_->backends();
  const bool nominated = ChargeNominated(node);
  const std::vector<DeviceUsage>& usage = nominated ? held_.usage : node.usage;
  std::vector<VendorCapacity> out;
  for (std::size_t b = 0; b < node.vendor_range.size(); ++b) {
    const auto [begin, end] = node.vendor_range[b];
    if (begin == end) continue;
    VendorCapacity& v = out.emplace_back();
    v.vendor = backends.at(b).Vendor();
    const bool blocked = !node.blocked.empty() && !node.blocked[b].empty();
    for (auto d = static_cast<std::size_t>(begin); d < static_cast<std::size_t>(end) && !blocked; ++d) {
      const DeviceCaps& caps = node.caps[d];
      if (!caps.health || caps.cordoned || usage[d].used >= caps.count) continue;
      v.largest_free_mib = std::max(v.largest_free_mib, caps.devmem - usage[d].mem.value());
    }
    for (const Prepared& shape : shapes_) {
      if (shape.backend != static_cast<int>(b)) continue;
      v.fits.emplace_back(shape.name, nominated ? CountWithNominated(shape, node)
                                                : engine_.Capacity(shape.context, shape.requests, node,
                                                                   kMaxShapeFits));
    }
  }
  return out;
}

bool FreeCapacity::ChargeNominated(const NodeEntry& node) {
  if (!state_->HasNominations()) return false;
  bool any = false;
  state_->ForEachNominated(node.node.name, [&](std::int32_t, const PodAllocation& hold) {
    if (!any) {
      held_.usage = node.usage;
      held_.mig = node.mig_in_use;
      held_.classes = node.classes_in_use;
      held_.totals = node.totals;
      any = true;
    }
    ApplyCharges(node, hold, +1, NodeUsage{held_.usage, held_.mig, held_.classes, held_.totals});
  });
  return any;
}

// The rare case (a preemption under way): each pod that fits is charged in turn onto a copy of the node's
// usage with the nominated holds charged (Capacity() starts from the ledger's usage alone).
int FreeCapacity::CountWithNominated(const Prepared& shape, const NodeEntry& node) {
  work_ = held_;
  const NodeUsage into{work_.usage, work_.mig, work_.classes, work_.totals};
  int fits = 0;
  PodDevices devices;
  while (fits < kMaxShapeFits &&
         engine_.FitAgainst(shape.context, shape.requests, node, into, &devices, nullptr)) {
    ++fits;
    const PodAllocation placed =
        AllocationOf(shape.pod, node.node.name, std::move(devices), state_->backends(), true);
    ApplyCharges(node, placed, +1, into);
    devices = {};
  }
  return fits;
}

std::vector<VendorCapacity> NodeFreeCapacity(const ClusterState& state, const NodeEntry& node,
                                             std::span<const CapacityShape> shapes,
                                             std::string_view gpu_policy) {
  return FreeCapacity(state, shapes, gpu_policy).Of(node);
}

}  // namespace hami
