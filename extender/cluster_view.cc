#include "extender/cluster_view.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/json.hpp>
#include <iterator>
#include <map>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "core/codec/stamps.h"

namespace hami::extender {
namespace json = boost::json;

namespace {

json::object UsedOf(std::int64_t used, std::int64_t total) { return {{"used", used}, {"total", total}}; }

// `s` as a JSON string: quotes, backslashes and control characters escaped.
// Runs that need no escape are appended whole.
void AppendJsonString(fmt::memory_buffer& out, std::string_view s) {
  out.push_back('"');
  std::size_t run = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c != '"' && c != '\\' && static_cast<unsigned char>(c) >= 0x20) continue;
    out.append(s.substr(run, i - run));
    run = i + 1;
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else {
      fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<unsigned char>(c));
    }
  }
  out.append(s.substr(run));
  out.push_back('"');
}

// "ns/name" of one pod against another's, as the strings would compare (a namespace holds no '/').
int CompareKey(std::string_view a_ns, std::string_view a_name, std::string_view b_ns,
               std::string_view b_name) {
  const std::size_t common = std::min(a_ns.size(), b_ns.size());
  if (const int c = a_ns.substr(0, common).compare(b_ns.substr(0, common)); c != 0) return c;
  if (a_ns.size() != b_ns.size()) {  // one namespace ends where the other goes on: '/' against its next char
    const auto next_a = static_cast<unsigned char>(a_ns.size() > common ? a_ns[common] : '/');
    const auto next_b = static_cast<unsigned char>(b_ns.size() > common ? b_ns[common] : '/');
    return next_a < next_b ? -1 : 1;
  }
  return a_name.compare(b_name);
}
// A cache key "ns/name" against a pod's namespace and name.
int CompareKey(std::string_view key, std::string_view ns, std::string_view name) {
  const std::size_t slash = key.find('/');
  const std::string_view key_name = slash == std::string_view::npos ? "" : key.substr(slash + 1);
  return CompareKey(key.substr(0, slash), key_name, ns, name);
}

void AppendInt(fmt::memory_buffer& out, std::int64_t v) {
  const fmt::format_int digits(v);
  out.append(digits.data(), digits.data() + digits.size());
}

// The node lock annotations of `lock_keys` set on `node`: [{"annotation", "holder", "since"}] (NodesJson).
void AppendLocks(fmt::memory_buffer& out, const NodeEntry& node, const std::set<std::string>& lock_keys) {
  bool first = true;
  for (const std::string& key : lock_keys) {
    const auto held = node.node.annotations.find(key);
    if (held == node.node.annotations.end()) continue;
    if (!std::exchange(first, false)) out.push_back(',');
    out.append(std::string_view(R"({"annotation":)"));
    AppendJsonString(out, key);
    out.append(std::string_view(R"(,"holder":)"));
    if (auto lock = codec::ParseNodeLock(held->second); lock) {
      AppendJsonString(out, lock->legacy ? std::string() : lock->ns + "/" + lock->pod);
      out.append(std::string_view(R"(,"since":)"));
      AppendJsonString(out, codec::FormatRfc3339(lock->taken_at));
    } else {
      out.append(std::string_view(R"(null,"value":)"));
      AppendJsonString(out, held->second);
    }
    out.push_back('}');
  }
}

struct VendorTotals {
  std::int64_t nodes = 0, blocked = 0, devices = 0, unhealthy = 0, pods = 0;
  std::int64_t mem = 0, mem_used = 0, cores = 0, cores_used = 0, tasks = 0, tasks_used = 0;
};

}  // namespace

std::string ClusterView::Overview() const { return OverviewJson(*state_, requeue_->candidates()); }
std::string ClusterView::Nodes() const { return NodesJson(*state_); }
std::string ClusterView::Pods() const { return PodsJson(*state_, *pods_, *requeue_); }
std::string ClusterView::Quotas() const { return QuotasJson(*state_); }
std::string ClusterView::Capacity() const { return CapacityJson(*state_, shapes_, policies_->gpu_policy); }

Result<PodExplanation> ClusterView::Explain(const std::string& ns, const std::string& name) const {
  const auto it = pods_->find(ns + "/" + name);
  if (it == pods_->end())
    return Error{fmt::format("pod {}/{} is not in the scheduler's pod cache", ns, name)};
  if (!it->second.node_name.empty()) {
    PodExplanation bound;
    bound.pod = it->first;
    bound.hints.push_back(fmt::format("it is not pending: it is bound to node {}", it->second.node_name));
    return bound;
  }
  return ExplainPod(*state_, *policies_, it->second, state_->NodeNames());
}

std::string OverviewJson(const ClusterState& state, std::size_t refused) {
  const Backends& backends = state.backends();
  std::vector<VendorTotals> totals(backends.size());
  const std::vector<std::string> names = state.NodeNames();
  for (const std::string& name : names) {
    const NodeEntry* node = state.FindNode(name);
    for (std::size_t b = 0; b < backends.size(); ++b) {
      const auto [begin, end] = node->vendor_range[b];
      if (begin == end) continue;
      VendorTotals& t = totals[b];
      ++t.nodes;
      if (b < node->blocked.size() && !node->blocked[b].empty()) ++t.blocked;
      for (auto d = static_cast<std::size_t>(begin); d < static_cast<std::size_t>(end); ++d) {
        const DeviceInfo& card = node->devices[d];
        const DeviceUsage& use = node->usage[d];
        ++t.devices;
        t.unhealthy += card.health ? 0 : 1;
        t.mem += card.devmem.value();
        t.mem_used += use.mem.value();
        t.cores += card.devcore.value();
        t.cores_used += use.cores.value();
        t.tasks += card.count;
        t.tasks_used += use.used;
      }
    }
  }
  std::map<std::string_view, std::size_t> index;  // vendor -> backend
  for (std::size_t b = 0; b < backends.size(); ++b) index.emplace(backends.at(b).Vendor(), b);
  state.ForEachPod([&](const PodAllocation& pod, const auto&) {
    for (const auto& [vendor, containers] : pod.devices) {
      if (auto it = index.find(vendor); it != index.end()) ++totals[it->second].pods;
    }
  });
  const std::vector<std::size_t> refused_by_vendor = state.UnplaceableByBackend();
  json::array vendors;
  for (std::size_t b = 0; b < backends.size(); ++b) {
    const VendorTotals& t = totals[b];
    if (t.nodes == 0) continue;
    vendors.push_back(json::object{{"vendor", backends.at(b).Vendor()},
                                   {"nodes", t.nodes},
                                   {"nodesBlocked", t.blocked},
                                   {"devices", t.devices},
                                   {"devicesUnhealthy", t.unhealthy},
                                   {"memoryMiB", UsedOf(t.mem_used, t.mem)},
                                   {"cores", UsedOf(t.cores_used, t.cores)},
                                   {"tasks", UsedOf(t.tasks_used, t.tasks)},
                                   {"pods", t.pods},
                                   {"podsWaiting", state.WaitingFor(b)},
                                   {"podsRefused", refused_by_vendor[b]}});
  }
  return json::serialize(json::object{{"nodes", names.size()},
                                      {"pods", state.PodCount()},
                                      {"podsRefused", refused},
                                      {"vendors", std::move(vendors)}});
}

std::string QuotasJson(const ClusterState& state) {
  json::array quotas;
  for (const QuotaBook::Entry& e : state.quotas().Entries()) {
    quotas.push_back(json::object{{"namespace", e.ns},
                                  {"resource", e.resource},
                                  {"used", e.used},
                                  {"limit", e.limit ? json::value(*e.limit) : json::value(nullptr)}});
  }
  return json::serialize(json::object{{"quotas", std::move(quotas)}});
}

std::string NodesJson(const ClusterState& state) {
  // Written straight into one buffer: a value tree of 5,000 nodes x 8 cards costs more to build than to
  // print (docs/PERFORMANCE.md, "The metrics listener's /api/").
  const Backends& backends = state.backends();
  std::set<std::string> lock_keys;  // one annotation many vendors share, or one of a vendor's own
  for (const auto& b : backends) {
    if (!b->Spec().keys.node_lock.empty()) lock_keys.insert(b->Spec().keys.node_lock);
  }
  FreeCapacity slices(state, {}, kPolicySpread);  // no shape: the largest slices alone
  fmt::memory_buffer out;
  const auto text = [&](std::string_view s) { AppendJsonString(out, s); };
  out.append(std::string_view(R"({"nodes":[)"));
  bool first_node = true;
  for (const std::string& name : state.NodeNames()) {
    const NodeEntry* node = state.FindNode(name);
    if (!std::exchange(first_node, false)) out.push_back(',');
    out.append(std::string_view(R"({"node":)"));
    text(name);
    fmt::format_to(std::back_inserter(out), R"(,"allocationsInFlight":{},"blocked":{{)",
                   node->allocations_in_flight);
    bool first = true;
    for (std::size_t b = 0; b < backends.size() && b < node->blocked.size(); ++b) {
      if (node->blocked[b].empty()) continue;
      if (!std::exchange(first, false)) out.push_back(',');
      text(backends.at(b).Vendor());
      out.push_back(':');
      text(node->blocked[b]);
    }
    out.append(std::string_view(R"(},"locks":[)"));
    AppendLocks(out, *node, lock_keys);
    out.append(std::string_view(R"(],"largestFreeMiB":{)"));
    first = true;
    for (const VendorCapacity& v : slices.Of(*node)) {
      if (!std::exchange(first, false)) out.push_back(',');
      text(v.vendor);
      fmt::format_to(std::back_inserter(out), ":{}", v.largest_free_mib);
    }
    out.append(std::string_view(R"(},"cards":[)"));
    for (std::size_t d = 0; d < node->devices.size(); ++d) {
      const DeviceInfo& card = node->devices[d];
      const DeviceUsage& use = node->usage[d];
      if (d > 0) out.push_back(',');
      out.append(std::string_view(R"({"id":)"));
      text(card.id);
      out.append(std::string_view(R"(,"vendor":)"));
      text(card.vendor);
      out.append(std::string_view(R"(,"type":)"));
      text(card.type);
      fmt::format_to(std::back_inserter(out),
                     R"(,"numa":{},"health":{},"memoryMiB":{{"used":{},"total":{}}},"cores":{{"used":{},)"
                     R"("total":{}}},"tasks":{{"used":{},"total":{}}}}})",
                     card.numa, card.health, use.mem.value(), card.devmem.value(), use.cores.value(),
                     card.devcore.value(), use.used, card.count);
    }
    out.append(std::string_view("]}"));
  }
  out.append(std::string_view("]}"));
  return fmt::to_string(out);
}

std::string CapacityJson(const ClusterState& state, std::span<const CapacityShape> shapes,
                         std::string_view gpu_policy) {
  FreeCapacity counter(state, shapes, gpu_policy);
  std::vector<std::int64_t> totals(shapes.size(), 0);
  json::array nodes;
  for (const std::string& name : state.NodeNames()) {
    for (const VendorCapacity& v : counter.Of(*state.FindNode(name))) {
      json::object fits;
      for (const auto& [shape, n] : v.fits) {
        fits[shape] = n;
        for (std::size_t s = 0; s < shapes.size(); ++s) totals[s] += shapes[s].name == shape ? n : 0;
      }
      if (fits.empty()) continue;  // no shape of this vendor
      nodes.push_back(json::object{{"node", name},
                                   {"vendor", v.vendor},
                                   {"largestFreeMiB", v.largest_free_mib},
                                   {"fits", std::move(fits)}});
    }
  }
  json::array out_shapes;
  for (std::size_t s = 0; s < shapes.size(); ++s) {
    out_shapes.push_back(json::object{{"shape", shapes[s].name},
                                      {"vendor", shapes[s].vendor},
                                      {"count", shapes[s].count},
                                      {"memoryMiB", shapes[s].memory_mib},
                                      {"cores", shapes[s].cores},
                                      {"fits", totals[s]}});
  }
  return json::serialize(json::object{{"shapes", std::move(out_shapes)}, {"nodes", std::move(nodes)}});
}

// The refused pods of `requeue`, sorted by "ns/name" (see PodsJson).
void AppendRefused(fmt::memory_buffer& out, const Requeue& requeue) {
  std::vector<std::pair<std::string, const Requeue::LastRefusal*>> refused;
  requeue.ForEachRefused([&](const std::string&, const std::string& key, const Requeue::LastRefusal& last) {
    refused.emplace_back(key, &last);
  });
  std::sort(refused.begin(), refused.end());
  bool first_pod = true;
  for (const auto& [key, last] : refused) {
    if (!std::exchange(first_pod, false)) out.push_back(',');
    const auto slash = key.find('/');
    out.append(std::string_view(R"({"namespace":)"));
    AppendJsonString(out, std::string_view(key).substr(0, slash));
    out.append(std::string_view(R"(,"name":)"));
    AppendJsonString(out, std::string_view(key).substr(slash + 1));
    out.append(std::string_view(R"(,"at":)"));
    AppendJsonString(out, codec::FormatRfc3339(last->at));
    fmt::format_to(std::back_inserter(out), R"(,"nodes":{},"reasons":[)", last->nodes);
    bool first = true;
    for (const auto& [node, reason] : last->reasons) {
      if (!std::exchange(first, false)) out.push_back(',');
      out.append(std::string_view(R"({"node":)"));
      AppendJsonString(out, node);
      out.append(std::string_view(R"(,"reason":)"));
      AppendJsonString(out, reason);
      out.push_back('}');
    }
    out.append(std::string_view("]}"));
  }
}

std::string PodsJson(const ClusterState& state, const std::map<std::string, PodView>& pods,
                     const Requeue& requeue) {
  // Sorted as the pod cache is ("ns/name"), without building the keys: the page lists them so, two answers
  // of one generation are equal, and the cache is walked along.
  std::vector<const PodAllocation*> holders;
  holders.reserve(state.PodCount());
  state.ForEachPod([&](const PodAllocation& pod, const auto&) { holders.push_back(&pod); });
  std::sort(holders.begin(), holders.end(), [](const PodAllocation* a, const PodAllocation* b) {
    return CompareKey(a->ns, a->name, b->ns, b->name) < 0;
  });
  fmt::memory_buffer out;
  out.reserve(holders.size() * 256);  // about a holder's length: the buffer is not grown and copied 16 times
  const auto text = [&](std::string_view s) { AppendJsonString(out, s); };
  out.append(std::string_view(R"({"holders":[)"));
  bool first_pod = true;
  auto cached = pods.begin();  // walks the cache, sorted by the same key, along the holders
  for (const PodAllocation* pod : holders) {
    if (!std::exchange(first_pod, false)) out.push_back(',');
    out.append(std::string_view(R"({"namespace":)"));
    text(pod->ns);
    out.append(std::string_view(R"(,"name":)"));
    text(pod->name);
    out.append(std::string_view(R"(,"node":)"));
    text(pod->node);
    out.append(std::string_view(R"(,"phase":)"));
    text(pod->in_flight ? "allocating" : "allocated");
    out.append(std::string_view(R"(,"created":)"));
    while (cached != pods.end() && CompareKey(cached->first, pod->ns, pod->name) < 0) ++cached;
    text(cached == pods.end() || CompareKey(cached->first, pod->ns, pod->name) != 0
             ? std::string_view()
             : std::string_view(cached->second.created));
    out.append(std::string_view(R"(,"devices":[)"));
    bool first = true;
    for (const auto& [vendor, containers] : pod->devices) {
      for (std::size_t c = 0; c < containers.size(); ++c) {
        for (const ContainerDevice& d : containers[c]) {
          if (!std::exchange(first, false)) out.push_back(',');
          out.append(std::string_view(R"({"container":)"));
          AppendInt(out, static_cast<std::int64_t>(c));
          out.append(std::string_view(R"(,"vendor":)"));
          text(vendor);
          out.append(std::string_view(R"(,"id":)"));
          text(d.uuid);
          out.append(std::string_view(R"(,"memoryMiB":)"));
          AppendInt(out, d.mem.value());
          out.append(std::string_view(R"(,"cores":)"));
          AppendInt(out, d.cores.value());
          out.push_back('}');
        }
      }
    }
    out.append(std::string_view("]}"));
  }
  out.append(std::string_view(R"(],"refused":[)"));
  AppendRefused(out, requeue);
  out.append(std::string_view("]}"));
  return fmt::to_string(out);
}

}  // namespace hami::extender
