#include "core/fit.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "core/codec/pod_devices.h"
#include "core/keys.h"
#include "core/strings.h"

namespace hami {
namespace {

bool OffersSoftSplit(const NodeEntry& node, const SoftSplitRule& rule) {
  const auto& a = node.node.annotations;
  auto it = a.find(rule.node_annotation);
  return it == a.end() ? rule.offered_by_default : it->second == "true";
}

CardRefusal Refusal(Reason reason, std::int64_t short_by = 0) {
  CardRefusal r;
  r.reason = reason;
  r.short_by = short_by;
  return r;
}

}  // namespace

std::string ReasonCounts::Format(int total) const {
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < n.size(); ++i) {
    if (n[i] > 0 || set[i]) {
      parts.push_back(fmt::format("{}/{} {}", n[i], total, ReasonName(static_cast<Reason>(i))));
    }
  }
  std::sort(parts.begin(), parts.end());
  return Join(parts, ", ");
}

bool PodRequests::Any() const {
  return std::any_of(containers.begin(), containers.end(), [](const auto& c) { return !c.empty(); });
}

std::vector<std::size_t> PodRequests::BackendsAsked() const {
  std::vector<std::size_t> out;
  for (const auto& container : containers) {
    for (const auto& [backend, request] : container) out.push_back(static_cast<std::size_t>(backend));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Result<PodRequests> CollectRequests(const PodView& pod, const Backends& backends) {
  PodRequests out;
  out.num_init = pod.init_containers.size();
  out.containers.resize(pod.ContainerCount());
  for (std::size_t c = 0; c < pod.ContainerCount(); ++c) {
    const ContainerView& ctr = pod.ContainerAt(c);
    for (std::size_t b = 0; b < backends.size(); ++b) {
      auto r = backends.at(b).RequestFor(ctr);
      if (!r) {
        return Error{fmt::format("pod {}: {}container \"{}\": {}", pod.Key(), c < out.num_init ? "init " : "",
                                 ctr.name, r.error().message)};
      }
      if (*r) out.containers[c].emplace_back(static_cast<int>(b), std::move(**r));
    }
  }
  return out;
}

Result<PodContext> MakePodContext(const PodView& pod, const Backends& backends, const QuotaBook& quotas,
                                  std::string_view default_gpu_policy) {
  PodContext ctx;
  ctx.pod = &pod;
  const auto& a = pod.annotations;
  auto policy = a.find(keys::kGpuPolicy);
  ctx.gpu_policy = policy != a.end() ? policy->second : std::string(default_gpu_policy);
  ctx.mutex = PolicyContains(ctx.gpu_policy, kPolicyMutex);
  ctx.topology = PolicyContains(ctx.gpu_policy, kPolicyTopologyAware);
  if (auto w = a.find(keys::kScoringWeights); w != a.end()) {
    auto weights = ParseScoringWeights(w->second);
    if (!weights) return Error{fmt::format("pod {}: {}", pod.Key(), weights.error().message)};
    ctx.weights = *weights;
  }
  ctx.quota_active = quotas.HasLimits(pod.ns);
  for (std::size_t i = 0; i < backends.size(); ++i) {
    const Backend& b = backends.at(i);
    const auto& spec = b.Spec();
    PodContext::Vendor v;
    v.uuids = ReadSelector(a, spec.keys.use_uuid, spec.keys.nouse_uuid);
    if (!spec.keys.use_uuid_alt.empty() || !spec.keys.nouse_uuid_alt.empty())
      v.alt_uuids = ReadSelector(a, spec.keys.use_uuid_alt, spec.keys.nouse_uuid_alt);
    v.types = ReadSelector(a, spec.keys.use_type, spec.keys.nouse_type);
    if (!spec.fit.mode_annotation.empty()) {
      if (auto m = a.find(spec.fit.mode_annotation); m != a.end()) v.mode_filter = m->second;
    }
    if (!spec.fit.numa_bind_annotation.empty()) {
      if (auto n = a.find(spec.fit.numa_bind_annotation); n != a.end()) {
        auto bind = ParseGoBool(n->second, spec.fit.numa_bind_annotation);
        v.numa_bind = bind && *bind;
      }
    }
    if (spec.fit.soft_split) {
      auto m = a.find(spec.fit.soft_split->pod_annotation);
      v.soft_split = m != a.end() && m->second == spec.fit.soft_split->pod_value;
    }
    v.order = DeviceOrder(ctx.gpu_policy, v.numa_bind);
    if (backends.hooks(i).pod_class) v.pod_class = b.PodClass(pod);
    ctx.vendors.push_back(std::move(v));
  }
  return ctx;
}

const NodeEntry& FitEngine::Target(const NodeEntry& node, const PodRequests& reqs) const {
  if (node.pool == nullptr) return node;  // no pool vendor configured, or a pool server: the per-node path
  bool any = false;
  for (const auto& container : reqs.containers) {
    for (const auto& [b, request] : container) {
      // A pod that mixes pool cards with the node's own is fit against the node (no pool there).
      if (!backends_->spec(static_cast<std::size_t>(b)).pool.Active()) return node;
      any = true;
    }
  }
  return any ? *node.pool : node;
}

bool FitEngine::Fit(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& client, PodDevices* out,
                    std::string* reason) {
  const NodeEntry& node = Target(client, reqs);
  return FitFrom(ctx, reqs, node, Base{&node.usage, &node.mig_in_use, &node.classes_in_use, &node.totals},
                 out, reason);
}

bool FitEngine::FitWith(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& client,
                        const UsageOverlay& overlay, PodDevices* out, std::string* reason) {
  const NodeEntry& node = Target(client, reqs);
  // The pool's cards are charged by pods on every client node.
  const bool pool = &node != &client;
  overlay_usage_ = node.usage;
  overlay_mig_ = node.mig_in_use;
  overlay_classes_ = node.classes_in_use;
  overlay_totals_ = node.totals;
  NodeUsage into{overlay_usage_, overlay_mig_, overlay_classes_, overlay_totals_};
  const auto apply = [&](std::span<const PodAllocation* const> pods, int sign) {
    for (const PodAllocation* pod : pods) {
      if (pod != nullptr && (pool || pod->node == node.node.name)) ApplyCharges(node, *pod, sign, into);
    }
  };
  apply(overlay.without, -1);
  apply(overlay.with, +1);
  return FitAgainst(ctx, reqs, node, into, out, reason);
}

bool FitEngine::FitAgainst(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& node,
                           const NodeUsage& usage, PodDevices* out, std::string* reason) {
  return FitFrom(ctx, reqs, node, Base{&usage.usage, &usage.mig, &usage.classes, &usage.totals}, out, reason);
}

int FitEngine::Capacity(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& client, int limit) {
  const NodeEntry& node = Target(client, reqs);
  capacity_usage_.assign(node.usage.begin(), node.usage.end());
  if (node.has_mig) capacity_mig_ = node.mig_in_use;
  int copies = 0;
  // Each copy that fits leaves its app containers' picks in app_usage_ (init containers release theirs):
  // that is the usage the next copy is fit against. Every copy takes at least one slot, so this ends.
  while (copies < limit &&
         FitFrom(ctx, reqs, node, Base{&capacity_usage_, &capacity_mig_, &node.classes_in_use, &node.totals},
                 nullptr, nullptr)) {
    ++copies;
    std::swap(capacity_usage_, app_usage_);
    if (node.has_mig) std::swap(capacity_mig_, app_mig_);
  }
  return copies;
}

bool FitEngine::FitsIdle(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& client) {
  const NodeEntry& node = Target(client, reqs);
  idle_usage_.assign(node.usage.size(), DeviceUsage{});
  idle_mig_.assign(node.mig_in_use.size(), {});
  idle_classes_.assign(node.classes_in_use.size(), {});
  // A vendor closed by a running pod's unreadable allocation opens when that pod leaves.
  ignore_blocks_ = true;
  const bool fits = FitFrom(ctx, reqs, node, Base{&idle_usage_, &idle_mig_, &idle_classes_, &node.totals},
                            nullptr, nullptr);
  ignore_blocks_ = false;
  return fits;
}

bool FitEngine::FitOnto(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& node,
                        std::vector<DeviceUsage>& usage, std::vector<std::vector<MigInUse>>& mig) {
  if (!FitFrom(ctx, reqs, node, Base{&usage, &mig, &node.classes_in_use, &node.totals}, nullptr, nullptr))
    return false;
  // app_usage_ holds only the asked backends' devices: copy those back.
  for (std::size_t b : asked_) {
    const auto [begin, end] = node.vendor_range[b];
    std::copy(app_usage_.begin() + begin, app_usage_.begin() + end, usage.begin() + begin);
  }
  if (node.has_mig) mig = app_mig_;
  return true;
}

bool FitEngine::FitFrom(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& node,
                        const Base& base, PodDevices* out, std::string* reason) {
  if (trace_ != nullptr) trace_->clear();
  if (!node.HasDevices()) {
    if (reason) *reason = std::string(kNodeUnregistered);
    return false;
  }
  NoteAsked(reqs);
  if (!PlaceContainers(ctx, reqs, node, base, reason)) return false;
  ScoreNode(ctx, reqs, node, base);
  if (out != nullptr) WriteDevices(node, reqs.containers.size(), *out);
  return true;
}

[[gnu::always_inline]] inline void FitEngine::NoteAsked(const PodRequests& reqs) {
  // Only the backends the pod asks for are touched per node: a cluster's other vendors cost nothing here.
  asked_.clear();
  for (const auto& container : reqs.containers) {
    for (const auto& [b, request] : container) {
      const auto backend = static_cast<std::size_t>(b);
      if (std::find(asked_.begin(), asked_.end(), backend) == asked_.end()) asked_.push_back(backend);
    }
  }
  allocated_.resize(backends_->size());
  for (std::size_t b : asked_) {
    allocated_[b].resize(reqs.containers.size());
    for (auto& picks : allocated_[b]) picks.clear();
  }
}

[[gnu::always_inline]] inline bool FitEngine::PlaceContainers(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& node,
                                const Base& base, std::string* reason) {
  // Only the asked backends' devices are read (and their usage copied): on a node of several vendors the
  // others' entries stay untouched, never fetched into the cache.
  const auto copy_asked = [&](std::vector<DeviceUsage>& to) {
    to.resize(base.usage->size());
    const DeviceUsage* from = base.usage->data();
    for (std::size_t b : asked_) {
      // A node's handful of counters: a plain loop, no library call per node.
      for (int d = node.vendor_range[b].first; d < node.vendor_range[b].second; ++d)
        to[static_cast<std::size_t>(d)] = from[d];
    }
  };
  copy_asked(app_usage_);
  if (node.has_mig) app_mig_ = *base.mig;
  for (std::size_t c = 0; c < reqs.containers.size(); ++c) {
    const auto& requests = reqs.containers[c];
    if (requests.empty()) continue;
    const bool is_init = c < reqs.num_init;
    // Init containers run one at a time before the app containers: each is fit against the current usage
    // alone.
    if (is_init) {
      copy_asked(init_usage_);
      if (node.has_mig) init_mig_ = *base.mig;
    }
    auto& usage = is_init ? init_usage_ : app_usage_;
    auto& mig = is_init ? init_mig_ : app_mig_;
    for (const auto& [b, request] : requests) {
      const auto backend = static_cast<std::size_t>(b);
      if (!ignore_blocks_ && !node.blocked.empty() && !node.blocked[backend].empty()) {
        if (reason) *reason = node.blocked[backend];
        return false;
      }
      if (!FitRequest(ctx, node, base, b, request, c, usage, mig, reason)) return false;
      for (const Pick& p : allocated_[backend][c]) {
        auto& u = usage[static_cast<std::size_t>(p.device)];
        u.used += 1;
        u.mem += p.mem;
        u.cores += p.cores;
        if (p.mig)
          mig[static_cast<std::size_t>(p.device)].push_back(MigInUse{p.mig->profile, p.mig->placement});
      }
    }
  }
  return true;
}

[[gnu::always_inline]] inline void FitEngine::ScoreNode(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& node,
                          const Base& base) {
  // The chosen cards' own score (interconnect groups kept together) counts for either policy: spread,
  // which takes the lowest score, has it subtracted (docs/DECISIONS.md "Interconnect groups"). A vendor's
  // packing score counts as the node's usage does (docs/DECISIONS.md "Packing scores").
  double together = 0;
  double packing = 0;
  for (std::size_t b : asked_) {
    if (!backends_->hooks(b).allocation_score) continue;
    (backends_->spec(b).fit.vendor_score_together ? together : packing) +=
        VendorScore(ctx, reqs, node, b, base);
  }
  score_ = base.totals->Score() + (ctx.spread ? -together : together) + packing;
}

void FitEngine::WriteDevices(const NodeEntry& node, std::size_t containers, PodDevices& out) const {
  out.clear();
  for (std::size_t b : asked_) {
    bool any = false;
    for (const auto& picks : allocated_[b]) any = any || !picks.empty();
    if (!any) continue;
    PodVendorDevices vendor_devices(containers);
    for (std::size_t c = 0; c < containers; ++c) {
      for (const Pick& p : allocated_[b][c]) {
        const DeviceInfo& d = node.devices[static_cast<std::size_t>(p.device)];
        vendor_devices[c].push_back(
            ContainerDevice{d.index, d.id, backends_->at(b).Vendor(), p.mem, p.cores, p.mig});
      }
    }
    out[backends_->at(b).Vendor()] = std::move(vendor_devices);
  }
}

// One request's pass over its vendor's cards: what every card check reads, and what the pass found.
struct FitEngine::Scan {
  const PodContext& ctx;
  const PodContext::Vendor& vctx;
  const Backend& vendor;
  const BackendSpec& spec;
  const BackendHooks& hooks;
  const NodeEntry& node;
  const Base& base;
  int backend;
  const DeviceRequest& request;
  std::size_t container;
  std::vector<DeviceUsage>& usage;
  std::vector<std::vector<MigInUse>>& mig;
  ContainerPicks& picks;
  int total = 0;  // the vendor's cards on the node
  // Every usable card is collected for the vendor to choose among (Backend::ChoosesCards).
  bool collect_all = false;
  Cores cores_req{};  // the request's cores, at most a whole card
  CardCheckView view{};  // what the vendor's hooks see of the node
  ReasonCounts reasons{};
};

[[gnu::always_inline]] inline bool FitEngine::RefuseRequest(const PodContext& ctx, const NodeEntry& node,
                                                            int backend, const DeviceRequest& request,
                                                            std::string* reason) const {
  const BackendSpec& spec = backends_->spec(static_cast<std::size_t>(backend));
  const PodContext::Vendor& vctx = ctx.vendors[static_cast<std::size_t>(backend)];
  const auto [begin, end] = node.vendor_range[static_cast<std::size_t>(backend)];
  bool mig_request = false;
  if (spec.fit.mig && (!vctx.mode_filter || vctx.mode_filter->find("mig") != std::string::npos)) {
    for (int d = begin; d < end && !mig_request; ++d) mig_request = node.caps[static_cast<std::size_t>(d)].mig;
  }
  // A MIG card hosts several instances of one request: the count of cards bounds nothing then.
  if (!mig_request && request.count > end - begin) {
    if (reason) *reason = std::string(kNodeInsufficientDevice);
    return true;
  }
  if (vctx.soft_split && !OffersSoftSplit(node, *spec.fit.soft_split)) {
    ReasonCounts mode;
    mode.Add(Reason::kModeNotFit);
    if (reason) *reason = mode.Format(end - begin);
    return true;
  }
  return false;
}

[[gnu::always_inline]] inline void FitEngine::OrderCards(const PodContext& ctx, const NodeEntry& node, int backend,
                           const DeviceRequest& request, const std::vector<DeviceUsage>& usage) {
  const auto [begin, end] = node.vendor_range[static_cast<std::size_t>(backend)];
  items_.clear();
  for (int d = begin; d < end; ++d) {
    const auto i = static_cast<std::size_t>(d);
    const DeviceCaps& dev = node.caps[i];
    items_.push_back(DeviceOrder::Item{d, DeviceScore(dev, usage[i], &request, ctx.weights), dev.numa,
                                       dev.index, usage[i].used});
  }
  ctx.vendors[static_cast<std::size_t>(backend)].order.Sort(items_);
}

[[gnu::always_inline]] inline bool FitEngine::FitRequest(const PodContext& ctx, const NodeEntry& node, const Base& base, int backend,
                           const DeviceRequest& request, std::size_t container, std::vector<DeviceUsage>& usage,
                           std::vector<std::vector<MigInUse>>& mig, std::string* reason) {
  if (RefuseRequest(ctx, node, backend, request, reason)) return false;
  OrderCards(ctx, node, backend, request, usage);
  const auto b = static_cast<std::size_t>(backend);
  const Backend& vendor = backends_->at(b);
  Scan scan{ctx, ctx.vendors[b], vendor, backends_->spec(b), backends_->hooks(b), node, base, backend, request,
            container, usage, mig, allocated_[b][container]};
  const auto [begin, end] = node.vendor_range[b];
  scan.total = end - begin;
  // The node's DeviceInfo entries are off the candidate's hot cache lines: ChoosesCards sees the request
  // and the policy only.
  if (scan.vctx.chooses_for != request.count) {
    scan.vctx.chooses =
        scan.hooks.chooses_cards && vendor.ChoosesCards(ChoiceView{&request, {}, ctx.topology, 0, {}});
    scan.vctx.chooses_for = request.count;
  }
  scan.collect_all = scan.vctx.chooses;
  scan.cores_req = std::min(request.cores, 100_cores);
  if (scan.hooks.refuse_card || scan.hooks.charged) {
    const auto first = static_cast<std::size_t>(begin);
    const auto n = static_cast<std::size_t>(scan.total);
    scan.view = CardCheckView{std::span<const DeviceInfo>(node.devices).subspan(first, n),
                              std::span<const DeviceUsage>(usage).subspan(first, n), ctx.mutex, {}, 0, false};
    if (scan.hooks.pod_class) {
      scan.view.classes = std::span<const CardClasses>(*base.classes).subspan(
          static_cast<std::size_t>(begin), static_cast<std::size_t>(scan.total));
      scan.view.pod_class = scan.vctx.pod_class;
    }
  }
  ContainerPicks& picks = scan.picks;
  picks.clear();
  const std::int32_t origin = request.count;
  std::int32_t remaining = origin;
  std::int64_t prev_numa = std::numeric_limits<std::int64_t>::min();
  for (int i = static_cast<int>(items_.size()) - 1; i >= 0; --i) {
    const auto d = static_cast<std::size_t>(items_[static_cast<std::size_t>(i)].device);
    if (auto refused = FirstChecks(scan, d)) {
      Refused(scan, *refused);
      continue;
    }
    // A NUMA-bound request starts over at each NUMA node: the cards taken so far were on another one.
    if (scan.vctx.numa_bind && node.caps[d].numa != prev_numa) {
      if (remaining != origin) scan.reasons.Add(Reason::kNumaNotFit, static_cast<int>(picks.size()));
      remaining = origin;
      prev_numa = node.caps[d].numa;
      picks.clear();
    }
    Pick pick{static_cast<int>(d), MiB(0), Cores(0), std::nullopt};
    if (auto refused = CardChecks(scan, d, pick)) {
      Refused(scan, *refused);
      continue;
    }
    const bool mig_instance = pick.mig.has_value();
    if (remaining > 0) {
      if (!scan.collect_all) --remaining;
      picks.push_back(std::move(pick));
    }
    if (remaining == 0 && !scan.collect_all) return true;
    if (mig_instance) ++i;  // a MIG GPU may host another instance of the same request
  }
  return Conclude(scan, reason);
}

void FitEngine::Refused(Scan& scan, const CardRefusal& refusal) {
  scan.reasons.Add(refusal.reason);
  if (trace_ == nullptr) return;
  // The first refusal of each card for this request (a MIG card may be tried again).
  for (const CardRefusal& r : *trace_) {
    if (r.container == scan.container && r.device == refusal.device) return;
  }
  CardRefusal traced = refusal;
  traced.container = scan.container;
  traced.backend = scan.backend;
  trace_->push_back(traced);
}

// The checks before a NUMA-bound request's grouping: the vendor's own first (FitRules::vendor_checks_first),
// health, cordon, the pod's type and mode selectors.
[[gnu::always_inline]] inline std::optional<CardRefusal> FitEngine::FirstChecks(Scan& scan, std::size_t d) const {
  const DeviceCaps& dev = scan.node.caps[d];
  const auto refuse = [&](Reason r) {
    CardRefusal out = Refusal(r);
    out.device = static_cast<int>(d);
    return std::optional<CardRefusal>(out);
  };
  if (scan.spec.fit.vendor_checks_first) {
    scan.view.before_shared = true;
    auto refused = scan.vendor.RefuseCard(scan.node.devices[d], scan.usage[d], scan.request, scan.view);
    scan.view.before_shared = false;
    if (refused) return refuse(*refused);
  }
  if (!dev.health) return refuse(Reason::kCardNotHealth);
  if (scan.spec.fit.cordon && dev.cordoned) return refuse(Reason::kCardCordoned);
  // Selectors need the device's strings; only read them when the pod has selectors.
  const PodContext::Vendor& vctx = scan.vctx;
  if ((vctx.types.active() && !SelectorAllowsType(vctx.types, scan.node.devices[d].type)) ||
      (vctx.mode_filter && vctx.mode_filter->find(scan.node.devices[d].mode) == std::string::npos))
    return refuse(Reason::kCardTypeMismatch);
  return std::nullopt;
}

// The checks after the grouping, in HAMi's order: UUID selectors, the split count, the mutex policy, the
// vendor's own check, the pick's size (the vendor's charge), the quota, the card's room, a MIG instance,
// the same card across containers.
[[gnu::always_inline]] inline std::optional<CardRefusal> FitEngine::CardChecks(Scan& scan, std::size_t d, Pick& pick) const {
  const DeviceCaps& dev = scan.node.caps[d];
  const DeviceUsage& u = scan.usage[d];
  const PodContext::Vendor& vctx = scan.vctx;
  const auto refuse = [&](Reason r, std::int64_t short_by = 0) {
    CardRefusal out = Refusal(r, short_by);
    out.device = static_cast<int>(d);
    return std::optional<CardRefusal>(out);
  };
  // Selectors need the device's strings (off the candidate's hot cache lines): only read with selectors.
  if ((vctx.uuids.active() && !SelectorAllowsUuid(vctx.uuids, scan.node.devices[d].id)) ||
      (vctx.alt_uuids.active() && !SelectorAllowsUuid(vctx.alt_uuids, scan.node.devices[d].id)))
    return refuse(Reason::kCardUuidMismatch);
  if (scan.spec.fit.split_count_limits && dev.count <= u.used)
    return refuse(Reason::kCardTimeSlicingExhausted, u.used - dev.count + 1);
  if (scan.ctx.mutex && u.used > 0) return refuse(Reason::kExclusiveDeviceAllocateConflict);
  if (scan.hooks.refuse_card) {
    if (auto refused = scan.vendor.RefuseCard(scan.node.devices[d], u, scan.request, scan.view))
      return refuse(*refused);
  }
  if (auto refused = SizeChecks(scan, d, pick)) return refused;
  if (scan.spec.fit.same_device_across_containers) {
    for (std::size_t c = 0; c < scan.container; ++c) {
      for (const Pick& earlier : allocated_[static_cast<std::size_t>(scan.backend)][c]) {
        if (earlier.device != pick.device) return refuse(Reason::kCardNotFoundCustomFilterRule);
      }
    }
  }
  return std::nullopt;
}

namespace {

// The shared checks of a card's free memory and cores for a request of `memreq` and `cores` (out of
// `core_total`), in upstream's order; nullopt when it has room.
std::optional<CardRefusal> RefuseSize(const DeviceCaps& dev, const DeviceUsage& u, MiB memreq, Cores cores,
                                      std::int64_t core_total) {
  if (const MiB free = MiB(dev.devmem) - u.mem; free < memreq)
    return Refusal(Reason::kCardInsufficientMemory, (memreq - free).value());
  if (const Cores free = Cores(core_total) - u.cores; free < cores)
    return Refusal(Reason::kCardInsufficientCore, (cores - free).value());
  if (core_total == 100 && cores == 100_cores && u.used > 0)
    return Refusal(Reason::kExclusiveDeviceAllocateConflict);
  if (core_total != 0 && u.cores.value() == core_total && cores.value() == 0)
    return Refusal(Reason::kCardComputeUnitsExhausted);
  return std::nullopt;
}

}  // namespace

// What the card would be charged, and whether that fits: the quota, the card's room, a MIG instance.
[[gnu::always_inline]] inline std::optional<CardRefusal> FitEngine::SizeChecks(Scan& scan, std::size_t d, Pick& pick) const {
  const DeviceCaps& dev = scan.node.caps[d];
  const DeviceUsage& u = scan.usage[d];
  const DeviceRequest& request = scan.request;
  const auto refuse = [&](CardRefusal r) {
    r.device = static_cast<int>(d);
    return std::optional<CardRefusal>(r);
  };
  // Percent of a card counted in its compute units: that share of this card's units, at least one.
  Cores card_cores = scan.cores_req;
  if (scan.spec.resources.cores_share_of_units && scan.cores_req.value() > 0) {
    if (dev.devcore <= 0) return refuse(Refusal(Reason::kCardInsufficientCore, scan.cores_req.value()));
    card_cores = Cores(std::clamp<std::int64_t>(dev.devcore * scan.cores_req.value() / 100, 1, dev.devcore));
  }
  MiB memreq = request.memory.value() > 0 ? request.memory : MiB(0);
  if (request.mem_percent != kPercentUnset && request.memory.value() == 0)
    memreq = MiB(dev.devmem * request.mem_percent / 100);
  pick.mem = memreq;
  pick.cores = card_cores;
  if (scan.hooks.charged) {
    const CardCharge charged =
        scan.vendor.Charged(scan.node.devices[d], u, request, CardCharge{pick.mem, pick.cores}, scan.view);
    pick.mem = charged.mem;
    pick.cores = charged.cores;
  }
  if (scan.spec.fit.quota_in_fit && scan.ctx.quota_active && !QuotaAllows(scan, pick))
    return refuse(Refusal(Reason::kResourceQuotaNotFit));
  // A soft-split pod counts a card's cores in percent, whatever number of cores the plugin publishes.
  const std::int64_t core_total = scan.vctx.soft_split ? 100 : dev.devcore;
  if (!scan.spec.fit.vendor_sizes) {
    if (auto refused = RefuseSize(dev, u, memreq, card_cores, core_total)) return refuse(*refused);
  }
  if (scan.spec.fit.mig && dev.mig) {
    static const std::vector<MigInUse> kNone;
    const auto& in_use = scan.node.has_mig ? scan.mig[d] : kNone;
    auto slot = ChooseMigSlot(scan.node, pick.device, memreq, in_use, scan.picks);
    if (!slot) return refuse(Refusal(Reason::kCardMigTopologyInfeasible));
    for (const auto& p : scan.node.devices[d].mig_profiles) {
      if (p.name == slot->profile) {
        pick.mem = MiB(p.memory_mib);
        pick.cores = Cores(p.core);
      }
    }
    pick.mig = std::move(slot);
  }
  return std::nullopt;
}

bool FitEngine::Conclude(Scan& scan, std::string* reason) {
  ContainerPicks& picks = scan.picks;
  const std::int32_t origin = scan.request.count;
  if (scan.collect_all) {
    const CardChoice choice = ChooseByVendor(scan);
    const auto chosen = static_cast<std::int32_t>(choice.chosen.size());
    if (chosen == origin || (scan.spec.fit.choice_beyond_count && chosen > origin)) return true;
    if (choice.refusal) {
      scan.reasons.Set(*choice.refusal, choice.refused);
      if (reason) *reason = scan.reasons.Format(choice.over_request ? origin : scan.total);
      picks.clear();
      return false;
    }
  }
  if (!picks.empty())
    scan.reasons.Set(Reason::kAllocatedCardsInsufficientRequest, static_cast<int>(picks.size()));
  if (reason) *reason = scan.reasons.Format(scan.total);
  picks.clear();
  return false;
}

bool FitEngine::QuotaAllows(const Scan& scan, const Pick& candidate) const {
  const std::string& vendor = scan.vendor.Vendor();
  const auto& allocated = allocated_[static_cast<std::size_t>(scan.backend)];
  PodVendorDevices hypothetical(scan.container + 1);
  const auto add = [&](std::size_t c, const Pick& p) {
    hypothetical[c].push_back(ContainerDevice{0, scan.node.devices[static_cast<std::size_t>(p.device)].id,
                                              vendor, p.mem, p.cores, std::nullopt});
  };
  for (std::size_t c = 0; c < scan.container; ++c) {
    for (const Pick& p : allocated[c]) add(c, p);
  }
  for (const Pick& p : scan.picks) add(scan.container, p);
  add(scan.container, candidate);
  PodDevices pd;
  pd[vendor] = std::move(hypothetical);
  MiB mem;
  Cores cores;
  for (const auto& charge : codec::CollapseDevices(pd, scan.ctx.pod->init_containers.size())) {
    mem += charge.mem;
    cores += charge.cores;
  }
  return quotas_->Fits(scan.ctx.pod->ns, vendor, mem, cores);
}

std::optional<MigSlot> FitEngine::ChooseMigSlot(const NodeEntry& node, int device, MiB memreq,
                                                 const std::vector<MigInUse>& in_use,
                                                 const ContainerPicks& tmp) const {
  const DeviceInfo& dev = node.devices[static_cast<std::size_t>(device)];
  const Backend& backend =
      backends_->at(static_cast<std::size_t>(node.backend_of[static_cast<std::size_t>(device)]));
  std::vector<const MigProfile*> profiles;
  for (const auto& p : dev.mig_profiles) {
    if (p.memory_mib >= memreq.value() && backend.MigProfileAllowed(dev.type, p.name)) profiles.push_back(&p);
  }
  std::stable_sort(profiles.begin(), profiles.end(), [](const MigProfile* a, const MigProfile* b) {
    if (a->memory_mib != b->memory_mib) return a->memory_mib < b->memory_mib;
    return a->slice_count < b->slice_count;
  });
  const auto overlaps = [](const MigPlacement& a, const MigPlacement& b) {
    return a.start < b.start + b.size && b.start < a.start + a.size;
  };
  for (const MigProfile* p : profiles) {
    std::vector<MigPlacement> order = p->placements;
    const bool high_first = p->name.starts_with("1g.") || p->name.starts_with("3g.");
    std::stable_sort(order.begin(), order.end(), [&](const MigPlacement& a, const MigPlacement& b) {
      return high_first ? a.start > b.start : a.start < b.start;
    });
    for (const auto& pl : order) {
      bool free = true;
      for (const auto& used : in_use) free = free && !overlaps(pl, used.placement);
      for (const Pick& t : tmp) {
        if (t.device == device && t.mig) free = free && !overlaps(pl, t.mig->placement);
      }
      if (free) return MigSlot{p->name, pl};
    }
  }
  return std::nullopt;
}

CardChoice FitEngine::ChooseByVendor(const Scan& scan) {
  ContainerPicks& picks = scan.picks;
  candidates_.clear();
  candidate_classes_.clear();
  const auto [begin, end] = scan.node.vendor_range[static_cast<std::size_t>(scan.backend)];
  ChoiceView view{&scan.request,
                  std::span<const DeviceInfo>(scan.node.devices)
                      .subspan(static_cast<std::size_t>(begin), static_cast<std::size_t>(end - begin)),
                  scan.ctx.topology,
                  0,
                  {}};
  for (const Pick& p : picks) {
    candidates_.push_back(&scan.node.devices[static_cast<std::size_t>(p.device)]);
    if (scan.hooks.pod_class)
      candidate_classes_.push_back(&(*scan.base.classes)[static_cast<std::size_t>(p.device)]);
  }
  if (scan.hooks.pod_class) {
    view.pod_class = scan.vctx.pod_class;
    view.classes = candidate_classes_;
  }
  CardChoice choice = scan.vendor.ChooseCards(candidates_, scan.request.count, view);
  const auto chosen = static_cast<std::int32_t>(choice.chosen.size());
  if (chosen < scan.request.count || (chosen > scan.request.count && !scan.spec.fit.choice_beyond_count))
    return choice;
  ContainerPicks taken;
  taken.reserve(choice.chosen.size());
  for (std::size_t i : choice.chosen) {
    // A backend's mistake (a position past the end or twice) refuses the node: never a read past the
    // candidates, never a card given twice.
    if (i >= picks.size() ||
        std::any_of(taken.begin(), taken.end(), [&](const Pick& p) { return p.device == picks[i].device; }))
      return CardChoice{{}, Reason::kNumaNotFit, 1, false};
    taken.push_back(picks[i]);
  }
  picks = std::move(taken);
  return choice;
}

double FitEngine::VendorScore(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& node,
                              std::size_t backend, const Base& base) {
  const auto [begin, end] = node.vendor_range[backend];
  chosen_.clear();
  const std::size_t containers = allocated_[backend].size();
  if (chosen_per_container_.size() < containers) chosen_per_container_.resize(containers);
  for (std::size_t c = 0; c < containers; ++c) {
    chosen_per_container_[c].clear();
    for (const Pick& p : allocated_[backend][c]) {
      chosen_.push_back(p.device - begin);
      chosen_per_container_[c].push_back(p.device - begin);
    }
  }
  std::sort(chosen_.begin(), chosen_.end());
  chosen_.erase(std::unique(chosen_.begin(), chosen_.end()), chosen_.end());
  const std::span<const DeviceInfo> all(node.devices);
  const auto first = static_cast<std::size_t>(begin);
  const auto n = static_cast<std::size_t>(end - begin);
  requests_.assign(containers, nullptr);
  for (std::size_t c = 0; c < containers && c < reqs.containers.size(); ++c) {
    for (const auto& [b, request] : reqs.containers[c]) {
      if (static_cast<std::size_t>(b) == backend) requests_[c] = &request;
    }
  }
  AllocationView view{all,
                      all.subspan(first, n),
                      std::span<const DeviceUsage>(*base.usage).subspan(first, n),
                      chosen_,
                      std::span<const std::vector<int>>(chosen_per_container_).first(containers),
                      requests_,
                      ctx.pod,
                      ctx.spread,
                      0,
                      {}};
  if (backends_->hooks(backend).pod_class) {
    view.pod_class = ctx.vendors[backend].pod_class;
    view.classes_before = std::span<const CardClasses>(*base.classes).subspan(first, n);
  }
  return backends_->at(backend).AllocationScore(view);
}

}  // namespace hami
