#include "core/fit.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>

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

}  // namespace

std::string_view ReasonName(Reason r) {
  switch (r) {
    case Reason::kAllocatedCardsInsufficientRequest:
      return "AllocatedCardsInsufficientRequest";
    case Reason::kCardAppClassMismatch:
      return "CardAppClassMismatch";
    case Reason::kCardComputeUnitsExhausted:
      return "CardComputeUnitsExhausted";
    case Reason::kCardCordoned:
      return "CardCordoned";
    case Reason::kCardInsufficientCore:
      return "CardInsufficientCore";
    case Reason::kCardInsufficientMemory:
      return "CardInsufficientMemory";
    case Reason::kCardMigTopologyInfeasible:
      return "CardMigTopologyInfeasible";
    case Reason::kCardNotFoundCustomFilterRule:
      return "CardNotFoundCustomFilterRule";
    case Reason::kCardNotHealth:
      return "CardNotHealth";
    case Reason::kCardQosPolicyMismatch:
      return "CardQosPolicyMismatch";
    case Reason::kCardSizeMismatch:
      return "CardSizeMismatch";
    case Reason::kCardTimeSlicingExhausted:
      return "CardTimeSlicingExhausted";
    case Reason::kCardTypeMismatch:
      return "CardTypeMismatch";
    case Reason::kCardUnhealthy:
      return "CardUnhealthy";
    case Reason::kCardUuidMismatch:
      return "CardUuidMismatch";
    case Reason::kExclusiveDeviceAllocateConflict:
      return "ExclusiveDeviceAllocateConflict";
    case Reason::kModeNotFit:
      return "ModeNotFit";
    case Reason::kNumaNotFit:
      return "NumaNotFit";
    case Reason::kResourceQuotaNotFit:
      return "ResourceQuotaNotFit";
    case Reason::kCount:
      break;
  }
  return "Unknown";
}

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
  for (const auto& b : backends) {
    const auto& spec = b->Spec();
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
    if (spec.fit.pod_classes) v.pod_class = b->PodClass(pod);
    ctx.vendors.push_back(std::move(v));
  }
  return ctx;
}

bool NodeFitter::Fit(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& node, PodDevices* out,
                     std::string* reason) {
  return FitFrom(ctx, reqs, node, node.usage, node.mig_in_use, out, reason);
}

int NodeFitter::Capacity(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& node, int limit) {
  capacity_usage_.assign(node.usage.begin(), node.usage.end());
  if (node.has_mig) capacity_mig_ = node.mig_in_use;
  int copies = 0;
  // Each copy that fits leaves its app containers' picks in app_usage_ (init containers release theirs):
  // that is the usage the next copy is fit against. Every copy takes at least one slot, so this ends.
  while (copies < limit && FitFrom(ctx, reqs, node, capacity_usage_, capacity_mig_, nullptr, nullptr)) {
    ++copies;
    std::swap(capacity_usage_, app_usage_);
    if (node.has_mig) std::swap(capacity_mig_, app_mig_);
  }
  return copies;
}

bool NodeFitter::FitsIdle(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& node) {
  idle_usage_.assign(node.usage.size(), DeviceUsage{});
  idle_mig_.assign(node.mig_in_use.size(), {});
  // A vendor closed by a running pod's unreadable allocation opens when that pod leaves.
  ignore_blocks_ = true;
  const bool fits = FitFrom(ctx, reqs, node, idle_usage_, idle_mig_, nullptr, nullptr);
  ignore_blocks_ = false;
  return fits;
}

bool NodeFitter::FitOnto(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& node,
                         std::vector<DeviceUsage>& usage, std::vector<std::vector<MigInUse>>& mig) {
  if (!FitFrom(ctx, reqs, node, usage, mig, nullptr, nullptr)) return false;
  // app_usage_ holds only the asked backends' devices: copy those back.
  for (std::size_t b : asked_) {
    const auto [begin, end] = node.vendor_range[b];
    std::copy(app_usage_.begin() + begin, app_usage_.begin() + end, usage.begin() + begin);
  }
  if (node.has_mig) mig = app_mig_;
  return true;
}

bool NodeFitter::FitFrom(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& node,
                         const std::vector<DeviceUsage>& base, const std::vector<std::vector<MigInUse>>& base_mig,
                         PodDevices* out, std::string* reason) {
  if (!node.HasDevices()) {
    if (reason) *reason = std::string(kNodeUnregistered);
    return false;
  }
  const std::size_t nc = reqs.containers.size();
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
    allocated_[b].resize(nc);
    for (auto& picks : allocated_[b]) picks.clear();
  }
  // Only the asked backends' devices are read (and their usage copied): on a node of several vendors the
  // others' entries stay untouched, never fetched into the cache.
  const auto copy_asked = [&](std::vector<DeviceUsage>& to) {
    to.resize(base.size());
    for (std::size_t b : asked_) {
      const auto [begin, end] = node.vendor_range[b];
      std::copy(base.begin() + begin, base.begin() + end, to.begin() + begin);
    }
  };
  copy_asked(app_usage_);
  if (node.has_mig) app_mig_ = base_mig;
  for (std::size_t c = 0; c < nc; ++c) {
    const auto& requests = reqs.containers[c];
    if (requests.empty()) continue;
    const bool is_init = c < reqs.num_init;
    // Init containers run one at a time before the app containers: each is fit against the current usage
    // alone.
    if (is_init) {
      copy_asked(init_usage_);
      if (node.has_mig) init_mig_ = base_mig;
    }
    auto& usage = is_init ? init_usage_ : app_usage_;
    auto& mig = is_init ? init_mig_ : app_mig_;
    for (const auto& [b, request] : requests) {
      if (!ignore_blocks_ && !node.blocked.empty() && !node.blocked[static_cast<std::size_t>(b)].empty()) {
        if (reason) *reason = node.blocked[static_cast<std::size_t>(b)];
        return false;
      }
      ContainerPicks& picks = allocated_[static_cast<std::size_t>(b)][c];
      if (!FitRequest(ctx, node, b, request, c, allocated_, usage, mig, picks, reason)) return false;
      for (const Pick& p : picks) {
        auto& u = usage[static_cast<std::size_t>(p.device)];
        u.used += 1;
        u.mem += p.mem;
        u.cores += p.cores;
        if (p.mig)
          mig[static_cast<std::size_t>(p.device)].push_back(MigInUse{p.mig->profile, p.mig->placement});
      }
    }
  }
  allocation_score_ = 0;
  packing_score_ = 0;
  for (std::size_t b : asked_) {
    const FitRules& rules = backends_->at(b).Spec().fit;
    if (rules.vendor_score) {
      (rules.vendor_score_together ? allocation_score_ : packing_score_) +=
          VendorScore(ctx, reqs, node, b, base);
    }
  }
  if (out != nullptr) {
    out->clear();
    for (std::size_t b : asked_) {
      bool any = false;
      for (const auto& picks : allocated_[b]) any = any || !picks.empty();
      if (!any) continue;
      PodVendorDevices vendor_devices(nc);
      for (std::size_t c = 0; c < nc; ++c) {
        for (const Pick& p : allocated_[b][c]) {
          const DeviceInfo& d = node.devices[static_cast<std::size_t>(p.device)];
          vendor_devices[c].push_back(
              ContainerDevice{d.index, d.id, backends_->at(b).Vendor(), p.mem, p.cores, p.mig});
        }
      }
      (*out)[backends_->at(b).Vendor()] = std::move(vendor_devices);
    }
  }
  return true;
}

namespace {

// The shared checks of a card's free memory and cores for a request of `memreq` and `cores` (out of
// `core_total`), in upstream's order; nullopt when it has room.
std::optional<Reason> RefuseSize(const DeviceCaps& dev, const DeviceUsage& u, MiB memreq, Cores cores,
                                 std::int64_t core_total) {
  if (MiB(dev.devmem) - u.mem < memreq) return Reason::kCardInsufficientMemory;
  if (Cores(core_total) - u.cores < cores) return Reason::kCardInsufficientCore;
  if (core_total == 100 && cores == 100_cores && u.used > 0) return Reason::kExclusiveDeviceAllocateConflict;
  if (core_total != 0 && u.cores.value() == core_total && cores.value() == 0)
    return Reason::kCardComputeUnitsExhausted;
  return std::nullopt;
}

}  // namespace

bool NodeFitter::FitRequest(const PodContext& ctx, const NodeEntry& node, int backend,
                            const DeviceRequest& request, std::size_t container,
                            const std::vector<std::vector<ContainerPicks>>& allocated,
                            std::vector<DeviceUsage>& usage, std::vector<std::vector<MigInUse>>& mig,
                            ContainerPicks& picks, std::string* reason) {
  const BackendSpec& spec = backends_->at(static_cast<std::size_t>(backend)).Spec();
  const PodContext::Vendor& vctx = ctx.vendors[static_cast<std::size_t>(backend)];
  const auto [begin, end] = node.vendor_range[static_cast<std::size_t>(backend)];
  const int total = end - begin;

  bool mig_request = false;
  if (spec.fit.mig && (!vctx.mode_filter || vctx.mode_filter->find("mig") != std::string::npos)) {
    for (int d = begin; d < end && !mig_request; ++d)
      mig_request = node.caps[static_cast<std::size_t>(d)].mig;
  }
  if (!mig_request && request.count > total) {
    if (reason) *reason = std::string(kNodeInsufficientDevice);
    return false;
  }
  if (vctx.soft_split && !OffersSoftSplit(node, *spec.fit.soft_split)) {
    ReasonCounts mode;
    mode.Add(Reason::kModeNotFit);
    if (reason) *reason = mode.Format(total);
    return false;
  }

  items_.clear();
  for (int d = begin; d < end; ++d) {
    const auto i = static_cast<std::size_t>(d);
    const DeviceCaps& dev = node.caps[i];
    items_.push_back(DeviceOrder::Item{d, DeviceScore(dev, usage[i], &request, ctx.weights), dev.numa,
                                       dev.index, usage[i].used});
  }
  vctx.order.Sort(items_);

  ReasonCounts reasons;
  const std::int32_t origin = request.count;
  // Whether every candidate is collected first and the devices chosen among them afterwards.
  const bool by_topology = ctx.topology && spec.fit.topology;
  const bool by_modules = spec.fit.multi_device == MultiDevice::kModulePairs && origin > 1;
  const bool by_vendor = spec.fit.multi_device == MultiDevice::kVendor;
  bool by_network = false;
  if (spec.fit.multi_device == MultiDevice::kNetworkGroups && origin > 1) {
    by_network = true;
    for (int d = begin; d < end && by_network; ++d) {
      by_network = node.devices[static_cast<std::size_t>(d)].network.has_value();
    }
  }
  const bool collect_all = by_topology || by_modules || by_network || by_vendor;
  std::int32_t remaining = origin;
  std::int64_t prev_numa = std::numeric_limits<std::int64_t>::min();
  Cores cores_req = request.cores;
  picks.clear();
  bool done = false;
  // What the vendor's own checks and charges see of the node (FitRules::vendor_card_check, vendor_charge).
  const Backend& vendor = backends_->at(static_cast<std::size_t>(backend));
  CardCheckView view{{}, {}, ctx.mutex, {}, 0, false};
  if (spec.fit.vendor_card_check || spec.fit.vendor_charge) {
    const auto first = static_cast<std::size_t>(begin);
    const auto n = static_cast<std::size_t>(total);
    view.cards = std::span<const DeviceInfo>(node.devices).subspan(first, n);
    view.used = std::span<const DeviceUsage>(usage).subspan(first, n);
    if (spec.fit.pod_classes) {
      view.classes = std::span<const CardClasses>(node.classes_in_use).subspan(first, n);
      view.pod_class = vctx.pod_class;
    }
  }

  for (int i = static_cast<int>(items_.size()) - 1; i >= 0 && !done; --i) {
    const int d = items_[static_cast<std::size_t>(i)].device;
    const auto di = static_cast<std::size_t>(d);
    const DeviceCaps& dev = node.caps[di];
    const DeviceUsage& u = usage[di];
    if (spec.fit.vendor_checks_first) {
      view.before_shared = true;
      if (auto refused = vendor.RefuseCard(node.devices[di], u, request, view)) {
        reasons.Add(*refused);
        continue;
      }
      view.before_shared = false;
    }
    if (!dev.health) {
      reasons.Add(Reason::kCardNotHealth);
      continue;
    }
    if (spec.fit.cordon && dev.cordoned) {
      reasons.Add(Reason::kCardCordoned);
      continue;
    }
    // Selectors need the device's strings; only read them when the pod has selectors.
    if ((vctx.types.active() && !SelectorAllowsType(vctx.types, node.devices[di].type)) ||
        (vctx.mode_filter && vctx.mode_filter->find(node.devices[di].mode) == std::string::npos)) {
      reasons.Add(Reason::kCardTypeMismatch);
      continue;
    }
    if (vctx.numa_bind && dev.numa != prev_numa) {
      if (remaining != origin) reasons.Add(Reason::kNumaNotFit, static_cast<int>(picks.size()));
      remaining = origin;
      prev_numa = dev.numa;
      picks.clear();
    }
    if ((vctx.uuids.active() && !SelectorAllowsUuid(vctx.uuids, node.devices[di].id)) ||
        (vctx.alt_uuids.active() && !SelectorAllowsUuid(vctx.alt_uuids, node.devices[di].id))) {
      reasons.Add(Reason::kCardUuidMismatch);
      continue;
    }
    if (spec.fit.split_count_limits && dev.count <= u.used) {
      reasons.Add(Reason::kCardTimeSlicingExhausted);
      continue;
    }
    if (ctx.mutex && u.used > 0) {
      reasons.Add(Reason::kExclusiveDeviceAllocateConflict);
      continue;
    }
    if (spec.fit.vendor_card_check) {
      if (auto refused = vendor.RefuseCard(node.devices[di], u, request, view)) {
        reasons.Add(*refused);
        continue;
      }
    }
    if (cores_req > 100_cores) cores_req = 100_cores;
    // Percent of a card counted in its compute units: that share of this card's units, at least one.
    Cores card_cores = cores_req;
    if (spec.resources.cores_share_of_units && cores_req.value() > 0) {
      if (dev.devcore <= 0) {
        reasons.Add(Reason::kCardInsufficientCore);
        continue;
      }
      card_cores = Cores(std::clamp<std::int64_t>(dev.devcore * cores_req.value() / 100, 1, dev.devcore));
    }
    MiB memreq = request.memory.value() > 0 ? request.memory : MiB(0);
    if (request.mem_percent != kPercentUnset && request.memory.value() == 0) {
      memreq = MiB(dev.devmem * request.mem_percent / 100);
    }
    Pick pick{d, memreq, card_cores, std::nullopt};
    if (spec.fit.vendor_charge) {
      const CardCharge charged =
          vendor.Charged(node.devices[di], u, request, CardCharge{pick.mem, pick.cores}, view);
      pick.mem = charged.mem;
      pick.cores = charged.cores;
    }
    if (spec.fit.quota_in_fit && ctx.quota_active &&
        !QuotaAllows(ctx, node, backend, container, allocated, picks, pick)) {
      reasons.Add(Reason::kResourceQuotaNotFit);
      continue;
    }
    // A soft-split pod counts a card's cores in percent, whatever number of cores the plugin publishes.
    const std::int64_t core_total = vctx.soft_split ? 100 : dev.devcore;
    if (!spec.fit.vendor_sizes) {
      if (auto refused = RefuseSize(dev, u, memreq, card_cores, core_total)) {
        reasons.Add(*refused);
        continue;
      }
    }
    const bool mig_device = spec.fit.mig && dev.mig;
    if (mig_device) {
      static const std::vector<MigInUse> kNone;
      const auto& in_use = node.has_mig ? mig[di] : kNone;
      auto slot = ChooseMigSlot(node, d, memreq, in_use, picks);
      if (!slot) {
        reasons.Add(Reason::kCardMigTopologyInfeasible);
        continue;
      }
      for (const auto& p : node.devices[di].mig_profiles) {
        if (p.name == slot->profile) {
          pick.mem = MiB(p.memory_mib);
          pick.cores = Cores(p.core);
        }
      }
      pick.mig = std::move(slot);
    }
    if (spec.fit.same_device_across_containers) {
      bool same = true;
      for (std::size_t c = 0; c < container && same; ++c) {
        for (const Pick& earlier : allocated[static_cast<std::size_t>(backend)][c]) {
          same = same && earlier.device == d;
        }
      }
      if (!same) {
        reasons.Add(Reason::kCardNotFoundCustomFilterRule);
        continue;
      }
    }
    if (remaining > 0) {
      if (!collect_all) --remaining;
      picks.push_back(std::move(pick));
    }
    if (remaining == 0 && !collect_all) {
      done = true;
      break;
    }
    if (mig_device) ++i;  // a MIG GPU may host another instance of the same request
  }
  if (done) return true;
  const auto found = static_cast<std::int32_t>(picks.size());
  if (by_modules) {
    ChooseModulePairs(node, origin, picks);
    if (static_cast<std::int32_t>(picks.size()) == origin) return true;
    // Counted against the request: the cards were there, the modules were not whole.
    reasons.Set(Reason::kAllocatedCardsInsufficientRequest, static_cast<int>(picks.size()));
    if (reason) *reason = reasons.Format(origin);
    picks.clear();
    return false;
  }
  if (by_vendor && found >= origin) {
    if (ChooseByVendor(ctx, node, backend, request, picks)) return true;
    // Enough usable cards, none in an arrangement the vendor's interconnect allows.
    reasons.Set(Reason::kNumaNotFit, 1);
    if (reason) *reason = reasons.Format(total);
    picks.clear();
    return false;
  }
  if (collect_all && found >= origin) {
    if (found > origin) {
      if (by_topology) {
        ChooseTopology(node, origin, picks);
      } else {
        ChooseNetworkGroups(node, origin, picks);
      }
    }
    return true;
  }
  if (!picks.empty()) reasons.Set(Reason::kAllocatedCardsInsufficientRequest, static_cast<int>(picks.size()));
  if (reason) *reason = reasons.Format(total);
  picks.clear();
  return false;
}

bool NodeFitter::QuotaAllows(const PodContext& ctx, const NodeEntry& node, int backend, std::size_t container,
                             const std::vector<std::vector<ContainerPicks>>& allocated,
                             const ContainerPicks& tmp, const Pick& candidate) const {
  const std::string& vendor = backends_->at(static_cast<std::size_t>(backend)).Vendor();
  PodVendorDevices hypothetical(container + 1);
  const auto add = [&](std::size_t c, const Pick& p) {
    hypothetical[c].push_back(ContainerDevice{0, node.devices[static_cast<std::size_t>(p.device)].id, vendor,
                                              p.mem, p.cores, std::nullopt});
  };
  for (std::size_t c = 0; c < container; ++c) {
    for (const Pick& p : allocated[static_cast<std::size_t>(backend)][c]) add(c, p);
  }
  for (const Pick& p : tmp) add(container, p);
  add(container, candidate);
  PodDevices pd;
  pd[vendor] = std::move(hypothetical);
  MiB mem;
  Cores cores;
  for (const auto& charge : codec::CollapseDevices(pd, ctx.pod->init_containers.size())) {
    mem += charge.mem;
    cores += charge.cores;
  }
  return quotas_->Fits(ctx.pod->ns, vendor, mem, cores);
}

std::optional<MigSlot> NodeFitter::ChooseMigSlot(const NodeEntry& node, int device, MiB memreq,
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

void NodeFitter::ChooseTopology(const NodeEntry& node, std::int32_t want, ContainerPicks& picks) const {
  const auto score = [&](const Pick& a, const Pick& b) -> std::int64_t {
    const DeviceInfo& da = node.devices[static_cast<std::size_t>(a.device)];
    const DeviceInfo& db = node.devices[static_cast<std::size_t>(b.device)];
    auto it = da.pair_scores.find(db.id);
    return it == da.pair_scores.end() ? 0 : it->second;
  };
  const std::size_t n = picks.size();
  if (want == 1) {
    // The card least connected to the others keeps the well-connected ones free for multi-card pods.
    std::size_t best = 0;
    std::int64_t best_sum = std::numeric_limits<std::int64_t>::max();
    for (std::size_t i = 0; i < n; ++i) {
      std::int64_t sum = 0;
      for (std::size_t j = 0; j < n; ++j) {
        if (i != j) sum += score(picks[i], picks[j]);
      }
      if (sum < best_sum) {
        best_sum = sum;
        best = i;
      }
    }
    picks = {picks[best]};
    return;
  }
  // Highest sum of pairwise scores over all combinations, in candidate order (first maximum wins).
  const auto k = static_cast<std::size_t>(want);
  std::vector<std::size_t> idx(k), best;
  for (std::size_t i = 0; i < k; ++i) idx[i] = i;
  std::int64_t best_sum = std::numeric_limits<std::int64_t>::min();
  for (;;) {
    std::int64_t sum = 0;
    for (std::size_t a = 0; a < k; ++a) {
      for (std::size_t b = a + 1; b < k; ++b) sum += score(picks[idx[a]], picks[idx[b]]);
    }
    if (sum > best_sum) {
      best_sum = sum;
      best = idx;
    }
    std::size_t i = k;
    while (i > 0 && idx[i - 1] == n - k + (i - 1)) --i;
    if (i == 0) break;
    ++idx[i - 1];
    for (std::size_t j = i; j < k; ++j) idx[j] = idx[j - 1] + 1;
  }
  ContainerPicks chosen;
  for (std::size_t i : best) chosen.push_back(picks[i]);
  picks = std::move(chosen);
}

void NodeFitter::ChooseNetworkGroups(const NodeEntry& node, std::int32_t want, ContainerPicks& picks) const {
  // Groups by size, largest first; equal sizes by network id, so the choice does not depend on map order.
  std::map<std::int32_t, int> size;
  for (const Pick& p : picks) ++size[*node.devices[static_cast<std::size_t>(p.device)].network];
  std::vector<std::pair<int, std::int32_t>> order;  // (size, network)
  for (const auto& [network, n] : size) order.emplace_back(n, network);
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  ContainerPicks chosen;
  for (const auto& [n, network] : order) {
    for (const Pick& p : picks) {
      if (static_cast<std::int32_t>(chosen.size()) == want) break;
      if (*node.devices[static_cast<std::size_t>(p.device)].network == network) chosen.push_back(p);
    }
  }
  picks = std::move(chosen);
}

void NodeFitter::ChooseModulePairs(const NodeEntry& node, std::int32_t want, ContainerPicks& picks) const {
  // Modules in the order their first candidate appears (the policy's preference), complete ones only.
  std::vector<std::pair<std::int32_t, std::vector<std::size_t>>> modules;  // (module, positions in picks)
  for (std::size_t i = 0; i < picks.size(); ++i) {
    const std::int32_t module = node.devices[static_cast<std::size_t>(picks[i].device)].index / 2;
    auto it = std::find_if(modules.begin(), modules.end(), [&](const auto& m) { return m.first == module; });
    if (it == modules.end()) {
      modules.push_back({module, {i}});
    } else {
      it->second.push_back(i);
    }
  }
  ContainerPicks chosen;
  for (const auto& [module, positions] : modules) {
    if (static_cast<std::int32_t>(chosen.size()) >= want) break;
    if (positions.size() != 2) continue;
    for (std::size_t i : positions) chosen.push_back(picks[i]);
  }
  picks = std::move(chosen);
}

bool NodeFitter::ChooseByVendor(const PodContext& ctx, const NodeEntry& node, int backend,
                                const DeviceRequest& request, ContainerPicks& picks) {
  const Backend& b = backends_->at(static_cast<std::size_t>(backend));
  const std::int32_t want = request.count;
  candidates_.clear();
  candidate_classes_.clear();
  ChoiceView view{&request, 0, {}};
  const bool classes = b.Spec().fit.pod_classes;
  for (const Pick& p : picks) {
    candidates_.push_back(&node.devices[static_cast<std::size_t>(p.device)]);
    if (classes) candidate_classes_.push_back(&node.classes_in_use[static_cast<std::size_t>(p.device)]);
  }
  if (classes) {
    view.pod_class = ctx.vendors[static_cast<std::size_t>(backend)].pod_class;
    view.classes = candidate_classes_;
  }
  const std::vector<std::size_t> chosen = b.ChooseCards(candidates_, want, view);
  if (static_cast<std::int32_t>(chosen.size()) != want) return false;
  ContainerPicks taken;
  taken.reserve(chosen.size());
  for (std::size_t i : chosen) {
    // A backend's mistake (a position past the end or twice) refuses the node: never a read past the
    // candidates, never a card given twice.
    if (i >= picks.size() ||
        std::any_of(taken.begin(), taken.end(), [&](const Pick& p) { return p.device == picks[i].device; }))
      return false;
    taken.push_back(picks[i]);
  }
  picks = std::move(taken);
  return true;
}

double NodeFitter::VendorScore(const PodContext& ctx, const PodRequests& reqs, const NodeEntry& node,
                               std::size_t backend, const std::vector<DeviceUsage>& base) {
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
                      std::span<const DeviceUsage>(base).subspan(first, n),
                      chosen_,
                      std::span<const std::vector<int>>(chosen_per_container_).first(containers),
                      requests_,
                      ctx.pod,
                      ctx.spread,
                      0,
                      {}};
  const Backend& b = backends_->at(backend);
  if (b.Spec().fit.pod_classes) {
    view.pod_class = ctx.vendors[backend].pod_class;
    view.classes_before = std::span<const CardClasses>(node.classes_in_use).subspan(first, n);
  }
  return b.AllocationScore(view);
}

}  // namespace hami
