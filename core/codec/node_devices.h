#pragma once
// Node registration codecs: the JSON manifest (NVIDIA's hami.io/node-nvidia-register), the legacy colon
// format (Hygon's hami.io/node-dcu-register), and NVIDIA's topology score annotation.
#include <boost/json/fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/model.h"
#include "core/result.h"

namespace hami::codec {

// JSON array of device objects with Go encoding/json semantics: keys match case-insensitively (last one
// wins), unknown keys are ignored, missing keys are zero values (health missing = false), integers must be
// integral and in range, `null` is an empty list. Errors name the device position and field.
Result<std::vector<DeviceInfo>> DecodeDeviceManifest(std::string_view json_text);
// Canonical encoding: field order id,index,count,devmem,devcore,type,numa,mode,migProfiles,health,
// custominfo (NetworkID, then the string entries by key) with zero-valued fields omitted; "[]" for no
// devices.
std::string EncodeDeviceManifest(const std::vector<DeviceInfo>& devices);

// Legacy colon format: devices separated by ':', each
// `id,count,devmem,devcore,type,numa,health[,index,mode]`. A value without ':' is an error; ":" alone means
// no devices. The 7-field form gets index 0, mode hami-core.
Result<std::vector<DeviceInfo>> DecodeLegacyDevices(std::string_view text);
// Always 9 fields per device, each followed by ':'; no devices is ":".
std::string EncodeLegacyDevices(const std::vector<DeviceInfo>& devices);

// What every device must be to enter the registry, whichever format it came in (`where` names it in the
// error): an id, no separators of the allocation formats or control characters in its texts, no negative
// sizes. A vendor that decodes its own format checks its devices with these.
Result<void> CheckDevice(const DeviceInfo& d, std::string_view where);
// Two devices of one id would share one ledger entry: an error names the id listed twice.
Result<void> CheckUniqueIds(const std::vector<DeviceInfo>& devices);

// JSON values read into Go encoding/json fields (null is the zero value); errors name `where`.
Result<std::int64_t> JsonInt(const boost::json::value& v, std::string_view where, std::int64_t lo,
                             std::int64_t hi);
Result<std::string> JsonString(const boost::json::value& v, std::string_view where);
Result<bool> JsonBool(const boost::json::value& v, std::string_view where);

// `[{"uuid":"GPU-0","score":{"GPU-1":100}}]`: attaches pair scores to the devices with the same id.
Result<void> ApplyPairScores(std::string_view json_text, std::vector<DeviceInfo>& devices);

}  // namespace hami::codec
