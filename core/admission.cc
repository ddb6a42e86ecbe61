#include "core/admission.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "core/bind_plan.h"
#include "core/keys.h"
#include "core/names.h"
#include "core/policy.h"
#include "core/strings.h"

namespace hami {
namespace {

constexpr std::string_view kDefaultScheduler = "default-scheduler";

AdmissionVerdict Deny(int code, std::string message, bool uses_devices) {
  AdmissionVerdict v;
  v.kind = AdmissionVerdict::Kind::kDenied;
  v.code = code;
  v.message = std::move(message);
  v.uses_devices = uses_devices;
  return v;
}

// Upstream's precedence (#1627): a pod naming a scheduler is left alone unless it names ours, or names the
// default scheduler and we overwrite that one.
bool OtherSchedulers(const PodView& pod, const AdmissionOptions& o) {
  const std::string& name = pod.scheduler_name;
  if (name.empty()) return false;
  if (name == kDefaultScheduler && o.force_overwrite_default_scheduler) return false;
  return o.scheduler_name.empty() || name != o.scheduler_name;
}

// Runs `f(container)` on the init containers, then the regular ones; stops at the first non-empty result.
template <class F>
auto EachContainer(PodView& pod, F&& f) -> decltype(f(pod.containers.front())) {
  for (auto* list : {&pod.init_containers, &pod.containers}) {
    for (auto& c : *list) {
      if (auto r = f(c)) return r;
    }
  }
  return {};
}

// Memory and cores the pod takes from one vendor: the larger of the init containers' peak and the regular
// containers' sum, per dimension (init containers run one at a time, before the others).
struct VendorTotal {
  std::int64_t memory = 0, cores = 0;
};
// Sums and products that stop at the int64 maximum (count, memory and cores are each up to 2^31, so a pod of
// a few containers could wrap).
std::int64_t SaturatingAdd(std::int64_t a, std::int64_t b) {
  std::int64_t out = 0;
  return __builtin_add_overflow(a, b, &out) ? std::numeric_limits<std::int64_t>::max() : out;
}
std::int64_t SaturatingMul(std::int64_t a, std::int64_t b) {
  std::int64_t out = 0;
  return __builtin_mul_overflow(a, b, &out) ? std::numeric_limits<std::int64_t>::max() : out;
}
VendorTotal PodTotal(const PodView& pod, const Backend& backend) {
  VendorTotal app, init;
  const auto charge = [&](const ContainerView& c) {
    auto req = backend.RequestFor(c);
    if (!req || !*req) return VendorTotal{};  // unreadable values were refused before
    const auto& r = **req;
    return VendorTotal{SaturatingMul(r.memory.value(), r.count), SaturatingMul(r.cores.value(), r.count)};
  };
  for (const auto& c : pod.init_containers) {
    const VendorTotal t = charge(c);
    init.memory = std::max(init.memory, t.memory);
    init.cores = std::max(init.cores, t.cores);
  }
  for (const auto& c : pod.containers) {
    const VendorTotal t = charge(c);
    app.memory = SaturatingAdd(app.memory, t.memory);
    app.cores = SaturatingAdd(app.cores, t.cores);
  }
  return VendorTotal{std::max(app.memory, init.memory), std::max(app.cores, init.cores)};
}

// HAMi's rules, in HAMi's order.
AdmissionVerdict Admit(PodView& pod, const Backends& backends, const AdmissionOptions& options) {
  if (pod.containers.empty()) return Deny(403, "pod has no containers", false);
  if (OtherSchedulers(pod, options)) {
    AdmissionVerdict v;
    v.kind = AdmissionVerdict::Kind::kSkipped;
    v.message = "pod already has different scheduler assigned";
    return v;
  }
  // The device plugin reads it when the kubelet hands it other cards: a typo would only surface in its log.
  if (auto numa = pod.annotations.find(std::string(keys::kNumaAlignment)); numa != pod.annotations.end()) {
    const std::string mode = ToLower(Trim(numa->second));
    if (mode != "best-effort" && mode != "strict")
      return Deny(403,
                  fmt::format("invalid {} annotation {}: expected \"best-effort\" or \"strict\"",
                              keys::kNumaAlignment, Quoted(numa->second)),
                  false);
  }

  bool uses_devices = false;
  // Every backend's admission on every container. An error is a value in the pod that cannot be right
  // (HAMi answers 500 for it; it is the pod's fault, so 400 here).
  if (auto error = EachContainer(pod, [&](ContainerView& c) -> std::optional<std::string> {
        for (const auto& b : backends) {
          auto found = b->Admit(c, pod);
          if (!found) return found.error().message;
          uses_devices = uses_devices || *found;
        }
        return std::nullopt;
      })) {
    return Deny(400, *error, uses_devices);
  }
  // docs/DECISIONS.md, D7: what the filter could not read is refused now, with the reason, instead of being
  // found when the pod is scheduled (HAMi drops such a request and the pod runs without the device).
  if (auto error = EachContainer(pod, [&](ContainerView& c) -> std::optional<std::string> {
        for (const auto& b : backends) {
          auto req = b->RequestFor(c);
          if (!req) return fmt::format("container {}: {}", c.name, req.error().message);
          uses_devices = uses_devices || req->has_value();
        }
        return std::nullopt;
      })) {
    return Deny(400, *error, uses_devices);
  }
  if (uses_devices) {
    // Weights the filter cannot read would leave the pod pending with that error: refused now with the same
    // message, as HAMi's webhook does since v2.10 (docs/DECISIONS.md, "HAMi after v2.10").
    if (auto w = pod.annotations.find(std::string(keys::kScoringWeights)); w != pod.annotations.end()) {
      auto weights = ParseScoringWeights(w->second);
      if (!weights) return Deny(400, weights.error().message, true);
    }
    if (auto name = EachContainer(pod, [](ContainerView& c) -> std::optional<std::string> {
          if (c.privileged) return c.name;
          return std::nullopt;
        })) {
      return Deny(403, fmt::format("container {} is privileged", *name), true);
    }
    if (!options.scheduler_name.empty()) {
      pod.scheduler_name = options.scheduler_name;
      if (!pod.node_name.empty()) return Deny(403, "pod has node assigned", true);
    }
  }

  AdmissionVerdict v;
  v.uses_devices = uses_devices;
  for (std::size_t b = 0; b < backends.size(); ++b) {
    const auto& r = backends.at(b).Spec().resources;
    if (r.memory.empty() && r.cores.empty()) continue;
    const VendorTotal total = PodTotal(pod, backends.at(b));
    if (total.memory == 0 && total.cores == 0) continue;
    v.quota.push_back({b, total.memory, total.cores});
  }
  return v;
}

}  // namespace

AdmissionVerdict AdmitPodRules(PodView& pod, const Backends& backends, const AdmissionOptions& options) {
  // A new pod has no decision yet: the scheduler writes one at bind, the device plugin reads it. Allocation
  // annotations on a CREATE are made up (or copied from another pod) and would make a device plugin or a
  // ledger take cards the pod never got: refused, whichever scheduler the pod names, with HAMi's words
  // (docs/DECISIONS.md, "The webhook refuses").
  std::vector<std::string_view> allocation = AllocationKeys(backends);
  allocation.push_back(keys::kBindPhase);
  allocation.push_back(keys::kBindTime);
  std::sort(allocation.begin(), allocation.end());
  for (const std::string_view k : allocation) {
    if (!pod.annotations.contains(std::string(k))) continue;
    constexpr std::string_view kWhy = "is written by the scheduler and cannot be set when creating a pod";
    return Deny(403, fmt::format("annotation {} {}", k, kWhy), false);
  }
  return Admit(pod, backends, options);
}

std::optional<AdmissionVerdict> QuotaDenial(const std::string& ns, const AdmissionVerdict& admitted,
                                            const Backends& backends, const QuotaBook& quotas) {
  for (const QuotaDemand& d : admitted.quota) {
    const auto& r = backends.at(d.backend).Spec().resources;
    if (auto s = quotas.Exceeded(ns, backends.at(d.backend).Vendor(), MiB(d.memory), Cores(d.cores))) {
      const std::string_view unit = s->resource == r.memory ? " MiB" : "";
      return Deny(403,
                  fmt::format("exceeding resource quota: {} in namespace {}: the pod asks for {}{}, {}{} "
                              "of the limit {}{} are in use",
                              s->resource, ns, s->requested, unit, s->used, unit, s->limit, unit),
                  admitted.uses_devices);
    }
  }
  return std::nullopt;
}

AdmissionVerdict AdmitPod(PodView& pod, const Backends& backends, const QuotaBook& quotas,
                          const AdmissionOptions& options) {
  AdmissionVerdict v = AdmitPodRules(pod, backends, options);
  if (!v.allowed()) return v;
  if (auto denied = QuotaDenial(pod.ns, v, backends, quotas)) return *denied;
  return v;
}

}  // namespace hami
