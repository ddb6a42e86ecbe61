#pragma once
// Kubernetes JSON <-> core views. Only the fields the scheduler reads are kept. Errors name the object and
// the field path ("Pod default/p: spec.containers[0].resources.limits: expected an object").
#include <boost/json/value.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/model.h"
#include "core/result.h"

namespace hami::k8s {

Result<NodeView> NodeFromJson(const boost::json::value& v);
Result<PodView> PodFromJson(const boost::json::value& v);
// A pod being created (admission): it may have no name yet (metadata.generateName).
Result<PodView> PodBeingCreatedFromJson(const boost::json::value& v);
Result<ResourceQuotaView> ResourceQuotaFromJson(const boost::json::value& v);
Result<LeaseView> LeaseFromJson(const boost::json::value& v);
Result<DisruptionBudgetView> DisruptionBudgetFromJson(const boost::json::value& v);

// The objects of a `kubectl get ... -o json|yaml` document: a List (or NodeList, PodList...) or single
// objects.
struct ObjectSet {
  std::vector<NodeView> nodes;
  std::vector<PodView> pods;
  std::vector<ResourceQuotaView> quotas;
  std::vector<DisruptionBudgetView> budgets;
  std::vector<std::string> skipped;  // "Kind ns/name" of objects of other kinds (Services, ...)
};
// Adds the objects of one document; `source` names the file in errors.
Result<void> CollectObjects(const boost::json::value& document, std::string_view source, ObjectSet& out);

// Parses text that is JSON, or YAML with one or more documents, into JSON values (one per document).
Result<std::vector<boost::json::value>> ParseDocuments(std::string_view text, std::string_view source);

}  // namespace hami::k8s
