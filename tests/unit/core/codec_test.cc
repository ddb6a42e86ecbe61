#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/codec/node_devices.h"
#include "core/codec/pod_devices.h"
#include "core/codec/stamps.h"

namespace hami::codec {
namespace {

using namespace std::chrono_literals;

// --- JSON manifest (NVIDIA)
// ---------------------------------------------------------------------------------

constexpr std::string_view kSeedManifest =
    R"([{"id":"GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec","count":10,"devmem":32768,"devcore":100,"type":"NVIDIA-Tesla V100-PCIE-32GB","numa":1,"mode":"hami-core","health":true},{"id":"GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448","index":1,"count":10,"devmem":32768,"devcore":100,"type":"NVIDIA-Tesla V100-PCIE-32GB","numa":1,"mode":"hami-core","health":true}])";

TEST(DeviceManifest, SeedExampleDecodesAndReencodesByteForByte) {
  auto devices = DecodeDeviceManifest(kSeedManifest).value();
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0].id, "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec");
  EXPECT_EQ(devices[0].index, 0);
  EXPECT_EQ(devices[0].count, 10);
  EXPECT_EQ(devices[0].devmem, 32768_MiB);
  EXPECT_EQ(devices[0].devcore, 100_cores);
  EXPECT_EQ(devices[0].type, "NVIDIA-Tesla V100-PCIE-32GB");
  EXPECT_EQ(devices[0].numa, 1);
  EXPECT_EQ(devices[0].mode, "hami-core");
  EXPECT_TRUE(devices[0].health);
  EXPECT_EQ(devices[1].index, 1);
  EXPECT_EQ(EncodeDeviceManifest(devices), kSeedManifest);
}

TEST(DeviceManifest, ZeroValuesOmittedOnEncode) {
  DeviceInfo d;
  d.id = "id-1";
  d.index = 1;
  d.count = 1;
  d.devmem = 1024_MiB;
  d.devcore = 10_cores;
  d.type = "type";
  d.health = true;
  EXPECT_EQ(EncodeDeviceManifest({d}),
            R"([{"id":"id-1","index":1,"count":1,"devmem":1024,"devcore":10,"type":"type","health":true}])");
  EXPECT_EQ(EncodeDeviceManifest({}), "[]");
}

TEST(DeviceManifest, GoSemantics) {
  // Unknown keys ignored, keys case-insensitive, trailing newline accepted, missing health = false.
  auto d = DecodeDeviceManifest(
               "[{\"index\":1,\"ID\":\"id-1\",\"Count\":1,\"devmem\":1024,\"devcore\":10,\"type\":\"type\","
               "\"health\":true,\"instanceCount\":3,\"multiprocessorCount\":80},"
               "{\"id\":\"id-2\",\"count\":1}]\n")
               .value();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].id, "id-1");
  EXPECT_EQ(d[0].count, 1);
  EXPECT_TRUE(d[0].health);
  EXPECT_FALSE(d[1].health);
  EXPECT_EQ(d[1].mode, "");  // not "hami-core": that default belongs to the legacy format only
  EXPECT_TRUE(DecodeDeviceManifest("null").value().empty());
  EXPECT_TRUE(DecodeDeviceManifest("[]").value().empty());
}

// custominfo: NetworkID is a number; the other string entries are kept, sorted by key, and written back
// after it; entries of other kinds are dropped.
TEST(DeviceManifest, CustomInfoStringsAreKeptAndReencoded) {
  auto d = DecodeDeviceManifest(
               R"([{"id":"a","custominfo":{"Zone":"z1","NetworkID":2,"Slots":4,"Card":"1","Nested":{}}}])")
               .value();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].network, 2);
  EXPECT_EQ(d[0].custom_info,
            (std::vector<std::pair<std::string, std::string>>{{"Card", "1"}, {"Zone", "z1"}}));
  ASSERT_NE(d[0].CustomInfo("Zone"), nullptr);
  EXPECT_EQ(*d[0].CustomInfo("Zone"), "z1");
  EXPECT_EQ(d[0].CustomInfo("zone"), nullptr) << "a Go map's keys are exact";
  EXPECT_EQ(EncodeDeviceManifest(d), R"([{"id":"a","custominfo":{"NetworkID":2,"Card":"1","Zone":"z1"}}])");
  EXPECT_EQ(DecodeDeviceManifest(EncodeDeviceManifest(d)).value(), d);
  auto strings_only = DecodeDeviceManifest(R"([{"id":"b","custominfo":{"Card":"7"}}])").value();
  EXPECT_FALSE(strings_only[0].network.has_value());
  EXPECT_EQ(EncodeDeviceManifest(strings_only), R"([{"id":"b","custominfo":{"Card":"7"}}])");
}

TEST(DeviceManifest, ErrorsNameDeviceAndField) {
  auto bad_json = DecodeDeviceManifest("not-valid-json");
  ASSERT_FALSE(bad_json);
  EXPECT_NE(bad_json.error().message.find("not valid JSON"), std::string::npos);
  auto not_int = DecodeDeviceManifest(R"([{"id":"a"},{"id":"b","devmem":1.5}])");
  ASSERT_FALSE(not_int);
  EXPECT_NE(not_int.error().message.find("device 1"), std::string::npos) << not_int.error().message;
  EXPECT_NE(not_int.error().message.find("devmem"), std::string::npos);
  auto range = DecodeDeviceManifest(R"([{"id":"a","count":4294967296}])");
  ASSERT_FALSE(range);
  EXPECT_NE(range.error().message.find("out of range"), std::string::npos);
  auto neg_index = DecodeDeviceManifest(R"([{"id":"a","index":-1}])");
  EXPECT_FALSE(neg_index);
  auto wrong_type = DecodeDeviceManifest(R"([{"id":5}])");
  EXPECT_FALSE(wrong_type);
  EXPECT_FALSE(DecodeDeviceManifest(R"({"id":"a"})"));
}

TEST(DeviceManifest, MigProfiles) {
  auto d =
      DecodeDeviceManifest(
          R"([{"id":"GPU-0","count":7,"devmem":40960,"devcore":100,"type":"NVIDIA-A100","mode":"mig","health":true,)"
          R"("migProfiles":[{"name":"1g.5gb","memoryMB":4864,"core":15,"sliceCount":1,"placements":[{"start":6,"size":1}]}]}])")
          .value();
  ASSERT_EQ(d[0].mig_profiles.size(), 1u);
  EXPECT_EQ(d[0].mig_profiles[0].name, "1g.5gb");
  EXPECT_EQ(d[0].mig_profiles[0].memory_mib, 4864);
  EXPECT_EQ(d[0].mig_profiles[0].placements, (std::vector<MigPlacement>{{6, 1}}));
  EXPECT_EQ(DecodeDeviceManifest(EncodeDeviceManifest(d)).value(), d);
}

TEST(DeviceManifest, PairScores) {
  auto d = DecodeDeviceManifest(R"([{"id":"GPU-0"},{"id":"GPU-1"}])").value();
  ASSERT_TRUE(ApplyPairScores(
      R"([{"uuid":"GPU-0","score":{"GPU-1":100}},{"uuid":"GPU-1","score":{"GPU-0":100}}])", d));
  EXPECT_EQ(d[0].pair_scores.at("GPU-1"), 100);
  EXPECT_FALSE(ApplyPairScores("{bad", d));
}

// --- legacy colon format (docs/TEST_VECTORS.md, V1, V2)
// -----------------------------------------------------------------------------

TEST(LegacyDevices, Vectors) {
  EXPECT_FALSE(DecodeLegacyDevices(""));
  EXPECT_FALSE(DecodeLegacyDevices(","));
  EXPECT_FALSE(DecodeLegacyDevices("a"));
  EXPECT_TRUE(DecodeLegacyDevices(":").value().empty());
  EXPECT_TRUE(DecodeLegacyDevices("::").value().empty());
  auto two = DecodeLegacyDevices(",:");
  ASSERT_FALSE(two);
  EXPECT_NE(two.error().message.find("got 2"), std::string::npos) << two.error().message;
  auto garbage = DecodeLegacyDevices("garbage:");
  ASSERT_FALSE(garbage);
  EXPECT_NE(garbage.error().message.find("'garbage'"), std::string::npos);
  auto five = DecodeLegacyDevices("GPU-x,10,7680,100,NVIDIA-Tesla P4:");
  ASSERT_FALSE(five);
  EXPECT_NE(five.error().message.find("got 5"), std::string::npos);

  auto one =
      DecodeLegacyDevices("GPU-ebe7c3f7-303d-558d-435e-99a160631fe4,10,7680,100,NVIDIA-Tesla P4,0,true:")
          .value();
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].id, "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4");
  EXPECT_EQ(one[0].index, 0);
  EXPECT_EQ(one[0].count, 10);
  EXPECT_EQ(one[0].devmem, 7680_MiB);
  EXPECT_EQ(one[0].devcore, 100_cores);
  EXPECT_EQ(one[0].type, "NVIDIA-Tesla P4");
  EXPECT_EQ(one[0].mode, "hami-core");
  EXPECT_TRUE(one[0].health);
  auto nine = DecodeLegacyDevices(
                  "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4,10,7680,100,NVIDIA-Tesla P4,0,true,1,hami-core:")
                  .value();
  EXPECT_EQ(nine[0].index, 1);

  for (const char* bad : {"GPU-x,notanint,7680,100,T,0,true:", "GPU-x,10,notanint,100,T,0,true:",
                          "GPU-x,10,7680,notanint,T,0,true:", "GPU-x,10,7680,100,T,notanint,true:",
                          "GPU-x,10,7680,100,T,0,notabool:", "GPU-x,10,7680,100,T,0,true,notanint,m:",
                          "GPU-x,10,7680,100,T,0,true,-1,m:"}) {
    auto r = DecodeLegacyDevices(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message.find("field"), std::string::npos) << r.error().message;
  }
}

TEST(LegacyDevices, EncodeIsNineFieldsAndRoundTrips) {
  auto d = DecodeLegacyDevices("GPU-ebe7c3f7-303d-558d-435e-99a160631fe4,10,7680,100,NVIDIA-Tesla P4,0,true:")
               .value();
  EXPECT_EQ(EncodeLegacyDevices(d),
            "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4,10,7680,100,NVIDIA-Tesla P4,0,true,0,hami-core:");
  d[0].index = 1;
  const std::string enc = EncodeLegacyDevices(d);
  EXPECT_EQ(enc, "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4,10,7680,100,NVIDIA-Tesla P4,0,true,1,hami-core:");
  EXPECT_EQ(DecodeLegacyDevices(enc).value(), d);
  // No devices: what the decoder reads as none (found by tests/fuzz/fuzz_legacy_devices; "" is unreadable).
  EXPECT_EQ(EncodeLegacyDevices({}), ":");
  EXPECT_TRUE(DecodeLegacyDevices(EncodeLegacyDevices({})).value().empty());
  // The protocol's Hygon example.
  auto dcu = DecodeLegacyDevices("DCU-0001,4,16384,100,DCU-K100,0,true:DCU-0002,4,16384,100,DCU-K100,0,true:")
                 .value();
  ASSERT_EQ(dcu.size(), 2u);
  EXPECT_EQ(dcu[1].id, "DCU-0002");
  EXPECT_EQ(dcu[1].count, 4);
}

TEST(LegacyDevices, OlderSeedExamples) {
  // 000 seed: two V100s and two MLU370s in the 7-field form; decoding gives the documented fields, and the
  // canonical (9-field) encoding decodes back to the same devices.
  const char* nvidia =
      "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:"
      "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:";
  const char* mlu =
      "MLU-45013011-2257-0000-0000-000000000000,10,23308,0,MLU-MLU370-X4,0,false:"
      "MLU-54043011-2257-0000-0000-000000000000,10,23308,0,MLU-MLU370-X4,0,false:";
  auto v100 = DecodeLegacyDevices(nvidia).value();
  ASSERT_EQ(v100.size(), 2u);
  EXPECT_EQ(v100[1].id, "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448");
  EXPECT_EQ(v100[1].devmem, 32768_MiB);
  EXPECT_EQ(v100[1].type, "NVIDIA-Tesla V100-PCIE-32GB");
  auto mlus = DecodeLegacyDevices(mlu).value();
  ASSERT_EQ(mlus.size(), 2u);
  EXPECT_EQ(mlus[0].devcore, 0_cores);
  EXPECT_FALSE(mlus[0].health);
  EXPECT_EQ(DecodeLegacyDevices(EncodeLegacyDevices(mlus)).value(), mlus);
  // A JSON manifest is not the colon format and vice versa: each decoder says so rather than guessing.
  EXPECT_FALSE(DecodeDeviceManifest(nvidia));
  EXPECT_FALSE(DecodeLegacyDevices(kSeedManifest));
}

// --- pod device lists (docs/TEST_VECTORS.md, V5)
// --------------------------------------------------------------------------------------

ContainerDevice Dev(std::string uuid, std::string vendor, std::int64_t mem, std::int64_t cores) {
  return ContainerDevice{0, std::move(uuid), std::move(vendor), MiB(mem), Cores(cores), std::nullopt};
}

TEST(PodDevices, EncodeVectors) {
  EXPECT_EQ(EncodePodDevices({{Dev("UUID1", "Type1", 1000, 30)}}), "UUID1,Type1,1000,30:;");
  EXPECT_EQ(EncodePodDevices({{Dev("UUID1", "Type1", 1000, 30)}, {Dev("UUID1", "Type1", 1000, 30)}}),
            "UUID1,Type1,1000,30:;UUID1,Type1,1000,30:;");
  EXPECT_EQ(EncodePodDevices({{Dev("UUID1", "Type1", 1000, 30), Dev("UUID2", "Type1", 1000, 30)}}),
            "UUID1,Type1,1000,30:UUID2,Type1,1000,30:;");
  EXPECT_EQ(EncodePodDevices({}), "");
  EXPECT_EQ(EncodePodDevices({{}, {Dev("GPU-abc", "NVIDIA", 1000, 30)}}), ";GPU-abc,NVIDIA,1000,30:;");
}

TEST(PodDevices, DecodeKeepsPositions) {
  auto one = DecodePodDevices("UUID1,Type1,1000,30:;").value();
  ASSERT_EQ(one.size(), 2u);  // the piece after the final ';' is an empty entry, as upstream decodes it
  EXPECT_EQ(one[0], (ContainerDevices{Dev("UUID1", "Type1", 1000, 30)}));
  EXPECT_TRUE(one[1].empty());
  auto pair = DecodePodDevices(
                  "GPU-8dcd427f-483b-b48f-d7e5-75fb19a52b76,NVIDIA,500,3:;GPU-ebe7c3f7-303d-558d-435e-"
                  "99a160631fe4,NVIDIA,500,3:;")
                  .value();
  ASSERT_EQ(pair.size(), 3u);
  EXPECT_TRUE(pair[2].empty());
  EXPECT_EQ(DecodePodDevices(";GPU-abc,NVIDIA,1000,30:;").value()[1][0].uuid, "GPU-abc");
  EXPECT_EQ(DecodePodDevices("").value().size(), 0u);
  // The seed's example.
  auto seed = DecodePodDevices("GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448,NVIDIA,3000,0:;").value();
  EXPECT_EQ(seed[0][0].mem, 3000_MiB);
  EXPECT_EQ(EncodePodDevices({seed[0]}), "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448,NVIDIA,3000,0:;");
}

TEST(PodDevices, DecodeErrors) {
  auto few = DecodePodDevices("uuid,type,100:;");
  ASSERT_FALSE(few);
  EXPECT_NE(few.error().message.find("container 0"), std::string::npos) << few.error().message;
  auto mem = DecodePodDevices(";uuid,NVIDIA,lots,0:;");
  ASSERT_FALSE(mem);
  EXPECT_NE(mem.error().message.find("container 1"), std::string::npos) << mem.error().message;
  EXPECT_NE(mem.error().message.find("memory"), std::string::npos);
}

TEST(PodDevices, NothingLeftToAllocate) {
  EXPECT_TRUE(NothingLeftToAllocate(";"));
  EXPECT_TRUE(NothingLeftToAllocate(";;"));
  EXPECT_TRUE(NothingLeftToAllocate(";;;;"));
  EXPECT_TRUE(NothingLeftToAllocate(""));
  EXPECT_FALSE(NothingLeftToAllocate("GPU-0,NVIDIA,1,0:;"));
}

TEST(MigAllocations, RoundTripAndValidation) {
  std::vector<MigAllocation> a(1);
  a[0].container_index = 0;
  a[0].device_index = 0;
  a[0].gpu_uuid = "GPU-x";
  a[0].profile = "1g.10gb";
  a[0].placement = {6, 1};
  const std::string enc = EncodeMigAllocations(a);
  EXPECT_EQ(
      enc,
      R"([{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-x","profile":"1g.10gb","placement":{"start":6,"size":1}}])");
  EXPECT_EQ(DecodeMigAllocations(enc).value(), a);
  a[0].mig_uuid = "MIG-1";
  a[0].gpu_instance_id = 0;  // zero ids are kept
  a[0].compute_instance_id = 0;
  EXPECT_EQ(DecodeMigAllocations(EncodeMigAllocations(a)).value(), a);
  EXPECT_FALSE(DecodeMigAllocations(
      R"([{"containerIndex":0,"deviceIndex":0,"gpuUUID":"G","profile":"p","placement":{"start":0,"size":1},"migUUID":"M"}])"));
  EXPECT_FALSE(DecodeMigAllocations(
      R"([{"containerIndex":0,"deviceIndex":0,"gpuUUID":"G","profile":"p","placement":{"start":0,"size":1}},)"
      R"({"containerIndex":0,"deviceIndex":0,"gpuUUID":"G","profile":"p","placement":{"start":1,"size":1}}])"));
}

// --- collapse (docs/TEST_VECTORS.md, V11)
// -----------------------------------------------------------------------------------------------

PodDevices OneGpu(std::vector<std::pair<std::int64_t, std::int64_t>> per_container) {
  PodVendorDevices v;
  for (auto [mem, cores] : per_container) {
    if (mem < 0) {
      v.push_back({});
    } else {
      v.push_back({Dev("gpu0", "NVIDIA", mem, cores)});
    }
  }
  return PodDevices{{"NVIDIA", v}};
}

TEST(Collapse, Vectors) {
  const auto one = [](const std::vector<DeviceCharge>& c) {
    EXPECT_EQ(c.size(), 1u);
    return c.at(0);
  };
  auto c = one(CollapseDevices(OneGpu({{100, 10}, {200, 20}}), 0));
  EXPECT_EQ(c.mem, 300_MiB);
  EXPECT_EQ(c.cores, 30_cores);
  EXPECT_EQ(c.slots, 2);
  c = one(CollapseDevices(OneGpu({{100, 10}, {200, 30}}), 2));
  EXPECT_EQ(c.mem, 200_MiB);
  EXPECT_EQ(c.cores, 30_cores);
  EXPECT_EQ(c.slots, 1);
  c = one(CollapseDevices(OneGpu({{500, 50}, {100, 10}}), 1));
  EXPECT_EQ(c.mem, 500_MiB);
  EXPECT_EQ(c.slots, 1);
  c = one(CollapseDevices(OneGpu({{100, 10}, {200, 20}, {300, 30}}), 1));
  EXPECT_EQ(c.mem, 500_MiB);
  EXPECT_EQ(c.cores, 50_cores);
  EXPECT_EQ(c.slots, 2);
  c = one(CollapseDevices(OneGpu({{100, 10}, {300, 30}, {200, 20}, {50, 5}}), 3));
  EXPECT_EQ(c.mem, 300_MiB);
  EXPECT_EQ(c.cores, 30_cores);
  EXPECT_EQ(c.slots, 1);
  c = one(CollapseDevices(OneGpu({{100, 10}, {100, 10}, {100, 10}}), 0));
  EXPECT_EQ(c.slots, 3);
  EXPECT_TRUE(CollapseDevices(OneGpu({{-1, 0}, {-1, 0}}), 0).empty());
  // App-only shrink: init 999/99 + apps 100/10, 200/20.
  c = one(AppOnlyCharges(OneGpu({{999, 99}, {100, 10}, {200, 20}}), 1));
  EXPECT_EQ(c.mem, 300_MiB);
  EXPECT_EQ(c.cores, 30_cores);
  EXPECT_EQ(c.slots, 2);
}

// --- stamps
// -------------------------------------------------------------------------------------------------------

TEST(Handshake, ParseAndFormat) {
  setenv("TZ", "UTC", 1);
  tzset();
  const TimePoint t = std::chrono::system_clock::from_time_t(1706070604);  // 2024-01-24 04:30:04 UTC
  EXPECT_EQ(FormatHandshakeRequest(t), "Requesting_2024-01-24 04:30:04");
  auto h = ParseHandshake("Requesting_2024-01-24 04:30:04", true);
  EXPECT_EQ(h.kind, Handshake::Kind::kRequesting);
  EXPECT_EQ(h.requested_at, t);
  EXPECT_EQ(ParseHandshake("Requesting", true).kind, Handshake::Kind::kMalformedRequest);
  EXPECT_EQ(ParseHandshake("Requesting_not-a-timestamp", true).kind, Handshake::Kind::kMalformedRequest);
  EXPECT_EQ(ParseHandshake("Requesting_2024.01.10 04:06:57", true).kind, Handshake::Kind::kMalformedRequest);
  EXPECT_EQ(
      ParseHandshake("Reported 2024-01-23 04:30:04.434037031 +0000 UTC m=+1104711.777756895", true).kind,
      Handshake::Kind::kReported);
  EXPECT_EQ(ParseHandshake("Unknown", true).kind, Handshake::Kind::kReported);
  EXPECT_EQ(ParseHandshake("", false).kind, Handshake::Kind::kAbsent);
}

TEST(NodeLock, ParseAndFormat) {
  const TimePoint t = std::chrono::system_clock::from_time_t(1787293239);  // 2026-08-21T06:20:39Z
  EXPECT_EQ(FormatNodeLock(t, "default", "gpu-pod"), "2026-08-21T06:20:39Z,default,gpu-pod");
  auto lock = ParseNodeLock("2026-08-21T06:20:39Z,default,gpu-pod").value();
  EXPECT_EQ(lock.taken_at, t);
  EXPECT_TRUE(lock.OwnedBy("default", "gpu-pod"));
  EXPECT_FALSE(lock.OwnedBy("default", "other"));
  auto offset = ParseNodeLock("2026-08-21T14:20:39+08:00,ns,p").value();
  EXPECT_EQ(offset.taken_at, t);
  auto legacy = ParseNodeLock("2026-08-21T06:20:39.123456Z").value();
  EXPECT_TRUE(legacy.legacy);
  EXPECT_EQ(legacy.taken_at, t);
  EXPECT_FALSE(legacy.OwnedBy("", ""));
  auto parts = ParseNodeLock("2026-08-21T06:20:39Z,default");
  ASSERT_FALSE(parts);
  EXPECT_NE(parts.error().message.find("got 2"), std::string::npos);
  EXPECT_FALSE(ParseNodeLock("lock"));
  EXPECT_FALSE(ParseNodeLock("lock-values,default,pod-gpu"));
}

// --- Hostile wire values: values that the colon/comma formats cannot carry, or absurd ones, are refused on entry

TEST(DeviceManifest, RefusesSeparatorsNegativesAndDuplicateIds) {
  const auto error = [](std::string_view manifest) {
    auto r = DecodeDeviceManifest(manifest);
    return r ? std::string() : r.error().message;
  };
  // One id that would read as two devices in the pod's annotation: GPU-0 and GPU-1, never chosen.
  EXPECT_NE(
      error(R"([{"id":"GPU-0,NVIDIA,16000,0:GPU-1","count":4,"devmem":16384,"devcore":100,"health":true}])")
          .find("may not contain ',', ':', ';'"),
      std::string::npos);
  for (std::string_view id : {"a:b", "a;b", R"(a\nb)", R"(a\u0000b)", R"(a\u007fb)"}) {
    EXPECT_NE(error(fmt::format(R"([{{"id":"{}","count":1,"devmem":1,"health":true}}])", id)), "") << id;
  }
  EXPECT_NE(error(R"([{"id":"g","type":"A,B","count":1,"devmem":1}])"), "");
  EXPECT_NE(error(R"([{"id":"g","mode":"mig;x","count":1,"devmem":1}])"), "");
  EXPECT_NE(error(R"([{"id":"g","count":-1,"devmem":1}])").find("count = -1 is negative"), std::string::npos);
  EXPECT_NE(error(R"([{"id":"g","count":1,"devmem":-16384}])").find("devmem"), std::string::npos);
  EXPECT_NE(error(R"([{"id":"g","count":1,"devmem":1,"devcore":-100}])").find("devcore"), std::string::npos);
  EXPECT_NE(error(R"([{"id":"g","count":1,"devmem":1,"migProfiles":[{"name":"1g","memoryMB":-5}]}])"), "");
  EXPECT_NE(
      error(R"([{"id":"g","count":1,"devmem":1},{"id":"g","count":1,"devmem":1}])").find("listed twice"),
      std::string::npos);
  EXPECT_NE(error(R"([{"count":1,"devmem":1}])").find("missing the device id"), std::string::npos);
  EXPECT_EQ(error(kSeedManifest), "");
}

TEST(LegacyDevices, RefusesNegativesAndDuplicateIds) {
  EXPECT_FALSE(DecodeLegacyDevices("DCU-1,-4,16384,100,DCU,0,true:"));
  EXPECT_FALSE(DecodeLegacyDevices("DCU-1,4,-16384,100,DCU,0,true:"));
  EXPECT_FALSE(DecodeLegacyDevices("DCU-1,4,16384,-100,DCU,0,true:"));
  EXPECT_FALSE(DecodeLegacyDevices("DCU-1,4,16384,100,DCU,0,true:DCU-1,4,16384,100,DCU,0,true:"));
  EXPECT_FALSE(DecodeLegacyDevices(",4,16384,100,DCU,0,true:"));
  EXPECT_TRUE(DecodeLegacyDevices("DCU-1,4,16384,100,DCU,0,true:DCU-2,4,16384,100,DCU,0,true:"));
}

TEST(Stamps, YearsOutsideTheClockRangeAreUnreadable) {
  // Past 2262 a TimePoint (signed 64-bit nanoseconds) would overflow.
  EXPECT_FALSE(ParseRfc3339("2300-01-01T00:00:00Z"));
  EXPECT_FALSE(ParseRfc3339("9999-12-31T23:59:59Z"));
  EXPECT_FALSE(ParseRfc3339("0001-01-01T00:00:00Z"));
  EXPECT_TRUE(ParseRfc3339("2200-01-01T00:00:00Z"));
  EXPECT_NE(ParseRfc3339("9999-12-31T23:59:59Z").error().message.find("between the years 1970 and 2200"),
            std::string::npos);
  EXPECT_EQ(ParseHandshake("Requesting_9999-12-31 23:59:59", true).kind, Handshake::Kind::kMalformedRequest);
  EXPECT_FALSE(ParseNodeLock("9999-12-31T23:59:59Z,default,pod"));
}

TEST(NodeLock, OwnerMustBeANamespaceAndAPodName) {
  // The owner is looked up on the API server: a path in it would make us read (or act on) another object.
  for (std::string_view value :
       {"2026-08-21T06:20:39Z,default,../../nodes/n2", "2026-08-21T06:20:39Z,default,victim?dryRun=All",
        "2026-08-21T06:20:39Z,default,p\r\nDELETE /api/v1/nodes/n2", "2026-08-21T06:20:39Z,Default,pod",
        "2026-08-21T06:20:39Z,kube-system/x,pod", "2026-08-21T06:20:39Z,,pod", "2026-08-21T06:20:39Z,ns,"}) {
    EXPECT_FALSE(ParseNodeLock(value)) << value;
  }
  EXPECT_TRUE(ParseNodeLock("2026-08-21T06:20:39Z,kube-system,gpu-pod.v2"));
}

}  // namespace
}  // namespace hami::codec
