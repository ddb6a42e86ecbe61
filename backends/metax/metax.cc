#include "backends/metax/metax.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cctype>
#include <chrono>
#include <functional>
#include <map>
#include <numeric>

#include "backends/common.h"
#include "core/codec/node_devices.h"
#include "core/strings.h"

namespace hami::backends::metax {
namespace {

namespace json = boost::json;

constexpr std::string_view kSection = "metax";
constexpr std::string_view kGpuVendor = "Metax-GPU";
constexpr std::string_view kSgpuVendor = "Metax-SGPU";
constexpr std::int64_t kGpuMemory = 65536;  // what a whole card is counted as (its plugin publishes none)
constexpr std::int64_t kMiBPerGiB = 1024;   // a bare vmemory value is GiB
constexpr std::string_view kDevicesAllocated = "metax-tech.com/gpu-devices-allocated";
constexpr std::string_view kPredicateTime = "metax-tech.com/predicate-time";
// Card facts kept in DeviceInfo::custom_info.
constexpr std::string_view kInfoLosses = "TopologyLosses";
constexpr std::string_view kInfoScores = "TopologyScores";
constexpr std::string_view kInfoModel = "Model";
constexpr std::string_view kInfoQos = "QosPolicy";
constexpr std::string_view kCoreUnit = "percent of a card's compute";
// Under FitRules::vendor_score_together, as upstream weighs this vendor's node score.
constexpr double kScoreWeight = 10000;

constexpr std::string_view kOnline = "online";
constexpr std::string_view kOffline = "offline";
constexpr std::string_view kBestEffort = "best-effort";
constexpr std::string_view kFixedShare = "fixed-share";
constexpr std::string_view kBurstShare = "burst-share";

const std::string* AnnotationOf(const PodView& pod, std::string_view key) {
  auto it = pod.annotations.find(key);
  return it == pod.annotations.end() ? nullptr : &it->second;
}

AppClass AppClassOf(const PodView& pod) {
  const std::string* v = AnnotationOf(pod, kAppClassAnnotation);
  if (v == nullptr) return AppClass::kNone;
  if (*v == kOnline) return AppClass::kOnline;
  if (*v == kOffline) return AppClass::kOffline;
  return AppClass::kOther;
}

Qos QosOfPod(const PodView& pod) {
  const std::string* v = AnnotationOf(pod, kQosAnnotation);
  if (v == nullptr || v->empty()) return Qos::kNone;
  if (*v == kBestEffort) return Qos::kBestEffort;
  if (*v == kFixedShare) return Qos::kFixedShare;
  if (*v == kBurstShare) return Qos::kBurstShare;
  return Qos::kOther;
}

// The position of `card` among `cards` (a view of the node's cards), or npos for a card from elsewhere.
std::size_t PositionIn(std::span<const DeviceInfo> cards, const DeviceInfo& card) {
  const std::less<const DeviceInfo*> before;
  if (cards.empty() || before(&card, cards.data()) || !before(&card, cards.data() + cards.size()))
    return std::string::npos;
  return static_cast<std::size_t>(&card - cards.data());
}

// Whole cards from the node's capacity; the node's topology annotations ride on each card.
class GpuBackend final : public Hooked<GpuBackend, BasicBackend> {
 public:
  using Hooked::Hooked;

  Result<std::vector<DeviceInfo>> Discover(const NodeView& node) const override {
    DeviceInfo card;
    card.count = 1;
    card.devmem = MiB(kGpuMemory);
    card.devcore = Cores(100);
    card.type = std::string(kGpuVendor);
    auto out = CapacityCardList(node, spec_.resources.count, "metax", card);
    if (!out || out->empty()) return out;
    using Table = std::pair<std::string_view, std::string_view>;
    for (const auto& [annotation, info] :
         {Table{kLossesAnnotation, kInfoLosses}, Table{kScoresAnnotation, kInfoScores}}) {
      auto it = node.annotations.find(annotation);
      if (it == node.annotations.end()) continue;
      auto encoded = ParseTopology(it->second);
      if (!encoded) return Error{fmt::format("annotation {}: {}", annotation, encoded.error().message)};
      for (DeviceInfo& d : *out) d.custom_info.emplace_back(info, *encoded);  // Losses < Scores: sorted
    }
    return out;
  }
  NodePublication Publish(const std::vector<DeviceInfo>& cards) const override {
    return CapacityCardCount(spec_.resources.count, cards);
  }

  Result<std::optional<DeviceRequest>> RequestFor(const ContainerView& c) const override {
    return WholeCardRequest(c, spec_);
  }

  // Binpack: 2000 less the bandwidth the node says k cards lose; spread: 2000 less what they keep (spread
  // takes the lowest). A node that publishes no figures scores 0.
  double AllocationScore(const AllocationView& view) const override {
    if (view.cards.empty()) return 0;
    const std::string* table = view.cards.front().CustomInfo(view.spread ? kInfoScores : kInfoLosses);
    if (table == nullptr) return 0;
    std::int64_t k = 0;
    for (const auto& positions : view.containers) k += static_cast<std::int64_t>(positions.size());
    return 2000.0 - static_cast<double>(TopologyValue(*table, k));
  }
};

// One card of metax-tech.com/node-gpu-devices, as Go's encoding/json fills upstream's struct.
Result<DeviceInfo> DecodeSgpu(const json::value& v, std::size_t position) {
  const std::string where = fmt::format("card {}", position);
  if (!v.is_object()) return Error{fmt::format("{}: expected an object, got {}", where, json::serialize(v))};
  DeviceInfo d;
  d.index = static_cast<std::int32_t>(position);
  d.type = std::string(kSgpuVendor);
  std::string model, qos;
  std::int64_t zone = 0;
  for (const auto& kv : v.get_object()) {
    const std::string key = ToLower(kv.key());
    const std::string at = fmt::format("{} field \"{}\"", where, std::string_view(kv.key()));
    const json::value& val = kv.value();
    const auto int32 = [&](auto assign) -> Result<void> {
      auto n = codec::JsonInt(val, at, -kInt32Max - 1, kInt32Max);
      if (!n) return n.error();
      assign(*n);
      return {};
    };
    Result<void> ok;
    if (key == "uuid") {
      auto s = codec::JsonString(val, at);
      if (!s) return s.error();
      d.id = *s;
    } else if (key == "model" || key == "qospolicy") {
      auto s = codec::JsonString(val, at);
      if (!s) return s.error();
      (key == "model" ? model : qos) = *s;
    } else if (key == "totaldevcount") {
      ok = int32([&](std::int64_t n) { d.count = static_cast<std::int32_t>(n); });
    } else if (key == "totalcompute") {
      ok = int32([&](std::int64_t n) { d.devcore = Cores(n); });
    } else if (key == "totalvram") {
      ok = int32([&](std::int64_t n) { d.devmem = MiB(n); });
    } else if (key == "numa") {
      ok = int32([&](std::int64_t n) { d.numa = static_cast<std::int32_t>(n); });
    } else if (key == "linkzone") {
      ok = int32([&](std::int64_t n) { zone = n; });
    } else if (key == "healthy") {
      auto b = codec::JsonBool(val, at);
      if (!b) return b.error();
      d.health = *b;
    } else if (key == "bdf") {
      if (auto s = codec::JsonString(val, at); !s) return s.error();  // checked as upstream does, unused
    } else if (key == "availabledevcount" || key == "availablecompute" || key == "availablevram") {
      ok = int32([](std::int64_t) {});  // checked as upstream does, unused: the ledger knows what is free
    }
    if (!ok) return ok.error();
  }
  if (zone != 0) d.network = static_cast<std::int32_t>(zone);
  if (!model.empty()) d.custom_info.emplace_back(kInfoModel, model);
  if (!qos.empty()) d.custom_info.emplace_back(kInfoQos, qos);
  if (auto ok = codec::CheckDevice(d, where); !ok) return ok.error();
  return d;
}

Result<std::vector<DeviceInfo>> DecodeSgpus(std::string_view text) {
  boost::system::error_code ec;
  json::value root = json::parse(text, ec);
  if (ec) return Error{fmt::format("not valid JSON ({}): want a JSON array of card objects", ec.message())};
  std::vector<DeviceInfo> out;
  if (root.is_null()) return out;
  if (!root.is_array()) return Error{"want a JSON array of card objects"};
  if (root.get_array().size() > static_cast<std::size_t>(kMaxCardsPerNode))
    return Error{fmt::format("lists {} cards, more than {}", root.get_array().size(), kMaxCardsPerNode)};
  for (const auto& v : root.get_array()) {
    auto d = DecodeSgpu(v, out.size());
    if (!d) return d.error();
    out.push_back(std::move(*d));
  }
  if (auto ok = codec::CheckUniqueIds(out); !ok) return ok.error();
  return out;
}

// sGPUs of the cards the plugin lists, shared by memory and compute share, with app classes and QoS.
class SgpuBackend final : public Hooked<SgpuBackend, BasicBackend> {
 public:
  SgpuBackend(BackendSpec spec, bool topology_aware)
      : Hooked(std::move(spec)), topology_aware_(topology_aware) {}

  // No annotation, or an empty list: no cards (upstream's errors for both leave the node without them too).
  Result<std::vector<DeviceInfo>> Discover(const NodeView& node) const override {
    auto it = node.annotations.find(spec_.keys.register_annotation);
    if (it == node.annotations.end()) return std::vector<DeviceInfo>();
    auto cards = DecodeSgpus(it->second);
    if (!cards) return Error{fmt::format("annotation {}: {}", spec_.keys.register_annotation,
                                         cards.error().message)};
    return cards;
  }

  NodePublication Publish(const std::vector<DeviceInfo>& cards) const override {
    json::array list;
    for (const DeviceInfo& d : cards) {
      json::object o;
      o["uuid"] = d.id;
      if (const std::string* model = d.CustomInfo(kInfoModel)) o["model"] = *model;
      if (d.count != 0) o["totalDevCount"] = d.count;
      if (d.devcore.value() != 0) o["totalCompute"] = d.devcore.value();
      if (d.devmem.value() != 0) o["totalVRam"] = d.devmem.value();
      if (d.numa != 0) o["numa"] = d.numa;
      if (d.health) o["healthy"] = true;
      if (const std::string* qos = d.CustomInfo(kInfoQos)) o["qosPolicy"] = *qos;
      if (d.network && *d.network != 0) o["linkZone"] = *d.network;
      list.push_back(std::move(o));
    }
    NodePublication out;
    out.annotation = json::serialize(list);
    out.resources = CountResource(spec_, cards);
    return out;
  }
  // The plugin knows each card's MetaLink zone: four cards to a zone, by position.
  void AddPluginFacts(std::vector<DeviceInfo>& cards) const override {
    for (DeviceInfo& d : cards) {
      if (!d.network) d.network = 1 + d.index / 4;
    }
  }

  // Limits only. A bare vmemory value is GiB; one with a unit (or an exponent) is bytes.
  Result<std::optional<DeviceRequest>> RequestFor(const ContainerView& c) const override {
    const ContainerView limits = LimitsOnly(c);
    const auto& r = spec_.resources;
    auto count = CountResource(limits, r.count);
    if (!count) return count.error();
    if (!*count) return std::optional<DeviceRequest>();
    auto cores = IntegerResource(limits, r.cores, kCoreUnit, 0, kInt32Max);
    if (!cores) return cores.error();
    auto memory = MemoryMiB(limits);
    if (!memory) return memory.error();
    DeviceRequest req;
    req.vendor = spec_.vendor;
    req.count = **count;
    req.memory = MiB(*memory);
    req.mem_percent = *memory == 0 ? 100 : 0;
    req.cores = Cores(cores->value_or(100));
    return std::optional<DeviceRequest>(req);
  }

  // A pod of an app class asks for one card; a pod that is not online gets best-effort unless it names a
  // QoS policy, which must be one of the three.
  Result<bool> Admit(ContainerView& container, PodView& pod) const override {
    if (!container.limits.contains(spec_.resources.count)) return false;
    auto request = RequestFor(container);
    if (!request) return request.error();
    const std::string* app = AnnotationOf(pod, kAppClassAnnotation);
    if (app != nullptr) {
      if (*app != kOnline && *app != kOffline) {
        return Error{fmt::format("{} must be set one of [{}, {}]", kAppClassAnnotation, kOnline, kOffline)};
      }
      if (!*request || (*request)->count != 1) return Error{"app-class pod must request single device"};
    }
    if (app != nullptr && *app == kOnline) return true;
    const std::string* qos = AnnotationOf(pod, kQosAnnotation);
    if (qos == nullptr) {
      pod.annotations[std::string(kQosAnnotation)] = std::string(kBestEffort);
      return true;
    }
    if (*qos != kBestEffort && *qos != kFixedShare && *qos != kBurstShare) {
      return Error{fmt::format("{} must be set one of [{}, {}, {}]", kQosAnnotation, kBestEffort, kFixedShare,
                               kBurstShare)};
    }
    return true;
  }

  std::uint8_t PodClass(const PodView& pod) const override {
    const AppClass app = AppClassOf(pod);
    return EncodeClass(app, app == AppClass::kOnline ? Qos::kNone : QosOfPod(pod));
  }

  // Before the shared checks: health, app class and QoS; after them (UUIDs, slots, mutex): the sizes, where
  // an online pod takes memory only.
  std::optional<Reason> RefuseCard(const DeviceInfo& card, const DeviceUsage& used,
                                   const DeviceRequest& request, const CardCheckView& node) const override {
    const AppClass app = AppOf(node.pod_class);
    if (node.before_shared) {
      if (!card.health) return Reason::kCardUnhealthy;
      static const CardClasses kNoHolders;
      const std::size_t at = PositionIn(node.cards, card);
      const CardClasses& classes = at < node.classes.size() ? node.classes[at] : kNoHolders;
      const bool idle = used.used == 0;
      if (!AppClassAllows(app, idle, HoldersOf(classes))) return Reason::kCardAppClassMismatch;
      const bool exclusive = request.cores.value() == 100;
      if (app != AppClass::kOnline && !idle && !exclusive && !QosAllows(QosOf(node.pod_class), classes))
        return Reason::kCardQosPolicyMismatch;
      return std::nullopt;
    }
    const std::int64_t memory = request.memory.value() > 0
                                    ? request.memory.value()
                                    : card.devmem.value() * std::clamp(request.mem_percent, 0, 100) / 100;
    if (card.devmem.value() - used.mem.value() < memory) return Reason::kCardInsufficientMemory;
    if (app == AppClass::kOnline) return std::nullopt;
    const std::int64_t total = card.devcore.value();
    const std::int64_t cores = request.cores.value();
    if (total - used.cores.value() < cores) return Reason::kCardInsufficientCore;
    if (total == 100 && cores == 100 && used.used > 0) return Reason::kExclusiveDeviceAllocateConflict;
    if (total != 0 && used.cores.value() == total && cores == 0) return Reason::kCardComputeUnitsExhausted;
    return std::nullopt;
  }

  CardCharge Charged(const DeviceInfo&, const DeviceUsage&, const DeviceRequest&, CardCharge shared,
                     const CardCheckView& node) const override {
    if (AppOf(node.pod_class) == AppClass::kOnline) shared.cores = Cores(0);  // online pods take no compute
    return shared;
  }

  bool ChoosesCards(const ChoiceView&) const override { return true; }
  CardChoice ChooseCards(std::span<const DeviceInfo* const> candidates, std::int32_t want,
                         const ChoiceView& view) const override {
    if (TooFew(candidates, want)) return {};
    return Arranged(Choose(candidates, want, view), want);
  }

 private:
  // The cards an sGPU request takes among at least `want` usable ones: the online pod's least crowded, a
  // whole-card request's best MetaLink zone, else the policy's first.
  static std::vector<std::size_t> Choose(std::span<const DeviceInfo* const> candidates, std::int32_t want,
                                         const ChoiceView& view) {
    const std::size_t n = candidates.size();
    const auto w = static_cast<std::size_t>(std::max(want, 0));
    std::vector<std::size_t> first(std::min(n, w));
    std::iota(first.begin(), first.end(), std::size_t{0});
    if (n <= w) return first;
    const AppClass app = AppOf(view.pod_class);
    if (app == AppClass::kOnline) {
      std::vector<ClassHolders> holders(n);
      for (std::size_t i = 0; i < n && i < view.classes.size(); ++i) holders[i] = HoldersOf(*view.classes[i]);
      return ChooseForOnline(holders, w);
    }
    if (app == AppClass::kNone && view.request != nullptr && view.request->cores.value() == 100) {
      std::vector<std::int32_t> zones(n);
      for (std::size_t i = 0; i < n; ++i) zones[i] = candidates[i]->network.value_or(0);
      return ChooseByLinkZone(zones, w);
    }
    return first;
  }

 public:
  // An online pod: how crowded its cards were (OnlineScore). Otherwise, when the pod takes cards whole
  // and topology awareness is on: how well it keeps MetaLink pairs (ExclusiveScore).
  double AllocationScore(const AllocationView& view) const override {
    if (AppOf(view.pod_class) == AppClass::kOnline) {
      std::int64_t sum = 0;
      for (int i : view.chosen) {
        const auto at = static_cast<std::size_t>(i);
        if (at < view.classes_before.size()) sum += OnlineScore(HoldersOf(view.classes_before[at]));
      }
      return static_cast<double>(sum) * kScoreWeight;
    }
    const auto exclusive = [&](std::size_t c) {
      return c < view.requests.size() && view.requests[c] != nullptr &&
             view.requests[c]->cores.value() == 100 && !view.containers[c].empty();
    };
    bool any = false;
    for (std::size_t c = 0; c < view.containers.size() && !any; ++c) any = exclusive(c);
    if (!any || !TopologyAware(view.pod)) return 0;
    std::vector<LinkCard> allocated, idle;
    const auto link = [&](std::size_t i) {
      return LinkCard{view.cards[i].id, view.cards[i].network.value_or(0)};
    };
    for (std::size_t c = 0; c < view.containers.size(); ++c) {
      if (!exclusive(c)) continue;
      for (int i : view.containers[c]) allocated.push_back(link(static_cast<std::size_t>(i)));
    }
    for (std::size_t i = 0; i < view.cards.size() && i < view.before.size(); ++i) {
      if (view.before[i].used == 0) idle.push_back(link(i));
    }
    return static_cast<double>(ExclusiveScore(allocated, idle)) * kScoreWeight;
  }

  // Both HAMi keys, the cards per container in the plugin's JSON (zero values left out), and when.
  void Annotate(const PodView& pod, const PodVendorDevices& devices, const Annotations& written,
                TimePoint now, Annotations& out) const override {
    BasicBackend::Annotate(pod, devices, written, now, out);
    json::array containers;
    for (const auto& ctr : devices) {
      json::array cards;
      for (const ContainerDevice& d : ctr) {
        json::object o;
        o["uuid"] = d.uuid;
        if (d.cores.value() != 0) o["compute"] = d.cores.value();
        if (d.mem.value() != 0) o["vRam"] = d.mem.value();
        cards.push_back(std::move(o));
      }
      containers.push_back(std::move(cards));
    }
    out[std::string(kDevicesAllocated)] = json::serialize(containers);
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
    out[std::string(kPredicateTime)] = std::to_string(ns);
  }

 private:
  Result<std::int64_t> MemoryMiB(const ContainerView& limits) const {
    const std::string& name = spec_.resources.memory;
    auto q = ResourceValue(limits, name);
    if (!q) return q.error();
    if (!*q) return std::int64_t{0};
    const std::string& text = (*q)->text();
    auto v = (*q)->AsInt64();
    if (!v || *v < 0) {
      return Error{fmt::format("{}: \"{}\" is not a whole, non-negative amount (want GiB, or bytes with "
                               "a unit such as 16Gi)",
                               name, text)};
    }
    const bool unit = std::any_of(text.begin(), text.end(), [](char c) { return std::isalpha(c & 0xff); });
    if (!unit && *v > kInt32Max / kMiBPerGiB) {
      return Error{fmt::format("{}: \"{}\" is out of range (want 0 to {} GiB)", name, text,
                               kInt32Max / kMiBPerGiB)};
    }
    const std::int64_t mib = unit ? *v / 1024 / 1024 : *v * kMiBPerGiB;
    if (mib > kInt32Max) {
      return Error{fmt::format("{}: \"{}\" is out of range (want at most {} MiB)", name, text, kInt32Max)};
    }
    return mib;
  }

  // The setting, unless the pod's annotation says otherwise in a form Go's ParseBool reads.
  bool TopologyAware(const PodView* pod) const {
    if (pod != nullptr) {
      if (const std::string* v = AnnotationOf(*pod, kTopologyAwareAnnotation)) {
        if (auto b = ParseGoBool(*v, kTopologyAwareAnnotation)) return *b;
      }
    }
    return topology_aware_;
  }

  bool topology_aware_;
};

Result<std::vector<BackendPtr>> Create(const VendorSettings& settings) {
  BackendSpec gpu = GpuSpec();
  BackendSpec sgpu = SgpuSpec();
  using Name = std::pair<std::string_view, std::string*>;
  for (const auto& [key, name] :
       {Name{"resourceCountName", &gpu.resources.count}, Name{"resourceVCountName", &sgpu.resources.count},
        Name{"resourceVMemoryName", &sgpu.resources.memory},
        Name{"resourceVCoreName", &sgpu.resources.cores}}) {
    if (auto v = settings.String(key)) *name = *v;
  }
  if (gpu.resources.count.empty() || sgpu.resources.count.empty()) {
    return Error{fmt::format("{}.{}: must not be empty", kSection,
                             gpu.resources.count.empty() ? "resourceCountName" : "resourceVCountName")};
  }
  std::vector<BackendPtr> out;
  out.push_back(std::make_unique<GpuBackend>(std::move(gpu)));
  out.push_back(
      std::make_unique<SgpuBackend>(std::move(sgpu), settings.Bool("sgpuTopologyAware").value_or(false)));
  return out;
}

VendorFlag NoEffect(std::string flag, std::string_view key, bool boolean = false) {
  return VendorFlag{std::move(flag), VendorFlag::Effect::kNoEffect, boolean,
                    fmt::format("no effect: set {}.{}", kSection, key)};
}

}  // namespace

std::uint8_t EncodeClass(AppClass app, Qos qos) {
  return static_cast<std::uint8_t>(static_cast<unsigned>(app) * 8 + static_cast<unsigned>(qos));
}
AppClass AppOf(std::uint8_t pod_class) { return static_cast<AppClass>(std::min(pod_class / 8, 3)); }
Qos QosOf(std::uint8_t pod_class) { return static_cast<Qos>(std::min(pod_class % 8, 4)); }

ClassHolders HoldersOf(const CardClasses& classes) {
  ClassHolders out;
  for (const ClassCount& c : classes) {
    const AppClass app = AppOf(c.pod_class);
    if (app == AppClass::kOnline) out.online += c.pods;
    if (app == AppClass::kOffline) out.offline += c.pods;
  }
  return out;
}

bool AppClassAllows(AppClass app, bool idle, const ClassHolders& holders) {
  if (idle) return true;
  const bool class_card = holders.online > 0 || holders.offline > 0;
  const bool class_pod = app == AppClass::kOnline || app == AppClass::kOffline;
  if (class_card != class_pod) return false;
  return !(holders.online > 0 && app == AppClass::kOffline);
}

bool QosAllows(Qos qos, const CardClasses& classes) {
  for (const ClassCount& c : classes) {
    if (AppOf(c.pod_class) == AppClass::kOnline) continue;
    const Qos held = QosOf(c.pod_class);
    if (held != Qos::kNone && held != qos) return false;
  }
  return true;
}

std::vector<std::size_t> ChooseForOnline(std::span<const ClassHolders> holders, std::size_t want) {
  std::vector<std::size_t> order(holders.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  const auto only_offline = [&](std::size_t i) { return holders[i].online == 0 && holders[i].offline > 0; };
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const bool oa = only_offline(a), ob = only_offline(b);
    if (oa != ob) return ob;
    if (oa) return holders[a].offline < holders[b].offline;
    if (holders[a].online != holders[b].online) return holders[a].online < holders[b].online;
    return holders[a].offline < holders[b].offline;
  });
  order.resize(std::min(order.size(), want));
  return order;
}

std::vector<std::size_t> ChooseByLinkZone(std::span<const std::int32_t> zones, std::size_t want) {
  std::vector<std::vector<std::size_t>> groups;  // by zone, in the order zones first appear
  std::map<std::int32_t, std::size_t> group_of;
  std::vector<std::size_t> unlinked;
  for (std::size_t i = 0; i < zones.size(); ++i) {
    if (zones[i] <= 0) {
      unlinked.push_back(i);
      continue;
    }
    auto [it, added] = group_of.try_emplace(zones[i], groups.size());
    if (added) groups.emplace_back();
    groups[it->second].push_back(i);
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [](const auto& a, const auto& b) { return a.size() < b.size(); });
  for (const auto& g : groups) {
    if (g.size() >= want) return {g.begin(), g.begin() + static_cast<std::ptrdiff_t>(want)};
  }
  std::vector<std::size_t> out;
  for (const auto& g : groups) {
    for (std::size_t i : g) {
      out.push_back(i);
      if (out.size() >= want) return out;
    }
  }
  for (std::size_t i : unlinked) {
    out.push_back(i);
    if (out.size() >= want) return out;
  }
  std::vector<std::size_t> first(std::min(zones.size(), want));
  std::iota(first.begin(), first.end(), std::size_t{0});
  return first;
}

std::int64_t LinkPairScore(std::span<const LinkCard> cards) {
  std::int64_t score = 0;
  for (std::size_t i = 0; i < cards.size(); ++i) {
    for (std::size_t j = i + 1; j < cards.size(); ++j) {
      if (cards[i].id != cards[j].id && cards[i].zone != 0 && cards[i].zone == cards[j].zone) score += 10;
    }
  }
  return score;
}

std::int64_t ExclusiveScore(std::span<const LinkCard> allocated, std::span<const LinkCard> idle) {
  std::vector<LinkCard> rest;
  for (const LinkCard& c : idle) {
    const bool taken =
        std::any_of(allocated.begin(), allocated.end(), [&](const LinkCard& a) { return a.id == c.id; });
    if (!taken) rest.push_back(c);
  }
  const std::int64_t kept = LinkPairScore(allocated);
  const std::int64_t lost = LinkPairScore(idle) - kept - LinkPairScore(rest);
  return 10 * kept - lost;
}

std::int64_t OnlineScore(const ClassHolders& holders) {
  if (holders.offline > 0 && holders.online == 0) return -100 * std::int64_t{holders.offline};
  return -20 * std::int64_t{holders.online} - 2 * std::int64_t{holders.offline};
}

std::int64_t TopologyValue(std::string_view encoded, std::int64_t cards) {
  for (std::string_view entry : Split(encoded, ',')) {
    const auto colon = entry.find(':');
    if (colon == std::string_view::npos) continue;
    auto k = ParseInt64(entry.substr(0, colon), "cards");
    if (!k || *k != cards) continue;
    auto value = ParseInt64(entry.substr(colon + 1), "value");
    return value ? *value : 0;
  }
  return 0;
}

Result<std::string> ParseTopology(std::string_view json_text) {
  constexpr std::string_view kWant = R"(want a JSON object of card count to integer, e.g. {"1":0,"2":110})";
  boost::system::error_code ec;
  json::value root = json::parse(json_text, ec);
  if (ec || !root.is_object()) return Error{fmt::format("not {}", kWant.substr(5))};
  std::map<std::int64_t, std::int64_t> entries;
  for (const auto& kv : root.get_object()) {
    const auto cards = ParseInt64(std::string_view(kv.key()), "card count");
    if (!cards)
      return Error{fmt::format("key \"{}\" is not a card count: {}", std::string_view(kv.key()), kWant)};
    auto value =
        codec::JsonInt(kv.value(), fmt::format("value of \"{}\"", *cards), -kInt32Max - 1, kInt32Max);
    if (!value || kv.value().is_null()) {
      return Error{fmt::format("value of \"{}\" is not an integer: {}", std::string_view(kv.key()), kWant)};
    }
    if (*cards >= 1 && *cards <= kMaxCardsPerNode) entries[*cards] = *value;
  }
  std::vector<std::string> parts;
  for (const auto& [cards, value] : entries) parts.push_back(fmt::format("{}:{}", cards, value));
  return Ok(Join(parts, ","));
}

BackendSpec GpuSpec() {
  BackendSpec s;
  s.vendor = std::string(kGpuVendor);
  s.config_section = std::string(kSection);
  s.display_name = "MetaX GPU";
  s.health = HealthRule::kAlwaysHealthy;  // the capacity gate in Discover
  s.keys.allocated = "hami.io/metax-gpu-devices-allocated";
  s.keys.to_allocate = "hami.io/metax-gpu-devices-to-allocate";
  s.resources.count = "metax-tech.com/gpu";
  return s;
}

BackendSpec SgpuSpec() {
  BackendSpec s;
  s.vendor = std::string(kSgpuVendor);
  s.config_section = std::string(kSection);
  s.display_name = "MetaX sGPU";
  s.health = HealthRule::kAlwaysHealthy;  // a node lists its cards while it has them
  s.keys.register_annotation = "metax-tech.com/node-gpu-devices";
  s.keys.allocated = "hami.io/metax-sgpu-devices-allocated";
  s.keys.to_allocate = "hami.io/metax-sgpu-devices-to-allocate";
  s.keys.node_lock = "hami.io/mutex.lock";
  s.keys.use_uuid = "metax-tech.com/use-gpuuuid";
  s.keys.nouse_uuid = "metax-tech.com/nouse-gpuuuid";
  s.resources = {"metax-tech.com/sgpu", "metax-tech.com/vmemory", "", "metax-tech.com/vcore", "", kMiBPerGiB,
                 false};
  s.fit.vendor_checks_first = true;
  s.fit.vendor_sizes = true;
  s.fit.vendor_score_together = true;
  return s;
}

VendorModule Module() {
  VendorModule module{std::string(kSection), VendorSchema{}, &Create};
  module.schema.fields = {{"resourceCountName", SettingKind::kString},
                          {"resourceVCountName", SettingKind::kString},
                          {"resourceVMemoryName", SettingKind::kString},
                          {"resourceVCoreName", SettingKind::kString},
                          {"sgpuTopologyAware", SettingKind::kBool}};
  module.flags = {NoEffect("metax-name", "resourceCountName"), NoEffect("metax-vcount", "resourceVCountName"),
                  NoEffect("metax-vcore", "resourceVCoreName"),
                  NoEffect("metax-vmemory", "resourceVMemoryName"),
                  NoEffect("sgpu-topology-aware", "sgpuTopologyAware", true)};
  module.demo.nodes = {
      {"metax-c500-1", DemoCards("metax", 4, 1, kGpuMemory, 100, "Metax-GPU"), std::string(kGpuVendor)},
      {"metax-sgpu-1", DemoCards("sgpu", 4, 16, 65536, 100, "Metax-SGPU"), std::string(kSgpuVendor)}};
  module.demo.pods = R"(
- {name: metax-whole, limits: {metax-tech.com/gpu: "1"}}
- name: sgpu-quarter
  limits: {metax-tech.com/sgpu: "1", metax-tech.com/vmemory: "16", metax-tech.com/vcore: "25"}
)";
  return module;
}

}  // namespace hami::backends::metax
