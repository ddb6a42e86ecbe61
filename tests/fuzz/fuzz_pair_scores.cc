// NVIDIA's topology score annotation: scores land only on known devices, applying is idempotent, and the
// scores re-encoded as an annotation apply to the same result.
#include <boost/json.hpp>

#include "core/codec/node_devices.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

std::vector<hami::DeviceInfo> Devices() {
  std::vector<hami::DeviceInfo> d(3);
  d[0].id = "GPU-0";
  d[1].id = "GPU-1";
  d[2].id = "gpu-0";  // ids are case-sensitive
  return d;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = hami::fuzz::AsText(data, size);
  auto devices = Devices();
  auto applied = hami::codec::ApplyPairScores(text, devices);
  if (!applied) {
    FUZZ_CHECK(!applied.error().message.empty(), "an error without a message");
    return 0;
  }
  auto twice = devices;
  FUZZ_CHECK(hami::codec::ApplyPairScores(text, twice).has_value(), "a second application fails");
  FUZZ_CHECK(twice == devices, "applying twice differs from applying once");
  auto without_scores = devices;
  for (auto& d : without_scores) d.pair_scores.clear();
  FUZZ_CHECK(without_scores == Devices(), "a device field other than the scores changed");
  boost::json::array out;
  for (const auto& d : devices) {
    boost::json::object score;
    for (const auto& [peer, value] : d.pair_scores) score[peer] = value;
    out.push_back(boost::json::object{{"uuid", d.id}, {"score", std::move(score)}});
  }
  const std::string reencoded = boost::json::serialize(out);
  auto rebuilt = Devices();
  FUZZ_CHECK(hami::codec::ApplyPairScores(reencoded, rebuilt).has_value(),
             "re-encoded scores fail: " + reencoded);
  FUZZ_CHECK(rebuilt == devices, "re-encoded scores apply differently: " + reencoded);
  return 0;
}
