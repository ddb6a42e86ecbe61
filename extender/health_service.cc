#include "extender/health_service.h"

#include <spdlog/spdlog.h>

#include <vector>

namespace hami::extender {
namespace asio = boost::asio;
namespace json = boost::json;

HealthService::HealthService(const Backends& backends, ClusterWriter& writer, const Clock& clock,
                             std::chrono::seconds handshake_timeout, k8s::Signal* decided)
    : backends_(&backends),
      writer_(&writer),
      clock_(&clock),
      handshake_timeout_(handshake_timeout),
      decided_(decided) {}

void HealthService::ApplyMask(const std::string& node, ClusterState& state) const {
  auto it = records_.find(node);
  if (it == records_.end()) return;
  for (std::size_t b : it->second.unhealthy) state.RemoveVendorDevices(node, b);
}

asio::awaitable<void> HealthService::Pass(const std::map<std::string, NodeView>& nodes, ClusterState& state) {
  const TimePoint now = clock_->Now();
  struct Write {
    std::string node, key;
    json::value value;
  };
  std::vector<Write> writes;
  // Decide for every node first (synchronously: the caches cannot change under us), then write.
  for (const auto& [name_key, node] : nodes) {
    NodeHealthRecord& h = records_[node.name];
    for (const NodeHealthStep& step :
         NodeHealthPass(*backends_, node, state.FindNode(node.name), h, now, handshake_timeout_)) {
      const BackendSpec& spec = backends_->at(step.backend).Spec();
      const HealthVerdict& v = step.verdict;
      if (v.handshake_patch && !spec.keys.handshake.empty()) {
        writes.push_back({node.name, spec.keys.handshake, json::value(*v.handshake_patch)});
        ++stats_.handshake_patches;
      }
      if (step.withhold) {
        spdlog::warn("node {}: {} devices withheld: {}", node.name, spec.vendor, v.why);
        state.RemoveVendorDevices(node.name, step.backend);
        // Removing the handshake lets the device plugin register again on a later pass.
        if (!spec.keys.handshake.empty())
          writes.push_back({node.name, spec.keys.handshake, json::value(nullptr)});
        ++stats_.cleanups;
      } else if (step.restore) {
        spdlog::info("node {}: {} devices healthy again: {}", node.name, spec.vendor, v.why);
        state.UpsertNode(node);
        ApplyMask(node.name, state);
      }
    }
  }
  ++stats_.passes;
  if (decided_ != nullptr) decided_->Notify();
  for (const auto& w : writes) {
    const json::value patch = {{"metadata", {{"annotations", {{w.key, w.value}}}}}};
    auto r = co_await writer_->PatchNode(w.node, patch, Budget::kBackground);
    if (!r && r.error().kind != ApiErrorKind::kNotFound)
      spdlog::warn("node {}: could not write {}: {}", w.node, w.key, r.error().message);
  }
}

void HealthService::WriteMetrics(k8s::prom::TextWriter& w) const {
  w.Counter("hami_scheduler_health_passes_total", "Health passes run.", static_cast<double>(stats_.passes));
  w.Counter("hami_scheduler_handshake_requests_total", "Requesting_ handshakes written to nodes.",
            static_cast<double>(stats_.handshake_patches));
  w.Counter("hami_scheduler_device_cleanups_total",
            "Times a vendor's devices were withheld from a node as unhealthy.",
            static_cast<double>(stats_.cleanups));
}

}  // namespace hami::extender
