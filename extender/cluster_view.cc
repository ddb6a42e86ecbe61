#include "extender/cluster_view.h"

#include <fmt/format.h>

#include <boost/json.hpp>
#include <iterator>
#include <map>
#include <string_view>
#include <utility>

namespace hami::extender {
namespace json = boost::json;

namespace {

json::object UsedOf(std::int64_t used, std::int64_t total) { return {{"used", used}, {"total", total}}; }

// `s` as a JSON string: quotes, backslashes and control characters escaped.
void AppendJsonString(fmt::memory_buffer& out, std::string_view s) {
  out.push_back('"');
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<unsigned char>(c));
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
}

struct VendorTotals {
  std::int64_t nodes = 0, blocked = 0, devices = 0, unhealthy = 0, pods = 0;
  std::int64_t mem = 0, mem_used = 0, cores = 0, cores_used = 0, tasks = 0, tasks_used = 0;
};

}  // namespace

std::string OverviewJson(const ClusterState& state) {
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
                                   {"podsWaiting", state.WaitingFor(b)}});
  }
  return json::serialize(json::object{{"nodes", names.size()},
                                      {"pods", state.PodCount()},
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
    out.append(std::string_view(R"(},"largestFreeMiB":{)"));
    first = true;
    for (std::size_t b = 0; b < backends.size(); ++b) {
      const auto [begin, end] = node->vendor_range[b];
      if (begin == end) continue;
      std::int64_t free = 0;
      for (auto d = static_cast<std::size_t>(begin); d < static_cast<std::size_t>(end); ++d) {
        const DeviceUsage& use = node->usage[d];
        if (node->devices[d].health && use.used < node->devices[d].count)
          free = std::max(free, node->devices[d].devmem.value() - use.mem.value());
      }
      if (!std::exchange(first, false)) out.push_back(',');
      text(backends.at(b).Vendor());
      fmt::format_to(std::back_inserter(out), ":{}", free);
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

}  // namespace hami::extender
