#include "k8s/json_patch.h"

#include <algorithm>
#include <boost/json.hpp>

namespace hami::k8s {
namespace json = boost::json;
namespace {

void AddOp(json::array& ops, std::string_view op, const std::string& path, const json::value* value) {
  json::object o;
  o["op"] = op;
  o["path"] = path;
  if (value != nullptr) o["value"] = *value;
  ops.emplace_back(std::move(o));
}

void Diff(const json::value& from, const json::value& to, std::string& path, json::array& ops) {
  if (from == to) return;
  const std::size_t base = path.size();
  if (from.is_object() && to.is_object()) {
    const auto& a = from.get_object();
    const auto& b = to.get_object();
    for (const auto& kv : a) {
      if (b.contains(kv.key())) continue;
      path.append("/").append(JsonPointerToken(kv.key()));
      AddOp(ops, "remove", path, nullptr);
      path.resize(base);
    }
    for (const auto& kv : b) {
      path.append("/").append(JsonPointerToken(kv.key()));
      if (const json::value* old = a.if_contains(kv.key())) {
        Diff(*old, kv.value(), path, ops);
      } else {
        AddOp(ops, "add", path, &kv.value());
      }
      path.resize(base);
    }
    return;
  }
  if (from.is_array() && to.is_array()) {
    const auto& a = from.get_array();
    const auto& b = to.get_array();
    const std::size_t common = std::min(a.size(), b.size());
    for (std::size_t i = 0; i < common; ++i) {
      path.append("/").append(std::to_string(i));
      Diff(a[i], b[i], path, ops);
      path.resize(base);
    }
    for (std::size_t i = common; i < b.size(); ++i) {
      path.append("/").append(std::to_string(i));
      AddOp(ops, "add", path, &b[i]);
      path.resize(base);
    }
    // From the end, so that each index is still valid when its operation applies.
    for (std::size_t i = a.size(); i > common; --i) {
      path.append("/").append(std::to_string(i - 1));
      AddOp(ops, "remove", path, nullptr);
      path.resize(base);
    }
    return;
  }
  AddOp(ops, "replace", path, &to);
}

}  // namespace

std::string JsonPointerToken(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

json::array JsonPatch(const json::value& from, const json::value& to) {
  json::array ops;
  std::string path;
  Diff(from, to, path, ops);
  return ops;
}

}  // namespace hami::k8s
