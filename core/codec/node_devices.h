#pragma once
// Node registration codecs: the JSON manifest (NVIDIA's hami.io/node-nvidia-register), the legacy colon
// format (Hygon's hami.io/node-dcu-register), and NVIDIA's topology score annotation.
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

// `[{"uuid":"GPU-0","score":{"GPU-1":100}}]`: attaches pair scores to the devices with the same id.
Result<void> ApplyPairScores(std::string_view json_text, std::vector<DeviceInfo>& devices);

}  // namespace hami::codec
