#pragma once
// A vendor's section of the device configuration, read generically. Each backend declares its section's
// schema (backends/<vendor>/); config/ reads any section by its schema and knows no vendor; the backend's
// factory reads the values back by key. Values are kept by their path inside the section
// ("resourceCountName", "annotations.register"); a list of records holds one Settings per entry.
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
  kStringList,  // a list of strings ("models: [A30, A100]")
  kGroup,       // a map of the fields listed in `fields` ("annotations: {register: ...}")
  kRecordList,  // a list of maps, each read by the schema in `fields` (fields of any kind, lists included)
};

struct SettingField {
  SettingField(std::string k, SettingKind kd = SettingKind::kString, std::vector<SettingField> f = {},
               bool req = false)
      : key(std::move(k)), kind(kd), fields(std::move(f)), required(req) {}
  std::string key;
  SettingKind kind = SettingKind::kString;
  std::vector<SettingField> fields;  // kGroup, kRecordList
  bool required = false;             // inside a group or a record: a missing key is a problem
};

struct VendorSchema {
  // In the order `--print-config` writes them. Every section also has `enabled` (read by config/).
  std::vector<SettingField> fields;
  // Keys of the same section that others read (HAMi's device plugin): accepted, unused.
  std::vector<std::string> ignored;
  // A section that may also be written as a plain list (`<section>: [...]`): the list is read as this
  // kRecordList field of the section.
  std::string list_field;
};

struct Settings;
// One entry of a kRecordList is a Settings of its own, keyed by the record's schema.
using SettingRecord = Settings;
using SettingValue =
    std::variant<std::string, bool, std::int64_t, std::vector<std::string>, std::vector<SettingRecord>>;

// Values by their path inside a section or a record ("resourceCountName", "annotations.register").
struct Settings {
  std::map<std::string, SettingValue, std::less<>> values;  // set keys only; path -> value

  // The value at `path` when set and of that kind.
  std::optional<std::string> String(std::string_view path) const;
  std::optional<bool> Bool(std::string_view path) const;
  std::optional<std::int64_t> Int(std::string_view path) const;
  std::vector<std::string> StringList(std::string_view path) const;  // empty when unset
  std::vector<SettingRecord> Records(std::string_view path) const;   // empty when unset
  bool Has(std::string_view path) const { return values.find(path) != values.end(); }
  Settings& Set(std::string path, SettingValue value) {
    values.insert_or_assign(std::move(path), std::move(value));
    return *this;
  }
  bool operator==(const Settings&) const = default;
};

struct VendorSettings : Settings {
  bool enabled = true;
  VendorSettings& Set(std::string path, SettingValue value) {
    Settings::Set(std::move(path), std::move(value));
    return *this;
  }
};

}  // namespace hami
