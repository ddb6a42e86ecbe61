#include "core/explain.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "core/fit.h"

namespace hami {

namespace {

std::string DescribeRequest(const PodView& pod, std::size_t container, const DeviceRequest& r) {
  std::string out = fmt::format("{}: {} x {}", pod.ContainerAt(container).name, r.count, r.vendor);
  if (r.partition > 0) out += fmt::format(", a partition of {} slices", r.partition);
  if (r.mem_percent != kPercentUnset) {
    out += fmt::format(", {}% of the memory", r.mem_percent);
  } else if (r.memory.value() > 0) {
    out += fmt::format(", {} MiB", r.memory.value());
  }
  if (r.cores.value() > 0) out += fmt::format(", {} cores", r.cores.value());
  return out + (r.count > 1 ? " each" : "");
}

// Refusals that more room lifts, closest first: memory, then cores, then a card's task limit.
int RoomRank(Reason r) {
  switch (r) {
    case Reason::kCardInsufficientMemory:
      return 0;
    case Reason::kCardInsufficientCore:
      return 1;
    case Reason::kCardTimeSlicingExhausted:
      return 2;
    default:
      return -1;
  }
}

std::optional<ClosestCard> Closest(const PodView& pod, const PodRequests& requests, const NodeEntry& node,
                                   const std::vector<CardRefusal>& trace) {
  const CardRefusal* best = nullptr;
  for (const CardRefusal& r : trace) {
    if (RoomRank(r.reason) < 0 || r.short_by <= 0) continue;
    const auto key = [](const CardRefusal& c) { return std::make_pair(RoomRank(c.reason), c.short_by); };
    if (best == nullptr || key(r) < key(*best)) best = &r;
  }
  if (best == nullptr) return std::nullopt;
  const auto d = static_cast<std::size_t>(best->device);
  const DeviceInfo& card = node.devices[d];
  const DeviceUsage& used = node.usage[d];
  ClosestCard out;
  out.device = card.id;
  out.container = pod.ContainerAt(best->container).name;
  out.reason = best->reason;
  out.short_by = best->short_by;
  for (const auto& [backend, request] : requests.containers[best->container]) {
    if (backend != best->backend) continue;
    if (best->reason == Reason::kCardInsufficientMemory) {
      out.wanted = request.mem_percent != kPercentUnset ? card.devmem.value() * request.mem_percent / 100
                                                        : request.memory.value();
    } else if (best->reason == Reason::kCardInsufficientCore) {
      out.wanted = request.cores.value();
    } else {
      out.wanted = 1;
    }
  }
  out.mem_total = card.devmem.value();
  out.mem_free = std::max<std::int64_t>(0, card.devmem.value() - used.mem.value());
  out.cores_used = used.cores.value();
  out.cores_total = card.devcore.value();
  out.tasks = used.used;
  out.task_limit = card.count;
  return out;
}

// At most five names, then how many more.
std::string Some(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size() && i < 5; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > 5) out += fmt::format(" and {} more", names.size() - 5);
  return out;
}

void AddHints(PodExplanation& out) {
  std::vector<std::string> fitting, resolvable;
  const NodeExplanation* nearest = nullptr;  // the smallest memory shortfall of all nodes
  bool quota = false;
  for (const NodeExplanation& n : out.nodes) {
    if (n.fits) fitting.push_back(n.node);
    quota = quota || n.reason.find(ReasonName(Reason::kResourceQuotaNotFit)) != std::string::npos;
    if (!n.fits && n.resolvable) resolvable.push_back(n.node);
    if (n.closest && n.closest->reason == Reason::kCardInsufficientMemory &&
        (nearest == nullptr || n.closest->short_by < nearest->closest->short_by))
      nearest = &n;
  }
  if (!fitting.empty()) {
    out.hints.push_back(fmt::format(
        "its devices fit now on {}: if it is still pending, the reason is kube-scheduler's own (its "
        "FailedScheduling event says which)",
        Some(fitting)));
    return;
  }
  if (quota) {
    out.hints.push_back(fmt::format(
        "namespace {}'s ResourceQuota on devices has too little left: it fits once pods of the namespace "
        "end, or with the quota raised",
        out.pod.substr(0, out.pod.find('/'))));
  }
  if (nearest != nullptr) {
    const ClosestCard& c = *nearest->closest;
    out.hints.push_back(
        fmt::format("a request of at most {} MiB per card passes the memory check of {} on {}", c.mem_free,
                    c.device, nearest->node));
  }
  if (!resolvable.empty()) {
    out.hints.push_back(fmt::format(
        "pods leaving {} would make room: it fits there once they end, or by preemption for a pod of higher "
        "priority (`simulate` shows whom kube-scheduler would evict)",
        Some(resolvable)));
  } else {
    out.hints.push_back(
        "no candidate node can take it even with every pod gone: another node, another card type, or a "
        "smaller request");
  }
}

}  // namespace

std::string NodeExplanation::Summary() const {
  if (fits) return "fits";
  if (!closest) return resolvable ? reason : reason + "; no pod leaving the node makes room";
  const ClosestCard& c = *closest;
  switch (c.reason) {
    case Reason::kCardInsufficientMemory:
      return fmt::format(
          "{}; {} needs {} MiB on one card: the closest, {}, has {} MiB free ({} MiB short), cores {}/{} "
          "used",
          reason, c.container, c.wanted, c.device, c.mem_free, c.short_by, c.cores_used, c.cores_total);
    case Reason::kCardInsufficientCore:
      return fmt::format(
          "{}; {} needs {} cores on one card: the closest, {}, has {} free ({} short), {}/{} MiB free",
          reason, c.container, c.wanted, c.device, c.cores_total - c.cores_used, c.short_by, c.mem_free,
          c.mem_total);
    default:
      return fmt::format("{}; the closest card, {}, runs {}/{} tasks already", reason, c.device, c.tasks,
                         c.task_limit);
  }
}

PodExplanation ExplainPod(const ClusterState& state, const SchedulerOptions& options, const PodView& pod,
                          const std::vector<std::string>& candidates) {
  PodExplanation out;
  out.pod = pod.Key();
  auto requests = CollectRequests(pod, state.backends());
  if (!requests) {
    out.error = requests.error().message;
    return out;
  }
  for (std::size_t c = 0; c < requests->containers.size(); ++c) {
    for (const auto& [backend, request] : requests->containers[c])
      out.requests.push_back(DescribeRequest(pod, c, request));
  }
  if (!requests->Any()) {
    out.hints.push_back("it asks for no device this scheduler manages: any node passes our filter");
    return out;
  }
  auto ctx = DecisionContext(pod, state, options);
  if (!ctx) {
    out.error = ctx.error().message;
    return out;
  }
  PodContext idle = *ctx;
  idle.quota_active = false;
  FitEngine engine(state.backends(), state.quotas());
  std::vector<CardRefusal> trace;
  std::vector<const PodAllocation*> held;
  for (const std::string& name : candidates) {
    NodeExplanation n;
    n.node = name;
    const NodeEntry* node = state.FindNode(name);
    if (node == nullptr) {
      n.reason = std::string(kNodeUnregistered);
      out.nodes.push_back(std::move(n));
      continue;
    }
    held.clear();
    state.NominatedHolds(name, pod.priority, pod.UidOrKey(), held);
    engine.TraceRefusals(&trace);
    n.fits = held.empty()
                 ? engine.Fit(*ctx, *requests, *node, nullptr, &n.reason)
                 : engine.FitWith(*ctx, *requests, *node, UsageOverlay{{}, held}, nullptr, &n.reason);
    engine.TraceRefusals(nullptr);
    if (!n.fits) {
      n.resolvable = engine.FitsIdle(idle, *requests, *node);
      n.closest = Closest(pod, *requests, engine.Target(*node, *requests), trace);
    } else {
      n.reason.clear();
    }
    out.nodes.push_back(std::move(n));
  }
  AddHints(out);
  return out;
}

}  // namespace hami
