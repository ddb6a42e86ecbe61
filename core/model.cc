#include "core/model.h"

#include <algorithm>

namespace hami {

bool LabelSelector::Matches(const Labels& labels) const {
  for (const auto& [key, value] : match_labels) {
    auto it = labels.find(key);
    if (it == labels.end() || it->second != value) return false;
  }
  for (const Requirement& r : expressions) {
    auto it = labels.find(r.key);
    const bool has = it != labels.end();
    const bool listed = has && std::find(r.values.begin(), r.values.end(), it->second) != r.values.end();
    switch (r.op) {
      case Requirement::Op::kIn:
        if (!listed) return false;
        break;
      case Requirement::Op::kNotIn:
        if (listed) return false;
        break;
      case Requirement::Op::kExists:
        if (!has) return false;
        break;
      case Requirement::Op::kDoesNotExist:
        if (has) return false;
        break;
    }
  }
  return true;
}

}  // namespace hami
