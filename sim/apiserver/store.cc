#include "sim/apiserver/store.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/json.hpp>
#include <charconv>
#include <cstring>
#include <limits>
#include <set>

#include "core/base64.h"
#include "core/codec/stamps.h"
#include "core/names.h"
#include "core/strings.h"
#include "k8s/json_patch.h"
#include "sim/apiserver/patch.h"

namespace hami::sim {
namespace json = boost::json;
using k8s::JsonEqual;
namespace {

constexpr std::string_view kInitialEventsEnd = "k8s.io/initial-events-end";

json::object& Meta(json::object& o) {
  json::value& m = o["metadata"];
  if (!m.is_object()) m = json::object{};
  return m.as_object();
}

const json::object* MetaOf(const json::object& o) {
  const json::value* m = o.if_contains("metadata");
  return m ? m->if_object() : nullptr;
}

std::string_view Str(const json::object* o, std::string_view key) {
  if (!o) return {};
  const json::value* v = o->if_contains(key);
  return v && v->is_string() ? std::string_view(v->get_string()) : std::string_view();
}

std::string_view MetaStr(const json::object& o, std::string_view key) { return Str(MetaOf(o), key); }

std::string Key(std::string_view ns, std::string_view name) {
  return ns.empty() ? std::string(name) : fmt::format("{}/{}", ns, name);
}

std::string KeyOf(const json::object& o) { return Key(MetaStr(o, "namespace"), MetaStr(o, "name")); }

std::optional<std::uint64_t> ParseRv(std::string_view s) {
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// RFC 1123 subdomain (names of most objects) or label (namespaces: no dots, at most 63).
bool IsDnsName(std::string_view s, bool label) { return label ? IsDns1123Label(s) : IsDns1123Subdomain(s); }

std::optional<ApiError> ValidateMetadata(const ResourceType& type, const json::object& object) {
  const json::object* meta = MetaOf(object);
  const std::string name(MetaStr(object, "name"));
  if (!meta) return Invalid(type.group, type.kind, name, "metadata", "\"\": must be an object");
  const bool label_name = type.plural == "namespaces";
  if (!IsDnsName(name, label_name)) {
    return Invalid(type.group, type.kind, name, "metadata.name",
                   fmt::format("\"{}\": a lowercase RFC 1123 {} must consist of lower case alphanumeric "
                               "characters, '-'{}, and must start and end with an alphanumeric character",
                               name, label_name ? "label" : "subdomain", label_name ? "" : " or '.'"));
  }
  if (const json::value* labels = meta->if_contains("labels"); labels && !labels->is_null()) {
    if (!labels->is_object()) {
      return Invalid(type.group, type.kind, name, "metadata.labels", "must be a map of strings");
    }
    for (const auto& kv : labels->get_object()) {
      if (!IsLabelKey(kv.key())) {
        return Invalid(
            type.group, type.kind, name, "metadata.labels",
            fmt::format("\"{}\": name part must consist of alphanumeric characters, '-', '_' or '.', "
                        "at most 63 characters",
                        std::string_view(kv.key())));
      }
      if (!kv.value().is_string() || !IsLabelValue(kv.value().get_string())) {
        return Invalid(type.group, type.kind, name,
                       fmt::format("metadata.labels[{}]", std::string_view(kv.key())),
                       fmt::format("{}: a valid label must be an empty string or consist of alphanumeric "
                                   "characters, '-', '_' or '.', at most 63 characters",
                                   json::serialize(kv.value())));
      }
    }
  }
  if (const json::value* ann = meta->if_contains("annotations"); ann && !ann->is_null()) {
    if (!ann->is_object()) {
      return Invalid(type.group, type.kind, name, "metadata.annotations", "must be a map of strings");
    }
    std::size_t total = 0;
    for (const auto& kv : ann->get_object()) {
      if (!kv.value().is_string()) {
        return Invalid(type.group, type.kind, name,
                       fmt::format("metadata.annotations[{}]", std::string_view(kv.key())),
                       "must be a string");
      }
      total += kv.key().size() + kv.value().get_string().size();
    }
    if (total > 256 * 1024) {
      return Invalid(type.group, type.kind, name, "metadata.annotations",
                     "Too long: must have at most 262144 bytes");
    }
  }
  return std::nullopt;
}

// What kube-apiserver refuses in a Lease's spec (its validation, and MicroTime's decoding): the leader
// election reads these fields, so the embedded server must not store what a real one never would.
std::optional<ApiError> ValidateLeaseSpec(const ResourceType& type, const json::object& object) {
  const json::value* spec_value = object.if_contains("spec");
  if (spec_value == nullptr || spec_value->is_null()) return std::nullopt;
  const std::string name(MetaStr(object, "name"));
  const auto undecodable = [](std::string_view field, std::string_view why) {
    return BadRequest(
        fmt::format("Lease in version \"v1\" cannot be handled as a Lease: spec{}: {}", field, why));
  };
  if (!spec_value->is_object()) return undecodable("", "expected an object");
  const json::object& spec = spec_value->get_object();
  for (const char* field : {"acquireTime", "renewTime"}) {
    const json::value* t = spec.if_contains(field);
    if (t == nullptr || t->is_null()) continue;
    if (!t->is_string() || !codec::ParseRfc3339(t->get_string()))
      return undecodable(fmt::format(".{}", field), json::serialize(*t) + " is not an RFC 3339 time");
  }
  if (const json::value* h = spec.if_contains("holderIdentity"); h && !h->is_null() && !h->is_string())
    return undecodable(".holderIdentity", "expected a string");
  for (const auto& [field, least] :
       {std::pair<const char*, std::int64_t>{"leaseDurationSeconds", 1}, {"leaseTransitions", 0}}) {
    const json::value* v = spec.if_contains(field);
    if (v == nullptr || v->is_null()) continue;
    if (!v->is_int64() || v->get_int64() > std::numeric_limits<std::int32_t>::max() ||
        v->get_int64() < std::numeric_limits<std::int32_t>::min())
      return undecodable(fmt::format(".{}", field), json::serialize(*v) + " is not an int32");
    if (v->get_int64() < least)
      return Invalid(type.group, type.kind, name, fmt::format("spec.{}", field),
                     fmt::format("Invalid value: {}: must be greater than {}", v->get_int64(),
                                 least == 1 ? "0" : "or equal to 0"));
  }
  return std::nullopt;
}

// Metadata of every kind, and what kube-apiserver checks in the spec of the kinds that need it.
std::optional<ApiError> ValidateObject(const ResourceType& type, const json::object& object) {
  if (auto e = ValidateMetadata(type, object)) return e;
  if (type.kind == "Lease") return ValidateLeaseSpec(type, object);
  return std::nullopt;
}

std::optional<ApiError> CheckTypeMeta(const ResourceType& type, const json::object& object) {
  const std::string_view api_version = Str(&object, "apiVersion");
  const std::string_view kind = Str(&object, "kind");
  if (!api_version.empty() && api_version != type.ApiVersion()) {
    return BadRequest(
        fmt::format("the API version in the data ({}) does not match the expected API version ({})",
                    api_version, type.ApiVersion()));
  }
  if (!kind.empty() && kind != type.kind) {
    return BadRequest(
        fmt::format("the kind in the data ({}) does not match the expected kind ({})", kind, type.kind));
  }
  return std::nullopt;
}

// Everything but metadata and status: a change here bumps metadata.generation.
json::object SpecPart(const json::object& o) {
  json::object out = o;
  out.erase("metadata");
  out.erase("status");
  out.erase("apiVersion");
  out.erase("kind");
  return out;
}

json::object WithoutVolatile(const json::object& o) {
  json::object out = o;
  if (json::value* m = out.if_contains("metadata"); m && m->is_object()) {
    m->as_object().erase("resourceVersion");
    m->as_object().erase("managedFields");
  }
  return out;
}

void SetRv(json::object& o, std::uint64_t rv) { Meta(o)["resourceVersion"] = std::to_string(rv); }

bool HasFinalizers(const json::object& o) {
  const json::object* meta = MetaOf(o);
  const json::value* f = meta ? meta->if_contains("finalizers") : nullptr;
  return f && f->is_array() && !f->get_array().empty();
}

void ApplyDefaults(const ResourceType& type, json::object& o) {
  if (type.plural == "pods") {
    json::value& spec = o["spec"];
    if (!spec.is_object()) spec = json::object{};
    if (Str(&spec.as_object(), "schedulerName").empty())
      spec.as_object()["schedulerName"] = "default-scheduler";
    json::value& status = o["status"];
    if (!status.is_object()) status = json::object{};
    if (Str(&status.as_object(), "phase").empty()) status.as_object()["phase"] = "Pending";
  } else if (type.plural == "namespaces") {
    json::value& status = o["status"];
    if (!status.is_object()) status = json::object{};
    if (Str(&status.as_object(), "phase").empty()) status.as_object()["phase"] = "Active";
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// Watcher

std::string_view ToString(EventType type) {
  switch (type) {
    case EventType::kAdded:
      return "ADDED";
    case EventType::kModified:
      return "MODIFIED";
    case EventType::kDeleted:
      return "DELETED";
    case EventType::kBookmark:
      return "BOOKMARK";
    case EventType::kError:
      return "ERROR";
  }
  return "ERROR";
}

WatchEvent Watcher::Pop() {
  WatchEvent e = std::move(queue_.front());
  queue_.pop_front();
  return e;
}

bool Watcher::TakeBookmarkRequest() {
  const bool requested = bookmark_requested_;
  bookmark_requested_ = false;
  return requested;
}

WatchEvent Watcher::Bookmark(std::uint64_t resource_version) const {
  return {EventType::kBookmark,
          std::make_shared<const json::object>(json::object{
              {"kind", type_->kind},
              {"apiVersion", type_->ApiVersion()},
              {"metadata", json::object{{"resourceVersion", std::to_string(resource_version)}}}})};
}

bool Watcher::Matches(const json::object& object) const {
  if (!namespace_.empty() && MetaStr(object, "namespace") != namespace_) return false;
  if (!labels_.Empty()) {
    const json::object* meta = MetaOf(object);
    const json::value* labels = meta ? meta->if_contains("labels") : nullptr;
    if (!labels_.Matches(labels ? labels->if_object() : nullptr)) return false;
  }
  return fields_.Empty() || fields_.Matches(object);
}

void Watcher::Push(WatchEvent event, std::size_t limit) {
  if (end_ != End::kNone) return;
  if (queue_.size() >= limit) {
    end_ = End::kOverflow;
    return;
  }
  queue_.push_back(std::move(event));
}

// ---------------------------------------------------------------------------------------------------------
// Store

Store::Store(StoreOptions options, const Clock* clock)
    : options_(options),
      clock_(clock ? clock : &system_clock_),
      buckets_(Resources().size()),
      random_(std::random_device{}()) {
  for (const char* ns : {"default", "kube-system", "kube-public", "kube-node-lease"}) {
    auto created =
        Create(*FindResource("", "v1", "namespaces"), "", json::object{{"metadata", {{"name", ns}}}});
    (void)created;
  }
  // The built-in namespaces are part of the initial state, not history.
  history_.clear();
  compacted_rv_ = rv_;
}

const ObjectPtr* Store::Lookup(const ResourceType& type, std::string_view ns, std::string_view name) const {
  const Bucket& b = buckets_[IndexOf(type)];
  auto it = b.find(Key(type.namespaced ? ns : std::string_view(), name));
  return it == b.end() ? nullptr : &it->second;
}

std::string Store::NewUid() {
  std::uniform_int_distribution<std::uint32_t> d(0, 15);
  std::string uid = "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx";
  for (char& c : uid) {
    if (c == 'x') c = "0123456789abcdef"[d(random_)];
    if (c == 'y') c = "89ab"[d(random_) & 3];
  }
  return uid;
}

std::string Store::GenerateName(std::string_view prefix) {
  static constexpr std::string_view kAlphabet = "bcdfghjklmnpqrstvwxz2456789";
  std::uniform_int_distribution<std::size_t> d(0, kAlphabet.size() - 1);
  std::string name(prefix.substr(0, 58));
  for (int i = 0; i < 5; ++i) name += kAlphabet[d(random_)];
  return name;
}

ApiResult<std::string> Store::ResolveNamespace(const ResourceType& type, std::string_view url_ns,
                                               json::object& metadata, bool create_namespace) {
  if (!type.namespaced) {
    metadata.erase("namespace");
    return std::string();
  }
  std::string ns(Str(&metadata, "namespace"));
  if (!url_ns.empty()) {
    if (!ns.empty() && ns != url_ns) {
      return BadRequest(
          fmt::format("the namespace of the provided object ({}) does not match the namespace sent on "
                      "the request ({})",
                      ns, url_ns));
    }
    ns = std::string(url_ns);
  }
  if (ns.empty()) ns = "default";
  metadata["namespace"] = ns;
  const ResourceType& namespaces = *FindResource("", "v1", "namespaces");
  if (!Lookup(namespaces, "", ns)) {
    if (!options_.auto_create_namespaces) return NotFound("", "namespaces", ns);
    if (create_namespace) {
      auto created = Create(namespaces, "", json::object{{"metadata", {{"name", ns}}}});
      if (!created) return created.error();
    }
  }
  return ns;
}

ApiResult<ObjectPtr> Store::Create(const ResourceType& type, std::string_view ns, json::object object,
                                   const WriteOptions& options) {
  if (auto e = CheckTypeMeta(type, object)) return *e;
  object["apiVersion"] = type.ApiVersion();
  object["kind"] = type.kind;
  json::object& meta = Meta(object);
  for (const char* server_field : {"resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds",
                                   "managedFields", "selfLink", "uid", "creationTimestamp", "generation"}) {
    meta.erase(server_field);
  }
  const std::string generate(Str(&meta, "generateName"));
  if (Str(&meta, "name").empty()) {
    if (generate.empty()) {
      return Invalid(type.group, type.kind, "", "metadata.name",
                     "Required value: name or generateName is required");
    }
    meta["name"] = GenerateName(generate);
  }
  // Validate before creating the namespace as a side effect.
  if (auto e = ValidateObject(type, object)) return *e;
  auto resolved = ResolveNamespace(type, ns, meta, !options.dry_run);
  if (!resolved) return resolved.error();
  for (int attempt = 0; Lookup(type, *resolved, Str(&meta, "name")); ++attempt) {
    if (generate.empty() || attempt >= 8) return AlreadyExists(type.group, type.plural, Str(&meta, "name"));
    meta["name"] = GenerateName(generate);
  }
  meta["uid"] = NewUid();
  meta["creationTimestamp"] = codec::FormatRfc3339(clock_->Now());
  meta["generation"] = 1;
  ApplyDefaults(type, object);
  if (options.dry_run) return std::make_shared<const json::object>(std::move(object));
  SetRv(object, ++rv_);
  auto stored = std::make_shared<const json::object>(std::move(object));
  buckets_[IndexOf(type)][KeyOf(*stored)] = stored;
  Emit(EventType::kAdded, IndexOf(type), stored, nullptr);
  return stored;
}

ApiResult<ObjectPtr> Store::Get(const ResourceType& type, std::string_view ns, std::string_view name,
                                const std::optional<std::string>& resource_version) const {
  if (resource_version && !resource_version->empty() && *resource_version != "0") {
    auto rv = ParseRv(*resource_version);
    if (!rv) return BadRequest(fmt::format("invalid resource version \"{}\"", *resource_version));
    if (*rv > rv_) return TooLargeResourceVersion(*rv, rv_);
  }
  const ObjectPtr* found = Lookup(type, ns, name);
  if (!found) return NotFound(type.group, type.plural, name);
  return *found;
}

ApiResult<ObjectPtr> Store::Commit(const ResourceType& type, const ObjectPtr& current, json::object next,
                                   const WriteOptions& options) {
  next["apiVersion"] = type.ApiVersion();
  next["kind"] = type.kind;
  json::object& meta = Meta(next);
  const json::object& cur_meta = *MetaOf(*current);
  for (const char* kept : {"uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                           "generation", "name", "namespace"}) {
    if (const json::value* v = cur_meta.if_contains(kept)) {
      meta[kept] = *v;
    } else {
      meta.erase(kept);
    }
  }
  meta["resourceVersion"] = cur_meta.at("resourceVersion");
  if (auto e = ValidateObject(type, next)) return *e;
  if (JsonEqual(WithoutVolatile(next), WithoutVolatile(*current))) return current;  // no-op: same version
  if (!JsonEqual(SpecPart(next), SpecPart(*current))) {
    const json::value* g = cur_meta.if_contains("generation");
    meta["generation"] = (g && g->is_int64() ? g->get_int64() : 0) + 1;
  }
  if (options.dry_run) return std::make_shared<const json::object>(std::move(next));
  if (meta.contains("deletionTimestamp") && !HasFinalizers(next)) {
    // The last finalizer is gone: the deletion completes.
    auto final_state = std::make_shared<const json::object>(std::move(next));
    return Remove(type, final_state);
  }
  SetRv(next, ++rv_);
  auto stored = std::make_shared<const json::object>(std::move(next));
  buckets_[IndexOf(type)][KeyOf(*stored)] = stored;
  Emit(EventType::kModified, IndexOf(type), stored, current);
  return stored;
}

ObjectPtr Store::Remove(const ResourceType& type, const ObjectPtr& current) {
  Bucket& bucket = buckets_[IndexOf(type)];
  auto it = bucket.find(KeyOf(*current));
  ObjectPtr before = it != bucket.end() ? it->second : current;
  if (it != bucket.end()) bucket.erase(it);
  json::object final_state = *current;
  SetRv(final_state, ++rv_);
  auto stored = std::make_shared<const json::object>(std::move(final_state));
  Emit(EventType::kDeleted, IndexOf(type), stored, before);
  return stored;
}

namespace {

// The object to store after a write: a status write keeps everything but the status; a main-resource write
// keeps the current status (status changes go through the subresource).
json::object MergeSubresource(const ResourceType& type, const json::object& current, json::object incoming,
                              Subresource sub) {
  const json::object& status_from = sub == Subresource::kStatus ? incoming : current;
  json::object next = sub == Subresource::kStatus ? current : std::move(incoming);
  if (sub == Subresource::kStatus || type.has_status) {
    if (const json::value* status = status_from.if_contains("status")) {
      json::value copy = *status;
      next["status"] = std::move(copy);
    } else {
      next.erase("status");
    }
  }
  return next;
}

// metadata.resourceVersion and metadata.uid in a write are preconditions (409 when they do not match).
std::optional<ApiError> CheckPreconditions(const ResourceType& type, std::string_view name,
                                           const json::object& current, std::string_view rv,
                                           std::string_view uid) {
  if (!rv.empty() && rv != MetaStr(current, "resourceVersion"))
    return StaleConflict(type.group, type.plural, name);
  if (!uid.empty() && uid != MetaStr(current, "uid")) {
    return Conflict(type.group, type.plural, name,
                    fmt::format("Precondition failed: UID in precondition: {}, UID in object meta: {}", uid,
                                MetaStr(current, "uid")));
  }
  return std::nullopt;
}

}  // namespace

ApiResult<ObjectPtr> Store::Update(const ResourceType& type, std::string_view ns, std::string_view name,
                                   json::object object, Subresource sub, const WriteOptions& options) {
  const ObjectPtr* found = Lookup(type, ns, name);
  if (!found) return NotFound(type.group, type.plural, name);
  const ObjectPtr current = *found;
  if (auto e = CheckTypeMeta(type, object)) return *e;
  json::object& meta = Meta(object);
  if (const std::string_view n = Str(&meta, "name"); !n.empty() && n != name) {
    return BadRequest(
        fmt::format("the name of the object ({}) does not match the name on the URL ({})", n, name));
  }
  if (const std::string_view n = Str(&meta, "namespace"); type.namespaced && !n.empty() && n != ns) {
    return BadRequest(fmt::format(
        "the namespace of the provided object ({}) does not match the namespace sent on the request ({})", n,
        ns));
  }
  if (auto e = CheckPreconditions(type, name, *current, Str(&meta, "resourceVersion"), Str(&meta, "uid"))) {
    return *e;
  }
  return Commit(type, current, MergeSubresource(type, *current, std::move(object), sub), options);
}

ApiResult<ObjectPtr> Store::Patch(const ResourceType& type, std::string_view ns, std::string_view name,
                                  PatchType patch_type, const json::value& patch, Subresource sub,
                                  const WriteOptions& options) {
  const ObjectPtr* found = Lookup(type, ns, name);
  if (!found) return NotFound(type.group, type.plural, name);
  const ObjectPtr current = *found;
  json::value doc(*current);
  switch (patch_type) {
    case PatchType::kJson:
      if (auto valid = k8s::ValidateJsonPatch(patch); !valid) return BadRequest(valid.error().message);
      if (auto applied = k8s::ApplyJsonPatch(doc, patch); !applied) {
        return ApiError{422, "Invalid", applied.error().message, {}};
      }
      break;
    case PatchType::kMerge:
      doc = ApplyMergePatch(doc, patch);
      break;
    case PatchType::kStrategicMerge: {
      auto merged = ApplyStrategicMergePatch(doc, patch);
      if (!merged) return ApiError{422, "Invalid", merged.error().message, {}};
      doc = std::move(*merged);
      break;
    }
  }
  if (!doc.is_object()) return ApiError{422, "Invalid", "the patched document is not a JSON object", {}};
  json::object& patched = doc.as_object();
  const json::object* meta = MetaOf(patched);
  if (!meta) return ApiError{422, "Invalid", "the patch removed metadata", {}};
  if (MetaStr(patched, "name") != name) {
    return BadRequest(fmt::format("the name of the object ({}) does not match the name on the URL ({})",
                                  MetaStr(patched, "name"), name));
  }
  if (auto e = CheckPreconditions(type, name, *current, MetaStr(patched, "resourceVersion"),
                                  MetaStr(patched, "uid"))) {
    return *e;
  }
  if (auto e = CheckTypeMeta(type, patched)) return *e;
  return Commit(type, current, MergeSubresource(type, *current, std::move(patched), sub), options);
}

ApiResult<DeleteResult> Store::Delete(const ResourceType& type, std::string_view ns, std::string_view name,
                                      const DeleteOptions& options) {
  const ObjectPtr* found = Lookup(type, ns, name);
  if (!found) return NotFound(type.group, type.plural, name);
  const ObjectPtr current = *found;
  if (options.uid && !options.uid->empty() && *options.uid != MetaStr(*current, "uid")) {
    return Conflict(type.group, type.plural, name,
                    fmt::format("Precondition failed: UID in precondition: {}, UID in object meta: {}",
                                *options.uid, MetaStr(*current, "uid")));
  }
  if (options.resource_version && !options.resource_version->empty() &&
      *options.resource_version != MetaStr(*current, "resourceVersion")) {
    return Conflict(
        type.group, type.plural, name,
        fmt::format("Precondition failed: ResourceVersion in precondition: {}, ResourceVersion in "
                    "object meta: {}",
                    *options.resource_version, MetaStr(*current, "resourceVersion")));
  }
  if (type.plural == "namespaces" && (name == "default" || name == "kube-system" || name == "kube-public")) {
    return Forbidden(fmt::format("namespaces \"{}\" is forbidden: this namespace may not be deleted", name));
  }
  if (options.dry_run) return DeleteResult{current, true};
  if (HasFinalizers(*current)) {
    if (MetaOf(*current)->contains("deletionTimestamp")) return DeleteResult{current, false};
    json::object next = *current;
    json::object& meta = Meta(next);
    meta["deletionTimestamp"] = codec::FormatRfc3339(clock_->Now());
    meta["deletionGracePeriodSeconds"] = 0;
    SetRv(next, ++rv_);
    auto stored = std::make_shared<const json::object>(std::move(next));
    buckets_[IndexOf(type)][KeyOf(*stored)] = stored;
    Emit(EventType::kModified, IndexOf(type), stored, current);
    return DeleteResult{stored, false};
  }
  if (type.plural == "namespaces") {
    for (const auto& t : Resources()) {
      if (!t.namespaced) continue;
      std::vector<ObjectPtr> doomed;
      for (const auto& [key, obj] : buckets_[IndexOf(t)]) {
        if (MetaStr(*obj, "namespace") == name) doomed.push_back(obj);
      }
      for (const auto& obj : doomed) Remove(t, obj);
    }
  }
  return DeleteResult{Remove(type, current), true};
}

ApiResult<ObjectPtr> Store::Bind(std::string_view ns, std::string_view pod, const json::object& binding) {
  const ResourceType& pods = *FindResource("", "v1", "pods");
  const ObjectPtr* found = Lookup(pods, ns, pod);
  if (!found) return NotFound("", "pods", pod);
  const ObjectPtr current = *found;
  const json::value* target = binding.if_contains("target");
  const std::string_view node = target && target->is_object() ? Str(&target->as_object(), "name") : "";
  if (node.empty()) return Invalid("", "Binding", pod, "target.name", "\"\": Required value");
  const json::object* bmeta = MetaOf(binding);
  if (const std::string_view uid = Str(bmeta, "uid"); !uid.empty() && uid != MetaStr(*current, "uid")) {
    return Conflict("", "pods/binding", pod,
                    fmt::format("Precondition failed: UID in precondition: {}, UID in object meta: {}", uid,
                                MetaStr(*current, "uid")));
  }
  if (const std::string_view rv = Str(bmeta, "resourceVersion");
      !rv.empty() && rv != MetaStr(*current, "resourceVersion")) {
    return Conflict(
        "", "pods/binding", pod,
        fmt::format("Precondition failed: ResourceVersion in precondition: {}, ResourceVersion in "
                    "object meta: {}",
                    rv, MetaStr(*current, "resourceVersion")));
  }
  if (MetaOf(*current)->contains("deletionTimestamp")) {
    return Conflict("", "pods/binding", pod,
                    fmt::format("pod {} is being deleted, cannot be assigned to a host", pod));
  }
  const json::value* spec = current->if_contains("spec");
  if (const std::string_view bound = spec && spec->is_object() ? Str(&spec->as_object(), "nodeName") : "";
      !bound.empty()) {
    return Conflict("", "pods/binding", pod,
                    fmt::format("pod {} is already assigned to node \"{}\"", pod, bound));
  }
  json::object next = *current;
  json::value& next_spec = next["spec"];
  if (!next_spec.is_object()) next_spec = json::object{};
  next_spec.as_object()["nodeName"] = node;
  // Annotations and (as Kubernetes 1.35 and later) labels of the Binding are copied onto the pod.
  for (const char* field : {"annotations", "labels"}) {
    const json::value* from = bmeta ? bmeta->if_contains(field) : nullptr;
    if (from == nullptr || !from->is_object()) continue;
    json::value& dst = Meta(next)[field];
    if (!dst.is_object()) dst = json::object{};
    for (const auto& kv : from->get_object()) dst.as_object()[kv.key()] = kv.value();
  }
  json::value& status = next["status"];
  if (!status.is_object()) status = json::object{};
  json::value& conditions = status.as_object()["conditions"];
  if (!conditions.is_array()) conditions = json::array{};
  json::array& conds = conditions.as_array();
  conds.erase(std::remove_if(conds.begin(), conds.end(),
                             [](const json::value& c) {
                               return c.is_object() && Str(&c.as_object(), "type") == "PodScheduled";
                             }),
              conds.end());
  conds.push_back(json::object{{"type", "PodScheduled"},
                               {"status", "True"},
                               {"lastProbeTime", nullptr},
                               {"lastTransitionTime", codec::FormatRfc3339(clock_->Now())}});
  return Commit(pods, current, std::move(next), {});
}

Store::Bucket Store::StateAt(std::size_t resource, std::uint64_t rv) const {
  Bucket state = buckets_[resource];
  for (auto it = history_.rbegin(); it != history_.rend() && it->rv > rv; ++it) {
    if (it->resource != resource) continue;
    const std::string key = KeyOf(*it->object);
    if (it->type == EventType::kAdded) {
      state.erase(key);
    } else {
      state[key] = it->prev;
    }
  }
  return state;
}

ApiResult<ListResult> Store::List(const ResourceType& type, std::string_view ns, const ListOptions& options) {
  auto labels = LabelSelector::Parse(options.label_selector);
  if (!labels) return BadRequest(labels.error().message);
  auto fields = FieldSelector::Parse(options.field_selector);
  if (!fields) return BadRequest(fields.error().message);
  if (options.limit < 0) return BadRequest("limit: must be a non-negative integer");
  ListResult result;
  std::vector<ObjectPtr> items;

  if (!options.continue_token.empty()) {
    if (options.resource_version && !options.resource_version->empty() && *options.resource_version != "0") {
      return BadRequest("specifying resource version is not allowed when using continue");
    }
    auto decoded = Base64Decode(options.continue_token);
    boost::system::error_code ec;
    json::value token = decoded ? json::parse(*decoded, ec) : json::value();
    const json::object* t = token.if_object();
    const json::value* id = t ? t->if_contains("id") : nullptr;
    const json::value* off = t ? t->if_contains("off") : nullptr;
    if (ec || !id || !off || !id->is_int64() || !off->is_int64() || off->get_int64() < 0) {
      return BadRequest("continue key is not valid: malformed token");
    }
    auto snap = snapshots_.find(static_cast<std::uint64_t>(id->get_int64()));
    if (snap == snapshots_.end() || clock_->Now() - snap->second.created > options_.continue_ttl) {
      if (snap != snapshots_.end()) snapshots_.erase(snap);
      return Expired(
          "The provided continue parameter is too old to display a consistent list result. You can start a "
          "new list "
          "without the continue parameter.");
    }
    const auto offset = static_cast<std::size_t>(off->get_int64());
    const Snapshot& s = snap->second;
    result.resource_version = s.rv;
    const std::size_t end = options.limit > 0
                                ? std::min(s.items.size(), offset + static_cast<std::size_t>(options.limit))
                                : s.items.size();
    for (std::size_t i = std::min(offset, s.items.size()); i < end; ++i) result.items.push_back(s.items[i]);
    if (end < s.items.size()) {
      result.continue_token =
          Base64Encode(json::serialize(json::object{
                           {"rv", s.rv}, {"id", id->get_int64()}, {"off", static_cast<std::int64_t>(end)}}),
                       Base64Alphabet::kUrl);
      result.remaining_items = static_cast<std::int64_t>(s.items.size() - end);
    }
    return result;
  }

  std::uint64_t at = rv_;
  bool exact = false;
  if (options.resource_version && !options.resource_version->empty() && *options.resource_version != "0") {
    auto rv = ParseRv(*options.resource_version);
    if (!rv) return BadRequest(fmt::format("invalid resource version \"{}\"", *options.resource_version));
    if (*rv > rv_) return TooLargeResourceVersion(*rv, rv_);
    exact = options.resource_version_match == "Exact" ||
            (options.resource_version_match.empty() && options.limit > 0);
    if (exact) {
      if (*rv < compacted_rv_) {
        return Expired(fmt::format("too old resource version: {} ({})", *rv, compacted_rv_));
      }
      at = *rv;
    }
  } else if (options.resource_version_match == "Exact") {
    return BadRequest(
        "resourceVersionMatch: Forbidden: resourceVersionMatch \"Exact\" is forbidden for "
        "resourceVersion \"0\" or unset");
  }
  const std::size_t idx = IndexOf(type);
  const Bucket state = at == rv_ ? Bucket() : StateAt(idx, at);
  const Bucket& source = at == rv_ ? buckets_[idx] : state;
  for (const auto& [key, obj] : source) {
    if (type.namespaced && !ns.empty() && MetaStr(*obj, "namespace") != ns) continue;
    const json::object* meta = MetaOf(*obj);
    const json::value* lab = meta ? meta->if_contains("labels") : nullptr;
    if (!labels->Empty() && !labels->Matches(lab ? lab->if_object() : nullptr)) continue;
    if (!fields->Empty() && !fields->Matches(*obj)) continue;
    items.push_back(obj);
  }
  result.resource_version = at;
  if (options.limit > 0 && items.size() > static_cast<std::size_t>(options.limit)) {
    const auto limit = static_cast<std::size_t>(options.limit);
    while (snapshots_.size() >= options_.max_snapshots && !snapshots_.empty())
      snapshots_.erase(snapshots_.begin());
    const std::uint64_t id = next_snapshot_++;
    Snapshot& s = snapshots_[id];
    s.rv = at;
    s.created = clock_->Now();
    s.items = items;
    result.items.assign(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(limit));
    result.continue_token = Base64Encode(
        json::serialize(json::object{
            {"rv", at}, {"id", static_cast<std::int64_t>(id)}, {"off", static_cast<std::int64_t>(limit)}}),
        Base64Alphabet::kUrl);
    result.remaining_items = static_cast<std::int64_t>(items.size() - limit);
  } else {
    result.items = std::move(items);
  }
  return result;
}

namespace {

// The event a watcher sees for one history entry, with selector transitions applied (an object that stops
// matching is DELETED for that watcher; one that starts matching is ADDED).
std::optional<WatchEvent> Convert(EventType type, const ObjectPtr& object, const ObjectPtr& prev, bool now,
                                  bool before, std::uint64_t rv) {
  switch (type) {
    case EventType::kAdded:
      if (now) return WatchEvent{EventType::kAdded, object};
      return std::nullopt;
    case EventType::kModified:
      if (now && before) return WatchEvent{EventType::kModified, object};
      if (now) return WatchEvent{EventType::kAdded, object};
      if (before) {
        json::object gone = *prev;
        SetRv(gone, rv);
        return WatchEvent{EventType::kDeleted, std::make_shared<const json::object>(std::move(gone))};
      }
      return std::nullopt;
    case EventType::kDeleted:
      if (before) return WatchEvent{EventType::kDeleted, object};
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

}  // namespace

ApiResult<std::shared_ptr<Watcher>> Store::Watch(const ResourceType& type, std::string_view ns,
                                                 const WatchOptions& options) {
  auto labels = LabelSelector::Parse(options.label_selector);
  if (!labels) return BadRequest(labels.error().message);
  auto fields = FieldSelector::Parse(options.field_selector);
  if (!fields) return BadRequest(fields.error().message);
  auto w = std::make_shared<Watcher>();
  w->type_ = &type;
  w->namespace_ = type.namespaced ? std::string(ns) : std::string();
  w->labels_ = std::move(*labels);
  w->fields_ = std::move(*fields);
  w->allow_bookmarks_ = options.allow_bookmarks;
  const std::size_t idx = IndexOf(type);
  const std::string rv_text = options.resource_version.value_or("");
  const bool from_state = rv_text.empty() || rv_text == "0" || options.send_initial_events;
  if (!from_state) {
    auto rv = ParseRv(rv_text);
    if (!rv) return BadRequest(fmt::format("invalid resource version \"{}\"", rv_text));
    if (*rv > rv_) return TooLargeResourceVersion(*rv, rv_);
    if (*rv < compacted_rv_)
      return Expired(fmt::format("too old resource version: {} ({})", *rv, compacted_rv_));
    for (const auto& h : history_) {
      if (h.rv <= *rv || h.resource != idx) continue;
      const bool now = h.type != EventType::kDeleted && w->Matches(*h.object);
      const bool before = h.prev && w->Matches(*h.prev);
      if (auto e = Convert(h.type, h.object, h.prev, now, before, h.rv)) w->queue_.push_back(std::move(*e));
    }
  } else {
    if (options.send_initial_events && !rv_text.empty() && rv_text != "0") {
      auto rv = ParseRv(rv_text);
      if (!rv) return BadRequest(fmt::format("invalid resource version \"{}\"", rv_text));
      if (*rv > rv_) return TooLargeResourceVersion(*rv, rv_);
    }
    for (const auto& [key, obj] : buckets_[idx]) {
      if (w->Matches(*obj)) w->queue_.push_back({EventType::kAdded, obj});
    }
    if (options.send_initial_events) {
      json::object mark = *w->Bookmark(rv_).object;
      mark["metadata"].as_object()["annotations"] = json::object{{kInitialEventsEnd, "true"}};
      w->queue_.push_back({EventType::kBookmark, std::make_shared<const json::object>(std::move(mark))});
    }
  }
  watchers_[next_watcher_++] = w;
  return w;
}

void Store::Emit(EventType type, std::size_t resource, ObjectPtr object, ObjectPtr prev) {
  const std::uint64_t rv = rv_;
  for (auto it = watchers_.begin(); it != watchers_.end();) {
    auto w = it->second.lock();
    if (!w) {
      it = watchers_.erase(it);
      continue;
    }
    ++it;
    if (IndexOf(*w->type_) != resource || w->end_ != Watcher::End::kNone) continue;
    const bool now = type != EventType::kDeleted && w->Matches(*object);
    const bool before = prev && w->Matches(*prev);
    if (auto e = Convert(type, object, prev, now, before, rv)) {
      w->Push(std::move(*e), options_.watch_queue_limit);
      w->Notify();
    }
  }
  history_.push_back({type, resource, rv, std::move(object), std::move(prev)});
  while (history_.size() > options_.history_limit) {
    compacted_rv_ = history_.front().rv;
    history_.pop_front();
  }
}

void Store::Compact() {
  history_.clear();
  compacted_rv_ = rv_;
  snapshots_.clear();
}

void Store::ExpireContinueTokens() { snapshots_.clear(); }

void Store::DropWatchers() {
  for (auto& [id, weak] : watchers_) {
    if (auto w = weak.lock()) {
      w->end_ = Watcher::End::kDropped;
      w->Notify();
    }
  }
  watchers_.clear();
}

void Store::RequestBookmarks() {
  for (auto& [id, weak] : watchers_) {
    if (auto w = weak.lock(); w && w->allow_bookmarks_) {
      w->bookmark_requested_ = true;
      w->Notify();
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// Convenience

namespace {

const ResourceType* TypeOf(const json::value& object, std::string* what) {
  const json::object* o = object.if_object();
  if (!o) {
    *what = "not a JSON object";
    return nullptr;
  }
  const std::string_view api_version = Str(o, "apiVersion");
  const std::string_view kind = Str(o, "kind");
  const ResourceType* type = FindResourceByKind(api_version, kind);
  if (!type) {
    *what = fmt::format("{} {}/{} ({})", kind.empty() ? "object" : kind, MetaStr(*o, "namespace"),
                        MetaStr(*o, "name"), api_version.empty() ? "no apiVersion" : api_version);
  }
  return type;
}

}  // namespace

ApiResult<ObjectPtr> Store::Create(json::value object) {
  std::string what;
  const ResourceType* type = TypeOf(object, &what);
  if (!type) return BadRequest(fmt::format("cannot create {}: kind not served", what));
  return Create(*type, "", std::move(object.as_object()));
}

Result<std::size_t> Store::Load(const std::vector<json::value>& documents,
                                std::vector<std::string>* skipped) {
  std::size_t loaded = 0;
  std::vector<const json::value*> objects;
  for (const auto& doc : documents) {
    const json::object* o = doc.if_object();
    const json::value* items = o ? o->if_contains("items") : nullptr;
    if (o && items && items->is_array() && Str(o, "kind").ends_with("List")) {
      for (const auto& item : items->get_array()) objects.push_back(&item);
    } else if (!doc.is_null()) {
      objects.push_back(&doc);
    }
  }
  for (const json::value* v : objects) {
    std::string what;
    const ResourceType* type = TypeOf(*v, &what);
    if (!type) {
      if (skipped) skipped->push_back(what);
      continue;
    }
    json::object o = v->as_object();
    const std::string created(MetaStr(o, "creationTimestamp"));
    const std::string uid(MetaStr(o, "uid"));
    if (type->plural == "namespaces" && Lookup(*type, "", MetaStr(o, "name")))
      continue;  // built-in namespaces
    auto stored = Create(*type, "", std::move(o));
    if (!stored) {
      return Error{fmt::format("{} {}/{}: {}", type->kind, MetaStr(v->as_object(), "namespace"),
                               MetaStr(v->as_object(), "name"), stored.error().message)};
    }
    if (!created.empty() || !uid.empty()) {
      // Keep the snapshot's identity and age: rewrite the stored object in place (no new version).
      json::object fixed = **stored;
      if (!created.empty()) Meta(fixed)["creationTimestamp"] = created;
      if (!uid.empty()) Meta(fixed)["uid"] = uid;
      auto ptr = std::make_shared<const json::object>(std::move(fixed));
      buckets_[IndexOf(*type)][KeyOf(*ptr)] = ptr;
      if (!history_.empty() && history_.back().rv == rv_) history_.back().object = ptr;
    }
    ++loaded;
  }
  return loaded;
}

ObjectPtr Store::Find(std::string_view resource, std::string_view ns, std::string_view name) const {
  const ResourceType* type = FindResourceByName(resource);
  if (!type) return nullptr;
  const ObjectPtr* found = Lookup(*type, ns, name);
  return found ? *found : nullptr;
}

std::vector<ObjectPtr> Store::Objects(std::string_view resource) const {
  std::vector<ObjectPtr> out;
  const ResourceType* type = FindResourceByName(resource);
  if (!type) return out;
  for (const auto& [key, obj] : buckets_[IndexOf(*type)]) out.push_back(obj);
  return out;
}

json::object ListDocument(const ResourceType& type, const ListResult& list) {
  json::object meta{{"resourceVersion", std::to_string(list.resource_version)}};
  if (!list.continue_token.empty()) meta["continue"] = list.continue_token;
  if (list.remaining_items) meta["remainingItemCount"] = *list.remaining_items;
  json::array items;
  items.reserve(list.items.size());
  for (const auto& obj : list.items) items.emplace_back(*obj);
  return json::object{{"kind", type.ListKind()},
                      {"apiVersion", type.ApiVersion()},
                      {"metadata", std::move(meta)},
                      {"items", std::move(items)}};
}

}  // namespace hami::sim
