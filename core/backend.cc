#include "core/backend.h"

#include <algorithm>

namespace hami {

std::string_view ToString(Discovery d) {
  switch (d) {
    case Discovery::kJsonAnnotation:
      return "json-annotation";
    case Discovery::kLegacyAnnotation:
      return "legacy-annotation";
    case Discovery::kNodeCapacity:
      return "node-capacity";
  }
  return "unknown";
}

std::string_view ToString(HealthRule h) {
  switch (h) {
    case HealthRule::kAlwaysHealthy:
      return "always-healthy";
    case HealthRule::kHandshake:
      return "handshake";
    case HealthRule::kHandshakeAndDeviceChecks:
      return "handshake+device-checks";
  }
  return "unknown";
}

Backends::Backends(std::vector<BackendPtr> backends) : list_(std::move(backends)) {
  std::sort(list_.begin(), list_.end(),
            [](const BackendPtr& a, const BackendPtr& b) { return a->Vendor() < b->Vendor(); });
}

int Backends::IndexOf(std::string_view vendor) const {
  for (std::size_t i = 0; i < list_.size(); ++i) {
    if (list_[i]->Vendor() == vendor) return static_cast<int>(i);
  }
  return -1;
}

const Backend* Backends::Find(std::string_view vendor) const {
  const int i = IndexOf(vendor);
  return i < 0 ? nullptr : list_[static_cast<std::size_t>(i)].get();
}

Result<void> BackendRegistry::Register(VendorModule module) {
  if (module.section.empty() || !module.create)
    return Error{"a vendor module needs a section name and a factory"};
  std::string section = module.section;
  auto [it, inserted] = modules_.emplace(std::move(section), std::move(module));
  if (!inserted) return Error{"backend '" + it->first + "' registered twice"};
  order_.push_back(it->first);
  return {};
}

Result<BackendPtr> BackendRegistry::Create(std::string_view section, const VendorSettings& settings) const {
  auto it = modules_.find(section);
  if (it == modules_.end()) return Error{"unknown backend '" + std::string(section) + "'"};
  return it->second.create(settings);
}

std::vector<std::string> BackendRegistry::Advise(std::string_view section,
                                                 const VendorSettings& settings) const {
  auto it = modules_.find(section);
  if (it == modules_.end() || !it->second.advise) return {};
  return it->second.advise(settings);
}

const VendorSchema* BackendRegistry::Schema(std::string_view section) const {
  auto it = modules_.find(section);
  return it == modules_.end() ? nullptr : &it->second.schema;
}

std::vector<std::string> BackendRegistry::Names() const {
  std::vector<std::string> out;
  for (const auto& [name, m] : modules_) out.push_back(name);
  return out;
}

}  // namespace hami
