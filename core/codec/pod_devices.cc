#include "core/codec/pod_devices.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/json.hpp>
#include <limits>
#include <map>
#include <set>

#include "core/strings.h"

namespace hami::codec {
namespace json = boost::json;

std::string EncodePodDevices(const PodVendorDevices& containers) {
  std::string out;
  for (const auto& ctr : containers) {
    for (const auto& d : ctr) {
      out += fmt::format("{},{},{},{}:", d.uuid, d.vendor, d.mem.value(), d.cores.value());
    }
    out += ';';
  }
  return out;
}

bool NothingLeftToAllocate(std::string_view value) {
  return std::all_of(value.begin(), value.end(), [](char c) { return c == ';'; });
}

Result<PodVendorDevices> DecodePodDevices(std::string_view value) {
  PodVendorDevices out;
  if (value.empty()) return out;
  const auto containers = Split(value, ';');
  constexpr std::int64_t kMin = std::numeric_limits<std::int32_t>::min();
  constexpr std::int64_t kMax = std::numeric_limits<std::int32_t>::max();
  for (std::size_t c = 0; c < containers.size(); ++c) {
    ContainerDevices devices;
    for (std::string_view piece : Split(containers[c], ':')) {
      if (piece.find(',') == std::string_view::npos) continue;  // empty piece after the last ':'
      const auto f = Split(piece, ',');
      if (f.size() < 4) {
        return Error{fmt::format("container {}: device '{}' has {} fields, want uuid,vendor,memory,cores", c,
                                 piece, f.size())};
      }
      auto mem = ParseIntInRange(f[2], "memory", kMin, kMax);
      if (!mem) return Error{fmt::format("container {}: device '{}': {}", c, piece, mem.error().message)};
      auto cores = ParseIntInRange(f[3], "cores", kMin, kMax);
      if (!cores) return Error{fmt::format("container {}: device '{}': {}", c, piece, cores.error().message)};
      ContainerDevice d;
      d.uuid = std::string(f[0]);
      d.vendor = std::string(f[1]);
      d.mem = MiB(*mem);
      d.cores = Cores(*cores);
      devices.push_back(std::move(d));
    }
    out.push_back(std::move(devices));
  }
  return out;
}

std::string EncodeMigAllocations(const std::vector<MigAllocation>& allocations) {
  json::array arr;
  for (const auto& a : allocations) {
    json::object o{{"containerIndex", a.container_index},
                   {"deviceIndex", a.device_index},
                   {"gpuUUID", a.gpu_uuid},
                   {"profile", a.profile},
                   {"placement", json::object{{"start", a.placement.start}, {"size", a.placement.size}}}};
    if (a.mig_uuid) o["migUUID"] = *a.mig_uuid;
    if (a.gpu_instance_id) o["gpuInstanceID"] = *a.gpu_instance_id;
    if (a.compute_instance_id) o["computeInstanceID"] = *a.compute_instance_id;
    arr.push_back(std::move(o));
  }
  return json::serialize(arr);
}

namespace {

Result<int> IntField(const json::object& o, std::string_view key, std::string_view where) {
  const auto* v = o.if_contains(key);
  if (v == nullptr) return Error{fmt::format("{}: missing \"{}\"", where, key)};
  if (!v->is_int64() && !v->is_uint64())
    return Error{fmt::format("{}: \"{}\" must be an integer", where, key)};
  const auto n = v->is_int64() ? v->get_int64() : static_cast<std::int64_t>(v->get_uint64());
  if (n < 0 || n > std::numeric_limits<int>::max()) {
    return Error{fmt::format("{}: \"{}\" = {} is out of range", where, key, n)};
  }
  return static_cast<int>(n);
}

}  // namespace

Result<std::vector<MigAllocation>> DecodeMigAllocations(std::string_view json_text) {
  boost::system::error_code ec;
  json::value root = json::parse(json_text, ec);
  if (ec) return Error{fmt::format("MIG allocations are not valid JSON ({})", ec.message())};
  std::vector<MigAllocation> out;
  if (root.is_null()) return out;
  if (!root.is_array()) return Error{"MIG allocations: want a JSON array"};
  std::set<std::pair<int, int>> seen;
  std::size_t i = 0;
  for (const auto& v : root.get_array()) {
    const std::string where = fmt::format("MIG allocation {}", i++);
    if (!v.is_object()) return Error{where + ": expected an object"};
    const auto& o = v.get_object();
    MigAllocation a;
    auto ci = IntField(o, "containerIndex", where);
    if (!ci) return ci.error();
    auto di = IntField(o, "deviceIndex", where);
    if (!di) return di.error();
    a.container_index = *ci;
    a.device_index = *di;
    const auto* uuid = o.if_contains("gpuUUID");
    const auto* profile = o.if_contains("profile");
    if (uuid == nullptr || !uuid->is_string() || uuid->get_string().empty()) {
      return Error{where + ": \"gpuUUID\" must be a non-empty string"};
    }
    if (profile == nullptr || !profile->is_string() || profile->get_string().empty()) {
      return Error{where + ": \"profile\" must be a non-empty string"};
    }
    a.gpu_uuid = std::string(uuid->get_string());
    a.profile = std::string(profile->get_string());
    const auto* placement = o.if_contains("placement");
    if (placement == nullptr || !placement->is_object())
      return Error{where + ": \"placement\" must be an object"};
    auto start = IntField(placement->get_object(), "start", where + " placement");
    if (!start) return start.error();
    auto size = IntField(placement->get_object(), "size", where + " placement");
    if (!size) return size.error();
    a.placement = {*start, *size};
    const auto* mig_uuid = o.if_contains("migUUID");
    const bool has_gi = o.contains("gpuInstanceID");
    const bool has_ci = o.contains("computeInstanceID");
    const int runtime_fields = (mig_uuid != nullptr) + has_gi + has_ci;
    if (runtime_fields != 0 && runtime_fields != 3) {
      return Error{where +
                   ": migUUID, gpuInstanceID and computeInstanceID must be given together or not at all"};
    }
    if (runtime_fields == 3) {
      if (!mig_uuid->is_string()) return Error{where + ": \"migUUID\" must be a string"};
      a.mig_uuid = std::string(mig_uuid->get_string());
      auto gi = IntField(o, "gpuInstanceID", where);
      if (!gi) return gi.error();
      auto cii = IntField(o, "computeInstanceID", where);
      if (!cii) return cii.error();
      a.gpu_instance_id = *gi;
      a.compute_instance_id = *cii;
    }
    if (!seen.insert({a.container_index, a.device_index}).second) {
      return Error{fmt::format("{}: container {} device {} is listed twice", where, a.container_index,
                               a.device_index)};
    }
    out.push_back(std::move(a));
  }
  return out;
}

std::vector<MigAllocation> MigAllocationsOf(const PodVendorDevices& containers) {
  std::vector<MigAllocation> out;
  for (std::size_t c = 0; c < containers.size(); ++c) {
    for (std::size_t d = 0; d < containers[c].size(); ++d) {
      const auto& dev = containers[c][d];
      if (!dev.mig) continue;
      MigAllocation a;
      a.container_index = static_cast<int>(c);
      a.device_index = static_cast<int>(d);
      a.gpu_uuid = dev.uuid;
      a.profile = dev.mig->profile;
      a.placement = dev.mig->placement;
      out.push_back(std::move(a));
    }
  }
  return out;
}

namespace {

struct Acc {
  MiB init_mem, app_mem;
  Cores init_cores, app_cores;
  std::int32_t app_slots = 0;
  bool seen_init = false;
};

std::vector<DeviceCharge> Collapse(const PodDevices& devices, std::size_t num_init, bool include_init) {
  std::map<std::pair<std::string, std::string>, Acc> acc;
  for (const auto& [vendor, containers] : devices) {
    for (std::size_t c = 0; c < containers.size(); ++c) {
      const bool is_init = c < num_init;
      if (is_init && !include_init) continue;
      for (const auto& d : containers[c]) {
        auto& a = acc[{vendor, d.uuid}];
        if (is_init) {
          a.seen_init = true;
          a.init_mem = std::max(a.init_mem, d.mem);
          a.init_cores = std::max(a.init_cores, d.cores);
        } else {
          a.app_mem += d.mem;
          a.app_cores += d.cores;
          ++a.app_slots;
        }
      }
    }
  }
  std::vector<DeviceCharge> out;
  out.reserve(acc.size());
  for (const auto& [key, a] : acc) {
    out.push_back(DeviceCharge{key.first, key.second, std::max(a.init_mem, a.app_mem),
                               std::max(a.init_cores, a.app_cores), std::max(a.app_slots, 1)});
  }
  return out;
}

}  // namespace

std::vector<DeviceCharge> CollapseDevices(const PodDevices& devices, std::size_t num_init) {
  return Collapse(devices, num_init, true);
}

std::vector<DeviceCharge> AppOnlyCharges(const PodDevices& devices, std::size_t num_init) {
  return Collapse(devices, num_init, false);
}

}  // namespace hami::codec
