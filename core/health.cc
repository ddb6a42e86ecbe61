#include "core/health.h"

#include <fmt/format.h>

#include "core/codec/stamps.h"
#include "core/quantity.h"

namespace hami {

std::int64_t AllocatableCount(const NodeView& node, const std::string& resource) {
  auto it = node.allocatable.find(resource);
  if (resource.empty() || it == node.allocatable.end()) return 0;
  auto q = Quantity::Parse(it->second);
  return q ? q->CeilValue() : 0;
}

namespace {

HealthVerdict SharedHandshake(const BackendSpec& spec, const NodeView& node, const HealthMemory& previous,
                              TimePoint now, std::chrono::seconds grace) {
  HealthVerdict v;
  v.memory = previous;
  const std::string& key = spec.keys.handshake;
  auto it = key.empty() ? node.annotations.end() : node.annotations.find(key);
  const bool present = it != node.annotations.end();
  codec::Handshake h = codec::ParseHandshake(present ? std::string_view(it->second) : "", present);
  // A request stamped far ahead of our clock would keep the node pending forever: unreadable (D10).
  if (h.kind == codec::Handshake::Kind::kRequesting && h.requested_at > now + codec::kMaxFutureSkew)
    h.kind = codec::Handshake::Kind::kMalformedRequest;
  const std::int64_t allocatable = AllocatableCount(node, spec.resources.count);

  const auto expired = [&](std::string_view what) {
    if (allocatable > 0) {
      v.why = fmt::format("{} expired but {} allocatable {} > 0: still healthy", what, spec.resources.count,
                          allocatable);
      return;
    }
    v.healthy = false;
    v.why = fmt::format("{} expired and {} allocatable is 0: device plugin gone", what, spec.resources.count);
  };

  if (h.kind != codec::Handshake::Kind::kMalformedRequest) v.memory.malformed_since.reset();
  switch (h.kind) {
    case codec::Handshake::Kind::kRequesting:
      if (now < h.requested_at + grace) {
        v.why = "handshake request pending";
      } else {
        expired("handshake request");
      }
      return v;
    case codec::Handshake::Kind::kMalformedRequest: {
      // docs/DECISIONS.md, D8: an unreadable stamp never blocks (or protects) a node forever: count it from
      // when we first saw it.
      if (!v.memory.malformed_since) v.memory.malformed_since = now;
      if (now < *v.memory.malformed_since + grace) {
        v.why = fmt::format("handshake value '{}' is unreadable; treated as a pending request", it->second);
      } else {
        expired(fmt::format("unreadable handshake value '{}'", it->second));
      }
      return v;
    }
    case codec::Handshake::Kind::kAbsent:
    case codec::Handshake::Kind::kReported:
      v.refresh = true;
      if (!key.empty()) v.handshake_patch = codec::FormatHandshakeRequest(now);
      v.why = present ? "device plugin reported" : "no handshake yet";
      return v;
  }
  return v;
}

}  // namespace

HealthVerdict EvaluateHealth(const BackendSpec& spec, const NodeView& node, const HealthMemory& previous,
                             TimePoint now, std::chrono::seconds grace) {
  if (spec.health == HealthRule::kAlwaysHealthy) {
    HealthVerdict v;
    v.refresh = true;
    v.memory = previous;
    v.why = "always healthy (capacity-based discovery)";
    return v;
  }
  HealthVerdict v = SharedHandshake(spec, node, previous, now, grace);
  if (spec.health != HealthRule::kHandshakeAndDeviceChecks) return v;

  const std::int64_t current = AllocatableCount(node, spec.resources.count);
  auto reg = node.annotations.find(spec.keys.register_annotation);
  const std::string manifest = reg == node.annotations.end() ? std::string() : reg->second;
  if (current == 0) {
    if (previous.reported_count == 0) return v;
    v.memory.reported_count = 0;
    v.memory.reported_register = manifest;
    v.healthy = false;
    v.why = fmt::format("{} allocatable dropped from {} to 0", spec.resources.count, previous.reported_count);
    return v;
  }
  if (previous.reported_count != current) {
    v.memory.reported_count = current;
    v.memory.reported_register = manifest;
    v.healthy = true;
    v.refresh = true;
    v.why = fmt::format("{} allocatable changed from {} to {}", spec.resources.count, previous.reported_count,
                        current);
    return v;
  }
  if (previous.reported_register != manifest) {
    v.memory.reported_register = manifest;
    v.refresh = true;
    v.why += "; device manifest changed";
  }
  return v;
}

bool ShowsLife(const BackendSpec& spec, const NodeView& node) {
  if (AllocatableCount(node, spec.resources.count) > 0) return true;
  auto it = spec.keys.handshake.empty() ? node.annotations.end() : node.annotations.find(spec.keys.handshake);
  return it != node.annotations.end() &&
         codec::ParseHandshake(it->second, true).kind == codec::Handshake::Kind::kReported;
}

std::vector<NodeHealthStep> NodeHealthPass(const Backends& backends, const NodeView& node,
                                           const NodeEntry* entry, NodeHealthRecord& record, TimePoint now,
                                           std::chrono::seconds grace) {
  std::vector<NodeHealthStep> steps;
  record.memory.resize(backends.size());
  for (std::size_t b = 0; b < backends.size(); ++b) {
    const BackendSpec& spec = backends.at(b).Spec();
    if (spec.health == HealthRule::kAlwaysHealthy) continue;
    // Only nodes that publish this vendor are asked (upstream stamps a handshake on every node).
    const bool publishes = (!spec.keys.register_annotation.empty() &&
                            node.annotations.contains(spec.keys.register_annotation)) ||
                           (entry != nullptr && b < entry->vendor_range.size() &&
                            entry->vendor_range[b].first != entry->vendor_range[b].second) ||
                           record.unhealthy.contains(b);
    if (!publishes) continue;
    NodeHealthStep step{b, EvaluateHealth(spec, node, record.memory[b], now, grace)};
    record.memory[b] = step.verdict.memory;
    if (!step.verdict.healthy) {
      if (record.unhealthy.insert(b).second) {
        step.withhold = true;
        record.memory[b] = HealthMemory{};
      }
    } else if (record.unhealthy.contains(b) && ShowsLife(spec, node)) {
      // Only a sign of the plugin brings devices back: a fresh request of ours is none (upstream returns
      // them on the next pass and withholds them again 60 s later, over and over).
      record.unhealthy.erase(b);
      step.restore = true;
    }
    steps.push_back(std::move(step));
  }
  return steps;
}

}  // namespace hami
