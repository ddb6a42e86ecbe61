#include "backends/enflame/enflame.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/json.hpp>
#include <charconv>
#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "backends/common.h"
#include "core/strings.h"

namespace hami::backends::enflame {
namespace {

namespace json = boost::json;

constexpr std::string_view kSection = "enflame";
constexpr std::string_view kWholeVendor = "GCU";
constexpr std::string_view kDrsVendor = "Enflame";
constexpr std::string_view kCapacityAnnotation = "enflame.com/gcu-drs-capacity";
// What the DRS device plugin reads from the pod (literal keys, as upstream).
constexpr std::string_view kAssigned = "enflame.com/gcu-assigned";
constexpr std::string_view kAssignedTime = "enflame.com/gcu-assigned-time";
constexpr std::string_view kAssignedIndex = "enflame.com/gcu-assigned-index";
constexpr std::string_view kAssignedId = "enflame.com/gcu-assigned-id";
constexpr std::string_view kAssignedMinor = "enflame.com/gcu-assigned-minor";
constexpr std::string_view kRequestSize = "enflame.com/gcu-request-size";
constexpr std::string_view kAssignedContainers = "assigned-containers";
// The card's custominfo entries Discover writes (sorted by key, as DeviceInfo keeps them).
constexpr std::string_view kInfoIndex = "index";
constexpr std::string_view kInfoMaxSlice = "maxSlice";
constexpr std::string_view kInfoMinor = "minor";
constexpr std::string_view kInfoProfiles = "profiles";
// More profiles than any card offers: a table of millions would be read on every filter.
constexpr std::size_t kMaxProfiles = 1024;
constexpr std::int64_t kMiBPerGB = 1024;

// Go's strconv.Atoi: an optional sign and decimal digits, nothing else.
std::optional<std::int64_t> ParseInt(std::string_view s) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::string_view StripSuffix(std::string_view s, std::string_view suffix) {
  if (s.ends_with(suffix)) s.remove_suffix(suffix.size());
  return s;
}

// A profile the fit may carve: size and memory whose charge fits the allocation's int32 fields.
bool Carvable(std::int64_t size, std::int64_t memory_gb) {
  return size >= 1 && size <= kInt32Max && memory_gb >= 1 && memory_gb <= kInt32Max / kMiBPerGB;
}

// The profile table of a card's custominfo: name -> ID, in the plugin's order.
std::vector<std::pair<std::string, std::string>> ProfileTable(const DeviceInfo& card) {
  std::vector<std::pair<std::string, std::string>> out;
  const std::string* text = card.CustomInfo(kInfoProfiles);
  if (text == nullptr) return out;
  boost::system::error_code ec;
  const json::value v = json::parse(*text, ec);
  if (ec || !v.is_object()) return out;
  for (const auto& kv : v.get_object()) {
    if (kv.value().is_string()) out.emplace_back(std::string(kv.key()), std::string(kv.value().get_string()));
  }
  return out;
}

std::string CustomOr(const DeviceInfo& card, std::string_view key, std::string fallback) {
  const std::string* v = card.CustomInfo(key);
  return v == nullptr || v->empty() ? fallback : *v;
}

// A DRS card's profile table and largest size, parsed once when the node is discovered: the fit reads them
// for every check of the card.
struct DrsFacts final : CardFacts {
  std::vector<DrsProfile> profiles;
  std::int64_t max_slice = 0;
};

// The card's largest profile size, as Discover wrote it (else the largest of its profiles).
std::int64_t MaxSlice(const DeviceInfo& card, const std::vector<DrsProfile>& profiles) {
  if (const std::string* v = card.CustomInfo(kInfoMaxSlice)) {
    if (auto n = ParseInt(*v); n && *n > 0 && *n <= kInt32Max) return *n;
  }
  std::int64_t max_slice = 0;
  for (const DrsProfile& p : profiles) max_slice = std::max(max_slice, p.size);
  return max_slice;
}

DrsFacts ParseFacts(const DeviceInfo& card) {
  DrsFacts facts;
  facts.profiles = CardProfiles(card);
  facts.max_slice = MaxSlice(card, facts.profiles);
  return facts;
}

// The facts discovery parsed, or (a card that was not discovered, e.g. built by a test) parsed now into
// `scratch`.
const DrsFacts& FactsOf(const DeviceInfo& card, DrsFacts& scratch) {
  if (const auto* parsed = dynamic_cast<const DrsFacts*>(card.facts.data.get())) return *parsed;
  scratch = ParseFacts(card);
  return scratch;
}

// The profiles of HAMi's example (an S60 card of six slices and 40 GB), for the simulated plugin.
json::object DefaultProfiles() { return {{"1g.6gb", "0"}, {"3g.20gb", "1"}, {"6g.40gb", "2"}}; }

// Whole cards from the node's capacity; a card is taken whole or not at all, whatever the policy.
class WholeBackend final : public Hooked<WholeBackend, BasicBackend> {
 public:
  using Hooked::Hooked;

  Result<std::vector<DeviceInfo>> Discover(const NodeView& node) const override {
    DeviceInfo card;
    card.count = 1;
    card.devmem = MiB(100);  // placeholders: a GCU is not shared
    card.devcore = Cores(100);
    card.type = std::string(kWholeVendor);
    return CapacityCardList(node, spec_.resources.count, "GCU", card);
  }
  // The plugin's capacity counts the healthy cards.
  NodePublication Publish(const std::vector<DeviceInfo>& cards) const override {
    return CapacityCardCount(spec_.resources.count, cards);
  }

  // The whole card's placeholder memory and cores, so the allocation reads `<id>,GCU,100,100`.
  Result<std::optional<DeviceRequest>> RequestFor(const ContainerView& c) const override {
    return WholeCardRequest(c, spec_, MiB(100));
  }

  std::optional<Reason> RefuseCard(const DeviceInfo&, const DeviceUsage& used, const DeviceRequest&,
                                   const CardCheckView&) const override {
    if (used.used > 0) return Reason::kExclusiveDeviceAllocateConflict;
    return std::nullopt;
  }
};

// DRS partitions of the cards the plugin lists in its capacity annotation.
class DrsBackend final : public Hooked<DrsBackend, BasicBackend> {
 public:
  using Hooked::Hooked;

  Result<std::vector<DeviceInfo>> Discover(const NodeView& node) const override {
    const std::string& key = spec_.keys.register_annotation;
    auto it = node.annotations.find(key);
    if (it == node.annotations.end()) return std::vector<DeviceInfo>();
    const auto unreadable = [&](std::string_view cause) {
      return Error{fmt::format("failed to parse {}: {}", key, cause)};
    };
    boost::system::error_code ec;
    const json::value root = json::parse(it->second, ec);
    if (ec) return unreadable(ec.message());
    if (!root.is_object()) return unreadable("not a JSON object");

    json::object profiles;
    std::int64_t max_slice = 0, max_memory_gb = 0;
    if (const json::value* p = root.get_object().if_contains("profiles"); p != nullptr && !p->is_null()) {
      if (!p->is_object()) return unreadable("profiles is not an object");
      if (p->get_object().size() > kMaxProfiles) {
        return Error{fmt::format("{}: {} profiles, more than the {} a card can have", key,
                                 p->get_object().size(), kMaxProfiles)};
      }
      for (const auto& kv : p->get_object()) {
        if (!kv.value().is_string()) return unreadable(fmt::format("profiles[{}] is not a string", kv.key()));
        profiles[kv.key()] = kv.value();
        const auto [size, memory_gb] = ParseProfileName(kv.key());
        if (!Carvable(size, memory_gb)) continue;
        max_slice = std::max(max_slice, size);
        max_memory_gb = std::max(max_memory_gb, memory_gb);
      }
    }
    if (max_slice <= 0) return Error{fmt::format("no valid drs profiles found on node {}", node.name)};

    const json::value* list = root.get_object().if_contains("devices");
    if (list != nullptr && !list->is_null() && !list->is_array())
      return unreadable("devices is not an array");
    const std::size_t n = list == nullptr || list->is_null() ? 0 : list->get_array().size();
    if (n == 0) return Error{fmt::format("no drs devices found on node {}", node.name)};
    if (n > static_cast<std::size_t>(kMaxCardsPerNode)) {
      return Error{fmt::format("{}: {} devices, more than the {} a node can have", key, n, kMaxCardsPerNode)};
    }
    const std::string table = json::serialize(profiles);
    std::vector<DeviceInfo> out;
    std::set<std::int64_t> seen;
    for (std::size_t pos = 0; pos < n; ++pos) {
      const json::value& entry = list->get_array()[pos];
      if (!entry.is_object()) return unreadable(fmt::format("devices[{}] is not an object", pos));
      const auto text = [&](std::string_view field) -> Result<std::string> {
        const json::value* v = entry.get_object().if_contains(field);
        if (v == nullptr || v->is_null()) return Ok(std::string());
        if (!v->is_string()) return unreadable(fmt::format("devices[{}].{} is not a string", pos, field));
        return Ok(std::string(v->get_string()));
      };
      auto index_text = text("index");
      if (!index_text) return index_text.error();
      auto minor_text = text("minor");
      if (!minor_text) return minor_text.error();
      std::int64_t index = static_cast<std::int64_t>(pos);
      if (auto parsed = ParseInt(*index_text); parsed && *parsed >= 0 && *parsed <= kInt32Max)
        index = *parsed;
      const json::value* raw = entry.get_object().if_contains("capacity");
      auto capacity = raw == nullptr ? Result<std::int32_t>(Error{"no capacity"}) : DrsCapacity(*raw);
      if (!capacity || *capacity <= 0)
        return Error{fmt::format("invalid drs capacity on node {}", node.name)};
      if (!seen.insert(index).second) {
        return Error{fmt::format("{}: device index {} is listed twice on node {}", key, index, node.name)};
      }
      std::string minor(Trim(*minor_text));
      if (minor.empty()) minor = std::to_string(index);
      DeviceInfo d;
      d.index = static_cast<std::int32_t>(index);
      d.id = fmt::format("{}-enflame-drs-{}", node.name, index);
      d.count = *capacity;
      d.devmem = MiB(max_memory_gb * kMiBPerGB);
      d.devcore = Cores(100);
      d.type = std::string(kDrsVendor);
      d.health = true;
      d.custom_info = {{std::string(kInfoIndex), std::to_string(index)},
                       {std::string(kInfoMaxSlice), std::to_string(max_slice)},
                       {std::string(kInfoMinor), std::move(minor)},
                       {std::string(kInfoProfiles), table}};
      d.facts.data = std::make_shared<const DrsFacts>(ParseFacts(d));
      out.push_back(std::move(d));
    }
    return out;
  }

  // The plugin lists its healthy cards (their index, minor and slices) and the node's profile table; the
  // count resource is their slices.
  NodePublication Publish(const std::vector<DeviceInfo>& cards) const override {
    json::array devices;
    json::object profiles;
    bool have_profiles = false;
    for (const DeviceInfo& d : cards) {
      if (!d.health) continue;
      const std::string index = std::to_string(d.index);
      devices.push_back(json::object{{"index", index},
                                     {"minor", CustomOr(d, kInfoMinor, index)},
                                     {"capacity", d.count}});
      if (!have_profiles) {
        for (auto& [name, id] : ProfileTable(d)) profiles[name] = id;
        have_profiles = !profiles.empty();
      }
    }
    if (!have_profiles) profiles = DefaultProfiles();
    NodePublication out;
    out.annotation = json::serialize(json::object{{"devices", std::move(devices)}, {"profiles", profiles}});
    out.resources = CountResource(spec_, cards);
    return out;
  }
  // The plugin's cards: HAMi's example profiles (1g.6gb, 3g.20gb, 6g.40gb) unless a card has a table.
  void AddPluginFacts(std::vector<DeviceInfo>& cards) const override {
    for (DeviceInfo& d : cards) {
      if (d.CustomInfo(kInfoProfiles) != nullptr) continue;
      const std::string index = std::to_string(d.index);
      d.custom_info = {{std::string(kInfoIndex), index},
                       {std::string(kInfoMaxSlice), "6"},
                       {std::string(kInfoMinor), index},
                       {std::string(kInfoProfiles), json::serialize(DefaultProfiles())}};
    }
  }

  // A partition named in slices (direct mode), else by memory and cores (spec mode); one card either way.
  Result<std::optional<DeviceRequest>> RequestFor(const ContainerView& c) const override {
    DeviceRequest req;
    req.vendor = spec_.vendor;
    req.count = 1;
    req.mem_percent = 0;
    auto slices = IntegerResource(c, spec_.resources.count, "slices", 0, kInt32Max);
    if (!slices) return slices.error();
    if (*slices && **slices > 0) {
      req.partition = static_cast<std::int32_t>(**slices);
      return std::optional<DeviceRequest>(req);
    }
    auto memory = IntegerResource(c, spec_.resources.memory, "MiB", 0, kInt32Max);
    if (!memory) return memory.error();
    auto cores = IntegerResource(c, spec_.resources.cores, "percent of a card", 0, 100);
    if (!cores) return cores.error();
    if (!*memory && !*cores) return std::optional<DeviceRequest>();
    req.memory = MiB(memory->value_or(0));
    req.cores = Cores(cores->value_or(0));
    return std::optional<DeviceRequest>(req);
  }

  // The webhook's checks and copies, in upstream's words.
  Result<bool> Admit(ContainerView& c, PodView&) const override {
    const std::string& slices = spec_.resources.count;
    auto count = ResourceValue(c, slices);
    if (!count) return count.error();
    if (*count) {
      if ((*count)->CeilValue() <= 0) return Error{fmt::format("{} must be greater than 0", slices)};
      CopyAcross(c, slices);
      return true;
    }
    const std::string& mem = spec_.resources.memory;
    const std::string& cores = spec_.resources.cores;
    auto memory = ResourceValue(c, mem);
    if (!memory) return memory.error();
    auto core = ResourceValue(c, cores);
    if (!core) return core.error();
    if (!*memory && !*core) return false;
    if (*memory && (*memory)->CeilValue() <= 0) return Error{fmt::format("{} must be greater than 0", mem)};
    if (*core && ((*core)->CeilValue() <= 0 || (*core)->CeilValue() > 100)) {
      return Error{fmt::format("{} must be in range (0,100]", cores)};
    }
    if (*memory) CopyAcross(c, mem);
    if (*core) CopyAcross(c, cores);
    return true;
  }

  // The card's profile for the request, its free slices (docs/DECISIONS.md "Enflame": counted from the
  // cores charged), memory and cores.
  std::optional<Reason> RefuseCard(const DeviceInfo& card, const DeviceUsage& used,
                                   const DeviceRequest& request, const CardCheckView&) const override {
    DrsFacts scratch;
    const DrsFacts& facts = FactsOf(card, scratch);
    const auto profile = ChooseProfile(facts.profiles, request);
    if (!profile) return Reason::kModeNotFit;
    if (card.count - SlicesInUse(used.cores, facts.max_slice) < profile->size)
      return Reason::kCardTimeSlicingExhausted;
    if (card.devmem.value() - used.mem.value() < profile->memory_gb * kMiBPerGB)
      return Reason::kCardInsufficientMemory;
    if (card.devcore.value() > 0 && card.devcore.value() - used.cores.value() < profile->core_percent)
      return Reason::kCardInsufficientCore;
    return std::nullopt;
  }
  // The profile's memory and core share.
  CardCharge Charged(const DeviceInfo& card, const DeviceUsage&, const DeviceRequest& request,
                     CardCharge shared, const CardCheckView&) const override {
    DrsFacts scratch;
    const auto profile = ChooseProfile(FactsOf(card, scratch).profiles, request);
    if (!profile) return shared;
    return {MiB(profile->memory_gb * kMiBPerGB), Cores(profile->core_percent)};
  }

  // Without the node's cards only the allocation and the assigned flag: the profile of each container is
  // read off its card.
  void Annotate(const PodView& pod, const PodVendorDevices& devices, const Annotations& written,
                TimePoint now, Annotations& out) const override {
    AnnotateOnNode(pod, devices, {}, written, now, out);
  }
  // What the DRS plugin reads: per container its first card's partition (slices, profile), and the first
  // such container's card index, minor and slices.
  void AnnotateOnNode(const PodView& pod, const PodVendorDevices& devices, std::span<const DeviceInfo> cards,
                      const Annotations& written, TimePoint now, Annotations& out) const override {
    BasicBackend::Annotate(pod, devices, written, now, out);
    out[std::string(kAssigned)] = "false";
    out[std::string(kAssignedTime)] =
        std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count());
    std::map<std::string, json::object> assigned;  // by container name, as Go's encoder sorts a map
    bool first = true;
    for (std::size_t c = 0; c < devices.size(); ++c) {
      if (devices[c].empty()) continue;
      const ContainerDevice& chosen = devices[c].front();
      const auto card = std::find_if(cards.begin(), cards.end(),
                                     [&](const DeviceInfo& d) { return d.id == chosen.uuid; });
      if (card == cards.end()) continue;
      std::optional<DrsProfile> profile;
      DrsFacts scratch;
      for (const DrsProfile& p : FactsOf(*card, scratch).profiles) {
        if (p.memory_gb * kMiBPerGB == chosen.mem.value() && p.core_percent == chosen.cores.value()) {
          profile = p;
          break;
        }
      }
      if (!profile) continue;
      json::object entry{{"allocated", false}, {"request", profile->size}};
      if (!profile->id.empty()) entry["profileID"] = profile->id;
      if (!profile->name.empty()) entry["profileName"] = profile->name;
      const std::string name =
          c < pod.ContainerCount() ? pod.ContainerAt(c).name : fmt::format("container-{}", c);
      assigned[name] = std::move(entry);
      if (!first) continue;
      first = false;
      const std::string index = CustomOr(*card, kInfoIndex, std::to_string(card->index));
      out[std::string(kAssignedIndex)] = index;
      out[std::string(kAssignedId)] = index;
      out[std::string(kAssignedMinor)] = CustomOr(*card, kInfoMinor, index);
      out[std::string(kRequestSize)] = std::to_string(profile->size);
    }
    if (assigned.empty()) return;
    json::object all;
    for (auto& [name, entry] : assigned) all[name] = std::move(entry);
    out[std::string(kAssignedContainers)] = json::serialize(all);
  }

 private:
  // Fills the side of limits and requests that lacks `name` with the other side's quantity.
  static void CopyAcross(ContainerView& c, const std::string& name) {
    auto limit = c.limits.find(name);
    auto request = c.requests.find(name);
    if (limit == c.limits.end()) {
      c.limits[name] = request->second;
    } else if (request == c.requests.end()) {
      c.requests[name] = limit->second;
    }
  }
};

BackendSpec WholeSpec() {
  BackendSpec s;
  s.vendor = std::string(kWholeVendor);
  s.config_section = std::string(kSection);
  s.display_name = "Enflame GCU";
  s.health = HealthRule::kAlwaysHealthy;
  s.keys.allocated = "hami.io/enflame-gcu-devices-allocated";
  s.keys.to_allocate = "hami.io/enflame-gcu-devices-to-allocate";
  s.resources.count = "enflame.com/gcu";
  // A card in use is refused as exclusive (RefuseCard), not as a full split count.
  s.fit.split_count_limits = false;
  return s;
}

BackendSpec DrsSpec() {
  BackendSpec s;
  s.vendor = std::string(kDrsVendor);
  s.config_section = std::string(kSection);
  s.display_name = "Enflame DRS GCU";
  s.health = HealthRule::kAlwaysHealthy;
  s.keys.register_annotation = std::string(kCapacityAnnotation);
  s.keys.allocated = "hami.io/enflame-vgpu-devices-allocated";
  s.keys.use_uuid = "enflame.com/use-gpuuuid";
  s.keys.nouse_uuid = "enflame.com/nouse-gpuuuid";
  s.resources.count = "enflame.com/drs-gcu";
  s.resources.memory = "enflame.com/gcu-memory";
  s.resources.cores = "enflame.com/gcu-core";
  s.fit.vendor_sizes = true;
  return s;
}

Result<std::vector<BackendPtr>> Create(const VendorSettings& settings) {
  BackendSpec whole = WholeSpec();
  BackendSpec drs = DrsSpec();
  // An empty name falls back for DRS (the legacy key, then the default), as upstream.
  const auto set = [&](std::string_view key, std::string& name) {
    if (auto v = settings.String(key); v && !v->empty()) name = *v;
  };
  set("resourceNameVGCU", drs.resources.count);
  set("resourceNameDRSGCU", drs.resources.count);
  set("resourceNameGCUMemory", drs.resources.memory);
  set("resourceNameGCUCore", drs.resources.cores);
  std::vector<BackendPtr> out;
  // resourceNameGCU: "" turns whole cards off (upstream's GCU then matches nothing).
  if (auto v = settings.String("resourceNameGCU")) whole.resources.count = *v;
  if (!whole.resources.count.empty()) out.push_back(std::make_unique<WholeBackend>(std::move(whole)));
  out.push_back(std::make_unique<DrsBackend>(std::move(drs)));
  return out;
}

VendorFlag NoEffect(std::string flag, std::string_view key) {
  return VendorFlag{std::move(flag), VendorFlag::Effect::kNoEffect, false,
                    fmt::format("no effect: set {}.{}", kSection, key)};
}

}  // namespace

std::pair<std::int64_t, std::int64_t> ParseProfileName(std::string_view name) {
  const std::string normalized = ToLower(Trim(name));
  const auto dot = normalized.find('.');
  if (dot == std::string::npos) return {0, 0};
  const std::string_view all(normalized);
  std::string_view second = all.substr(dot + 1);
  second = second.substr(0, second.find('.'));
  const auto size = ParseInt(StripSuffix(Trim(all.substr(0, dot)), "g"));
  if (!size) return {0, 0};
  const auto memory = ParseInt(StripSuffix(Trim(second), "gb"));
  return {*size, memory.value_or(0)};
}

Result<std::int32_t> DrsCapacity(const json::value& capacity) {
  if (capacity.is_string()) {
    auto n = ParseInt(Trim(capacity.get_string()));
    if (!n) {
      return Error{fmt::format("capacity \"{}\" is not an integer", std::string(capacity.get_string()))};
    }
    return static_cast<std::int32_t>(std::clamp<std::int64_t>(*n, -kInt32Max - 1, kInt32Max));
  }
  if (!capacity.is_number()) return Error{"capacity is neither a number nor a string"};
  // Go decodes every JSON number as a float64.
  const double v = capacity.to_number<double>();
  if (!std::isfinite(v) || v > static_cast<double>(kInt32Max) || v < static_cast<double>(-kInt32Max - 1))
    return Error{fmt::format("capacity {} is out of range", v)};
  return static_cast<std::int32_t>(v);
}

std::int64_t SlicesInUse(Cores used, std::int64_t max_slice) {
  const std::int64_t cores = used.value();
  if (cores <= 0 || max_slice <= 0) return 0;
  const std::int64_t whole = cores / 100;
  if (whole > kInt32Max / max_slice) return kInt32Max;
  return std::min(kInt32Max, whole * max_slice + (cores % 100) * max_slice / 100);
}

std::vector<DrsProfile> CardProfiles(const DeviceInfo& card) {
  std::vector<DrsProfile> out;
  const auto table = ProfileTable(card);
  std::int64_t max_slice = 0;
  if (const std::string* v = card.CustomInfo(kInfoMaxSlice)) {
    if (auto n = ParseInt(*v); n && *n > 0 && *n <= kInt32Max) max_slice = *n;
  }
  if (max_slice == 0) {
    for (const auto& [name, id] : table) {
      const auto [size, memory_gb] = ParseProfileName(name);
      if (Carvable(size, memory_gb)) max_slice = std::max(max_slice, size);
    }
  }
  if (max_slice == 0) return out;
  for (const auto& [name, id] : table) {
    const auto [size, memory_gb] = ParseProfileName(name);
    if (!Carvable(size, memory_gb)) continue;
    const std::int64_t core_percent = (size * 100 + max_slice - 1) / max_slice;
    if (core_percent > kInt32Max) continue;
    out.push_back(DrsProfile{name, id, size, memory_gb, core_percent});
  }
  std::sort(out.begin(), out.end(), [](const DrsProfile& a, const DrsProfile& b) {
    return std::tie(a.size, a.memory_gb, a.name) < std::tie(b.size, b.memory_gb, b.name);
  });
  return out;
}

std::optional<DrsProfile> ChooseProfile(const std::vector<DrsProfile>& profiles,
                                        const DeviceRequest& request) {
  if (request.partition > 0) {
    for (const DrsProfile& p : profiles) {
      if (p.size == request.partition) return p;
    }
    return std::nullopt;
  }
  // One unit: the memory resource is MiB, whatever its size (docs/DECISIONS.md "Enflame").
  const std::int64_t memory = request.memory.value();
  const std::int64_t gb = memory <= 0 ? 0 : (memory + kMiBPerGB - 1) / kMiBPerGB;
  const std::int64_t cores = request.cores.value();
  for (const DrsProfile& p : profiles) {
    if ((gb == 0 || p.memory_gb >= gb) && (cores <= 0 || p.core_percent >= cores)) return p;
  }
  return std::nullopt;
}

VendorModule Module() {
  VendorModule module{std::string(kSection), VendorSchema{}, &Create};
  module.schema.fields = {{"resourceNameGCU", SettingKind::kString},
                          {"resourceNameDRSGCU", SettingKind::kString},
                          {"resourceNameGCUMemory", SettingKind::kString},
                          {"resourceNameGCUCore", SettingKind::kString},
                          {"resourceNameVGCU", SettingKind::kString},
                          {"resourceNameVGCUPercentage", SettingKind::kString}};
  module.flags = {NoEffect("enflame-gcu-resource-name", "resourceNameGCU"),
                  NoEffect("enflame-drs-gcu-resource-name", "resourceNameDRSGCU"),
                  NoEffect("enflame-gcu-memory-resource-name", "resourceNameGCUMemory"),
                  NoEffect("enflame-gcu-core-resource-name", "resourceNameGCUCore"),
                  NoEffect("enflame-vgcu-resource-name", "resourceNameDRSGCU"),
                  NoEffect("enflame-vgcu-legacy-resource-name", "resourceNameVGCU"),
                  NoEffect("enflame-vgcu-percentage-resource-name", "resourceNameVGCUPercentage")};
  module.demo.nodes = {
      {"enflame-gcu-1", DemoCards("gcu", 4, 1, 100, 100, "GCU"), std::string(kWholeVendor)},
      {"enflame-drs-1", DemoCards("drs", 2, 6, 40 * kMiBPerGB, 100, "Enflame"), std::string(kDrsVendor)}};
  module.demo.pods = R"(
- {name: gcu-whole, limits: {enflame.com/gcu: "1"}}
- {name: drs-three, limits: {enflame.com/drs-gcu: "3"}}
)";
  return module;
}

}  // namespace hami::backends::enflame
