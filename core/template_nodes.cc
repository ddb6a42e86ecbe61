#include "core/template_nodes.h"

#include <algorithm>
#include <unordered_set>
#include <utility>

#include <fmt/format.h>

namespace hami {

namespace {

// The template's registrations that could not be read, as one clause for its refusal ("" when none).
std::string UnreadableRegistrations(const ClusterState& scratch, const std::string& node) {
  const NodeEntry* entry = scratch.FindNode(node);
  if (entry == nullptr) return "";
  std::string out;
  for (std::size_t b = 0; b < entry->discovery_error.size(); ++b) {
    if (entry->discovery_error[b].empty()) continue;
    out += fmt::format("; its {} registration cannot be read: {}", scratch.backends().at(b).Vendor(),
                       entry->discovery_error[b]);
  }
  return out;
}

// Both answers as one: `real`'s over the registry's candidates, `posted`'s over the templates.
FilterOutcome Merge(FilterOutcome real, FilterOutcome posted, const std::vector<std::string>& candidates) {
  FilterOutcome out;
  std::unordered_set<std::string> fits(real.fitting.begin(), real.fitting.end());
  fits.insert(posted.fitting.begin(), posted.fitting.end());
  for (const std::string& c : candidates)
    if (fits.contains(c)) out.fitting.push_back(c);
  out.fitting_count = out.fitting.size();
  out.kind = out.fitting.empty() ? FilterOutcome::Kind::kUnschedulable : FilterOutcome::Kind::kFitting;
  // Where the device policy alone would put the pod: the better of the two answers' choices.
  const bool on_template = !posted.best.empty() &&
                           (real.best.empty() || posted.best.front().second > real.best.front().second);
  FilterOutcome& chosen = on_template ? posted : real;
  out.node = std::move(chosen.node);
  out.devices = std::move(chosen.devices);
  out.failed_nodes = std::move(real.failed_nodes);
  out.failed_nodes.merge(posted.failed_nodes);
  out.unresolvable = std::move(real.unresolvable);
  out.unresolvable.merge(posted.unresolvable);
  out.best = std::move(real.best);
  out.best.insert(out.best.end(), posted.best.begin(), posted.best.end());
  std::stable_sort(out.best.begin(), out.best.end(),
                   [](const auto& x, const auto& y) { return x.second > y.second; });
  if (out.best.size() > 10) out.best.resize(10);
  return out;
}

}  // namespace

FilterOutcome FilterWithTemplates(ClusterState& state, const SchedulerOptions& options, const PodView& pod,
                                  const Result<PodRequests>& requests,
                                  const std::vector<std::string>& candidates,
                                  std::span<const NodeView> templates, TimePoint now) {
  // Every fitting node, not the one the policy prefers: the autoscaler chooses among node groups itself.
  SchedulerOptions all = options;
  all.filter_mode = FilterMode::kAllFitting;
  std::unordered_set<std::string_view> template_names;
  for (const NodeView& t : templates) template_names.insert(t.name);
  std::vector<std::string> registered, posted;
  for (const std::string& c : candidates) (template_names.contains(c) ? posted : registered).push_back(c);

  // The templates in a registry of their own, empty but for them: nothing runs on a node not made yet. The
  // namespaces' quotas are the cluster's, wherever the pod would run.
  ClusterState scratch(state.backends());
  scratch.quotas() = state.quotas();
  for (const NodeView& t : templates) scratch.UpsertNode(t);

  FilterOutcome real = Scheduler(state, all).Filter(pod, requests, registered, now);
  if (real.kind == FilterOutcome::Kind::kError || real.kind == FilterOutcome::Kind::kPassThrough) return real;
  FilterOutcome hypothetical = Scheduler(scratch, all).Filter(pod, requests, posted, now);
  if (hypothetical.kind == FilterOutcome::Kind::kError) return hypothetical;
  for (auto& [node, reason] : hypothetical.failed_nodes) reason += UnreadableRegistrations(scratch, node);
  return Merge(std::move(real), std::move(hypothetical), candidates);
}

}  // namespace hami
