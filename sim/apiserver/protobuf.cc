#include "sim/apiserver/protobuf.h"

#include <fmt/format.h>

#include <boost/json.hpp>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/codec/stamps.h"

namespace hami::sim {
namespace json = boost::json;
namespace {

// ---- The protobuf wire format (varint, 64-bit, length-delimited, 32-bit).

class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  bool done() const { return pos_ >= data_.size(); }

  std::optional<std::uint64_t> Varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64 && pos_ < data_.size(); shift += 7) {
      const auto b = static_cast<std::uint8_t>(data_[pos_++]);
      v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    return std::nullopt;
  }
  std::optional<std::string_view> Bytes() {
    auto n = Varint();
    if (!n || *n > data_.size() - pos_) return std::nullopt;
    std::string_view out = data_.substr(pos_, static_cast<std::size_t>(*n));
    pos_ += static_cast<std::size_t>(*n);
    return out;
  }
  bool Skip(int wire_type) {
    switch (wire_type) {
      case 0:
        return Varint().has_value();
      case 1:
        return Advance(8);
      case 2:
        return Bytes().has_value();
      case 5:
        return Advance(4);
      default:
        return false;  // groups are not used by Kubernetes
    }
  }

 private:
  bool Advance(std::size_t n) {
    if (n > data_.size() - pos_) return false;
    pos_ += n;
    return true;
  }
  std::string_view data_;
  std::size_t pos_ = 0;
};

// ---- A small schema of the messages decoded here (field numbers from k8s.io/api generated.proto).

enum class Kind { kString, kInt64, kBool, kMessage, kStringMap, kQuantityMap, kTime };

struct Message;
struct Field {
  int number;
  const char* name;
  Kind kind;
  bool repeated = false;
  const Message* message = nullptr;
};
struct Message {
  std::vector<Field> fields;
};

const Message kOwnerReference{{{1, "kind", Kind::kString},
                               {3, "name", Kind::kString},
                               {4, "uid", Kind::kString},
                               {5, "apiVersion", Kind::kString},
                               {6, "controller", Kind::kBool},
                               {7, "blockOwnerDeletion", Kind::kBool}}};
const Message kObjectMeta{{{1, "name", Kind::kString},
                           {2, "generateName", Kind::kString},
                           {3, "namespace", Kind::kString},
                           {5, "uid", Kind::kString},
                           {6, "resourceVersion", Kind::kString},
                           {7, "generation", Kind::kInt64},
                           {8, "creationTimestamp", Kind::kTime},
                           {11, "labels", Kind::kStringMap},
                           {12, "annotations", Kind::kStringMap},
                           {13, "ownerReferences", Kind::kMessage, true, &kOwnerReference},
                           {14, "finalizers", Kind::kString, true}}};
const Message kNamespaceSpec{{{1, "finalizers", Kind::kString, true}}};
const Message kNamespaceStatus{{{1, "phase", Kind::kString}}};
const Message kNamespace{{{1, "metadata", Kind::kMessage, false, &kObjectMeta},
                          {2, "spec", Kind::kMessage, false, &kNamespaceSpec},
                          {3, "status", Kind::kMessage, false, &kNamespaceStatus}}};
const Message kScopedRequirement{
    {{1, "scopeName", Kind::kString}, {2, "operator", Kind::kString}, {3, "values", Kind::kString, true}}};
const Message kScopeSelector{{{1, "matchExpressions", Kind::kMessage, true, &kScopedRequirement}}};
const Message kQuotaSpec{{{1, "hard", Kind::kQuantityMap},
                          {2, "scopes", Kind::kString, true},
                          {3, "scopeSelector", Kind::kMessage, false, &kScopeSelector}}};
const Message kQuotaStatus{{{1, "hard", Kind::kQuantityMap}, {2, "used", Kind::kQuantityMap}}};
const Message kResourceQuota{{{1, "metadata", Kind::kMessage, false, &kObjectMeta},
                              {2, "spec", Kind::kMessage, false, &kQuotaSpec},
                              {3, "status", Kind::kMessage, false, &kQuotaStatus}}};

Result<json::object> Decode(std::string_view data, const Message& schema, std::string_view where);

// A map entry {1: key, 2: value}; the value is a string or a Quantity {1: string}.
Result<std::pair<std::string, std::string>> MapEntry(std::string_view data, bool quantity,
                                                     std::string_view where) {
  Reader r(data);
  std::pair<std::string, std::string> kv;
  while (!r.done()) {
    auto tag = r.Varint();
    if (!tag) return Error{fmt::format("{}: malformed map entry", where)};
    const int number = static_cast<int>(*tag >> 3);
    const int wire = static_cast<int>(*tag & 7);
    if (wire == 2 && (number == 1 || number == 2)) {
      auto bytes = r.Bytes();
      if (!bytes) return Error{fmt::format("{}: truncated map entry", where)};
      if (number == 1) {
        kv.first = std::string(*bytes);
      } else if (quantity) {
        Reader q(*bytes);
        while (!q.done()) {
          auto qtag = q.Varint();
          if (!qtag) return Error{fmt::format("{}: malformed quantity", where)};
          if ((*qtag >> 3) == 1 && (*qtag & 7) == 2) {
            auto s = q.Bytes();
            if (!s) return Error{fmt::format("{}: truncated quantity", where)};
            kv.second = std::string(*s);
          } else if (!q.Skip(static_cast<int>(*qtag & 7))) {
            return Error{fmt::format("{}: malformed quantity", where)};
          }
        }
      } else {
        kv.second = std::string(*bytes);
      }
    } else if (!r.Skip(wire)) {
      return Error{fmt::format("{}: malformed map entry", where)};
    }
  }
  return kv;
}

Result<json::value> Time(std::string_view data, std::string_view where) {
  Reader r(data);
  std::int64_t seconds = 0;
  while (!r.done()) {
    auto tag = r.Varint();
    if (!tag) return Error{fmt::format("{}: malformed time", where)};
    if ((*tag >> 3) == 1 && (*tag & 7) == 0) {
      auto v = r.Varint();
      if (!v) return Error{fmt::format("{}: malformed time", where)};
      seconds = static_cast<std::int64_t>(*v);
    } else if (!r.Skip(static_cast<int>(*tag & 7))) {
      return Error{fmt::format("{}: malformed time", where)};
    }
  }
  if (seconds == 0) return json::value(nullptr);
  return json::value(codec::FormatRfc3339(TimePoint(std::chrono::seconds(seconds))));
}

Result<json::object> Decode(std::string_view data, const Message& schema, std::string_view where) {
  json::object out;
  Reader r(data);
  while (!r.done()) {
    auto tag = r.Varint();
    if (!tag) return Error{fmt::format("{}: malformed field tag", where)};
    const int number = static_cast<int>(*tag >> 3);
    const int wire = static_cast<int>(*tag & 7);
    const Field* field = nullptr;
    for (const auto& f : schema.fields) {
      if (f.number == number) field = &f;
    }
    if (!field) {
      if (!r.Skip(wire)) return Error{fmt::format("{}: malformed field {}", where, number)};
      continue;
    }
    const std::string path = fmt::format("{}.{}", where, field->name);
    json::value value;
    if (field->kind == Kind::kInt64 || field->kind == Kind::kBool) {
      if (wire != 0) return Error{fmt::format("{}: expected a varint", path)};
      auto v = r.Varint();
      if (!v) return Error{fmt::format("{}: malformed varint", path)};
      value = field->kind == Kind::kBool ? json::value(*v != 0) : json::value(static_cast<std::int64_t>(*v));
    } else {
      if (wire != 2) return Error{fmt::format("{}: expected a length-delimited field", path)};
      auto bytes = r.Bytes();
      if (!bytes) return Error{fmt::format("{}: truncated", path)};
      switch (field->kind) {
        case Kind::kString:
          value = json::string(*bytes);
          break;
        case Kind::kMessage: {
          auto m = Decode(*bytes, *field->message, path);
          if (!m) return m.error();
          value = std::move(*m);
          break;
        }
        case Kind::kTime: {
          auto t = Time(*bytes, path);
          if (!t) return t.error();
          value = std::move(*t);
          break;
        }
        case Kind::kStringMap:
        case Kind::kQuantityMap: {
          auto kv = MapEntry(*bytes, field->kind == Kind::kQuantityMap, path);
          if (!kv) return kv.error();
          json::value& map = out[field->name];
          if (!map.is_object()) map = json::object{};
          map.as_object()[kv->first] = kv->second;
          continue;
        }
        default:
          break;
      }
    }
    // Go's JSON omits empty strings, zero numbers and false (omitempty); protobuf writes them all.
    if (!field->repeated &&
        ((value.is_string() && value.get_string().empty()) || (value.is_int64() && value.get_int64() == 0) ||
         (value.is_bool() && !value.get_bool()) || value.is_null())) {
      continue;
    }
    if (field->repeated) {
      json::value& list = out[field->name];
      if (!list.is_array()) list = json::array{};
      list.as_array().push_back(std::move(value));
    } else {
      out[field->name] = std::move(value);
    }
  }
  return out;
}

}  // namespace

Result<json::object> DecodeKubernetesProtobuf(std::string_view body) {
  static constexpr std::string_view kMagic("k8s\0", 4);
  if (!body.starts_with(kMagic)) return Error{"protobuf body: missing the \"k8s\\0\" prefix"};
  // runtime.Unknown {1: typeMeta {1: apiVersion, 2: kind}, 2: raw, 3: contentEncoding, 4: contentType}
  Reader r(body.substr(kMagic.size()));
  std::string api_version;
  std::string kind;
  std::string_view raw;
  while (!r.done()) {
    auto tag = r.Varint();
    if (!tag) return Error{"protobuf body: malformed envelope"};
    const int number = static_cast<int>(*tag >> 3);
    const int wire = static_cast<int>(*tag & 7);
    if (wire == 2 && (number == 1 || number == 2)) {
      auto bytes = r.Bytes();
      if (!bytes) return Error{"protobuf body: truncated envelope"};
      if (number == 2) {
        raw = *bytes;
        continue;
      }
      Reader t(*bytes);
      while (!t.done()) {
        auto ttag = t.Varint();
        if (!ttag) return Error{"protobuf body: malformed typeMeta"};
        if ((*ttag & 7) == 2 && ((*ttag >> 3) == 1 || (*ttag >> 3) == 2)) {
          auto s = t.Bytes();
          if (!s) return Error{"protobuf body: truncated typeMeta"};
          ((*ttag >> 3) == 1 ? api_version : kind) = std::string(*s);
        } else if (!t.Skip(static_cast<int>(*ttag & 7))) {
          return Error{"protobuf body: malformed typeMeta"};
        }
      }
    } else if (!r.Skip(wire)) {
      return Error{"protobuf body: malformed envelope"};
    }
  }
  const Message* schema = nullptr;
  if (api_version == "v1" && kind == "Namespace") schema = &kNamespace;
  if (api_version == "v1" && kind == "ResourceQuota") schema = &kResourceQuota;
  if (!schema) {
    return Error{fmt::format("protobuf bodies of kind {} ({}) are not supported; send JSON",
                             kind.empty() ? "?" : kind, api_version.empty() ? "?" : api_version)};
  }
  auto object = Decode(raw, *schema, kind);
  if (!object) return object.error();
  json::object out{{"apiVersion", api_version}, {"kind", kind}};
  for (auto& kv : *object) out[kv.key()] = std::move(kv.value());
  return out;
}

}  // namespace hami::sim
