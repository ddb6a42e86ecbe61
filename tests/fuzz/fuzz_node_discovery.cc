// A node as each vendor backend reads it: register and score annotations, handshake, capacity and
// allocatable, from one input (lines: backend digit, register, score, handshake, count, memory, cores).
// Devices a backend accepts carry nothing the pod annotation formats cannot (no ',', ':' or ';' in an id,
// no negative size), re-encode to the same devices, and the health pass over any node is defined (UBSan).
#include <chrono>

#include "backends/builtin.h"
#include "core/codec/node_devices.h"
#include "core/codec/stamps.h"
#include "core/health.h"
#include "core/strings.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using namespace std::chrono_literals;

const std::vector<hami::BackendPtr>& TheBackends() {
  static auto* backends = [] {
    auto* list = new std::vector<hami::BackendPtr>;
    hami::BackendRegistry registry;
    hami::backends::RegisterBuiltinBackends(registry).value();
    for (const auto& name : registry.Names()) {
      for (auto& b : registry.Create(name, {}).value()) list->push_back(std::move(b));
    }
    return list;
  }();
  return *backends;
}

void Set(hami::StringMap& map, const std::string& key, std::string_view value) {
  if (!key.empty() && !value.empty()) map[key] = std::string(value);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("TZ", "UTC", 1);
  tzset();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (!hami::fuzz::IsUtf8(hami::fuzz::AsText(data, size))) return 0;  // as every annotation from the API
  const auto lines = hami::Split(hami::fuzz::AsText(data, size), '\n');
  const auto field = [&](std::size_t i) { return i < lines.size() ? lines[i] : std::string_view(); };
  const auto& backends = TheBackends();
  const std::size_t which = field(0).empty() ? 0 : static_cast<unsigned char>(field(0)[0]) % backends.size();
  const hami::Backend& backend = *backends[which];
  const hami::BackendSpec& spec = backend.Spec();

  hami::NodeView node;
  node.name = "node-a";
  Set(node.annotations, spec.keys.register_annotation, field(1));
  Set(node.annotations, spec.keys.score_annotation, field(2));
  Set(node.annotations, spec.keys.handshake, field(3));
  for (auto* list : {&node.capacity, &node.allocatable}) {
    Set(*list, spec.resources.count, field(4));
    Set(*list, spec.resources.memory, field(5));
    Set(*list, spec.resources.cores, field(6));
  }

  const auto devices = backend.Discover(node);
  if (devices) {
    for (const auto& d : *devices) {
      FUZZ_CHECK(d.id.find_first_of(",:;") == std::string::npos,
                 spec.vendor + " accepted the device id '" + d.id + "', which pod annotations cannot carry");
      FUZZ_CHECK(d.count >= 0 && d.devmem.value() >= 0 && d.devcore.value() >= 0,
                 spec.vendor + " accepted a negative count, memory or core value for " + d.id);
    }
    const bool registered = node.annotations.count(spec.keys.register_annotation) != 0;
    const auto published = backend.Publish(*devices);
    if (published.annotation && registered) {
      hami::NodeView again = node;
      again.annotations[spec.keys.register_annotation] = *published.annotation;
      auto rediscovered = backend.Discover(again);
      FUZZ_CHECK(rediscovered.has_value(), spec.vendor + ": re-encoded devices are refused: " +
                                               again.annotations[spec.keys.register_annotation]);
      FUZZ_CHECK(*rediscovered == *devices, spec.vendor + ": re-encoded devices read differently");
    }
  } else {
    FUZZ_CHECK(!devices.error().message.empty(), "an error without a message");
  }

  const hami::TimePoint now = std::chrono::system_clock::from_time_t(1796083200);
  const auto first = hami::EvaluateHealth(spec, node, {}, now, 60s);
  FUZZ_CHECK(!first.why.empty(), "a health verdict without a reason");
  if (first.handshake_patch) {
    const auto h = hami::codec::ParseHandshake(*first.handshake_patch, true);
    FUZZ_CHECK(h.kind != hami::codec::Handshake::Kind::kMalformedRequest,
               "the health pass writes an unreadable handshake: " + *first.handshake_patch);
  }
  hami::EvaluateHealth(spec, node, first.memory, now + 5min, 60s);
  return 0;
}
