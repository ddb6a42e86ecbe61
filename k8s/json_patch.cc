#include "k8s/json_patch.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/json.hpp>
#include <charconv>
#include <optional>

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

std::optional<double> AsNumber(const json::value& v) {
  switch (v.kind()) {
    case json::kind::int64:
      return static_cast<double>(v.get_int64());
    case json::kind::uint64:
      return static_cast<double>(v.get_uint64());
    case json::kind::double_:
      return v.get_double();
    default:
      return std::nullopt;
  }
}

// ---------------------------------------------------------------------------------------------------------
// Applying a JSON patch

// Where a pointer lands: the container holding the last token (or nullptr for the root).
struct Location {
  json::value* parent = nullptr;
  std::string token;
};

Result<Location> Locate(json::value& doc, const std::vector<std::string>& tokens, std::string_view pointer) {
  Location loc;
  if (tokens.empty()) return loc;
  json::value* cur = &doc;
  for (std::size_t i = 0; i + 1 < tokens.size(); ++i) {
    const std::string& t = tokens[i];
    if (auto* o = cur->if_object()) {
      auto it = o->find(t);
      if (it == o->end()) return Error{fmt::format("path {}: \"{}\" does not exist", pointer, t)};
      cur = &it->value();
    } else if (auto* a = cur->if_array()) {
      std::size_t idx = 0;
      auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), idx);
      if (ec != std::errc{} || p != t.data() + t.size() || idx >= a->size() ||
          (t.size() > 1 && t[0] == '0')) {
        return Error{fmt::format("path {}: array index \"{}\" out of range", pointer, t)};
      }
      cur = &(*a)[idx];
    } else {
      return Error{fmt::format("path {}: \"{}\" is not an object or array", pointer, t)};
    }
  }
  loc.parent = cur;
  loc.token = tokens.back();
  return loc;
}

Result<std::size_t> ArrayIndex(const json::array& a, std::string_view t, std::string_view pointer,
                               bool for_insert) {
  std::size_t idx = 0;
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), idx);
  const std::size_t limit = for_insert ? a.size() : a.size() - (a.empty() ? 0 : 1);
  if (ec != std::errc{} || p != t.data() + t.size() || (t.size() > 1 && t[0] == '0') ||
      (a.empty() && !for_insert) || idx > limit) {
    return Error{fmt::format("path {}: array index \"{}\" out of range (size {})", pointer, t, a.size())};
  }
  return idx;
}

Result<json::value*> Resolve(json::value& doc, std::string_view pointer) {
  auto tokens = ParseJsonPointer(pointer);
  if (!tokens) return tokens.error();
  auto loc = Locate(doc, *tokens, pointer);
  if (!loc) return loc.error();
  if (!loc->parent) return &doc;
  if (auto* o = loc->parent->if_object()) {
    auto it = o->find(loc->token);
    if (it == o->end()) return Error{fmt::format("path {}: missing value", pointer)};
    return &it->value();
  }
  if (auto* a = loc->parent->if_array()) {
    auto idx = ArrayIndex(*a, loc->token, pointer, false);
    if (!idx) return idx.error();
    return &(*a)[*idx];
  }
  return Error{fmt::format("path {}: parent is not an object or array", pointer)};
}

Result<void> Add(json::value& doc, std::string_view pointer, json::value value) {
  auto tokens = ParseJsonPointer(pointer);
  if (!tokens) return tokens.error();
  auto loc = Locate(doc, *tokens, pointer);
  if (!loc) return loc.error();
  if (!loc->parent) {
    doc = std::move(value);
    return {};
  }
  if (auto* o = loc->parent->if_object()) {
    (*o)[loc->token] = std::move(value);
    return {};
  }
  if (auto* a = loc->parent->if_array()) {
    if (loc->token == "-") {
      a->push_back(std::move(value));
      return {};
    }
    auto idx = ArrayIndex(*a, loc->token, pointer, true);
    if (!idx) return idx.error();
    a->insert(a->begin() + static_cast<std::ptrdiff_t>(*idx), std::move(value));
    return {};
  }
  return Error{fmt::format("path {}: parent is not an object or array", pointer)};
}

Result<json::value> Remove(json::value& doc, std::string_view pointer) {
  auto tokens = ParseJsonPointer(pointer);
  if (!tokens) return tokens.error();
  auto loc = Locate(doc, *tokens, pointer);
  if (!loc) return loc.error();
  if (!loc->parent) return Error{"cannot remove the whole document"};
  if (auto* o = loc->parent->if_object()) {
    auto it = o->find(loc->token);
    if (it == o->end()) return Error{fmt::format("path {}: missing value, unable to remove", pointer)};
    json::value out = std::move(it->value());
    o->erase(it);
    return out;
  }
  if (auto* a = loc->parent->if_array()) {
    auto idx = ArrayIndex(*a, loc->token, pointer, false);
    if (!idx) return idx.error();
    json::value out = std::move((*a)[*idx]);
    a->erase(a->begin() + static_cast<std::ptrdiff_t>(*idx));
    return out;
  }
  return Error{fmt::format("path {}: parent is not an object or array", pointer)};
}

Result<void> ApplyOne(json::value& doc, const json::object& op) {
  const std::string_view name = op.at("op").get_string();
  const std::string_view path = op.at("path").get_string();
  if (name == "add") return Add(doc, path, op.at("value"));
  if (name == "remove") {
    auto r = Remove(doc, path);
    if (!r) return r.error();
    return {};
  }
  if (name == "replace") {
    auto target = Resolve(doc, path);
    if (!target) return Error{fmt::format("replace operation does not apply: doc is missing key: {}", path)};
    **target = op.at("value");
    return {};
  }
  if (name == "test") {
    auto target = Resolve(doc, path);
    if (!target) return Error{fmt::format("testing value {} failed: {}", path, target.error().message)};
    if (!JsonEqual(**target, op.at("value")))
      return Error{fmt::format("testing value {} failed: test failed", path)};
    return {};
  }
  const std::string_view from = op.at("from").get_string();
  if (name == "move") {
    if (path.size() > from.size() && path.starts_with(from) && path[from.size()] == '/') {
      return Error{fmt::format("move operation: path {} is inside from {}", path, from)};
    }
    auto value = Remove(doc, from);
    if (!value) return value.error();
    return Add(doc, path, std::move(*value));
  }
  // copy
  auto source = Resolve(doc, from);
  if (!source) return source.error();
  json::value copy = **source;
  return Add(doc, path, std::move(copy));
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

bool JsonEqual(const json::value& a, const json::value& b) {
  auto na = AsNumber(a);
  auto nb = AsNumber(b);
  if (na || nb) return na && nb && *na == *nb;
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case json::kind::object: {
      const auto& oa = a.get_object();
      const auto& ob = b.get_object();
      if (oa.size() != ob.size()) return false;
      for (const auto& kv : oa) {
        const json::value* other = ob.if_contains(kv.key());
        if (!other || !JsonEqual(kv.value(), *other)) return false;
      }
      return true;
    }
    case json::kind::array: {
      const auto& aa = a.get_array();
      const auto& ab = b.get_array();
      if (aa.size() != ab.size()) return false;
      for (std::size_t i = 0; i < aa.size(); ++i) {
        if (!JsonEqual(aa[i], ab[i])) return false;
      }
      return true;
    }
    default:
      return a == b;
  }
}

Result<std::vector<std::string>> ParseJsonPointer(std::string_view pointer) {
  std::vector<std::string> tokens;
  if (pointer.empty()) return tokens;
  if (pointer[0] != '/') return Error{fmt::format("JSON pointer \"{}\" must start with '/'", pointer)};
  std::string cur;
  for (std::size_t i = 1; i <= pointer.size(); ++i) {
    if (i == pointer.size() || pointer[i] == '/') {
      tokens.push_back(std::move(cur));
      cur.clear();
      continue;
    }
    if (pointer[i] == '~') {
      if (i + 1 < pointer.size() && pointer[i + 1] == '0') {
        cur += '~';
      } else if (i + 1 < pointer.size() && pointer[i + 1] == '1') {
        cur += '/';
      } else {
        return Error{fmt::format("JSON pointer \"{}\": '~' must be followed by 0 or 1", pointer)};
      }
      ++i;
      continue;
    }
    cur += pointer[i];
  }
  return tokens;
}

Result<void> ValidateJsonPatch(const json::value& ops) {
  if (!ops.is_array()) return Error{"a JSON patch must be a list of operations"};
  for (std::size_t i = 0; i < ops.get_array().size(); ++i) {
    const json::value& op = ops.get_array()[i];
    const json::object* o = op.if_object();
    if (!o) return Error{fmt::format("operation {}: not an object", i)};
    const json::value* name = o->if_contains("op");
    if (!name || !name->is_string()) return Error{fmt::format("operation {}: missing \"op\"", i)};
    const std::string_view n = name->get_string();
    if (n != "add" && n != "remove" && n != "replace" && n != "move" && n != "copy" && n != "test") {
      return Error{fmt::format("operation {}: unknown op \"{}\"", i, n)};
    }
    const json::value* path = o->if_contains("path");
    if (!path || !path->is_string()) return Error{fmt::format("operation {} ({}): missing \"path\"", i, n)};
    if (auto p = ParseJsonPointer(path->get_string()); !p) {
      return Error{fmt::format("operation {} ({}): {}", i, n, p.error().message)};
    }
    if ((n == "add" || n == "replace" || n == "test") && !o->contains("value")) {
      return Error{fmt::format("operation {} ({}): missing \"value\"", i, n)};
    }
    if (n == "move" || n == "copy") {
      const json::value* from = o->if_contains("from");
      if (!from || !from->is_string()) return Error{fmt::format("operation {} ({}): missing \"from\"", i, n)};
      if (auto p = ParseJsonPointer(from->get_string()); !p) {
        return Error{fmt::format("operation {} ({}): {}", i, n, p.error().message)};
      }
    }
  }
  return {};
}

Result<void> ApplyJsonPatch(json::value& doc, const json::value& ops) {
  if (auto valid = ValidateJsonPatch(ops); !valid) return valid.error();
  json::value work = doc;
  for (const auto& op : ops.get_array()) {
    if (auto r = ApplyOne(work, op.get_object()); !r) return r.error();
  }
  doc = std::move(work);
  return {};
}

}  // namespace hami::k8s
