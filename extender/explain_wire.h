#pragma once
// The JSON of an explanation (core/explain): what GET /api/explain/<ns>/<pod> answers on the metrics
// listener, what `explain -o json` prints, and what `explain --server` reads back.
#include <string>
#include <string_view>

#include "core/explain.h"
#include "core/result.h"

namespace hami::extender {

// {"pod", "requests": [...], "nodes": [{"node", "fits", "reason", "resolvable", "summary", "closest"?}],
//  "hints": [...], "error"?}; "closest": {"device", "container", "reason", "shortBy", "wanted", "memFree",
//  "memTotal", "coresUsed", "coresTotal", "tasks", "taskLimit"}.
std::string ExplanationJson(const PodExplanation& e);
// The inverse; errors name the field.
Result<PodExplanation> ParseExplanation(std::string_view body);

}  // namespace hami::extender
