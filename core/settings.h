#pragma once
// A vendor's section of the device configuration, read generically. Each backend declares its section's
// schema (backends/<vendor>/); config/ reads any section by its schema and knows no vendor; the backend's
// factory reads the values back by key. Values are kept by their path inside the section
// ("resourceCountName", "annotations.register").
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace hami {

enum class SettingKind {
  kString,
  kBool,
  kInt32,
  kGroup,       // a map of the fields listed in `fields` ("annotations: {register: ...}")
  kRecordList,  // a list of maps whose fields (all string lists, all required) are listed in `fields`
};

struct SettingField {
  SettingField(std::string k, SettingKind kd = SettingKind::kString, std::vector<SettingField> f = {})
      : key(std::move(k)), kind(kd), fields(std::move(f)) {}
  std::string key;
  SettingKind kind = SettingKind::kString;
  std::vector<SettingField> fields;  // kGroup, kRecordList
};

struct VendorSchema {
  // In the order `--print-config` writes them. Every section also has `enabled` (read by config/).
  std::vector<SettingField> fields;
  // Keys of the same section that others read (HAMi's device plugin): accepted, unused.
  std::vector<std::string> ignored;
};

// One entry of a kRecordList: field -> its strings.
using SettingRecord = std::map<std::string, std::vector<std::string>, std::less<>>;
using SettingValue = std::variant<std::string, bool, std::int64_t, std::vector<SettingRecord>>;

struct VendorSettings {
  bool enabled = true;
  std::map<std::string, SettingValue, std::less<>> values;  // set keys only; path -> value

  // The value at `path` when set and of that kind.
  std::optional<std::string> String(std::string_view path) const;
  std::optional<bool> Bool(std::string_view path) const;
  std::optional<std::int64_t> Int(std::string_view path) const;
  std::vector<SettingRecord> Records(std::string_view path) const;
  bool Has(std::string_view path) const { return values.find(path) != values.end(); }
  VendorSettings& Set(std::string path, SettingValue value) {
    values.insert_or_assign(std::move(path), std::move(value));
    return *this;
  }
};

}  // namespace hami
