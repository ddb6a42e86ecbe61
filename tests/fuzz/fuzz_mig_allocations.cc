// NVIDIA's MIG allocation annotation (hami.io/vgpu-mig-allocations): decode -> encode -> decode is the
// identity and the encoding is valid JSON and canonical.
#include <boost/json/parse.hpp>

#include "core/codec/pod_devices.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = hami::fuzz::AsText(data, size);
  auto decoded = hami::codec::DecodeMigAllocations(text);
  if (!decoded) {
    FUZZ_CHECK(!decoded.error().message.empty(), "an error without a message");
    return 0;
  }
  for (const auto& a : *decoded) {
    const bool all = a.mig_uuid && a.gpu_instance_id && a.compute_instance_id;
    const bool none = !a.mig_uuid && !a.gpu_instance_id && !a.compute_instance_id;
    FUZZ_CHECK(all || none, "an allocation with only some of the device plugin's ids");
  }
  const std::string encoded = hami::codec::EncodeMigAllocations(*decoded);
  boost::system::error_code ec;
  boost::json::parse(encoded, ec);
  FUZZ_CHECK(!ec, "EncodeMigAllocations wrote invalid JSON: " + encoded);
  auto again = hami::codec::DecodeMigAllocations(encoded);
  FUZZ_CHECK(again.has_value(), "the encoding does not decode: " + encoded);
  FUZZ_CHECK(*again == *decoded, "decode(encode(x)) != x for " + encoded);
  FUZZ_CHECK(hami::codec::EncodeMigAllocations(*again) == encoded, "encoding is not canonical: " + encoded);
  return 0;
}
