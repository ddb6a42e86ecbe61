#include "core/health.h"

#include <gtest/gtest.h>

#include "backends/cambricon/cambricon.h"
#include "backends/hygon/hygon.h"
#include "backends/nvidia/nvidia.h"
#include "core/codec/stamps.h"
#include "tests/support/builders.h"

namespace hami {
namespace {

using namespace std::chrono_literals;

class Health : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("TZ", "UTC", 1);
    tzset();
  }
  static NodeView Node(std::string handshake_key, std::optional<std::string> handshake,
                       std::optional<std::string> allocatable) {
    NodeView n;
    n.name = "n";
    if (handshake) n.annotations[handshake_key] = *handshake;
    if (allocatable) n.allocatable["hygon.com/dcunum"] = *allocatable;
    if (allocatable) n.allocatable["nvidia.com/gpu"] = *allocatable;
    return n;
  }
  const TimePoint now_ = std::chrono::system_clock::from_time_t(1706070604);  // 2024-01-24 04:30:04
  const BackendSpec dcu_ = backends::hygon::DefaultSpec();
  const BackendSpec nvidia_ = backends::nvidia::DefaultSpec();
};

TEST_F(Health, SharedHandshakeVectors) {
  const std::string key = "hami.io/node-handshake-dcu";
  auto v = EvaluateHealth(dcu_, Node(key, "Requesting_2128-12-02 00:00:00", std::nullopt), {}, now_, 60s);
  EXPECT_TRUE(v.healthy);
  EXPECT_FALSE(v.refresh);
  EXPECT_FALSE(v.handshake_patch);
  v = EvaluateHealth(dcu_, Node(key, "Requesting_2024-01-02 00:00:00", std::nullopt), {}, now_, 60s);
  EXPECT_FALSE(v.healthy);
  v = EvaluateHealth(dcu_, Node(key, "Requesting_2024-01-02 00:00:00", "8"), {}, now_, 60s);
  EXPECT_TRUE(v.healthy);  // expired, but the plugin still advertises devices
  EXPECT_FALSE(v.refresh);
  EXPECT_FALSE(v.handshake_patch);  // no re-stamp
  v = EvaluateHealth(dcu_, Node(key, "Unknown", std::nullopt), {}, now_, 60s);
  EXPECT_TRUE(v.healthy);
  EXPECT_TRUE(v.refresh);
  EXPECT_EQ(v.handshake_patch, "Requesting_2024-01-24 04:30:04");
  v = EvaluateHealth(dcu_, Node(key, std::nullopt, std::nullopt), {}, now_, 60s);
  EXPECT_EQ(v.handshake_patch, "Requesting_2024-01-24 04:30:04");
}

TEST_F(Health, PendingRequestGetsTheFullGrace) {
  const std::string key = "hami.io/node-handshake-dcu";
  const NodeView n = Node(key, codec::FormatHandshakeRequest(now_), std::nullopt);
  EXPECT_TRUE(EvaluateHealth(dcu_, n, {}, now_ + 59s, 60s).healthy);
  EXPECT_FALSE(EvaluateHealth(dcu_, n, {}, now_ + 60s, 60s).healthy);
}

TEST_F(Health, MalformedStampIsStaleAfterTheGraceNotForever) {
  // docs/DECISIONS.md, D8: upstream treats an unreadable Requesting_ value as healthy forever.
  const std::string key = "hami.io/node-handshake-dcu";
  const NodeView n = Node(key, "Requesting_not-a-timestamp", std::nullopt);
  auto first = EvaluateHealth(dcu_, n, {}, now_, 60s);
  EXPECT_TRUE(first.healthy);
  ASSERT_TRUE(first.memory.malformed_since);
  auto later = EvaluateHealth(dcu_, n, first.memory, now_ + 30s, 60s);
  EXPECT_TRUE(later.healthy);
  auto expired = EvaluateHealth(dcu_, n, later.memory, now_ + 61s, 60s);
  EXPECT_FALSE(expired.healthy);
  // Still protected by a positive allocatable count.
  EXPECT_TRUE(EvaluateHealth(dcu_, Node(key, "Requesting", "2"), later.memory, now_ + 61s, 60s).healthy);
}

// A request stamped ahead of our clock is unreadable (docs/DECISIONS.md, D10), not pending forever.
TEST_F(Health, FutureRequestIsStaleAfterTheGrace) {
  const std::string key = "hami.io/node-handshake-dcu";
  const NodeView n = Node(key, codec::FormatHandshakeRequest(now_ + 24h * 365 * 100), std::nullopt);
  auto first = EvaluateHealth(dcu_, n, {}, now_, 60s);
  EXPECT_TRUE(first.healthy);
  ASSERT_TRUE(first.memory.malformed_since);
  EXPECT_FALSE(EvaluateHealth(dcu_, n, first.memory, now_ + 61s, 60s).healthy);
  // Within the allowed skew it is an ordinary pending request.
  const NodeView skewed = Node(key, codec::FormatHandshakeRequest(now_ + 4min), std::nullopt);
  EXPECT_FALSE(EvaluateHealth(dcu_, skewed, {}, now_, 60s).memory.malformed_since);
}

TEST_F(Health, CapacityBackendsAreAlwaysHealthy) {
  auto v = EvaluateHealth(backends::cambricon::DefaultSpec(), NodeView{}, {}, now_, 60s);
  EXPECT_TRUE(v.healthy);
  EXPECT_TRUE(v.refresh);
  EXPECT_FALSE(v.handshake_patch);
}

TEST_F(Health, NvidiaDeviceChecks) {
  const std::string key = "hami.io/node-handshake";
  const std::string old = "Requesting_2024-01-24 02:30:04";  // two hours ago
  // current 0, reported 0: the shared result.
  EXPECT_TRUE(
      EvaluateHealth(nvidia_, Node(key, codec::FormatHandshakeRequest(now_), std::nullopt), {}, now_, 60s)
          .healthy);
  EXPECT_FALSE(EvaluateHealth(nvidia_, Node(key, old, std::nullopt), {}, now_, 60s).healthy);
  // current 4, reported 4, expired handshake, manifest changed -> healthy and refresh.
  NodeView n = Node(key, old, "4");
  n.annotations["hami.io/node-nvidia-register"] = R"([{"id":"GPU-0","health":false}])";
  HealthMemory seen{4, R"([{"id":"GPU-0","health":true}])", std::nullopt};
  auto v = EvaluateHealth(nvidia_, n, seen, now_, 60s);
  EXPECT_TRUE(v.healthy);
  EXPECT_TRUE(v.refresh);
  EXPECT_EQ(v.memory.reported_register, n.annotations["hami.io/node-nvidia-register"]);
  // Unchanged manifest -> healthy, no refresh.
  v = EvaluateHealth(nvidia_, n, v.memory, now_, 60s);
  EXPECT_TRUE(v.healthy);
  EXPECT_FALSE(v.refresh);
  // Manifest deleted -> refresh.
  n.annotations.erase("hami.io/node-nvidia-register");
  EXPECT_TRUE(EvaluateHealth(nvidia_, n, v.memory, now_, 60s).refresh);
  // Count drops to zero -> unhealthy at once, even with a fresh handshake.
  NodeView gone = Node(key, codec::FormatHandshakeRequest(now_), "0");
  auto dropped = EvaluateHealth(nvidia_, gone, seen, now_, 60s);
  EXPECT_FALSE(dropped.healthy);
  EXPECT_EQ(dropped.memory.reported_count, 0);
  // A new count (e.g. a node name reused after deletion) -> healthy and refresh.
  auto fresh = EvaluateHealth(nvidia_, Node(key, "Heartbeat_2099-01-01T00:00:00Z", "4"), {}, now_, 60s);
  EXPECT_TRUE(fresh.healthy);
  EXPECT_TRUE(fresh.refresh);
  EXPECT_EQ(fresh.memory.reported_count, 4);
}

// The pass serve runs per node (and simulate runs once): which vendors are asked, and when their devices are
// withheld and given back.
TEST_F(Health, NodeHealthPassWithholdsOnceAndRestoresOnASignOfThePlugin) {
  const Backends backends = testing::BuiltinBackends();
  const std::size_t nv = static_cast<std::size_t>(backends.IndexOf("NVIDIA"));
  NodeView n = testing::NvidiaNode("n", {testing::Gpu("GPU-0", 0)});
  n.annotations["hami.io/node-handshake"] = codec::FormatHandshakeRequest(now_ - 10min);
  n.allocatable["nvidia.com/gpu"] = "0";
  NodeHealthRecord record;
  auto steps = NodeHealthPass(backends, n, nullptr, record, now_, 60s);
  ASSERT_EQ(steps.size(), 1u);  // only the vendor that publishes on the node
  EXPECT_EQ(steps[0].backend, nv);
  EXPECT_TRUE(steps[0].withhold);
  EXPECT_FALSE(steps[0].verdict.healthy);
  EXPECT_TRUE(record.unhealthy.contains(nv));
  // Withheld already: not again. Our own fresh request is no sign of life.
  n.annotations["hami.io/node-handshake"] = codec::FormatHandshakeRequest(now_);
  steps = NodeHealthPass(backends, n, nullptr, record, now_, 60s);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_FALSE(steps[0].withhold);
  EXPECT_FALSE(steps[0].restore);
  // The plugin answers: the devices come back.
  n.annotations["hami.io/node-handshake"] = "Reported 2024-01-24 04:30:00";
  steps = NodeHealthPass(backends, n, nullptr, record, now_, 60s);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_TRUE(steps[0].restore);
  EXPECT_FALSE(record.unhealthy.contains(nv));
  // A node that publishes nothing is not asked.
  EXPECT_TRUE(NodeHealthPass(backends, NodeView{}, nullptr, record, now_, 60s).empty());
}

}  // namespace
}  // namespace hami
