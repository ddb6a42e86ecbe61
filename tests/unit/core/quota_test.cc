#include "core/quota.h"

#include <gtest/gtest.h>

#include "tests/support/builders.h"

namespace hami {
namespace {

ResourceQuotaView Quota(std::string ns, std::string name, std::map<std::string, std::string> hard) {
  ResourceQuotaView q;
  q.ns = std::move(ns);
  q.name = std::move(name);
  for (auto& [k, v] : hard) q.hard[k] = v;
  return q;
}

std::vector<DeviceCharge> Charge(std::string vendor, std::int64_t mem, std::int64_t cores) {
  return {DeviceCharge{std::move(vendor), "dev", MiB(mem), Cores(cores), 1}};
}

TEST(QuotaBook, ExplicitZeroBlocks) {
  Backends b = testing::BuiltinBackends();
  QuotaBook q(b);
  EXPECT_TRUE(q.Fits("ns", "NVIDIA", MiB(500), Cores(0)));
  q.UpsertQuota(Quota("ns", "q", {{"limits.nvidia.com/gpumem", "0"}}));
  EXPECT_TRUE(q.HasLimits("ns"));
  EXPECT_FALSE(q.Fits("ns", "NVIDIA", MiB(500), Cores(0)));
  EXPECT_TRUE(q.Fits("other", "NVIDIA", MiB(500), Cores(0)));
  EXPECT_TRUE(q.Fits("ns", "UnknownVendor", MiB(500), Cores(0)));
}

TEST(QuotaBook, UsageAgainstLimits) {
  Backends b = testing::BuiltinBackends();
  QuotaBook q(b);
  q.UpsertQuota(Quota("ns", "q",
                      {{"limits.nvidia.com/gpumem", "1000"},
                       {"limits.nvidia.com/gpucores", "50"},
                       {"requests.nvidia.com/gpumem", "1"},
                       {"nvidia.com/gpumem", "1"}}));
  q.AddUsage("ns", Charge("NVIDIA", 1000, 20));
  EXPECT_FALSE(q.Fits("ns", "NVIDIA", MiB(1), Cores(0)));
  EXPECT_TRUE(q.Fits("ns", "NVIDIA", MiB(0), Cores(30)));
  EXPECT_FALSE(q.Fits("ns", "NVIDIA", MiB(0), Cores(31)));
  // Re-applying the same quota (an update) never opens a window without the limit.
  q.UpsertQuota(Quota("ns", "q", {{"limits.nvidia.com/gpumem", "1000"}}));
  EXPECT_FALSE(q.Fits("ns", "NVIDIA", MiB(1), Cores(0)));
  q.RemoveUsage("ns", Charge("NVIDIA", 5000, 50));  // never below zero
  EXPECT_TRUE(q.Fits("ns", "NVIDIA", MiB(1000), Cores(0)));
  EXPECT_FALSE(q.Fits("ns", "NVIDIA", MiB(1001), Cores(0)));
  q.RemoveQuota("ns", "q");
  EXPECT_TRUE(q.Fits("ns", "NVIDIA", MiB(100000), Cores(0)));
}

TEST(QuotaBook, TightestOfSeveralQuotasApplies) {
  Backends b = testing::BuiltinBackends();
  QuotaBook q(b);
  q.UpsertQuota(Quota("ns", "big", {{"limits.nvidia.com/gpumem", "8000"}}));
  q.UpsertQuota(Quota("ns", "small", {{"limits.nvidia.com/gpumem", "2000"}}));
  EXPECT_FALSE(q.Fits("ns", "NVIDIA", MiB(3000), Cores(0)));
  q.RemoveQuota("ns", "small");
  EXPECT_TRUE(q.Fits("ns", "NVIDIA", MiB(3000), Cores(0)));
}

TEST(QuotaBook, MemoryFactorScalesTheLimit) {
  // Cambricon counts memory in 256 MiB units: a limit of 50 units is 12800 MiB.
  Backends b = testing::BuiltinBackends();
  QuotaBook q(b);
  q.UpsertQuota(Quota("ns", "q", {{"limits.cambricon.com/mlu.smlu.vmemory", "50"}}));
  EXPECT_TRUE(q.Fits("ns", "MLU", MiB(12800), Cores(0)));
  EXPECT_FALSE(q.Fits("ns", "MLU", MiB(12801), Cores(0)));
  // Hygon with memoryFactor 2: limit 1000 -> 2000 scaled MiB; 800 units (1600) fit, 1200 (2400) do not.
  VendorSettings hygon;
  hygon.Set("memoryFactor", 2);
  Backends b2 = testing::BuiltinBackends({{"hygon", hygon}});
  QuotaBook q2(b2);
  q2.UpsertQuota(Quota("ns", "q", {{"limits.hygon.com/dcumem", "1000"}}));
  EXPECT_TRUE(q2.Fits("ns", "DCU", MiB(1600), Cores(0)));
  EXPECT_FALSE(q2.Fits("ns", "DCU", MiB(2400), Cores(0)));
}

}  // namespace
}  // namespace hami
