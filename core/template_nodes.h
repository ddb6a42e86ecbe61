#pragma once
// A filter over nodes that do not exist yet: Cluster Autoscaler's template nodes, posted whole in a /filter
// body (docs/DECISIONS.md, "Cluster Autoscaler's template nodes"). A template is judged by the devices its
// own annotations publish, with nothing used on them; the registry's nodes among the candidates by the
// registry and ledger as they are. Every node that fits is listed; nothing is reserved or recorded.
#include <span>
#include <string>
#include <vector>

#include "core/cluster_state.h"
#include "core/model.h"
#include "core/scheduler.h"

namespace hami {

// The decision for `pod` among `candidates`, where each name of `templates` is a node the registry does not
// have, described by that object. Changes nothing in `state`. The outcome is kFitting with every fitting
// candidate (in the candidates' order), kUnschedulable with every candidate's reason (a template whose
// registration cannot be read says so), kPassThrough for a pod asking for no device of ours, or kError.
FilterOutcome FilterWithTemplates(ClusterState& state, const SchedulerOptions& options, const PodView& pod,
                                  const Result<PodRequests>& requests,
                                  const std::vector<std::string>& candidates,
                                  std::span<const NodeView> templates, TimePoint now);

}  // namespace hami
