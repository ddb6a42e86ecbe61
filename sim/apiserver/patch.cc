#include "sim/apiserver/patch.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/json.hpp>
#include <map>
#include <optional>

#include "k8s/json_patch.h"

namespace hami::sim {
namespace json = boost::json;
using k8s::JsonEqual;
namespace {

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

Result<json::value> ApplyStrategicMergePatch(const json::value& target, const json::value& patch) {
  if (!patch.is_object()) return Error{"a strategic merge patch must be a JSON object"};
  json::object result = target.is_object() ? target.get_object() : json::object{};
  auto fate = MergeMap(result, patch.get_object());
  if (!fate) return fate.error();
  if (*fate == MapFate::kDelete) return Error{"$patch: delete on the whole object is not supported"};
  return json::value(std::move(result));
}

}  // namespace hami::sim
