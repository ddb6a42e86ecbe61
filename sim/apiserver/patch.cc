#include "sim/apiserver/patch.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/json.hpp>
#include <charconv>
#include <map>
#include <optional>

namespace hami::sim {
namespace json = boost::json;
namespace {

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
// JSON patch

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

// ---------------------------------------------------------------------------------------------------------
// Strategic merge patch

// The patch strategies of the built-in kinds' lists (Go struct tags patchStrategy/patchMergeKey of core/v1
// and meta/v1). The empty key marks a list of primitives merged as a set.
const std::map<std::string, std::string, std::less<>>& MergeLists() {
  static const std::map<std::string, std::string, std::less<>> lists{
      {"containers", "name"},
      {"initContainers", "name"},
      {"ephemeralContainers", "name"},
      {"env", "name"},
      {"ports", "containerPort"},
      {"volumeMounts", "mountPath"},
      {"volumeDevices", "devicePath"},
      {"volumes", "name"},
      {"imagePullSecrets", "name"},
      {"conditions", "type"},
      {"addresses", "type"},
      {"ownerReferences", "uid"},
      {"finalizers", ""},
      {"hostAliases", "ip"},
      {"resourceClaims", "name"},
      {"topologySpreadConstraints", "topologyKey"},
      {"schedulingGates", "name"},
      {"podIPs", "ip"},
      {"hostIPs", "ip"}};
  // Not here on purpose (atomic in the Go types, so replaced whole): taints, tolerations, readinessGates.
  return lists;
}

enum class MapFate { kKeep, kDelete };

Result<MapFate> MergeMap(json::object& original, const json::object& patch);

// A patch value written where the original has nothing to merge with: directives are resolved against empty.
Result<std::optional<json::value>> Fresh(const json::value& patch) {
  if (auto* o = patch.if_object()) {
    json::object fresh;
    auto fate = MergeMap(fresh, *o);
    if (!fate) return fate.error();
    if (*fate == MapFate::kDelete) return std::optional<json::value>();
    return std::optional<json::value>(json::value(std::move(fresh)));
  }
  if (auto* a = patch.if_array()) {
    json::array out;
    for (const auto& item : *a) {
      if (auto* io = item.if_object(); io && io->contains("$patch")) {
        const json::value& d = io->at("$patch");
        if (d == "delete" || (d == "replace" && io->size() == 1)) continue;
      }
      auto f = Fresh(item);
      if (!f) return f.error();
      if (*f) out.push_back(std::move(**f));
    }
    return std::optional<json::value>(json::value(std::move(out)));
  }
  return std::optional<json::value>(patch);
}

const json::value* MergeKeyValue(const json::value& item, std::string_view merge_key) {
  if (auto* o = item.if_object()) return o->if_contains(merge_key);
  return nullptr;
}

Result<void> MergeList(json::array& original, const json::array& patch, std::string_view field,
                       std::string_view merge_key) {
  // A {"$patch":"replace"} element replaces the whole list with the other elements.
  for (const auto& item : patch) {
    if (auto* o = item.if_object(); o && o->size() == 1 && o->contains("$patch")) {
      if (o->at("$patch") == "replace") {
        auto fresh = Fresh(json::value(patch));
        if (!fresh) return fresh.error();
        original = std::move((*fresh)->as_array());
        return {};
      }
    }
  }
  if (merge_key.empty()) {
    for (const auto& item : patch) {
      const bool present = std::any_of(original.begin(), original.end(),
                                       [&](const json::value& v) { return JsonEqual(v, item); });
      if (!present) original.push_back(item);
    }
    return {};
  }
  for (const auto& item : patch) {
    const json::value* key = MergeKeyValue(item, merge_key);
    if (!key) {
      return Error{fmt::format("{}: list element does not contain the merge key \"{}\"", field, merge_key)};
    }
    auto match = [&](const json::value& v) {
      const json::value* k = MergeKeyValue(v, merge_key);
      return k && JsonEqual(*k, *key);
    };
    const json::object& io = item.as_object();
    if (auto* d = io.if_contains("$patch"); d && *d == "delete") {
      original.erase(std::remove_if(original.begin(), original.end(), match), original.end());
      continue;
    }
    auto it = std::find_if(original.begin(), original.end(), match);
    if (it != original.end() && it->is_object()) {
      auto fate = MergeMap(it->as_object(), io);
      if (!fate) return fate.error();
      if (*fate == MapFate::kDelete) original.erase(it);
      continue;
    }
    auto fresh = Fresh(item);
    if (!fresh) return fresh.error();
    if (*fresh) original.push_back(std::move(**fresh));
  }
  return {};
}

// $setElementOrder/<field>: the listed elements first, in that order, then the rest as they were.
void ApplyElementOrder(json::array& list, const json::array& order, std::string_view merge_key) {
  json::array sorted;
  std::vector<bool> used(list.size(), false);
  for (const auto& want : order) {
    const json::value* want_key = merge_key.empty() ? &want : MergeKeyValue(want, merge_key);
    if (!want_key) continue;
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (used[i]) continue;
      const json::value* k = merge_key.empty() ? &list[i] : MergeKeyValue(list[i], merge_key);
      if (k && JsonEqual(*k, *want_key)) {
        sorted.push_back(list[i]);
        used[i] = true;
        break;
      }
    }
  }
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (!used[i]) sorted.push_back(list[i]);
  }
  list = std::move(sorted);
}

Result<MapFate> MergeMap(json::object& original, const json::object& patch) {
  if (const json::value* directive = patch.if_contains("$patch")) {
    if (*directive == "delete") return MapFate::kDelete;
    if (*directive == "replace") {
      json::object replacement;
      for (const auto& kv : patch) {
        if (kv.key() == "$patch") continue;
        auto fresh = Fresh(kv.value());
        if (!fresh) return fresh.error();
        if (*fresh) replacement[kv.key()] = std::move(**fresh);
      }
      original = std::move(replacement);
      return MapFate::kKeep;
    }
    if (*directive != "merge") {
      return Error{fmt::format("unknown $patch directive {}", json::serialize(*directive))};
    }
  }
  std::vector<std::pair<std::string, const json::array*>> orders;
  for (const auto& kv : patch) {
    const std::string_view key = kv.key();
    const json::value& value = kv.value();
    if (key == "$patch" || key == "$retainKeys") continue;
    if (key.starts_with("$setElementOrder/")) {
      if (!value.is_array()) return Error{fmt::format("{}: expected a list", key)};
      orders.emplace_back(std::string(key.substr(17)), &value.as_array());
      continue;
    }
    if (key.starts_with("$deleteFromPrimitiveList/")) {
      if (!value.is_array()) return Error{fmt::format("{}: expected a list", key)};
      if (auto* list = original.if_contains(key.substr(25)); list && list->is_array()) {
        auto& a = list->as_array();
        for (const auto& gone : value.as_array()) {
          a.erase(
              std::remove_if(a.begin(), a.end(), [&](const json::value& v) { return JsonEqual(v, gone); }),
              a.end());
        }
      }
      continue;
    }
    if (key.starts_with("$")) return Error{fmt::format("unknown strategic merge patch directive {}", key)};
    if (value.is_null()) {
      original.erase(key);
      continue;
    }
    json::value* existing = original.if_contains(key);
    if (value.is_object() && existing && existing->is_object()) {
      auto fate = MergeMap(existing->as_object(), value.as_object());
      if (!fate) return fate.error();
      if (*fate == MapFate::kDelete) original.erase(key);
      continue;
    }
    if (value.is_array() && existing && existing->is_array()) {
      auto strategy = MergeLists().find(key);
      if (strategy != MergeLists().end()) {
        auto merged = MergeList(existing->as_array(), value.as_array(), key, strategy->second);
        if (!merged) return merged.error();
        continue;
      }
    }
    auto fresh = Fresh(value);
    if (!fresh) return fresh.error();
    if (*fresh) {
      original[key] = std::move(**fresh);
    } else {
      original.erase(key);
    }
  }
  for (const auto& [field, order] : orders) {
    if (auto* list = original.if_contains(field); list && list->is_array()) {
      auto strategy = MergeLists().find(field);
      ApplyElementOrder(list->as_array(), *order, strategy == MergeLists().end() ? "" : strategy->second);
    }
  }
  if (const json::value* retain = patch.if_contains("$retainKeys")) {
    if (!retain->is_array()) return Error{"$retainKeys: expected a list of field names"};
    std::vector<std::string> drop;
    for (const auto& kv : original) {
      const bool keep =
          std::any_of(retain->as_array().begin(), retain->as_array().end(),
                      [&](const json::value& k) { return k.is_string() && k.get_string() == kv.key(); });
      if (!keep) drop.emplace_back(kv.key());
    }
    for (const auto& k : drop) original.erase(k);
  }
  return MapFate::kKeep;
}

}  // namespace

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

json::value ApplyMergePatch(const json::value& target, const json::value& patch) {
  if (!patch.is_object()) return patch;
  json::object result = target.is_object() ? target.get_object() : json::object{};
  for (const auto& kv : patch.get_object()) {
    if (kv.value().is_null()) {
      result.erase(kv.key());
      continue;
    }
    const json::value* existing = result.if_contains(kv.key());
    result[kv.key()] = ApplyMergePatch(existing ? *existing : json::value(nullptr), kv.value());
  }
  return result;
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

Result<json::value> ApplyStrategicMergePatch(const json::value& target, const json::value& patch) {
  if (!patch.is_object()) return Error{"a strategic merge patch must be a JSON object"};
  json::object result = target.is_object() ? target.get_object() : json::object{};
  auto fate = MergeMap(result, patch.get_object());
  if (!fate) return fate.error();
  if (*fate == MapFate::kDelete) return Error{"$patch: delete on the whole object is not supported"};
  return json::value(std::move(result));
}

}  // namespace hami::sim
