// NVIDIA's JSON register annotation (hami.io/node-nvidia-register) and its cross-format twin, the legacy
// colon format: whatever decodes re-encodes canonically, and the canonical text is a fixpoint.
#include <boost/json/parse.hpp>

#include "core/codec/node_devices.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using hami::DeviceInfo;

bool ColonSafe(const std::string& s) { return s.find_first_of(",:;") == std::string::npos; }

// What the legacy format can carry: no separators in strings, no MIG profiles, no negative numbers, a mode.
bool LegacyRepresentable(const std::vector<DeviceInfo>& devices) {
  for (const auto& d : devices) {
    if (!ColonSafe(d.id) || !ColonSafe(d.type) || !ColonSafe(d.mode) || d.mode.empty()) return false;
    if (!d.mig_profiles.empty() || d.index < 0 || d.count < 0 || d.numa < 0) return false;
    if (d.devmem.value() < 0 || d.devcore.value() < 0) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = hami::fuzz::AsText(data, size);
  auto decoded = hami::codec::DecodeDeviceManifest(text);
  if (!decoded) {
    FUZZ_CHECK(!decoded.error().message.empty(), "an error without a message");
    return 0;
  }
  const std::string encoded = hami::codec::EncodeDeviceManifest(*decoded);
  boost::system::error_code ec;
  boost::json::parse(encoded, ec);
  FUZZ_CHECK(!ec, "EncodeDeviceManifest wrote invalid JSON: " + encoded);
  auto again = hami::codec::DecodeDeviceManifest(encoded);
  FUZZ_CHECK(again.has_value(), "the canonical encoding does not decode: " + encoded);
  FUZZ_CHECK(*again == *decoded, "decode(encode(x)) != x for " + encoded);
  FUZZ_CHECK(hami::codec::EncodeDeviceManifest(*again) == encoded, "encoding is not canonical: " + encoded);
  if (LegacyRepresentable(*decoded)) {
    const std::string colon = hami::codec::EncodeLegacyDevices(*decoded);
    auto legacy = hami::codec::DecodeLegacyDevices(colon);
    FUZZ_CHECK(legacy.has_value(), "the legacy encoding does not decode: " + colon);
    FUZZ_CHECK(*legacy == *decoded, "legacy decode(encode(x)) != x for " + colon);
  }
  return 0;
}
