#pragma once
// Label and field selectors in the query-string syntax of the Kubernetes API (`labelSelector=`,
// `fieldSelector=`). Pure; parse once per request, then match objects.
#include <boost/json/object.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace hami::sim {

// `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x,y)`, `a`, `!a`, `a>3`, `a<3`, joined by commas (AND).
class LabelSelector {
 public:
  enum class Op { kEquals, kNotEquals, kIn, kNotIn, kExists, kDoesNotExist, kGreaterThan, kLessThan };
  struct Requirement {
    std::string key;
    Op op = Op::kExists;
    std::vector<std::string> values;
  };

  // Errors quote the selector and say what was expected where.
  static Result<LabelSelector> Parse(std::string_view text);

  // `labels` is metadata.labels (nullptr when the object has none).
  bool Matches(const boost::json::object* labels) const;
  bool Empty() const { return requirements_.empty(); }

 private:
  std::vector<Requirement> requirements_;
};

// `path=value`, `path==value`, `path!=value` joined by commas; values may escape `\,`, `\=` and `\\`.
// The path is any dotted field path of the object (metadata.name, spec.nodeName, status.phase,
// involvedObject.uid, ...); a missing field reads as "" so `spec.nodeName=` selects unbound pods.
class FieldSelector {
 public:
  struct Requirement {
    std::string field;
    bool negate = false;
    std::string value;
  };

  static Result<FieldSelector> Parse(std::string_view text);

  bool Matches(const boost::json::object& object) const;
  bool Empty() const { return requirements_.empty(); }

 private:
  std::vector<Requirement> requirements_;
};

// The value a field selector compares for `path` ("" if missing; numbers and booleans as text).
std::string FieldValue(const boost::json::object& object, std::string_view path);

}  // namespace hami::sim
