#include "extender/ledger_feed.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

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
  const std::string uid = UidOf(pod);
  auto decoded = AllocationFromAnnotations(pod, *backends_);
  if (!decoded) {
    ++stats_.annotation_errors;
    // Once per pod: every later event of the pod would say the same.
    if (annotation_warned_.insert(uid).second)
      spdlog::warn("pod {}: allocation annotations ignored: {}", pod.Key(), decoded.error().message);
    return;
  }
  if (!*decoded) return;
  state_.AddPod(std::move(**decoded));
  if (AllInitContainersSucceeded(pod)) state_.ReleaseInitContainers(uid);
}

void LedgerFeed::Forget(const std::string& uid) {
  state_.RemovePod(uid);
  annotation_warned_.erase(uid);
}

std::vector<std::string> LedgerFeed::Orphans(const std::map<std::string, PodView>& pods,
                                             const std::function<bool(const std::string&)>& reserved) const {
  std::vector<std::string> orphans;
  state_.ForEachPod([&](const PodAllocation& a, const auto&) {
    if (reserved(a.uid)) return;
    auto it = pods.find(a.ns + "/" + a.name);
    if (it == pods.end() || UidOf(it->second) != a.uid ||
        !it->second.annotations.contains(keys::kAssignedNode))
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
