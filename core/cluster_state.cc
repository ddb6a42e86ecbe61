#include "core/cluster_state.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/keys.h"
#include "core/strings.h"

namespace hami {

ClusterState::ClusterState(const Backends& backends)
    : backends_(&backends),
      quotas_(backends),
      nodes_with_(backends.size(), 0),
      waiting_count_(backends.size(), 0) {
  for (const auto& b : backends) unit_shares_ = unit_shares_ || b->Spec().resources.cores_share_of_units;
  for (std::size_t b = 0; b < backends.size(); ++b) {
    if (backends.spec(b).pool.Active()) pool_backends_.push_back(b);
  }
  if (!pool_backends_.empty()) {
    pool_ = std::make_unique<NodeEntry>();
    pool_->vendor_range.assign(backends.size(), {0, 0});
    pool_->discovery_error.assign(backends.size(), "");
  }
}

bool ClusterState::IsPoolVendor(std::string_view vendor) const {
  for (std::size_t b : pool_backends_) {
    if (backends_->at(b).Vendor() == vendor) return true;
  }
  return false;
}

bool ClusterState::IsPoolServer(const NodeView& node) const {
  for (std::size_t b : pool_backends_) {
    if (node.labels.contains(backends_->spec(b).pool.server_label)) return true;
  }
  return false;
}

bool ClusterState::DiscoverPoolPart(NodeEntry& entry, std::size_t b,
                                    Result<std::vector<DeviceInfo>> discovered) {
  if (!discovered) {
    // Keep what the server had: a bad value must not take the cards of running pods out of the pool.
    entry.discovery_error[b] = discovered.error().message;
    return false;
  }
  entry.discovery_error[b].clear();
  for (DeviceInfo& d : *discovered) d.vendor = backends_->at(b).Vendor();
  auto part = pool_parts_.find(entry.node.name);
  if (part == pool_parts_.end()) {
    if (discovered->empty()) return false;
    part = pool_parts_.emplace(entry.node.name, std::vector<std::vector<DeviceInfo>>(backends_->size()))
               .first;
  }
  if (part->second[b] == *discovered) return false;
  part->second[b] = std::move(*discovered);
  if (std::all_of(part->second.begin(), part->second.end(), [](const auto& cards) { return cards.empty(); }))
    pool_parts_.erase(part);
  return true;
}

void ClusterState::RebuildPool() {
  std::vector<std::vector<DeviceInfo>> per_backend(backends_->size());
  for (const auto& [server, part] : pool_parts_) {
    for (std::size_t b : pool_backends_)
      per_backend[b].insert(per_backend[b].end(), part[b].begin(), part[b].end());
  }
  RebuildLayout(*pool_, std::move(per_backend));
  // The pool is every client's: pods refused on any of them may fit now.
  grown_.changed.erase(pool_->node.name);
  for (const auto& [name, entry] : nodes_) {
    if (entry.pool != nullptr) grown_.changed.insert(name);
  }
  ++changes_;
}

void ClusterState::ApplyPool(const PodRecord& record, int sign) {
  if (!record.pool || pool_ == nullptr) return;
  std::vector<DeviceCharge> charges;  // the pod's pool cards alone
  for (const DeviceCharge& c : record.charges) {
    if (IsPoolVendor(c.vendor)) charges.push_back(c);
  }
  NodeEntry& pool = *pool_;
  pool.unknown_device_charges +=
      sign * ApplyCharges(pool, record.allocation, charges, sign,
                          NodeUsage{pool.usage, pool.mig_in_use, pool.classes_in_use, pool.totals});
}

std::vector<DeviceCharge> ClusterState::QuotaCharges(const std::vector<DeviceCharge>& charges,
                                                     std::string_view node) const {
  if (!unit_shares_) return charges;
  std::vector<DeviceCharge> out = charges;
  const NodeEntry* entry = FindNode(node);
  for (DeviceCharge& c : out) {
    const Backend* b = backends_->Find(c.vendor);
    if (b == nullptr || !b->Spec().resources.cores_share_of_units) continue;
    std::int64_t units = 0;  // the card's compute units; 0 while the node does not list it
    if (entry != nullptr) {
      auto d = entry->by_uuid.find(c.uuid);
      if (d != entry->by_uuid.end()) {
        const DeviceInfo& card = entry->devices[static_cast<std::size_t>(d->second)];
        if (card.vendor == c.vendor) units = card.devcore.value();
      }
    }
    const std::int64_t percent = units > 0 ? (c.cores.value() * 100 + units - 1) / units : 100;
    c.cores = Cores(std::min<std::int64_t>(percent, 100));
  }
  return out;
}

void ClusterState::UpsertNode(const NodeView& node) {
  auto [it, inserted] = nodes_.try_emplace(node.name);
  NodeEntry& entry = it->second;
  // Only what a reader can see moves the generation: the device plugins' handshake rewrites every node every
  // few seconds and changes none of it.
  bool seen_change = inserted || entry.node.labels != node.labels;
  for (const auto& b : *backends_) {
    const std::string& key = b->Spec().keys.node_lock;
    if (key.empty() || seen_change) continue;
    const Annotations& was = entry.node.annotations;
    const auto before = was.find(key);
    const auto after = node.annotations.find(key);
    seen_change = (before == was.end()) != (after == node.annotations.end()) ||
                  (after != node.annotations.end() && before->second != after->second);
  }
  const std::vector<DeviceInfo> devices_before = seen_change ? std::vector<DeviceInfo>{} : entry.devices;
  const std::vector<std::string> errors_before = entry.discovery_error;
  entry.node = node;
  const std::size_t nb = backends_->size();
  if (inserted) {
    entry.vendor_range.assign(nb, {0, 0});
    entry.discovery_error.assign(nb, "");
    if (auto b = blocks_.find(node.name); b != blocks_.end()) entry.blocked = b->second;
  }
  std::vector<std::vector<DeviceInfo>> per_backend(nb);
  bool pool_changed = false;
  for (std::size_t b = 0; b < nb; ++b) {
    const auto [begin, end] = entry.vendor_range[b];
    auto discovered = backends_->at(b).Discover(node);
    if (backends_->spec(b).pool.Active()) {  // a server's cards are the pool's, not the node's
      pool_changed = DiscoverPoolPart(entry, b, std::move(discovered)) || pool_changed;
      continue;
    }
    if (discovered) {
      per_backend[b] = std::move(*discovered);
      entry.discovery_error[b].clear();
    } else {
      // Keep what we had: a plugin writing a bad value must not make running pods' devices vanish.
      per_backend[b].assign(entry.devices.begin() + begin, entry.devices.begin() + end);
      entry.discovery_error[b] = discovered.error().message;
    }
  }
  RebuildLayout(entry, std::move(per_backend));
  if (pool_ != nullptr) {
    const NodeEntry* pool = IsPoolServer(node) ? nullptr : pool_.get();
    if (pool != entry.pool) grown_.changed.insert(node.name);
    entry.pool = pool;
  }
  if (pool_changed) RebuildPool();
  if (seen_change || entry.devices != devices_before || entry.discovery_error != errors_before) ++changes_;
}

void ClusterState::RemoveVendorDevices(std::string_view node, std::size_t backend) {
  ++changes_;
  auto it = nodes_.find(std::string(node));
  if (it == nodes_.end()) return;
  NodeEntry& entry = it->second;
  std::vector<std::vector<DeviceInfo>> per_backend(backends_->size());
  for (std::size_t b = 0; b < backends_->size(); ++b) {
    if (b == backend) continue;
    const auto [begin, end] = entry.vendor_range[b];
    per_backend[b].assign(entry.devices.begin() + begin, entry.devices.begin() + end);
  }
  RebuildLayout(entry, std::move(per_backend));
}

void ClusterState::CountVendors(const NodeEntry& entry, int sign) {
  for (std::size_t b = 0; b < entry.vendor_range.size() && b < nodes_with_.size(); ++b) {
    const auto [begin, end] = entry.vendor_range[b];
    if (begin < end) nodes_with_[b] += static_cast<std::size_t>(sign);
  }
}

void ClusterState::RebuildLayout(NodeEntry& entry, std::vector<std::vector<DeviceInfo>> per_backend) {
  CountVendors(entry, -1);
  std::vector<DeviceInfo> devices;
  std::vector<int> backend_of;
  for (std::size_t b = 0; b < per_backend.size(); ++b) {
    const int begin = static_cast<int>(devices.size());
    for (auto& d : per_backend[b]) {
      d.vendor = backends_->at(b).Vendor();
      devices.push_back(std::move(d));
      backend_of.push_back(static_cast<int>(b));
    }
    entry.vendor_range[b] = {begin, static_cast<int>(devices.size())};
  }
  CountVendors(entry, +1);
  const bool unchanged = devices == entry.devices;
  entry.devices = std::move(devices);
  entry.backend_of = std::move(backend_of);
  entry.by_uuid.clear();
  entry.caps.clear();
  entry.has_mig = false;
  entry.totals.count = entry.totals.cores = entry.totals.mem = 0;
  for (std::size_t i = 0; i < entry.devices.size(); ++i) {
    const DeviceInfo& d = entry.devices[i];
    entry.by_uuid.emplace(d.id, static_cast<int>(i));
    entry.caps.push_back(DeviceCaps::Of(d));
    entry.has_mig = entry.has_mig || entry.caps.back().mig;
    entry.totals.count += d.count;
    entry.totals.cores += d.devcore.value();
    entry.totals.mem += d.devmem.value();
  }
  // Cordons are read from the live node object (docs/DECISIONS.md, D6).
  if (auto c = entry.node.annotations.find(keys::kDeviceCordon); c != entry.node.annotations.end()) {
    for (std::string_view raw : Split(c->second, ',')) {
      const std::string_view id = Trim(raw);
      if (id.empty()) continue;
      if (auto d = entry.by_uuid.find(std::string(id)); d != entry.by_uuid.end()) {
        entry.caps[static_cast<std::size_t>(d->second)].cordoned = true;
      }
    }
  }
  if (!unchanged || entry.usage.size() != entry.devices.size()) ReapplyUsage(entry);
  if (!unchanged) grown_.changed.insert(entry.node.name);
}

void ClusterState::ReapplyUsage(NodeEntry& entry) {
  entry.usage.assign(entry.devices.size(), DeviceUsage{});
  entry.mig_in_use.assign(entry.devices.size(), {});
  entry.classes_in_use.assign(entry.devices.size(), {});
  entry.unknown_device_charges = 0;
  entry.allocations_in_flight = 0;
  entry.totals.used = entry.totals.used_cores = entry.totals.used_mem = 0;
  if (&entry == pool_.get()) {
    for (const std::string& uid : pool_pods_) {
      if (auto p = pods_.find(uid); p != pods_.end()) ApplyPool(p->second, +1);
    }
    return;
  }
  auto pods = pods_by_node_.find(entry.node.name);
  if (pods == pods_by_node_.end()) return;
  for (const auto& uid : pods->second) {
    auto p = pods_.find(uid);
    if (p == pods_.end()) continue;
    Apply(entry, p->second, +1);
    if (!unit_shares_) continue;
    // The node's cards changed: a share of compute units may be another percent now.
    PodRecord& record = p->second;
    std::vector<DeviceCharge> quota = QuotaCharges(record.charges, entry.node.name);
    if (quota == record.quota) continue;
    quotas_.RemoveUsage(record.allocation.ns, record.quota);
    record.quota = std::move(quota);
    quotas_.AddUsage(record.allocation.ns, record.quota);
  }
}

void ClusterState::RemoveNode(std::string_view node) {
  ++changes_;
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return;
  CountVendors(it->second, -1);
  nodes_.erase(it);
  if (auto part = pool_parts_.find(node); part != pool_parts_.end()) {
    pool_parts_.erase(part);
    RebuildPool();
  }
}

void ClusterState::SetVendorBlocks(const std::string& node, std::vector<std::string> reasons) {
  if (std::all_of(reasons.begin(), reasons.end(), [](const std::string& r) { return r.empty(); }))
    reasons.clear();
  if (!reasons.empty()) reasons.resize(backends_->size());
  const auto before = blocks_.find(node);
  if (before == blocks_.end() ? !reasons.empty() : before->second != reasons) ++changes_;
  if (reasons.empty()) {
    blocks_.erase(node);
  } else {
    reasons.resize(backends_->size());
    blocks_[node] = reasons;
  }
  if (auto it = nodes_.find(node); it != nodes_.end()) {
    // A vendor opened again: the node may take pods it refused.
    for (std::size_t b = 0; b < it->second.blocked.size(); ++b) {
      if (!it->second.blocked[b].empty() && (b >= reasons.size() || reasons[b].empty()))
        grown_.changed.insert(node);
    }
    it->second.blocked = std::move(reasons);
  }
  if (pool_ == nullptr) return;
  // A pool vendor closed on any node (a pod's allocation of it that cannot be read) closes the pool: the
  // cards that pod holds may be any server's.
  std::vector<std::string> pool_blocked(backends_->size());
  for (std::size_t b : pool_backends_) {
    for (const auto& [name, why] : blocks_) {
      if (b < why.size() && !why[b].empty()) {
        pool_blocked[b] = why[b];
        break;
      }
    }
  }
  if (std::all_of(pool_blocked.begin(), pool_blocked.end(), [](const std::string& r) { return r.empty(); }))
    pool_blocked.clear();
  if (pool_->blocked == pool_blocked) return;
  const bool opened = pool_blocked.size() < pool_->blocked.size();  // the pool's last block is gone
  pool_->blocked = std::move(pool_blocked);
  for (const auto& [name, entry] : nodes_) {
    if (opened && entry.pool != nullptr) grown_.changed.insert(name);
  }
}

const NodeEntry* ClusterState::FindNode(std::string_view node) const {
  auto it = nodes_.find(node);
  return it == nodes_.end() ? nullptr : &it->second;
}

std::vector<std::string> ClusterState::NodeNames() const {
  std::vector<std::string> out;
  out.reserve(nodes_.size());
  for (const auto& [name, e] : nodes_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// Adds `sign` pods of `pod_class` to a card's holders; a class no pod holds any more is dropped.
void CountClass(CardClasses& classes, std::uint8_t pod_class, int sign) {
  auto it = std::find_if(classes.begin(), classes.end(),
                         [&](const ClassCount& c) { return c.pod_class >= pod_class; });
  if (it == classes.end() || it->pod_class != pod_class) {
    if (sign > 0) classes.insert(it, ClassCount{pod_class, sign});
    return;
  }
  it->pods += sign;
  if (it->pods <= 0) classes.erase(it);
}

}  // namespace

int ApplyCharges(const NodeEntry& node, const PodAllocation& pod, int sign, NodeUsage into) {
  return ApplyCharges(node, pod, codec::CollapseDevices(pod.devices, pod.num_init), sign, into);
}

int ApplyCharges(const NodeEntry& node, const PodAllocation& pod, const std::vector<DeviceCharge>& charges,
                 int sign, NodeUsage into) {
  int unknown = 0;
  for (const auto& c : charges) {
    auto d = node.by_uuid.find(c.uuid);
    if (d == node.by_uuid.end() || node.devices[static_cast<std::size_t>(d->second)].vendor != c.vendor) {
      ++unknown;
      continue;
    }
    auto& u = into.usage[static_cast<std::size_t>(d->second)];
    u.used += sign * c.slots;
    u.mem += MiB(sign * c.mem.value());
    u.cores += Cores(sign * c.cores.value());
    into.totals.used += sign * c.slots;
    into.totals.used_mem += sign * c.mem.value();
    into.totals.used_cores += sign * c.cores.value();
    for (const auto& [vendor, pod_class] : pod.classes) {
      if (vendor == c.vendor) CountClass(into.classes[static_cast<std::size_t>(d->second)], pod_class, sign);
    }
  }
  for (const auto& m : pod.mig) {
    auto d = node.by_uuid.find(m.gpu_uuid);
    if (d == node.by_uuid.end()) continue;
    auto& slots = into.mig[static_cast<std::size_t>(d->second)];
    if (sign > 0) {
      slots.push_back(MigInUse{m.profile, m.placement});
    } else {
      auto it = std::find_if(slots.begin(), slots.end(), [&](const MigInUse& s) {
        return s.profile == m.profile && s.placement == m.placement;
      });
      if (it != slots.end()) slots.erase(it);
    }
  }
  return unknown;
}

void ClusterState::Apply(NodeEntry& entry, const PodRecord& record, int sign) {
  if (record.allocation.in_flight) entry.allocations_in_flight += sign;
  if (record.pool) {
    std::vector<DeviceCharge> own;  // the pool's cards are charged in the pool (ApplyPool)
    for (const DeviceCharge& c : record.charges) {
      if (!IsPoolVendor(c.vendor)) own.push_back(c);
    }
    entry.unknown_device_charges +=
        sign * ApplyCharges(entry, record.allocation, own, sign,
                            NodeUsage{entry.usage, entry.mig_in_use, entry.classes_in_use, entry.totals});
    return;
  }
  entry.unknown_device_charges +=
      sign * ApplyCharges(entry, record.allocation, record.charges, sign,
                          NodeUsage{entry.usage, entry.mig_in_use, entry.classes_in_use, entry.totals});
}

namespace {

// Equal as the annotations carry them: a device's index on its node is not encoded (MIG slots are compared
// through PodAllocation::mig), so a decision and the same allocation read back from the pod compare equal.
bool SameDevices(const PodDevices& a, const PodDevices& b) {
  const auto same_device = [](const ContainerDevice& x, const ContainerDevice& y) {
    return x.uuid == y.uuid && x.vendor == y.vendor && x.mem == y.mem && x.cores == y.cores;
  };
  const auto same_container = [&](const ContainerDevices& x, const ContainerDevices& y) {
    return std::equal(x.begin(), x.end(), y.begin(), y.end(), same_device);
  };
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [&](const auto& x, const auto& y) {
    return x.first == y.first &&
           std::equal(x.second.begin(), x.second.end(), y.second.begin(), y.second.end(), same_container);
  });
}

}  // namespace

bool ClusterState::AddPod(PodAllocation allocation) {
  const std::string uid = allocation.uid;
  if (auto existing = pods_.find(uid); existing != pods_.end()) {
    if (existing->second.allocation.node == allocation.node &&
        SameDevices(existing->second.allocation.devices, allocation.devices) &&
        existing->second.allocation.mig == allocation.mig &&
        existing->second.allocation.classes == allocation.classes) {
      if (existing->second.allocation.in_flight != allocation.in_flight) {
        ++changes_;
        existing->second.allocation.in_flight = allocation.in_flight;
        if (auto n = nodes_.find(allocation.node); n != nodes_.end())
          n->second.allocations_in_flight += allocation.in_flight ? 1 : -1;
      }
      return false;
    }
    RemovePod(uid);
  }
  ++changes_;
  PodRecord record;
  record.charges = codec::CollapseDevices(allocation.devices, allocation.num_init);
  record.pool = pool_ != nullptr &&
                std::any_of(record.charges.begin(), record.charges.end(),
                            [&](const DeviceCharge& c) { return IsPoolVendor(c.vendor); });
  record.allocation = std::move(allocation);
  const std::string node = record.allocation.node;
  record.quota = QuotaCharges(record.charges, node);
  quotas_.AddUsage(record.allocation.ns, record.quota);
  // A nominated pod charged on another node: its hold there no longer counts.
  if (auto n = nominated_.find(uid); n != nominated_.end() && n->second.hold.node != node)
    grown_.freed.insert(n->second.hold.node);
  if (auto w = waiting_.find(uid); w != waiting_.end() && !w->second.unplaceable) CountWaiting(w->second, -1);
  auto [it, inserted] = pods_.emplace(uid, std::move(record));
  pods_by_node_[node].insert(uid);
  if (it->second.pool) {
    pool_pods_.insert(uid);
    ApplyPool(it->second, +1);
  }
  if (auto n = nodes_.find(node); n != nodes_.end()) {
    n->second.pods.insert(uid);
    Apply(n->second, it->second, +1);
  }
  return true;
}

std::optional<PodAllocation> ClusterState::RemovePod(std::string_view uid) {
  auto it = pods_.find(std::string(uid));
  if (it == pods_.end()) return std::nullopt;
  ++changes_;
  PodRecord record = std::move(it->second);
  pods_.erase(it);
  if (record.pool) {
    pool_pods_.erase(record.allocation.uid);
    ApplyPool(record, -1);
  }
  const std::string& node = record.allocation.node;
  if (auto n = nodes_.find(node); n != nodes_.end()) {
    n->second.pods.erase(std::string(uid));
    Apply(n->second, record, -1);
  }
  if (auto p = pods_by_node_.find(node); p != pods_by_node_.end()) {
    p->second.erase(std::string(uid));
    if (p->second.empty()) pods_by_node_.erase(p);
  }
  quotas_.RemoveUsage(record.allocation.ns, record.quota);
  grown_.freed.insert(node);
  grown_.namespaces.insert(record.allocation.ns);
  if (auto w = waiting_.find(std::string(uid)); w != waiting_.end()) {
    w->second.unplaceable = false;  // a re-filter: the pod is placed again with the others
    CountWaiting(w->second, +1);
  }
  return std::move(record.allocation);
}

void ClusterState::CountWaiting(const Waiting& w, int sign) {
  for (std::size_t b : w.backends) {
    if (b < waiting_count_.size()) waiting_count_[b] += static_cast<std::size_t>(sign);
  }
}

void ClusterState::Nominate(std::int32_t priority, PodAllocation hold) {
  ++changes_;
  const std::string uid = hold.uid;
  ClearNomination(uid);
  nominated_by_node_[hold.node].push_back(uid);
  nominated_.emplace(uid, Nominated{priority, std::move(hold)});
}

void ClusterState::ClearNomination(const std::string& uid) {
  auto it = nominated_.find(uid);
  if (it == nominated_.end()) return;
  ++changes_;
  // A hold in effect (its pod not charged yet) kept pods off the node: they may fit now.
  if (!pods_.contains(uid)) grown_.freed.insert(it->second.hold.node);
  auto node = nominated_by_node_.find(it->second.hold.node);
  if (node != nominated_by_node_.end()) {
    std::erase(node->second, uid);
    if (node->second.empty()) nominated_by_node_.erase(node);
  }
  nominated_.erase(it);
}

void ClusterState::NominatedHolds(std::string_view node, std::int32_t priority, std::string_view uid,
                                  std::vector<const PodAllocation*>& out) const {
  ForEachNominated(node, [&](std::int32_t held_priority, const PodAllocation& hold) {
    if (hold.uid != uid && held_priority >= priority) out.push_back(&hold);
  });
}

const PodAllocation* ClusterState::NominationOf(const std::string& uid) const {
  auto it = nominated_.find(uid);
  return it == nominated_.end() ? nullptr : &it->second.hold;
}

void ClusterState::SetWaiting(const std::string& uid, std::vector<std::size_t> backends) {
  if (backends.empty()) {
    ClearWaiting(uid);
    return;
  }
  auto [it, inserted] = waiting_.try_emplace(uid);
  const bool counts = !it->second.unplaceable && !pods_.contains(uid);
  if (!inserted && it->second.backends == backends) return;
  ++changes_;
  if (!inserted && counts) CountWaiting(it->second, -1);
  it->second.backends = std::move(backends);
  if (counts) CountWaiting(it->second, +1);
}

void ClusterState::ClearWaiting(const std::string& uid) {
  auto it = waiting_.find(uid);
  if (it == waiting_.end()) return;
  ++changes_;
  if (!it->second.unplaceable && !pods_.contains(uid)) CountWaiting(it->second, -1);
  waiting_.erase(it);
}

void ClusterState::SetUnplaceable(const std::string& uid) {
  auto it = waiting_.find(uid);
  if (it == waiting_.end() || it->second.unplaceable) return;
  ++changes_;
  if (!pods_.contains(uid)) CountWaiting(it->second, -1);
  it->second.unplaceable = true;
}

std::vector<std::size_t> ClusterState::UnplaceableByBackend() const {
  std::vector<std::size_t> out(backends_->size(), 0);
  for (const auto& [uid, w] : waiting_) {
    if (!w.unplaceable || pods_.contains(uid)) continue;
    for (std::size_t b : w.backends) {
      if (b < out.size()) ++out[b];
    }
  }
  return out;
}

std::size_t ClusterState::WaitingFor(std::size_t backend) const {
  return backend < waiting_count_.size() ? waiting_count_[backend] : 0;
}

bool ClusterState::CountsAsWaiting(std::string_view uid) const {
  auto it = waiting_.find(std::string(uid));
  return it != waiting_.end() && !it->second.unplaceable && !pods_.contains(it->first);
}

const PodAllocation* ClusterState::FindPod(std::string_view uid) const {
  auto it = pods_.find(std::string(uid));
  return it == pods_.end() ? nullptr : &it->second.allocation;
}

void ClusterState::ReleaseInitContainers(std::string_view uid) {
  auto it = pods_.find(std::string(uid));
  if (it == pods_.end() || it->second.init_released) return;
  ++changes_;
  PodRecord& record = it->second;
  auto n = nodes_.find(record.allocation.node);
  if (n != nodes_.end()) Apply(n->second, record, -1);
  ApplyPool(record, -1);
  quotas_.RemoveUsage(record.allocation.ns, record.quota);
  record.charges = codec::AppOnlyCharges(record.allocation.devices, record.allocation.num_init);
  record.quota = QuotaCharges(record.charges, record.allocation.node);
  record.init_released = true;
  quotas_.AddUsage(record.allocation.ns, record.quota);
  if (n != nodes_.end()) Apply(n->second, record, +1);
  ApplyPool(record, +1);
  grown_.freed.insert(record.allocation.node);
  grown_.namespaces.insert(record.allocation.ns);
}

std::vector<std::size_t> UnreadableAllocationBackends(const PodView& pod, const Backends& backends) {
  std::vector<std::size_t> unreadable, carried;
  for (std::size_t b = 0; b < backends.size(); ++b) {
    const auto& key = backends.at(b).Spec().keys.allocated;
    auto v = pod.annotations.find(key);
    if (key.empty() || v == pod.annotations.end()) continue;
    carried.push_back(b);
    if (!codec::DecodePodDevices(v->second)) unreadable.push_back(b);
  }
  if (!unreadable.empty()) return unreadable;
  if (!carried.empty()) return carried;
  std::vector<std::size_t> all(backends.size());
  for (std::size_t b = 0; b < all.size(); ++b) all[b] = b;
  return all;
}

PodAllocation AllocationOf(const PodView& pod, std::string node, PodDevices devices, const Backends& backends,
                           bool in_flight) {
  PodAllocation a;
  a.uid = pod.UidOrKey();
  a.ns = pod.ns;
  a.name = pod.name;
  a.node = std::move(node);
  a.num_init = pod.init_containers.size();
  a.devices = std::move(devices);
  for (const auto& [vendor, containers] : a.devices) {
    for (auto& m : codec::MigAllocationsOf(containers)) a.mig.push_back(std::move(m));
  }
  a.classes = PodClassesOf(pod, backends, a.devices);
  a.in_flight = in_flight;
  return a;
}

std::vector<std::pair<std::string, std::uint8_t>> PodClassesOf(const PodView& pod, const Backends& backends,
                                                               const PodDevices& devices) {
  std::vector<std::pair<std::string, std::uint8_t>> out;
  for (const auto& [vendor, containers] : devices) {  // sorted by vendor
    const int b = backends.IndexOf(vendor);
    if (b < 0 || !backends.hooks(static_cast<std::size_t>(b)).pod_class) continue;
    if (const std::uint8_t c = backends.at(static_cast<std::size_t>(b)).PodClass(pod); c != 0)
      out.emplace_back(vendor, c);
  }
  return out;
}

Result<std::optional<PodAllocation>> AllocationFromAnnotations(const PodView& pod, const Backends& backends) {
  auto node = pod.annotations.find(keys::kAssignedNode);
  if (node == pod.annotations.end()) return std::optional<PodAllocation>();
  PodAllocation a;
  a.uid = pod.uid;
  a.ns = pod.ns;
  a.name = pod.name;
  a.node = node->second;
  a.num_init = pod.init_containers.size();
  if (auto phase = pod.annotations.find(keys::kBindPhase); phase != pod.annotations.end())
    a.in_flight = phase->second != keys::kBindPhaseSuccess && phase->second != keys::kBindPhaseFailed;
  for (const auto& b : backends) {
    const auto& key = b->Spec().keys.allocated;
    auto v = pod.annotations.find(key);
    if (key.empty() || v == pod.annotations.end()) continue;
    auto devices = codec::DecodePodDevices(v->second);
    if (!devices) {
      return Error{fmt::format("pod {}: annotation {}: {}", pod.Key(), key, devices.error().message)};
    }
    bool any = false;
    for (auto& ctr : *devices) {
      for (auto& d : ctr) {
        any = true;
        // Accounting follows the annotation key, whatever the entry's vendor field says.
        d.vendor = b->Vendor();
      }
    }
    if (any) a.devices[b->Vendor()] = std::move(*devices);
  }
  a.classes = PodClassesOf(pod, backends, a.devices);
  // A vendor whose plugin is handed no to-allocate list never answers `allocating`: such a pod waits on
  // nothing (docs/DECISIONS.md "Vendors without a to-allocate list").
  if (a.in_flight && !a.devices.empty()) {
    a.in_flight = std::any_of(a.devices.begin(), a.devices.end(), [&](const auto& vendor_devices) {
      const Backend* b = backends.Find(vendor_devices.first);
      // A pool vendor's client node runs no device plugin to answer.
      return b != nullptr && !b->Spec().keys.to_allocate.empty() && !b->Spec().pool.Active();
    });
  }
  if (auto m = pod.annotations.find(keys::kMigAllocations);
      m != pod.annotations.end() && !m->second.empty()) {
    auto mig = codec::DecodeMigAllocations(m->second);
    if (!mig)
      return Error{
          fmt::format("pod {}: annotation {}: {}", pod.Key(), keys::kMigAllocations, mig.error().message)};
    a.mig = std::move(*mig);
  }
  return std::optional<PodAllocation>(std::move(a));
}

}  // namespace hami
