#include "backends/awsneuron/awsneuron.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <chrono>

#include "backends/common.h"
#include "core/keys.h"
#include "core/strings.h"

namespace hami::backends::awsneuron {
namespace {

constexpr std::string_view kSection = "awsneuron";
constexpr std::string_view kVendor = "AWSNeuron";
constexpr std::string_view kInstanceType = "node.kubernetes.io/instance-type";
// What the Neuron device plugin reads from the pod (literal keys).
constexpr std::string_view kIds = "AWS_NEURON_IDS";
constexpr std::string_view kAllocTime = "NEURON_ALLOC_TIME";
constexpr std::string_view kAllocated = "NEURON_ALLOCATED";
constexpr std::string_view kResourceType = "NEURON_RESOURCE_TYPE";
constexpr std::string_view kPredicateNode = "aws.amazon.com/predicate-node";

int Bits(std::int64_t mask) { return std::popcount(static_cast<std::uint64_t>(mask)); }

// A count of devices or cores (limits, else requests) from 1 to `hi`; nullopt when absent. Zero is refused as
// upstream refuses it: a container that wants no Neuron leaves the resource out (docs/DECISIONS.md).
Result<std::optional<std::int64_t>> PositiveResource(const ContainerView& c, const std::string& name,
                                                     std::string_view unit, std::int64_t hi) {
  auto n = IntegerResource(c, name, unit, 0, hi);
  if (!n) return n.error();
  if (*n && **n == 0) {
    return Error{fmt::format(
        "{} must be greater than 0, got \"0\" (leave it out of a container that needs no {})", name, unit)};
  }
  return n;
}

// A request for whole devices is marked by asking for all of a card's (absent) memory.
bool Whole(const DeviceRequest& r) { return r.mem_percent == 100; }

class NeuronBackend final : public Hooked<NeuronBackend, BasicBackend> {
 public:
  using Hooked::Hooked;

  // Each node's own cores per device (its capacity's cores over its devices), the mask two cores at most.
  Result<std::vector<DeviceInfo>> Discover(const NodeView& node) const override {
    auto n = CapacityCards(node, spec_.resources.count);
    if (!n) return n.error();
    std::vector<DeviceInfo> out;
    if (*n == 0) return out;
    auto cores = CapacityCount(node, spec_.resources.cores);
    if (!cores) return cores.error();
    const std::int64_t per_device = *cores / *n;
    if (per_device > kInt32Max) {
      return Error{fmt::format("node capacity {}: {} cores on {} devices is too many per device",
                               spec_.resources.cores, *cores, *n)};
    }
    const std::int64_t mask = (std::int64_t{1} << std::min<std::int64_t>(per_device, kCoresPerMask)) - 1;
    std::string type(kVendor);
    if (auto it = node.labels.find(kInstanceType); it != node.labels.end() && !it->second.empty())
      type += " " + it->second;
    for (std::int64_t i = 0; i < *n; ++i) {
      DeviceInfo d;
      d.index = static_cast<std::int32_t>(i);
      d.id = fmt::format("{}-AWSNeuron-{}", node.name, i);
      d.count = static_cast<std::int32_t>(std::max<std::int64_t>(per_device, 1));
      d.devcore = Cores(mask);
      d.type = type;
      d.health = true;
      out.push_back(std::move(d));
    }
    return out;
  }
  // The plugin's capacity: the healthy devices and two cores on each.
  NodePublication Publish(const std::vector<DeviceInfo>& cards) const override {
    const auto healthy =
        std::count_if(cards.begin(), cards.end(), [](const DeviceInfo& d) { return d.health; });
    NodePublication out;
    out.resources[spec_.resources.count] = std::to_string(healthy);
    if (!spec_.resources.cores.empty())
      out.resources[spec_.resources.cores] = std::to_string(healthy * kCoresPerMask);
    return out;
  }

  Result<std::optional<DeviceRequest>> RequestFor(const ContainerView& c) const override {
    DeviceRequest req;
    req.vendor = spec_.vendor;
    auto count = PositiveResource(c, spec_.resources.count, "Neuron devices", kInt32Max);
    if (!count) return count.error();
    if (*count) {
      auto cores = CoreSplit(c);
      if (!cores) return cores.error();
      if (*cores) {
        return Error{fmt::format("{} and {}: ask for whole devices or for NeuronCores, not both",
                                 spec_.resources.count, spec_.resources.cores)};
      }
      req.count = static_cast<std::int32_t>(**count);
      req.mem_percent = 100;
      return std::optional<DeviceRequest>(req);
    }
    auto split = CoreSplit(c);
    if (!split) return split.error();
    if (!*split) return std::optional<DeviceRequest>();
    req.count = (*split)->first;
    req.mem_percent = 0;
    req.cores = Cores((*split)->second);
    return std::optional<DeviceRequest>(req);
  }

  // Whole devices and several devices need idle cards; one device's cores need as many free bits.
  std::optional<Reason> RefuseCard(const DeviceInfo& card, const DeviceUsage& used,
                                   const DeviceRequest& request, const CardCheckView&) const override {
    // The plugin numbers a device's cores from `cores per device x index`: with other than two a mask bit
    // would name another device's core, so cores are asked only of two-core devices (whole devices anywhere).
    if (!Whole(request) && card.count != kCoresPerMask) return Reason::kModeNotFit;
    if (Whole(request) || request.count > 1) {
      if (used.used > 0) return Reason::kExclusiveDeviceAllocateConflict;
      if (!Whole(request) && Bits(card.devcore.value()) < request.cores.value())
        return Reason::kCardInsufficientCore;
      return std::nullopt;
    }
    if (Bits(card.devcore.value()) - Bits(used.cores.value()) < request.cores.value())
      return Reason::kCardInsufficientCore;
    return std::nullopt;
  }
  // The mask of the cores taken: all of a whole device's, else the lowest free bits.
  CardCharge Charged(const DeviceInfo& card, const DeviceUsage& used, const DeviceRequest& request,
                     CardCharge shared, const CardCheckView&) const override {
    const std::int64_t all = card.devcore.value();
    if (Whole(request)) return {shared.mem, Cores(all)};
    std::int64_t free = all & ~used.cores.value(), mask = 0;
    for (std::int32_t k = 0; k < request.cores.value() && free != 0; ++k) {
      const std::int64_t bit = free & -free;
      mask |= bit;
      free &= ~bit;
    }
    return {shared.mem, Cores(mask)};
  }

  bool ChoosesCards(const ChoiceView&) const override { return true; }
  CardChoice ChooseCards(std::span<const DeviceInfo* const> candidates, std::int32_t want,
                         const ChoiceView&) const override {
    if (TooFew(candidates, want)) return {};
    if (want == 1) return Arranged({0}, want);  // the policy's first
    const std::string& type = candidates.front()->type;
    const bool inferentia = type.find("inf") != std::string::npos || type.find("Inf") != std::string::npos;
    return Arranged(PositionsOf(candidates, ContiguousWindow(CandidateIndexes(candidates), want, inferentia)),
                    want);
  }

  // The plugin reads which devices (a whole-device container) or cores (a core container) each container
  // got, for every container of the pod.
  void Annotate(const PodView& pod, const PodVendorDevices& devices, const Annotations& written,
                TimePoint now, Annotations& out) const override {
    BasicBackend::Annotate(pod, devices, written, now, out);
    std::vector<std::string> ids;
    for (std::size_t c = 0; c < devices.size(); ++c) {
      if (devices[c].empty()) continue;
      const bool whole = c < pod.ContainerCount() && AsksWhole(pod.ContainerAt(c));
      for (const ContainerDevice& d : devices[c]) {
        if (whole) {
          ids.push_back(std::to_string(d.index));
          continue;
        }
        for (std::int32_t bit = 0; bit < kCoresPerMask; ++bit) {
          if (d.cores.value() & (std::int64_t{1} << bit))
            ids.push_back(std::to_string(std::int64_t{kCoresPerMask} * d.index + bit));
        }
        out[std::string(kResourceType)] = spec_.resources.cores;
      }
    }
    out[std::string(kIds)] = Join(ids, ",");
    out[std::string(kAllocTime)] =
        std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count());
    out[std::string(kAllocated)] = "false";
    auto node = written.find(keys::kAssignedNode);
    out[std::string(kPredicateNode)] = node == written.end() ? "" : node->second;
  }

  // Whole devices or NeuronCores: the pod is ours when either is asked for and readable.
  Result<bool> Admit(ContainerView& container, PodView&) const override {
    auto request = RequestFor(container);
    if (!request) return request.error();
    return request->has_value();
  }

 private:
  bool AsksWhole(const ContainerView& c) const {
    return c.limits.contains(spec_.resources.count) || c.requests.contains(spec_.resources.count);
  }
  Result<std::optional<std::pair<std::int32_t, std::int32_t>>> CoreSplit(const ContainerView& c) const {
    auto cores = PositiveResource(c, spec_.resources.cores, "NeuronCores", 2 * kInt32Max);
    if (!cores) return cores.error();
    if (!*cores) return std::optional<std::pair<std::int32_t, std::int32_t>>();
    auto split = SplitCores(**cores, spec_.resources.cores);
    if (!split) return split.error();
    return std::optional<std::pair<std::int32_t, std::int32_t>>(*split);
  }
};

Result<std::vector<BackendPtr>> Create(const VendorSettings& settings) {
  BackendSpec s;
  s.vendor = std::string(kVendor);
  s.config_section = std::string(kSection);
  s.display_name = "AWS Neuron";
  s.health = HealthRule::kAlwaysHealthy;
  s.keys.allocated = "hami.io/aws-neuron-devices-allocated";
  s.keys.use_uuid = "aws.amazon.com/use-neuron-uuid";
  s.keys.nouse_uuid = "aws.amazon.com/nouse-neuron-uuid";
  s.resources.count = "aws.amazon.com/neuron";
  s.resources.cores = "aws.amazon.com/neuroncore";
  if (auto v = settings.String("resourceCountName")) s.resources.count = *v;
  if (auto v = settings.String("resourceCoreName")) s.resources.cores = *v;
  if (s.resources.count.empty()) {
    return Error{fmt::format("{}.resourceCountName: must not be empty", kSection)};
  }
  std::vector<BackendPtr> out;
  out.push_back(std::make_unique<NeuronBackend>(std::move(s)));
  return out;
}

}  // namespace

Result<std::pair<std::int32_t, std::int32_t>> SplitCores(std::int64_t cores, std::string_view resource) {
  if (cores <= kCoresPerMask) {
    return std::pair<std::int32_t, std::int32_t>{1, static_cast<std::int32_t>(cores)};
  }
  if (cores % kCoresPerMask != 0) {
    return Error{fmt::format("{} must be 1 or a multiple of {}, got {}", resource, kCoresPerMask, cores)};
  }
  const std::int64_t devices = cores / kCoresPerMask;
  if (devices > kInt32Max) {
    return Error{fmt::format("{} needs {} devices, which exceeds the maximum of {}", resource, devices,
                             kInt32Max)};
  }
  return std::pair<std::int32_t, std::int32_t>{static_cast<std::int32_t>(devices), kCoresPerMask};
}

std::vector<std::int32_t> ContiguousWindow(std::span<const std::int32_t> usable, std::int32_t want,
                                           bool inferentia) {
  if (want <= 0 || usable.empty()) return {};
  if (!inferentia && want != 1 && want != 4 && want != 8 && want != 16) return {};
  const auto has = [&](std::int32_t i) { return std::binary_search(usable.begin(), usable.end(), i); };
  const std::int32_t step = inferentia ? 1 : want;
  for (std::int64_t start = 0; start + want - 1 <= usable.back(); start += step) {
    bool free = true;
    for (std::int64_t i = start; i < start + want && free; ++i) free = has(static_cast<std::int32_t>(i));
    if (!free) continue;
    std::vector<std::int32_t> out;
    for (std::int64_t i = start; i < start + want; ++i) out.push_back(static_cast<std::int32_t>(i));
    return out;
  }
  return {};
}

VendorModule Module() {
  VendorModule module{std::string(kSection), VendorSchema{}, &Create};
  module.schema.fields = {{"resourceCountName", SettingKind::kString},
                          {"resourceCoreName", SettingKind::kString}};
  module.demo.nodes = {{"neuron-trn1-1", DemoCards("neuron", 8, 2, 0, 3, "AWSNeuron"), std::string(kVendor)}};
  module.demo.pods = R"(
- {name: neuron-core, limits: {aws.amazon.com/neuroncore: "1"}}
- {name: neuron-four, limits: {aws.amazon.com/neuron: "4"}}
)";
  return module;
}

}  // namespace hami::backends::awsneuron
