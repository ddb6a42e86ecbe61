#pragma once
// Server-side printing: the meta.k8s.io/v1 Table that `kubectl get` asks for (Accept: ...;as=Table;...), with
// the columns kube-apiserver prints for the kinds served here (pods: NAME READY STATUS RESTARTS AGE, ...).
#include <boost/json/object.hpp>
#include <chrono>
#include <string>
#include <string_view>

#include "core/clock.h"
#include "sim/apiserver/store.h"

namespace hami::sim {

// Whether an Accept header asks for a Table (`application/json;as=Table;v=v1;g=meta.k8s.io`).
bool WantsTable(std::string_view accept);

// A Table of `list.items` (rows carry the full object). `now` computes AGE. Without headers the Table has no
// columnDefinitions (watch events after the first).
boost::json::object TableForList(const ResourceType& type, const ListResult& list, TimePoint now,
                                 bool include_headers = true);

// kubectl's short durations: "45s", "3m12s", "2d4h", "400d".
std::string HumanDuration(std::chrono::seconds d);

}  // namespace hami::sim
