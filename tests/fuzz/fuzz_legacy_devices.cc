// The legacy colon register format (Hygon's hami.io/node-dcu-register and older NVIDIA plugins): whatever
// decodes re-encodes to the 9-field form, which decodes to the same devices, in both formats.
#include "core/codec/node_devices.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = hami::fuzz::AsText(data, size);
  auto decoded = hami::codec::DecodeLegacyDevices(text);
  if (!decoded) {
    FUZZ_CHECK(!decoded.error().message.empty(), "an error without a message");
    return 0;
  }
  for (const auto& d : *decoded) {
    // A field that held a separator would have been split: ids and types cannot carry one.
    FUZZ_CHECK(d.id.find_first_of(",:") == std::string::npos, "a decoded id holds a separator: " + d.id);
    FUZZ_CHECK(d.type.find_first_of(",:") == std::string::npos, "a decoded type holds a separator");
  }
  const std::string encoded = hami::codec::EncodeLegacyDevices(*decoded);
  auto again = hami::codec::DecodeLegacyDevices(encoded);
  FUZZ_CHECK(again.has_value(), "the 9-field encoding does not decode: " + encoded);
  FUZZ_CHECK(*again == *decoded, "decode(encode(x)) != x for " + encoded);
  FUZZ_CHECK(hami::codec::EncodeLegacyDevices(*again) == encoded, "encoding is not canonical: " + encoded);
  if (!hami::fuzz::IsUtf8(text)) return 0;  // JSON strings are UTF-8; annotation values always are
  const std::string manifest = hami::codec::EncodeDeviceManifest(*decoded);
  auto as_json = hami::codec::DecodeDeviceManifest(manifest);
  FUZZ_CHECK(as_json.has_value(), "the JSON encoding of legacy devices does not decode: " + manifest);
  FUZZ_CHECK(*as_json == *decoded, "JSON decode(encode(x)) != x for " + manifest);
  return 0;
}
