#include "core/codec/node_devices.h"

#include <fmt/format.h>

#include <boost/json.hpp>
#include <limits>
#include <map>
#include <set>

#include "core/names.h"
#include "core/strings.h"

namespace hami::codec {
namespace json = boost::json;
// Reads a JSON number as an integer in [lo, hi] the way Go's encoding/json fills an int field.
Result<std::int64_t> JsonInt(const json::value& v, std::string_view where, std::int64_t lo, std::int64_t hi) {
  std::int64_t out = 0;
  if (v.is_null()) return std::int64_t{0};
  if (v.is_int64()) {
    out = v.get_int64();
  } else if (v.is_uint64()) {
    if (v.get_uint64() > static_cast<std::uint64_t>(hi)) {
      return Error{fmt::format("{}: {} is out of range [{}, {}]", where, v.get_uint64(), lo, hi)};
    }
    out = static_cast<std::int64_t>(v.get_uint64());
  } else if (v.is_double()) {
    return Error{fmt::format("{}: {} is not an integer", where, json::serialize(v))};
  } else {
    return Error{fmt::format("{}: expected a number, got {}", where, json::serialize(v))};
  }
  if (out < lo || out > hi) return Error{fmt::format("{}: {} is out of range [{}, {}]", where, out, lo, hi)};
  return out;
}

Result<std::string> JsonString(const json::value& v, std::string_view where) {
  if (v.is_null()) return Ok(std::string());
  if (!v.is_string()) return Error{fmt::format("{}: expected a string, got {}", where, json::serialize(v))};
  return Ok(std::string(v.get_string()));
}

Result<bool> JsonBool(const json::value& v, std::string_view where) {
  if (v.is_null()) return false;
  if (!v.is_bool())
    return Error{fmt::format("{}: expected true or false, got {}", where, json::serialize(v))};
  return v.get_bool();
}

namespace {

// Fields that travel on in the colon/comma formats (the pod's allocation annotation, the legacy register)
// must not carry their separators: an id "GPU-0,X,1,1:GPU-1" would make the device plugin and the ledger read
// devices that were never chosen. Control characters have no business there either.
Result<void> CheckText(std::string_view value, std::string_view where, std::string_view field) {
  for (char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if (c == ',' || c == ':' || c == ';' || u < 0x20 || u == 0x7f) {
      return Error{fmt::format("{}: {} {} may not contain ',', ':', ';' or control characters", where, field,
                               Quoted(value))};
    }
  }
  return {};
}

}  // namespace

// What a device must be to enter the registry, whichever format it came in.
Result<void> CheckDevice(const DeviceInfo& d, std::string_view where) {
  if (d.id.empty()) return Error{fmt::format("{}: missing the device id", where)};
  for (auto [field, value] :
       {std::pair<std::string_view, std::string_view>{"id", d.id}, {"type", d.type}, {"mode", d.mode}}) {
    if (auto ok = CheckText(value, where, field); !ok) return ok;
  }
  for (auto [field, value] : {std::pair<std::string_view, std::int64_t>{"count", d.count},
                              {"devmem", d.devmem.value()},
                              {"devcore", d.devcore.value()}}) {
    if (value < 0)
      return Error{fmt::format("{} ({}): {} = {} is negative", where, Quoted(d.id), field, value)};
  }
  for (const auto& p : d.mig_profiles) {
    if (auto ok = CheckText(p.name, where, "MIG profile name"); !ok) return ok;
    if (p.memory_mib < 0 || p.core < 0 || p.slice_count < 0)
      return Error{
          fmt::format("{} ({}): MIG profile {} has a negative size", where, Quoted(d.id), Quoted(p.name))};
  }
  return {};
}

// Two devices of one id would share one ledger entry: the second could be handed out beyond its capacity.
Result<void> CheckUniqueIds(const std::vector<DeviceInfo>& devices) {
  std::set<std::string_view> seen;
  for (const auto& d : devices) {
    if (!seen.insert(d.id).second) return Error{fmt::format("device id {} is listed twice", Quoted(d.id))};
  }
  return {};
}

namespace {

constexpr std::int64_t kInt32Max = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t kInt32Min = std::numeric_limits<std::int32_t>::min();
constexpr std::int64_t kIntMax = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kIntMin = std::numeric_limits<std::int64_t>::min();

Result<MigProfile> DecodeMigProfile(const json::value& v, const std::string& where) {
  MigProfile p;
  if (v.is_null()) return p;
  if (!v.is_object()) return Error{fmt::format("{}: expected an object", where)};
  for (const auto& kv : v.get_object()) {
    const std::string key = ToLower(kv.key());
    const std::string at = fmt::format("{}.{}", where, std::string_view(kv.key()));
    if (key == "name") {
      auto s = JsonString(kv.value(), at);
      if (!s) return s.error();
      p.name = *s;
    } else if (key == "memorymb") {
      auto n = JsonInt(kv.value(), at, kIntMin, kIntMax);
      if (!n) return n.error();
      p.memory_mib = *n;
    } else if (key == "core") {
      auto n = JsonInt(kv.value(), at, kInt32Min, kInt32Max);
      if (!n) return n.error();
      p.core = static_cast<std::int32_t>(*n);
    } else if (key == "slicecount") {
      auto n = JsonInt(kv.value(), at, kInt32Min, kInt32Max);
      if (!n) return n.error();
      p.slice_count = static_cast<std::int32_t>(*n);
    } else if (key == "placements") {
      if (kv.value().is_null()) continue;
      if (!kv.value().is_array()) return Error{fmt::format("{}: expected an array", at)};
      int i = 0;
      for (const auto& pv : kv.value().get_array()) {
        const std::string pat = fmt::format("{}[{}]", at, i++);
        if (!pv.is_object()) return Error{fmt::format("{}: expected an object", pat)};
        MigPlacement pl;
        for (const auto& pkv : pv.get_object()) {
          const std::string pk = ToLower(pkv.key());
          if (pk != "start" && pk != "size") continue;
          auto n = JsonInt(pkv.value(), fmt::format("{}.{}", pat, pk), kIntMin / 2, kIntMax / 2);
          if (!n) return n.error();
          (pk == "start" ? pl.start : pl.size) = static_cast<int>(*n);
        }
        p.placements.push_back(pl);
      }
    }
  }
  return p;
}

// custominfo is a free map in Go. NetworkID is a JSON number (Go reads it as a float, so 1.0 counts as 1);
// null or a missing key: no network. Every other entry whose value is a string is kept for the vendor's
// rules (exact keys, as a Go map has them); entries of other kinds are ignored.
Result<void> DecodeCustomInfo(const json::value& v, std::string_view where, DeviceInfo& d) {
  d.network.reset();
  d.custom_info.clear();
  if (v.is_null()) return {};
  if (!v.is_object()) return Error{fmt::format("{}: expected an object, got {}", where, json::serialize(v))};
  std::map<std::string, std::string, std::less<>> strings;  // sorted, one value per key
  for (const auto& kv : v.get_object()) {
    if (kv.key() != "NetworkID" && kv.value().is_string()) {
      strings[std::string(kv.key())] = std::string(kv.value().get_string());
    }
  }
  d.custom_info.assign(strings.begin(), strings.end());
  const json::value* id = v.get_object().if_contains("NetworkID");
  if (id == nullptr || id->is_null()) return {};
  const std::string at = fmt::format("{}.NetworkID", where);
  if (id->is_double()) {
    const double x = id->get_double();
    if (x != static_cast<double>(static_cast<std::int64_t>(x)) || x < 0 || x > kInt32Max) {
      return Error{fmt::format("{}: {} is not an integer in [0, {}]", at, json::serialize(*id), kInt32Max)};
    }
    d.network = static_cast<std::int32_t>(x);
    return {};
  }
  auto n = JsonInt(*id, at, 0, kInt32Max);
  if (!n) return n.error();
  d.network = static_cast<std::int32_t>(*n);
  return {};
}

Result<DeviceInfo> DecodeManifestDevice(const json::value& v, std::size_t position) {
  const std::string where = fmt::format("device {}", position);
  DeviceInfo d;
  if (v.is_null()) return d;
  if (!v.is_object()) return Error{fmt::format("{}: expected an object, got {}", where, json::serialize(v))};
  for (const auto& kv : v.get_object()) {
    const std::string key = ToLower(kv.key());
    const std::string at = fmt::format("{} field \"{}\"", where, std::string_view(kv.key()));
    const json::value& val = kv.value();
    if (key == "id") {
      auto s = JsonString(val, at);
      if (!s) return s.error();
      d.id = *s;
    } else if (key == "index") {
      auto n = JsonInt(val, at, 0, std::numeric_limits<std::int32_t>::max());
      if (!n) return n.error();
      d.index = static_cast<std::int32_t>(*n);
    } else if (key == "count") {
      auto n = JsonInt(val, at, kInt32Min, kInt32Max);
      if (!n) return n.error();
      d.count = static_cast<std::int32_t>(*n);
    } else if (key == "devmem") {
      auto n = JsonInt(val, at, kInt32Min, kInt32Max);
      if (!n) return n.error();
      d.devmem = MiB(*n);
    } else if (key == "devcore") {
      auto n = JsonInt(val, at, kInt32Min, kInt32Max);
      if (!n) return n.error();
      d.devcore = Cores(*n);
    } else if (key == "type") {
      auto s = JsonString(val, at);
      if (!s) return s.error();
      d.type = *s;
    } else if (key == "numa") {
      auto n = JsonInt(val, at, kIntMin, kIntMax);
      if (!n) return n.error();
      d.numa = static_cast<std::int32_t>(*n);
    } else if (key == "mode") {
      auto s = JsonString(val, at);
      if (!s) return s.error();
      d.mode = *s;
    } else if (key == "health") {
      auto b = JsonBool(val, at);
      if (!b) return b.error();
      d.health = *b;
    } else if (key == "migprofiles") {
      if (val.is_null()) continue;
      if (!val.is_array()) return Error{fmt::format("{}: expected an array", at)};
      std::size_t i = 0;
      for (const auto& pv : val.get_array()) {
        auto p = DecodeMigProfile(pv, fmt::format("{} migProfiles[{}]", where, i++));
        if (!p) return p.error();
        d.mig_profiles.push_back(std::move(*p));
      }
    } else if (key == "custominfo") {
      if (auto ok = DecodeCustomInfo(val, at, d); !ok) return ok.error();
    }
    // Unknown keys (devicevendor, instanceCount, ...) are ignored, as Go does.
  }
  return d;
}

}  // namespace

Result<std::vector<DeviceInfo>> DecodeDeviceManifest(std::string_view json_text) {
  boost::system::error_code ec;
  json::value root = json::parse(json_text, ec);
  if (ec) {
    return Error{fmt::format("device manifest is not valid JSON ({}): want a JSON array of device objects",
                             ec.message())};
  }
  std::vector<DeviceInfo> out;
  if (root.is_null()) return out;
  if (!root.is_array()) return Error{"device manifest: want a JSON array of device objects"};
  std::size_t i = 0;
  for (const auto& v : root.get_array()) {
    auto d = DecodeManifestDevice(v, i);
    if (!d) return d.error();
    if (auto ok = CheckDevice(*d, fmt::format("device {}", i)); !ok) return ok.error();
    ++i;
    out.push_back(std::move(*d));
  }
  if (auto ok = CheckUniqueIds(out); !ok) return ok.error();
  return out;
}

std::string EncodeDeviceManifest(const std::vector<DeviceInfo>& devices) {
  json::array arr;
  for (const auto& d : devices) {
    json::object o;
    if (!d.id.empty()) o["id"] = d.id;
    if (d.index != 0) o["index"] = d.index;
    if (d.count != 0) o["count"] = d.count;
    if (d.devmem.value() != 0) o["devmem"] = d.devmem.value();
    if (d.devcore.value() != 0) o["devcore"] = d.devcore.value();
    if (!d.type.empty()) o["type"] = d.type;
    if (d.numa != 0) o["numa"] = d.numa;
    if (!d.mode.empty()) o["mode"] = d.mode;
    if (!d.mig_profiles.empty()) {
      json::array profiles;
      for (const auto& p : d.mig_profiles) {
        json::array placements;
        for (const auto& pl : p.placements)
          placements.push_back(json::object{{"start", pl.start}, {"size", pl.size}});
        profiles.push_back(json::object{{"name", p.name},
                                        {"memoryMB", p.memory_mib},
                                        {"core", p.core},
                                        {"sliceCount", p.slice_count},
                                        {"placements", std::move(placements)}});
      }
      o["migProfiles"] = std::move(profiles);
    }
    if (d.health) o["health"] = true;
    if (d.network || !d.custom_info.empty()) {
      json::object custom;
      if (d.network) custom["NetworkID"] = *d.network;
      for (const auto& [key, value] : d.custom_info) custom[key] = value;
      o["custominfo"] = std::move(custom);
    }
    arr.push_back(std::move(o));
  }
  return json::serialize(arr);
}

namespace {

enum LegacyField { kId, kCount, kDevmem, kDevcore, kType, kNuma, kHealth, kIndex, kMode, kFieldsLong };
constexpr std::size_t kFieldsShort = 7;

Result<DeviceInfo> DecodeLegacyEntry(std::string_view entry) {
  const auto f = Split(entry, ',');
  if (f.size() != kFieldsShort && f.size() != kFieldsLong) {
    return Error{
        fmt::format("device entry '{}': want 7 or 9 comma-separated fields "
                    "(id,count,devmem,devcore,type,numa,health[,index,mode]), got {}",
                    entry, f.size())};
  }
  const auto field_error = [&](std::string_view name, std::string_view value, std::string_view expected) {
    return Error{fmt::format("device entry '{}': field {} = '{}' is not {}", entry, name, value, expected)};
  };
  DeviceInfo d;
  d.id = std::string(f[kId]);
  auto count = ParseIntInRange(f[kCount], "count", kInt32Min, kInt32Max);
  if (!count) return field_error("count", f[kCount], "a 32-bit integer");
  d.count = static_cast<std::int32_t>(*count);
  auto mem = ParseIntInRange(f[kDevmem], "devmem", kInt32Min, kInt32Max);
  if (!mem) return field_error("devmem", f[kDevmem], "a 32-bit integer (MiB)");
  d.devmem = MiB(*mem);
  auto core = ParseIntInRange(f[kDevcore], "devcore", kInt32Min, kInt32Max);
  if (!core) return field_error("devcore", f[kDevcore], "a 32-bit integer");
  d.devcore = Cores(*core);
  d.type = std::string(f[kType]);
  auto numa = ParseIntInRange(f[kNuma], "numa", kInt32Min, kInt32Max);
  if (!numa) return field_error("numa", f[kNuma], "an integer");
  d.numa = static_cast<std::int32_t>(*numa);
  auto health = ParseGoBool(f[kHealth], "health");
  if (!health) return field_error("health", f[kHealth], "a boolean (true or false)");
  d.health = *health;
  d.mode = "hami-core";
  if (f.size() == kFieldsLong) {
    auto index = ParseIntInRange(f[kIndex], "index", kInt32Min, kInt32Max);
    if (!index) return field_error("index", f[kIndex], "an integer");
    if (*index < 0) return field_error("index", f[kIndex], "a non-negative integer");
    d.index = static_cast<std::int32_t>(*index);
    d.mode = std::string(f[kMode]);
  }
  return d;
}

}  // namespace

Result<std::vector<DeviceInfo>> DecodeLegacyDevices(std::string_view text) {
  if (text.find(':') == std::string_view::npos) {
    return Error{
        fmt::format("legacy device list '{}': missing the ':' after each device "
                    "(want id,count,devmem,devcore,type,numa,health[,index,mode]:...)",
                    text)};
  }
  std::vector<DeviceInfo> out;
  for (std::string_view seg : Split(text, ':')) {
    if (seg.empty()) continue;
    if (seg.find(',') == std::string_view::npos) {
      return Error{
          fmt::format("legacy device list: segment '{}' is not a comma-separated device entry", seg)};
    }
    auto d = DecodeLegacyEntry(seg);
    if (!d) return d.error();
    if (auto ok = CheckDevice(*d, fmt::format("device entry '{}'", seg)); !ok) return ok.error();
    out.push_back(std::move(*d));
  }
  if (auto ok = CheckUniqueIds(out); !ok) return ok.error();
  return out;
}

std::string EncodeLegacyDevices(const std::vector<DeviceInfo>& devices) {
  std::string out;
  for (const auto& d : devices) {
    out += fmt::format("{},{},{},{},{},{},{},{},{}:", d.id, d.count, d.devmem.value(), d.devcore.value(),
                       d.type, d.numa, d.health ? "true" : "false", d.index, d.mode);
  }
  return devices.empty() ? ":" : out;  // "" would be unreadable: the decoder wants at least one ':'
}

Result<void> ApplyPairScores(std::string_view json_text, std::vector<DeviceInfo>& devices) {
  boost::system::error_code ec;
  json::value root = json::parse(json_text, ec);
  if (ec) return Error{fmt::format("topology score annotation is not valid JSON ({})", ec.message())};
  if (root.is_null()) return {};
  if (!root.is_array()) return Error{"topology score annotation: want a JSON array of {uuid, score}"};
  std::size_t i = 0;
  for (const auto& entry : root.get_array()) {
    const std::string where = fmt::format("topology score entry {}", i++);
    if (!entry.is_object()) return Error{where + ": expected an object"};
    std::string uuid;
    const json::object* scores = nullptr;
    for (const auto& kv : entry.get_object()) {
      const std::string key = ToLower(kv.key());
      if (key == "uuid") {
        auto s = JsonString(kv.value(), where + ".uuid");
        if (!s) return s.error();
        uuid = *s;
      } else if (key == "score") {
        if (kv.value().is_null()) continue;
        if (!kv.value().is_object()) return Error{where + ".score: expected an object of uuid -> integer"};
        scores = &kv.value().get_object();
      }
    }
    for (auto& d : devices) {
      if (d.id != uuid || scores == nullptr) continue;
      for (const auto& s : *scores) {
        auto n = JsonInt(s.value(), fmt::format("{}.score[{}]", where, std::string_view(s.key())), kInt32Min,
                         kInt32Max);
        if (!n) return n.error();
        d.pair_scores[std::string(s.key())] = *n;
      }
    }
  }
  return {};
}

}  // namespace hami::codec
