#include "core/backend.h"

#include <algorithm>

namespace hami {

Backends::Backends(std::vector<BackendPtr> backends) : list_(std::move(backends)) {
  std::sort(list_.begin(), list_.end(),
            [](const BackendPtr& a, const BackendPtr& b) { return a->Vendor() < b->Vendor(); });
  for (const BackendPtr& b : list_) {
    hooks_.push_back(b->Hooks());
    specs_.push_back(&b->Spec());
  }
}

Result<void> CheckFitRules(const Backend& backend) {
  const FitRules& rules = backend.Spec().fit;
  const BackendHooks hooks = backend.Hooks();
  const auto missing = [&](std::string_view rule, std::string_view hook) {
    return Error{"backend " + backend.Vendor() + ": FitRules::" + std::string(rule) + " needs " +
                 std::string(hook) + ", which it does not override"};
  };
  if (rules.vendor_checks_first && !hooks.refuse_card) return missing("vendor_checks_first", "RefuseCard");
  if (rules.vendor_sizes && !hooks.refuse_card) return missing("vendor_sizes", "RefuseCard");
  if (!rules.split_count_limits && !hooks.refuse_card) return missing("split_count_limits", "RefuseCard");
  if (rules.vendor_score_together && !hooks.allocation_score)
    return missing("vendor_score_together", "AllocationScore");
  if (rules.choice_beyond_count && !hooks.chooses_cards)
    return missing("choice_beyond_count", "ChoosesCards and ChooseCards");
  return {};
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

Result<void> BackendRegistry::ClaimFlags(const std::vector<VendorFlag>& flags) {
  for (const VendorFlag& f : flags) {
    if (std::find(flag_names_.begin(), flag_names_.end(), f.name) != flag_names_.end())
      return Error{"vendor flag --" + f.name + " registered twice"};
  }
  for (const VendorFlag& f : flags) flag_names_.push_back(f.name);
  return {};
}

Result<void> BackendRegistry::Register(VendorModule module) {
  if (module.section.empty() || !module.create)
    return Error{"a vendor module needs a section name and a factory"};
  if (modules_.contains(module.section) || Unimplemented(module.section) != nullptr)
    return Error{"backend '" + module.section + "' registered twice"};
  if (auto ok = ClaimFlags(module.flags); !ok) return ok;
  std::string section = module.section;
  auto it = modules_.emplace(std::move(section), std::move(module)).first;
  order_.push_back(it->first);
  return {};
}

Result<std::vector<BackendPtr>> BackendRegistry::Create(std::string_view section,
                                                        const VendorSettings& settings) const {
  auto it = modules_.find(section);
  if (it == modules_.end()) return Error{"unknown backend '" + std::string(section) + "'"};
  auto created = it->second.create(settings);
  if (!created) return created;
  for (const BackendPtr& b : *created) {
    if (auto ok = CheckFitRules(*b); !ok) return ok.error();
  }
  return created;
}

std::vector<std::string> BackendRegistry::Advise(std::string_view section,
                                                 const VendorSettings& settings) const {
  auto it = modules_.find(section);
  if (it == modules_.end() || !it->second.advise) return {};
  return it->second.advise(settings);
}

const VendorModule* BackendRegistry::Module(std::string_view section) const {
  auto it = modules_.find(section);
  return it == modules_.end() ? nullptr : &it->second;
}

const VendorSchema* BackendRegistry::Schema(std::string_view section) const {
  auto it = modules_.find(section);
  return it == modules_.end() ? nullptr : &it->second.schema;
}

Result<void> BackendRegistry::RegisterUnimplemented(UnimplementedVendor vendor) {
  for (const auto& section : vendor.sections) {
    if (modules_.contains(section) || Unimplemented(section) != nullptr)
      return Error{"section '" + section + "' registered twice"};
  }
  if (auto ok = ClaimFlags(vendor.flags); !ok) return ok;
  unimplemented_.push_back(std::move(vendor));
  return {};
}

const VendorDemo* BackendRegistry::Demo(std::string_view section) const {
  auto it = modules_.find(section);
  return it == modules_.end() ? nullptr : &it->second.demo;
}

bool BackendRegistry::EnabledByDefault(std::string_view section) const {
  auto it = modules_.find(section);
  return it != modules_.end() && it->second.enabled_by_default;
}

const UnimplementedVendor* BackendRegistry::Unimplemented(std::string_view section) const {
  for (const auto& v : unimplemented_) {
    if (std::find(v.sections.begin(), v.sections.end(), section) != v.sections.end()) return &v;
  }
  return nullptr;
}

std::vector<VendorFlagOwner> BackendRegistry::Flags() const {
  std::vector<VendorFlagOwner> out;
  for (const auto& section : order_) {
    for (const VendorFlag& f : modules_.at(section).flags) out.push_back({&f, section, ""});
  }
  for (const auto& v : unimplemented_) {
    for (const VendorFlag& f : v.flags) out.push_back({&f, "", v.name});
  }
  return out;
}

std::vector<std::string> BackendRegistry::Names() const {
  std::vector<std::string> out;
  for (const auto& [name, m] : modules_) out.push_back(name);
  return out;
}

}  // namespace hami
