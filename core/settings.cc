#include "core/settings.h"

namespace hami {
namespace {

template <class T>
std::optional<T> Get(const Settings& s, std::string_view path) {
  auto it = s.values.find(path);
  if (it == s.values.end()) return std::nullopt;
  if (const T* v = std::get_if<T>(&it->second)) return *v;
  return std::nullopt;
}

}  // namespace

std::optional<std::string> Settings::String(std::string_view path) const {
  return Get<std::string>(*this, path);
}
std::optional<bool> Settings::Bool(std::string_view path) const { return Get<bool>(*this, path); }
std::optional<std::int64_t> Settings::Int(std::string_view path) const {
  return Get<std::int64_t>(*this, path);
}
std::vector<std::string> Settings::StringList(std::string_view path) const {
  return Get<std::vector<std::string>>(*this, path).value_or(std::vector<std::string>{});
}
std::vector<SettingRecord> Settings::Records(std::string_view path) const {
  return Get<std::vector<SettingRecord>>(*this, path).value_or(std::vector<SettingRecord>{});
}

}  // namespace hami
