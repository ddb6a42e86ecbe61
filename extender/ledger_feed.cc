#include "extender/ledger_feed.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "core/fit.h"
#include "core/keys.h"

namespace hami::extender {
namespace {

bool AllInitContainersSucceeded(const PodView& pod) {
  if (pod.init_containers.empty() || pod.init_container_statuses.size() < pod.init_containers.size())
    return false;
  for (const auto& s : pod.init_container_statuses) {
    if (!s.terminated || s.exit_code != 0) return false;
  }
  return true;
}

}  // namespace

LedgerFeed::LedgerFeed(const Backends& backends, ClusterWriter& writer)
    : backends_(&backends), writer_(&writer), state_(backends) {}

void LedgerFeed::UpsertNode(const NodeView& node) {
  state_.UpsertNode(node);
  ReportRegistrationErrors(node);
}

void LedgerFeed::RemoveNode(const std::string& name) {
  state_.RemoveNode(name);
  registration_errors_.erase(name);
}

void LedgerFeed::ReportRegistrationErrors(const NodeView& node) {
  const NodeEntry* entry = state_.FindNode(node.name);
  if (entry == nullptr) return;
  auto& reported = registration_errors_[node.name];
  reported.resize(backends_->size());
  for (std::size_t b = 0; b < backends_->size(); ++b) {
    const std::string& error = entry->discovery_error[b];
    if (error == reported[b]) continue;  // once per node, vendor and value: every later event says the same
    reported[b] = error;
    if (error.empty()) {
      spdlog::info("node {}: {} devices readable again", node.name, backends_->at(b).Spec().vendor);
      continue;
    }
    ++stats_.registration_errors;
    const std::string message =
        fmt::format("{} device registration ignored (the devices read before stay): {}",
                    backends_->at(b).Spec().vendor, error);
    spdlog::warn("node {}: {}", node.name, message);
    writer_->Event(k8s::InvolvedObject::Of(node), "Warning", "InvalidDeviceRegistration", message);
  }
  if (std::all_of(reported.begin(), reported.end(), [](const std::string& e) { return e.empty(); }))
    registration_errors_.erase(node.name);
}

void LedgerFeed::RecordAllocation(const PodView& pod) {
  const std::string uid = pod.UidOrKey();
  auto decoded = AllocationFromAnnotations(pod, *backends_);
  if (!decoded) {
    ++stats_.annotation_errors;
    // Once per pod: every later event of the pod would say the same.
    if (annotation_warned_.insert(uid).second)
      spdlog::warn("pod {}: allocation annotations cannot be read: {}", pod.Key(), decoded.error().message);
    // A running pod uses devices nobody can name now: fail closed on its node, for the vendors it asks for
    // (all of them when its requests cannot be read either). A pod not bound yet holds nothing there.
    if (!pod.node_name.empty()) {
      std::vector<std::size_t> blocked = UnreadableAllocationBackends(pod, *backends_);
      if (const auto asked = AskedBackends(pod))
        std::erase_if(blocked, [&](std::size_t b) { return !asked->contains(b); });
      if (!blocked.empty()) {
        MarkUnreadable(pod, decoded.error().message, std::move(blocked));
      } else {
        ClearUnreadable(uid);  // it asks for no device of those vendors: nothing of theirs is in use
      }
    }
    return;
  }
  if (!*decoded) {
    ClearUnreadable(uid);
    return;
  }
  PodAllocation& allocation = **decoded;
  const std::optional<std::set<std::size_t>> asked = AskedBackends(pod);
  // A running pod that asks for devices but whose annotation names another node: which of its own node's
  // devices it uses is unknown, so its node closes to those vendors (nothing is charged on the named node).
  if (!pod.node_name.empty() && allocation.node != pod.node_name && asked && !asked->empty()) {
    MarkUnreadable(pod,
                   fmt::format("its {} annotation names node {}, not the node it runs on", keys::kAssignedNode,
                               allocation.node),
                   std::vector<std::size_t>(asked->begin(), asked->end()));
    return;
  }
  // An annotation that decodes to no device at all (a value without a single "uuid,vendor,mem,cores"
  // entry) for a vendor the running pod asks for is as unreadable as a broken one: its devices are in use.
  if (!pod.node_name.empty() && asked) {
    std::vector<std::size_t> empty;
    std::string keys;
    for (std::size_t b : *asked) {
      const std::string& key = backends_->at(b).Spec().keys.allocated;
      if (key.empty() || !pod.annotations.contains(key) ||
          allocation.devices.contains(backends_->at(b).Vendor()))
        continue;
      empty.push_back(b);
      keys += fmt::format("{}{}", keys.empty() ? "" : ", ", key);
    }
    if (!empty.empty()) {
      MarkUnreadable(pod, fmt::format("annotation {} names no device of the vendor the pod asks for", keys),
                     std::move(empty));
      return;
    }
  }
  ClearUnreadable(uid);
  if (auto dropped = KeepChargeable(pod, asked, allocation)) {
    ++stats_.foreign_charges;
    if (foreign_warned_.insert(uid).second) spdlog::warn("pod {}: {}", pod.Key(), *dropped);
    if (allocation.devices.empty()) {
      state_.RemovePod(uid);
      return;
    }
  }
  state_.AddPod(std::move(allocation));
  if (AllInitContainersSucceeded(pod)) state_.ReleaseInitContainers(uid);
}

std::optional<std::set<std::size_t>> LedgerFeed::AskedBackends(const PodView& pod) const {
  auto requests = CollectRequests(pod, *backends_);
  if (!requests) return std::nullopt;
  const std::vector<std::size_t> asked = requests->BackendsAsked();
  return std::set<std::size_t>(asked.begin(), asked.end());
}

std::optional<std::string> LedgerFeed::KeepChargeable(const PodView& pod,
                                                      const std::optional<std::set<std::size_t>>& asked,
                                                      PodAllocation& allocation) const {
  // Annotations are the pod's own: anyone who can create a pod can write them. They say which devices the
  // device plugin gave it, on the node the pod runs on, for the resources it asks for; a node or a vendor
  // beyond that is nobody's card.
  if (pod.node_name.empty()) {
    // Our own decisions are charged from their reservation until the Binding makes the pod bound; annotations
    // on a pod nobody bound (another scheduler's decision, or the pod's own) charge nothing.
    allocation.devices.clear();
    allocation.mig.clear();
    return fmt::format("not bound, but its {} annotation names node {}: nothing is charged until it is bound",
                       keys::kAssignedNode, allocation.node);
  }
  if (allocation.node != pod.node_name) {
    allocation.devices.clear();
    allocation.mig.clear();
    return fmt::format("bound to node {} but its {} annotation names node {}: its allocation is not charged",
                       pod.node_name, keys::kAssignedNode, allocation.node);
  }
  if (!asked) return std::nullopt;  // requests unreadable: the allocation stands (fail closed)
  std::unordered_set<std::string_view> vendors;
  for (std::size_t b : *asked) vendors.insert(backends_->at(b).Vendor());
  std::string dropped;
  for (auto it = allocation.devices.begin(); it != allocation.devices.end();) {
    if (vendors.contains(it->first)) {
      ++it;
      continue;
    }
    dropped += fmt::format("{}{}", dropped.empty() ? "" : ", ", it->first);
    it = allocation.devices.erase(it);
  }
  if (dropped.empty()) return std::nullopt;
  allocation.mig.clear();  // MIG instances belong to the devices of a vendor the pod does not ask for
  return fmt::format("its allocation annotations name {} devices it does not ask for: not charged", dropped);
}

void LedgerFeed::MarkUnreadable(const PodView& pod, std::string error, std::vector<std::size_t> backends) {
  const std::string uid = pod.UidOrKey();
  // The error quotes the annotation: enough of it to find the fault, not a whole 256 KiB value in every
  // refusal and event.
  constexpr std::size_t kShown = 300;
  if (error.size() > kShown) error = error.substr(0, kShown) + "...";
  UnreadableAllocation next{pod.Key(), pod.node_name, std::move(backends), std::move(error)};
  auto it = unreadable_.find(uid);
  if (it != unreadable_.end() && it->second.node == next.node && it->second.backends == next.backends &&
      it->second.error == next.error)
    return;  // reported already
  std::string previous_node = it != unreadable_.end() ? it->second.node : std::string();
  std::string vendors;
  for (std::size_t b : next.backends)
    vendors += fmt::format("{}{}", vendors.empty() ? "" : ", ", backends_->at(b).Vendor());
  const std::string message = fmt::format(
      "pod {} runs here with an allocation that cannot be read ({}): no new {} pod on this node until it "
      "reads or the pod is gone",
      pod.Key(), next.error, vendors);
  spdlog::warn("node {}: {}", pod.node_name, message);
  if (const NodeEntry* entry = state_.FindNode(pod.node_name); entry != nullptr) {
    writer_->Event(k8s::InvolvedObject::Of(entry->node), "Warning", "UnreadableAllocation", message);
  } else {
    writer_->Event(k8s::InvolvedObject::Of(pod), "Warning", "UnreadableAllocation", message);
  }
  unreadable_[uid] = std::move(next);
  if (!previous_node.empty() && previous_node != pod.node_name) RefreshBlocks(previous_node);
  RefreshBlocks(pod.node_name);
}

void LedgerFeed::ClearUnreadable(const std::string& uid) {
  auto it = unreadable_.find(uid);
  if (it == unreadable_.end()) return;
  const std::string node = it->second.node;
  spdlog::info("node {}: pod {} no longer carries an unreadable allocation", node, it->second.pod);
  unreadable_.erase(it);
  RefreshBlocks(node);
}

void LedgerFeed::RefreshBlocks(const std::string& node) {
  // Each blocked vendor names the first pod that blocks it (in no particular order: any one explains it).
  std::vector<std::string> reasons(backends_->size());
  for (const auto& [uid, u] : unreadable_) {
    if (u.node != node) continue;
    for (std::size_t b : u.backends) {
      if (reasons[b].empty())
        reasons[b] = fmt::format(
            "NodeBlocked: pod {} runs here with an allocation that cannot be read ({}); mend its annotation "
            "or delete the pod",
            u.pod, u.error);
    }
  }
  state_.SetVendorBlocks(node, std::move(reasons));
}

void LedgerFeed::TrackWaiting(const PodView& pod, bool ours) {
  const std::string uid = pod.UidOrKey();
  if (!ours || !pod.node_name.empty() || pod.terminating || pod.Finished()) {
    state_.ClearWaiting(uid);
    return;
  }
  auto requests = CollectRequests(pod, *backends_);  // unreadable: its filter is an error, not a placement
  state_.SetWaiting(uid, requests ? requests->BackendsAsked() : std::vector<std::size_t>{});
}

void LedgerFeed::StopWaiting(const std::string& uid) { state_.ClearWaiting(uid); }

void LedgerFeed::Forget(const std::string& uid) {
  state_.RemovePod(uid);
  annotation_warned_.erase(uid);
  foreign_warned_.erase(uid);
  ClearUnreadable(uid);
}

std::vector<std::string> LedgerFeed::Orphans(const std::map<std::string, PodView>& pods,
                                             const std::function<bool(const std::string&)>& reserved) const {
  std::vector<std::string> orphans;
  state_.ForEachPod([&](const PodAllocation& a, const auto&) {
    if (reserved(a.uid)) return;
    auto it = pods.find(a.ns + "/" + a.name);
    if (it == pods.end() || it->second.UidOrKey() != a.uid) {
      orphans.push_back(a.uid);
      return;
    }
    // A bound pod keeps what it was charged when its annotations go (only a hand edit removes them): its
    // devices are still in use (docs/DECISIONS.md, "Fail closed").
    if (!it->second.annotations.contains(keys::kAssignedNode) && it->second.node_name.empty())
      orphans.push_back(a.uid);
  });
  return orphans;
}

std::size_t LedgerFeed::unreadable_registrations() const {
  std::size_t n = 0;
  for (const auto& [node, errors] : registration_errors_)
    n += static_cast<std::size_t>(
        std::count_if(errors.begin(), errors.end(), [](const auto& e) { return !e.empty(); }));
  return n;
}

}  // namespace hami::extender
