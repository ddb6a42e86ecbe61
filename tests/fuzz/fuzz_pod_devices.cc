// Pod device lists (hami.io/vgpu-devices-allocated and friends): decode -> encode -> decode keeps every
// container's devices in place, and the charges computed from them never overflow (UBSan).
#include "core/codec/pod_devices.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = hami::fuzz::AsText(data, size);
  auto decoded = hami::codec::DecodePodDevices(text);
  if (!decoded) {
    FUZZ_CHECK(!decoded.error().message.empty(), "an error without a message");
    FUZZ_CHECK(!hami::codec::NothingLeftToAllocate(text), "an empty list failed to decode");
    return 0;
  }
  bool any_device = false;
  for (const auto& c : *decoded) {
    for (const auto& d : c) {
      any_device = true;
      FUZZ_CHECK(d.uuid.find_first_of(",:;") == std::string::npos, "a decoded uuid holds a separator");
      FUZZ_CHECK(d.vendor.find_first_of(",:;") == std::string::npos, "a decoded vendor holds a separator");
    }
  }
  if (hami::codec::NothingLeftToAllocate(text)) FUZZ_CHECK(!any_device, "';'-only value with devices");
  const std::string encoded = hami::codec::EncodePodDevices(*decoded);
  auto again = hami::codec::DecodePodDevices(encoded);
  FUZZ_CHECK(again.has_value(), "the encoding does not decode: " + encoded);
  // Every container is followed by ';' and the piece after the last ';' decodes as one more empty container.
  auto expected = *decoded;
  if (!expected.empty()) expected.emplace_back();
  FUZZ_CHECK(*again == expected, "decode(encode(x)) moved or changed devices: " + encoded);
  hami::PodDevices pod{{"NVIDIA", *decoded}};
  for (std::size_t init = 0; init <= decoded->size() && init < 4; ++init) {
    for (const auto& c : hami::codec::CollapseDevices(pod, init)) FUZZ_CHECK(c.slots >= 0, "negative slots");
    hami::codec::AppOnlyCharges(pod, init);
  }
  hami::codec::MigAllocationsOf(*decoded);
  return 0;
}
