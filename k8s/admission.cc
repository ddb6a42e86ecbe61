#include "k8s/admission.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/json.hpp>

#include "core/base64.h"

namespace hami::k8s {
namespace json = boost::json;
namespace {

constexpr std::string_view kV1 = "admission.k8s.io/v1";
constexpr std::string_view kV1beta1 = "admission.k8s.io/v1beta1";

Error Bad(std::string_view field, std::string_view what) {
  return Error{fmt::format("AdmissionReview: {}: {}", field, what)};
}

// A string member of `o` whose key is matched exactly, as the API server's decoder matches an
// AdmissionReview's (k8s/extender.h's StringFieldAnyCase is for the extender protocol's untagged Go types):
// "" when absent or null, an error naming `shown` when of another type.
Result<std::string> StringFieldExact(const json::object& o, std::string_view key, std::string_view shown) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || v->is_null()) return Ok(std::string());
  if (!v->is_string()) return Bad(shown, fmt::format("expected a string, got {}", json::serialize(*v)));
  return Ok(std::string(v->get_string()));
}

// The object at `key` of `parent`, created (or replacing a non-object) when needed.
json::object& ObjectAt(json::object& parent, std::string_view key) {
  json::value& v = parent[key];
  if (!v.is_object()) v = json::object();
  return v.get_object();
}

void WriteMap(const StringMap& before, const StringMap& after, json::object& parent, std::string_view key) {
  if (before == after) return;
  json::object& out = ObjectAt(parent, key);
  for (const auto& [k, v] : after) {
    auto old = before.find(k);
    if (old == before.end() || old->second != v) out[k] = v;
  }
  for (const auto& [k, v] : before) {
    if (!after.contains(k)) out.erase(k);
  }
}

// `was` the entry before admission, or null: a value admission changed is written as a literal.
json::object EnvJson(const EnvVar& e, const EnvVar* was) {
  json::object entry;
  entry["name"] = e.name;
  if (e.field_path.empty() || (was != nullptr && was->value != e.value)) {
    entry["value"] = e.value;
  } else {
    entry["valueFrom"] = {{"fieldRef", {{"apiVersion", "v1"}, {"fieldPath", e.field_path}}}};
  }
  return entry;
}

json::array MountsJson(const std::vector<VolumeMount>& mounts) {
  json::array out;
  for (const VolumeMount& m : mounts)
    out.push_back(json::object{{"name", m.name}, {"mountPath", m.mount_path}});
  return out;
}

// Appends `items` to the list at `key` of `parent`, created when absent.
void Append(json::object& parent, std::string_view key, json::array items) {
  if (items.empty()) return;
  json::value& list = parent[key];
  if (!list.is_array()) list = json::array();
  for (auto& item : items) list.get_array().push_back(std::move(item));
}

void WriteContainer(const ContainerView& before, const ContainerView& after, json::object& c) {
  if (before.added_mounts != after.added_mounts) {
    const std::size_t kept = std::min(before.added_mounts.size(), after.added_mounts.size());
    std::vector<VolumeMount> added(after.added_mounts.begin() + static_cast<std::ptrdiff_t>(kept),
                                   after.added_mounts.end());
    Append(c, "volumeMounts", MountsJson(added));
  }
  if (before.limits != after.limits || before.requests != after.requests) {
    json::object& resources = ObjectAt(c, "resources");
    WriteMap(before.limits, after.limits, resources, "limits");
    WriteMap(before.requests, after.requests, resources, "requests");
  }
  if (before.env == after.env) return;
  // The views' env lists are index-aligned with the JSON's (one entry per element, in order), so entries are
  // matched by position: a name given twice stays two entries.
  json::value& env_value = c["env"];
  if (!env_value.is_array()) env_value = json::array();
  json::array& env = env_value.get_array();
  for (std::size_t i = 0; i < after.env.size(); ++i) {
    const EnvVar& e = after.env[i];
    if (i < before.env.size() && before.env[i] == e) continue;
    json::object entry = EnvJson(e, i < before.env.size() ? &before.env[i] : nullptr);
    if (i < env.size()) {
      env[i] = std::move(entry);
    } else {
      env.emplace_back(std::move(entry));
    }
  }
  while (env.size() > after.env.size()) env.pop_back();
}

void WriteContainers(const std::vector<ContainerView>& before, const std::vector<ContainerView>& after,
                     json::object& spec, std::string_view key) {
  json::value* list = spec.if_contains(key);
  if (list == nullptr || !list->is_array()) return;  // the pod as sent had none: admission added none
  auto& items = list->get_array();
  for (std::size_t i = 0; i < after.size() && i < before.size() && i < items.size(); ++i) {
    if (before[i].limits == after[i].limits && before[i].requests == after[i].requests &&
        before[i].env == after[i].env && before[i].added_mounts == after[i].added_mounts) {
      continue;
    }
    if (items[i].is_object()) WriteContainer(before[i], after[i], items[i].get_object());
  }
}

// The volumes and init containers admission appended (after the pod's own).
void WriteAdditions(const PodView& before, const PodView& after, json::object& spec) {
  json::array volumes;
  for (std::size_t i = before.added_empty_dirs.size(); i < after.added_empty_dirs.size(); ++i)
    volumes.push_back(json::object{{"name", after.added_empty_dirs[i]}, {"emptyDir", json::object()}});
  Append(spec, "volumes", std::move(volumes));
  json::array inits;
  for (std::size_t i = before.added_init_containers.size(); i < after.added_init_containers.size(); ++i) {
    const AddedContainer& a = after.added_init_containers[i];
    json::array command;
    for (const std::string& part : a.command) command.emplace_back(part);
    inits.push_back(json::object{{"name", a.name},
                                 {"image", a.image},
                                 {"command", std::move(command)},
                                 {"volumeMounts", MountsJson(a.mounts)}});
  }
  Append(spec, "initContainers", std::move(inits));
}

}  // namespace

Result<AdmissionRequest> ParseAdmissionReview(std::string_view body) {
  boost::system::error_code ec;
  json::value doc = json::parse(body, ec);
  if (ec) return Error{fmt::format("AdmissionReview: the body is not JSON: {}", ec.message())};
  if (!doc.is_object()) return Bad("(document)", "expected a JSON object");
  const json::object& top = doc.get_object();
  AdmissionRequest out;
  auto api_version = StringFieldExact(top, "apiVersion", "apiVersion");
  if (!api_version) return api_version.error();
  if (*api_version != kV1 && *api_version != kV1beta1) {
    return Bad("apiVersion", fmt::format("expected {} or {}, got \"{}\"", kV1, kV1beta1, *api_version));
  }
  out.api_version = *api_version;
  auto kind = StringFieldExact(top, "kind", "kind");
  if (!kind) return kind.error();
  if (*kind != "AdmissionReview")
    return Bad("kind", fmt::format("expected AdmissionReview, got \"{}\"", *kind));
  const json::value* request = top.if_contains("request");
  if (request == nullptr || !request->is_object()) return Bad("request", "expected an object");
  const json::object& req = request->get_object();
  for (auto [key, field] : {std::pair<std::string_view, std::string*>{"uid", &out.uid},
                            {"operation", &out.operation},
                            {"namespace", &out.ns},
                            {"name", &out.name}}) {
    auto v = StringFieldExact(req, key, fmt::format("request.{}", key));
    if (!v) return v.error();
    *field = std::move(*v);
  }
  if (out.uid.empty()) return Bad("request.uid", "missing");
  if (const json::value* k = req.if_contains("kind"); k != nullptr && k->is_object()) {
    auto kk = StringFieldExact(k->get_object(), "kind", "request.kind.kind");
    if (!kk) return kk.error();
    out.kind = std::move(*kk);
  }
  if (const json::value* object = req.if_contains("object"); object != nullptr) out.object = *object;
  return out;
}

std::string AdmissionReviewJson(std::string_view api_version, std::string_view uid,
                                const AdmissionAnswer& answer) {
  json::object response;
  response["uid"] = uid;
  response["allowed"] = answer.allowed;
  if (!answer.allowed || !answer.message.empty()) {
    json::object status;
    status["code"] = answer.code;
    if (!answer.allowed) {
      status["status"] = "Failure";
      status["reason"] = answer.code == 403   ? "Forbidden"
                         : answer.code == 400 ? "BadRequest"
                                              : "InternalError";
    }
    status["message"] = answer.message;
    response["status"] = std::move(status);
  }
  if (!answer.warnings.empty()) {
    json::array warnings;
    for (const auto& w : answer.warnings) warnings.emplace_back(w);
    response["warnings"] = std::move(warnings);
  }
  if (!answer.patch.empty()) {
    response["patchType"] = "JSONPatch";
    response["patch"] = Base64Encode(json::serialize(answer.patch));
  }
  json::object review;
  review["apiVersion"] = api_version.empty() ? kV1 : api_version;
  review["kind"] = "AdmissionReview";
  review["response"] = std::move(response);
  return json::serialize(review);
}

void WritePodChanges(const PodView& before, const PodView& after, json::value& object) {
  if (!object.is_object()) return;
  json::object& pod = object.get_object();
  if (before.annotations != after.annotations) {
    WriteMap(before.annotations, after.annotations, ObjectAt(pod, "metadata"), "annotations");
  }
  const bool spec_changed = before.scheduler_name != after.scheduler_name ||
                            before.runtime_class_name != after.runtime_class_name ||
                            before.added_empty_dirs != after.added_empty_dirs ||
                            before.added_init_containers != after.added_init_containers;
  json::value* spec_value = pod.if_contains("spec");
  if (spec_value == nullptr || !spec_value->is_object()) {
    if (!spec_changed) return;
    pod["spec"] = json::object();
    spec_value = pod.if_contains("spec");
  }
  json::object& spec = spec_value->get_object();
  if (before.scheduler_name != after.scheduler_name) spec["schedulerName"] = after.scheduler_name;
  if (before.runtime_class_name != after.runtime_class_name) {
    if (after.runtime_class_name) {
      spec["runtimeClassName"] = *after.runtime_class_name;
    } else {
      spec.erase("runtimeClassName");
    }
  }
  WriteContainers(before.init_containers, after.init_containers, spec, "initContainers");
  WriteContainers(before.containers, after.containers, spec, "containers");
  WriteAdditions(before, after, spec);
}

}  // namespace hami::k8s
