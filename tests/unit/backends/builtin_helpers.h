#pragma once
// What the tests of the four first vendors (nvidia_test.cc, cambricon_test.cc, mthreads_test.cc,
// hygon_test.cc) and of the built-in registration (builtin_test.cc) share, in the namespace their tests live
// in: a backend built from its config section by the built-in registry, and small readers of its answers.
#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "backends/builtin.h"
#include "core/backend.h"
#include "tests/support/builders.h"

namespace hami::vendor_tests {

using testing::Ctr;
using testing::Req;
using testing::Request;

inline const TimePoint kNow = std::chrono::system_clock::from_time_t(1716199325);

inline Result<BackendPtr> TryMake(std::string_view section, const VendorSettings& settings = {}) {
  BackendRegistry registry;
  backends::RegisterBuiltinBackends(registry).value();
  auto built = registry.Create(section, settings);
  if (!built) return built.error();
  if (built->size() != 1) return Error{fmt::format("{} backends from section {}", built->size(), section)};
  return std::move(built->front());
}

inline BackendPtr Make(std::string_view section, const VendorSettings& settings = {}) {
  return TryMake(section, settings).value();
}

// The error of a factory call, or a marker that makes a comparison fail when creation succeeded.
inline std::string CreateError(std::string_view section, const VendorSettings& settings) {
  auto b = TryMake(section, settings);
  return b ? std::string("<created without error>") : b.error().message;
}

inline ContainerView Requests(std::string name, std::map<std::string, std::string> requests,
                              std::map<std::string, std::string> limits = {}) {
  ContainerView c = Ctr(std::move(name), std::move(limits));
  for (auto& [k, v] : requests) c.requests[k] = v;
  return c;
}

// RequestFor that must fail; returns the message ("<no error>" when it succeeded, so a find() check fails).
inline std::string RequestError(const Backend& b, const ContainerView& c) {
  auto r = b.RequestFor(c);
  return r ? std::string("<no error>") : r.error().message;
}

inline bool Contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

inline NodeView CapacityNode(std::string name, std::map<std::string, std::string> capacity) {
  NodeView n;
  n.name = std::move(name);
  for (auto& [k, v] : capacity) n.capacity[k] = v;
  return n;
}

inline ContainerDevice Dev(std::int32_t index, std::string uuid, std::string vendor, std::int64_t mem,
                           std::int64_t cores) {
  return ContainerDevice{index, std::move(uuid), std::move(vendor), MiB(mem), Cores(cores), std::nullopt};
}

// What one Backend::Admit call did to a container (and its pod).
struct Admitted {
  bool ok = false;    // Admit returned a value
  bool uses = false;  // ... and that value
  std::string error;  // Admit's error, if any
  ContainerView container;
  PodView pod;
};

inline Admitted AdmitOne(const Backend& b, ContainerView c, PodView pod = {}) {
  Admitted a;
  auto r = b.Admit(c, pod);
  a.ok = r.has_value();
  if (r) {
    a.uses = *r;
  } else {
    a.error = r.error().message;
  }
  a.container = std::move(c);
  a.pod = std::move(pod);
  return a;
}

}  // namespace hami::vendor_tests
