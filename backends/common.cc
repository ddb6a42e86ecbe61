#include "backends/common.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <limits>

#include "core/codec/node_devices.h"
#include "core/codec/pod_devices.h"
#include "core/names.h"

namespace hami::backends {

Result<std::optional<Quantity>> ResourceValue(const ContainerView& c, const std::string& name) {
  if (name.empty()) return std::optional<Quantity>();
  const ResourceList* from = nullptr;
  if (c.limits.contains(name)) {
    from = &c.limits;
  } else if (c.requests.contains(name)) {
    from = &c.requests;
  }
  if (from == nullptr) return std::optional<Quantity>();
  auto q = Quantity::Parse(from->find(name)->second);
  if (!q) return Error{fmt::format("{}: {}", name, q.error().message)};
  return std::optional<Quantity>(std::move(*q));
}

Result<std::optional<DeviceRequest>> WholeCardRequest(const ContainerView& c, const BackendSpec& spec,
                                                      MiB memory) {
  auto count = CountResource(c, spec.resources.count);
  if (!count) return count.error();
  if (!*count) return std::optional<DeviceRequest>();
  DeviceRequest req;
  req.vendor = spec.vendor;
  req.count = **count;
  req.memory = memory;
  req.mem_percent = 100;
  req.cores = Cores(100);
  return std::optional<DeviceRequest>(req);
}

ContainerView LimitsOnly(const ContainerView& c) {
  ContainerView out;
  out.name = c.name;
  out.limits = c.limits;
  return out;
}

Result<std::optional<std::int64_t>> IntegerResource(const ContainerView& c, const std::string& name,
                                                    std::string_view unit, std::int64_t lo, std::int64_t hi) {
  auto q = ResourceValue(c, name);
  if (!q) return q.error();
  if (!*q) return std::optional<std::int64_t>();
  auto v = (*q)->AsInt64();
  if (!v) {
    // Past the int64 range a value may well be whole: it is too large (or too small) for any range here.
    const std::int64_t ceil = (*q)->CeilValue();
    if (ceil == std::numeric_limits<std::int64_t>::max() || ceil == std::numeric_limits<std::int64_t>::min())
      return Error{fmt::format("{}: \"{}\" is too {}, out of range (want {} to {} {})", name, (*q)->text(),
                               (*q)->IsNegative() ? "small" : "large", lo, hi, unit)};
    return Error{fmt::format("{}: \"{}\" is not a whole number of {}", name, (*q)->text(), unit)};
  }
  if (*v < lo || *v > hi) {
    const bool suffixed =
        !(*q)->text().empty() && !std::isdigit(static_cast<unsigned char>((*q)->text().back()));
    return Error{fmt::format("{}: \"{}\" is {}, out of range (want {} to {} {}){}", name, (*q)->text(), *v,
                             lo, hi, unit, suffixed ? "; give the number of units without a suffix" : "")};
  }
  return std::optional<std::int64_t>(*v);
}

Result<std::optional<std::int32_t>> CountResource(const ContainerView& c, const std::string& name) {
  auto n = IntegerResource(c, name, "devices", 0, kInt32Max);
  if (!n) return n.error();
  if (!*n || **n == 0) return std::optional<std::int32_t>();
  return std::optional<std::int32_t>(static_cast<std::int32_t>(**n));
}

Result<std::optional<ContainerAsk>> ReadAsk(const ContainerView& c, const ResourceNames& names,
                                            std::string_view memory_unit, std::string_view core_unit) {
  auto count = CountResource(c, names.count);
  if (!count) return count.error();
  if (!*count) return std::optional<ContainerAsk>();
  const std::int64_t factor = std::max<std::int64_t>(1, names.memory_factor);
  auto mem = IntegerResource(c, names.memory, memory_unit, 0, kInt32Max / factor);
  if (!mem) return mem.error();
  auto cores = IntegerResource(c, names.cores, core_unit, 0, kInt32Max);
  if (!cores) return cores.error();
  return std::optional<ContainerAsk>(ContainerAsk{**count, *mem, *cores});
}

Result<std::optional<DeviceRequest>> SharedCardRequest(const ContainerView& c, const BackendSpec& spec,
                                                       std::string_view memory_unit,
                                                       std::string_view core_unit, std::int64_t mib_per_unit,
                                                       std::int64_t default_cores) {
  auto ask = ReadAsk(c, spec.resources, memory_unit, core_unit);
  if (!ask) return ask.error();
  if (!*ask) return std::optional<DeviceRequest>();
  DeviceRequest req;
  req.vendor = spec.vendor;
  req.count = (*ask)->count;
  req.memory = MiB((*ask)->memory.value_or(0) * mib_per_unit);
  req.mem_percent = req.memory.value() == 0 ? 100 : 0;
  req.cores = Cores((*ask)->cores.value_or(default_cores));
  return std::optional<DeviceRequest>(req);
}

Result<std::vector<DeviceInfo>> CapacityDevices(const NodeView& node, const BackendSpec& spec,
                                                std::int64_t cores_per_card, std::string_view id_infix) {
  const auto& r = spec.resources;
  auto cores = CapacityCount(node, r.cores);
  if (!cores) return cores.error();
  std::vector<DeviceInfo> out;
  if (*cores == 0) return out;
  auto mem = CapacityCount(node, r.memory);
  if (!mem) return mem.error();
  const std::int64_t cards = *cores / cores_per_card + (*cores % cores_per_card != 0);
  if (cards > kMaxCardsPerNode) {
    return Error{fmt::format("capacity {}={} makes {} cards of {} cores, more than the {} a node can have",
                             r.cores, *cores, cards, cores_per_card, kMaxCardsPerNode)};
  }
  __extension__ using Int128 = __int128;
  const Int128 per_card = Int128{*mem} * r.memory_factor * cores_per_card / *cores;  // no int64 overflow
  if (per_card > std::numeric_limits<std::int32_t>::max()) {
    return Error{fmt::format("capacity {}={} gives each card more than {} MiB", r.memory, *mem,
                             std::numeric_limits<std::int32_t>::max())};
  }
  for (std::int64_t i = 0; i < cards; ++i) {
    DeviceInfo d;
    d.index = static_cast<std::int32_t>(i);
    d.id = fmt::format("{}-{}-{}", node.name, id_infix, i);
    d.count = 100;
    d.devmem = MiB(static_cast<std::int32_t>(per_card));
    d.devcore = Cores(cores_per_card);
    d.type = spec.vendor;
    d.health = true;
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<VendorFlag> ResourceNameFlags(std::string_view prefix, std::string_view section) {
  std::vector<VendorFlag> flags;
  using Pair = std::pair<std::string_view, std::string_view>;  // flag suffix, setting key
  for (const auto& [suffix, key] : {Pair{"name", "resourceCountName"}, Pair{"memory", "resourceMemoryName"},
                                    Pair{"cores", "resourceCoreName"}}) {
    flags.push_back(VendorFlag{fmt::format("{}-{}", prefix, suffix), VendorFlag::Effect::kNoEffect, false,
                               fmt::format("no effect: set {}.{}", section, key)});
  }
  return flags;
}

std::map<std::string, std::string> CountResource(const BackendSpec& spec,
                                                 const std::vector<DeviceInfo>& cards) {
  std::int64_t slots = 0;
  for (const DeviceInfo& d : cards) slots += d.health ? d.count : 0;
  return {{spec.resources.count, std::to_string(slots)}};
}

NodePublication CapacityPublication(const BackendSpec& spec, const std::vector<DeviceInfo>& cards,
                                    std::int64_t cores_per_card) {
  NodePublication out;
  out.resources = CountResource(spec, cards);
  std::int64_t healthy = 0, memory_mib = 0;
  for (const DeviceInfo& d : cards) {
    if (!d.health) continue;
    ++healthy;
    memory_mib += d.devmem.value();
  }
  const std::int64_t factor = std::max<std::int64_t>(1, spec.resources.memory_factor);
  const auto set = [&](const std::string& name, std::int64_t value) {
    if (!name.empty()) out.resources[name] = std::to_string(value);
  };
  set(spec.resources.cores, healthy * cores_per_card);
  set(spec.resources.memory, memory_mib / factor);
  return out;
}

NodePublication BasicBackend::Publish(const std::vector<DeviceInfo>& cards) const {
  NodePublication out;
  if (!spec_.keys.register_annotation.empty()) out.annotation = codec::EncodeDeviceManifest(cards);
  out.resources = CountResource(spec_, cards);
  return out;
}

std::vector<DeviceInfo> DemoCards(std::string_view prefix, int n, std::int32_t split, std::int64_t memory_mib,
                                  std::int32_t cores, std::string_view type) {
  std::vector<DeviceInfo> cards;
  for (int i = 0; i < n; ++i) {
    DeviceInfo d;
    d.id = fmt::format("{}-{}", prefix, i);
    d.index = i;
    d.count = split;
    d.devmem = MiB(memory_mib);
    d.devcore = Cores(cores);
    d.type = std::string(type);
    d.numa = i / 2;
    d.health = true;
    cards.push_back(std::move(d));
  }
  return cards;
}

VendorSchema BasicSchema(std::vector<SettingField> fields, std::vector<std::string> ignored) {
  VendorSchema schema;
  schema.fields = {{"resourceCountName", SettingKind::kString},
                   {"resourceMemoryName", SettingKind::kString},
                   {"resourceCoreName", SettingKind::kString}};
  for (auto& f : fields) schema.fields.push_back(std::move(f));
  schema.fields.push_back({"annotations",
                           SettingKind::kGroup,
                           {{"register", SettingKind::kString},
                            {"score", SettingKind::kString},
                            {"handshake", SettingKind::kString},
                            {"allocated", SettingKind::kString},
                            {"toAllocate", SettingKind::kString},
                            {"nodeLock", SettingKind::kString}}});
  schema.ignored = std::move(ignored);
  return schema;
}

VendorSchema CountSchema() {
  VendorSchema schema = BasicSchema();
  std::erase_if(schema.fields, [](const SettingField& f) {
    return f.key == "resourceMemoryName" || f.key == "resourceCoreName";
  });
  return schema;
}

Result<void> ApplySettings(const VendorSettings& s, bool factor_configurable, BackendSpec& spec) {
  const auto set = [&](std::string_view path, std::string& to) {
    if (auto v = s.String(path)) to = *v;
  };
  set("resourceCountName", spec.resources.count);
  set("resourceMemoryName", spec.resources.memory);
  set("resourceMemoryPercentageName", spec.resources.memory_percentage);
  set("resourceCoreName", spec.resources.cores);
  set("resourcePriorityName", spec.resources.priority);
  set("annotations.register", spec.keys.register_annotation);
  set("annotations.score", spec.keys.score_annotation);
  set("annotations.handshake", spec.keys.handshake);
  set("annotations.allocated", spec.keys.allocated);
  set("annotations.toAllocate", spec.keys.to_allocate);
  set("annotations.nodeLock", spec.keys.node_lock);
  if (auto factor = s.Int("memoryFactor")) {
    if (!factor_configurable) {
      return Error{
          fmt::format("{}.memoryFactor: {} memory is counted in fixed units of {} MiB and cannot be changed",
                      spec.config_section, spec.display_name, spec.resources.memory_factor)};
    }
    if (*factor < 0) {
      return Error{fmt::format("{}.memoryFactor: {} is negative (want 0 or 1 for MiB, or MiB per unit)",
                               spec.config_section, *factor)};
    }
    spec.resources.memory_factor = std::max<std::int64_t>(1, *factor);
  }
  if (spec.resources.count.empty()) {
    return Error{fmt::format("{}.resourceCountName: must not be empty", spec.config_section)};
  }
  if (spec.keys.allocated.empty()) {
    return Error{
        fmt::format("{}: the allocated-devices annotation key must not be empty", spec.config_section)};
  }
  return {};
}

Result<std::int64_t> CapacityCount(const NodeView& node, const std::string& name) {
  auto it = node.capacity.find(name);
  if (name.empty() || it == node.capacity.end()) return std::int64_t{0};
  auto q = Quantity::Parse(it->second);
  if (!q) return Error{fmt::format("node capacity {}: {}", name, q.error().message)};
  auto v = q->AsInt64();
  if (!v || *v < 0) {
    return Error{fmt::format("node capacity {}: \"{}\" is not a non-negative integer", name, it->second)};
  }
  return *v;
}

Result<std::vector<DeviceInfo>> ManifestDevices(const NodeView& node, const std::string& key) {
  auto it = node.annotations.find(key);
  if (it == node.annotations.end()) return std::vector<DeviceInfo>();
  auto devices = codec::DecodeDeviceManifest(it->second);
  if (!devices) return Error{fmt::format("annotation {}: {}", key, devices.error().message)};
  return devices;
}

Result<std::vector<DeviceInfo>> LegacyDevices(const NodeView& node, const std::string& key) {
  auto it = node.annotations.find(key);
  if (it == node.annotations.end()) return std::vector<DeviceInfo>();
  auto devices = codec::DecodeLegacyDevices(it->second);
  if (!devices) return Error{fmt::format("annotation {}: {}", key, devices.error().message)};
  return devices;
}

NodePublication LegacyPublication(const BackendSpec& spec, const std::vector<DeviceInfo>& cards) {
  NodePublication out;
  const std::string text = codec::EncodeLegacyDevices(cards);
  out.annotation = text.empty() ? std::string(":") : text;
  out.resources = CountResource(spec, cards);
  return out;
}

Result<void> CheckCommonWord(std::string_view cw, std::string_view at) {
  const auto allowed = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
  };
  if (cw.empty() || cw.size() > kMaxCommonWord || !std::all_of(cw.begin(), cw.end(), allowed) ||
      !std::isalnum(static_cast<unsigned char>(cw.front())) ||
      !std::isalnum(static_cast<unsigned char>(cw.back()))) {
    return Error{fmt::format("{}.commonWord: {} is not a chip name of at most {} letters, digits, '-', '_' "
                             "or '.' that starts and ends with a letter or digit (it names the chip's "
                             "annotations)",
                             at, Quoted(cw), kMaxCommonWord)};
  }
  return {};
}

std::vector<std::int32_t> CandidateIndexes(std::span<const DeviceInfo* const> candidates) {
  std::vector<std::int32_t> out;
  for (const DeviceInfo* d : candidates) out.push_back(d->index);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::size_t> PositionsOf(std::span<const DeviceInfo* const> candidates,
                                     std::span<const std::int32_t> indexes) {
  std::vector<std::size_t> out;
  for (std::int32_t index : indexes) {
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      if (candidates[i]->index == index) {
        out.push_back(i);
        break;
      }
    }
  }
  return out;
}

Result<std::int64_t> CapacityCards(const NodeView& node, const std::string& name) {
  auto n = CapacityCount(node, name);
  if (!n) return n;
  if (*n > kMaxCardsPerNode) {
    return Error{fmt::format("node capacity {}: {} cards, more than the {} a node can have", name, *n,
                             kMaxCardsPerNode)};
  }
  return n;
}

Result<std::vector<DeviceInfo>> CapacityCardList(const NodeView& node, const std::string& name,
                                                 std::string_view infix, const DeviceInfo& card) {
  auto n = CapacityCards(node, name);
  if (!n) return n.error();
  std::vector<DeviceInfo> out;
  for (std::int64_t i = 0; i < *n; ++i) {
    DeviceInfo d = card;
    d.index = static_cast<std::int32_t>(i);
    d.id = fmt::format("{}-{}-{}", node.name, infix, i);
    d.health = true;
    out.push_back(std::move(d));
  }
  return out;
}

NodePublication CapacityCardCount(const std::string& name, const std::vector<DeviceInfo>& cards) {
  NodePublication out;
  const auto healthy =
      std::count_if(cards.begin(), cards.end(), [](const DeviceInfo& d) { return d.health; });
  out.resources[name] = std::to_string(healthy);
  return out;
}

void BasicBackend::Annotate(const PodView&, const PodVendorDevices& devices, const Annotations&, TimePoint,
                            Annotations& out) const {
  const std::string value = codec::EncodePodDevices(devices);
  out[spec_.keys.allocated] = value;
  if (!spec_.keys.to_allocate.empty()) out[spec_.keys.to_allocate] = value;
}

Result<bool> BasicBackend::Admit(ContainerView& container, PodView&) const {
  return container.limits.contains(spec_.resources.count);
}

Result<std::vector<DeviceInfo>> CountBackend::Discover(const NodeView& node) const {
  auto devices = ManifestDevices(node, spec_.keys.register_annotation);
  if (!devices) return devices;
  for (DeviceInfo& d : *devices) d.devcore = Cores(100);
  return devices;
}

Result<std::optional<DeviceRequest>> CountBackend::RequestFor(const ContainerView& c) const {
  auto count = CountResource(c, spec_.resources.count);
  if (!count) return count.error();
  if (!*count) return std::optional<DeviceRequest>();
  DeviceRequest req;
  req.vendor = spec_.vendor;
  req.count = **count;  // no memory and no cores: the slot is the share
  return std::optional<DeviceRequest>(req);
}

}  // namespace hami::backends
