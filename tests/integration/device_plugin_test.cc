// The simulated device plugins against the embedded API server: what they publish is what each backend's
// Discover() reads back, they publish only on change, answer handshakes only where the real plugin does, and
// answer allocations (success, failure, silence) with the node lock released only when the pod holds it.
#include "sim/device_plugins/device_plugin.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/builtin.h"
#include "core/codec/node_devices.h"
#include "core/codec/stamps.h"
#include "core/keys.h"
#include "k8s/api_client.h"
#include "k8s/objects.h"
#include "sim/apiserver/api_server.h"
#include "tests/support/run_coro.h"

namespace hami {
namespace {
namespace asio = boost::asio;
namespace json = boost::json;
using namespace std::chrono_literals;
using sim::DevicePlugin;
using sim::PluginMode;
using sim::SimDevice;
using testing::RunCoro;
using testing::WaitUntil;

constexpr std::string_view kNode = "n1";
// How long a negative check ("nothing happens") watches: many plugin ticks at the test intervals.
constexpr auto kQuietWindow = 300ms;

SimDevice Device(std::string uuid, std::string type, std::int64_t memory_mib, std::int32_t cores,
                 std::int32_t split = 10, std::int32_t numa = 0) {
  SimDevice d;
  d.uuid = std::move(uuid);
  d.type = std::move(type);
  d.memory_mib = memory_mib;
  d.cores = cores;
  d.split = split;
  d.numa = numa;
  return d;
}

// Two cards per vendor, shaped as that vendor's plugin would describe them (capacity vendors: the memory a
// multiple of the memory unit, the per-card core count).
std::vector<SimDevice> DevicesFor(std::string_view backend) {
  if (backend == "nvidia") {
    return {Device("GPU-aaaa", "NVIDIA-Tesla T4", 15360, 100, 10, 0),
            Device("GPU-bbbb", "NVIDIA-Tesla T4", 15360, 100, 5, 1)};
  }
  if (backend == "hygon") {
    return {Device("DCU-0001", "DCU-K100", 65536, 100, 4), Device("DCU-0002", "DCU-K100", 65536, 100, 4, 1)};
  }
  if (backend == "cambricon") {
    return {Device("MLU-0", "MLU370", 24576, 100), Device("MLU-1", "MLU370", 24576, 100)};
  }
  return {Device("MT-0", "MTT S4000", 49152, 16), Device("MT-1", "MTT S4000", 49152, 16)};
}

// What Discover() must return for `devices`: annotation modes carry every field, capacity mode synthesizes
// ids, count and type (docs/TEST_VECTORS.md, V43 and V53).
void ExpectDiscovered(const Backend& backend, const std::vector<SimDevice>& devices,
                      const std::vector<DeviceInfo>& found) {
  ASSERT_EQ(found.size(), devices.size());
  const bool capacity = backend.Spec().keys.register_annotation.empty();  // cards from node capacity
  const std::string infix = backend.Vendor() == "MLU" ? "cambricon-mlu" : "mthreads";
  for (std::size_t i = 0; i < devices.size(); ++i) {
    SCOPED_TRACE(fmt::format("device {}", i));
    const SimDevice& want = devices[i];
    const DeviceInfo& got = found[i];
    EXPECT_EQ(got.devmem.value(), want.memory_mib);
    EXPECT_EQ(got.devcore.value(), want.cores);
    EXPECT_TRUE(got.health);
    if (capacity) {
      EXPECT_EQ(got.id, fmt::format("{}-{}-{}", kNode, infix, i));
      EXPECT_EQ(got.count, 100);
      EXPECT_EQ(got.type, backend.Vendor());
    } else {
      EXPECT_EQ(got.id, want.uuid);
      EXPECT_EQ(got.index, static_cast<std::int32_t>(i));
      EXPECT_EQ(got.count, want.split);
      EXPECT_EQ(got.type, want.type);
      EXPECT_EQ(got.numa, want.numa);
    }
  }
}

std::string SplitSum(const std::vector<SimDevice>& devices) {
  std::int64_t sum = 0;
  for (const auto& d : devices) sum += d.healthy ? d.split : 0;
  return std::to_string(sum);
}

class DevicePluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    port_ = server_.Start().value();
    k8s::RestConfig cfg = k8s::LoopbackHttp(port_);
    k8s::ClientOptions co;
    co.qps = 0;
    co.backoff_initial = 5ms;
    co.backoff_max = 50ms;
    client_ = k8s::ApiClient::Create(ioc_.get_executor(), cfg, co).value();
    ASSERT_TRUE(backends::RegisterBuiltinBackends(registry_));
  }

  void TearDown() override {
    for (auto& running : running_) Stop(*running);
    server_.Stop();
  }

  const Backend& MakeBackend(std::string_view name) {
    backends_.push_back(std::move(registry_.Create(name, VendorSettings{}).value().front()));
    return *backends_.back();
  }

  void CreateNode(const json::object& annotations = {}, const json::object& status = {}) {
    json::object metadata{{"name", kNode}};
    if (!annotations.empty()) metadata["annotations"] = annotations;
    json::object node{{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", metadata}};
    if (!status.empty()) node["status"] = status;
    ASSERT_TRUE(server_.store().Create(json::value(node)));
  }

  // A pod the scheduler has just bound to the node: bind-phase allocating, bind-time, hami.io/vgpu-node, the
  // to-allocate keys.
  void CreatePod(const std::string& name, const std::map<std::string, std::string>& annotations) {
    json::object ann{{std::string(keys::kBindPhase), keys::kBindPhaseAllocating},
                     {std::string(keys::kBindTime), "1716199325"},
                     {std::string(keys::kAssignedNode), kNode}};
    for (const auto& [k, v] : annotations) ann[k] = v;
    json::object pod{
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata", {{"name", name}, {"namespace", "default"}, {"annotations", ann}}},
        {"spec", {{"nodeName", kNode}, {"containers", json::array{{{"name", "c"}, {"image", "x"}}}}}}};
    ASSERT_TRUE(server_.store().Create(json::value(pod)));
  }

  NodeView Node() {
    auto object = server_.store().Find("nodes", "", kNode);
    if (object == nullptr) return {};
    return k8s::NodeFromJson(json::value(*object)).value();
  }
  std::optional<std::string> NodeAnnotation(const std::string& key) {
    auto node = Node();
    auto it = node.annotations.find(key);
    return it == node.annotations.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
  std::string Allocatable(const std::string& resource) {
    auto node = Node();
    auto it = node.allocatable.find(resource);
    return it == node.allocatable.end() ? "" : it->second;
  }
  std::optional<std::string> PodAnnotation(const std::string& pod, const std::string& key) {
    auto object = server_.store().Find("pods", "default", pod);
    if (object == nullptr) return std::nullopt;
    auto view = k8s::PodFromJson(json::value(*object)).value();
    auto it = view.annotations.find(key);
    return it == view.annotations.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
  std::vector<DeviceInfo> Discovered(const Backend& backend) {
    auto found = backend.Discover(Node());
    EXPECT_TRUE(found) << found.error().message;
    return found ? *found : std::vector<DeviceInfo>{};
  }

  asio::awaitable<void> PatchNodeAnnotation(const std::string& key, const std::string& value) {
    const json::value patch = {{"metadata", {{"annotations", {{key, value}}}}}};
    const std::string path = k8s::PathFor("v1", "nodes", "", kNode);
    auto patched = co_await client_->MergePatch(path, patch);
    EXPECT_TRUE(patched) << patched.error().message;
  }
  asio::awaitable<void> PatchPodAnnotation(const std::string& pod, const std::string& key,
                                           const std::string& value) {
    const json::value patch = {{"metadata", {{"annotations", {{key, value}}}}}};
    const std::string path = k8s::PathFor("v1", "pods", "default", pod);
    auto patched = co_await client_->MergePatch(path, patch);
    EXPECT_TRUE(patched) << patched.error().message;
  }

  sim::DevicePluginOptions Options(std::vector<SimDevice> devices) {
    sim::DevicePluginOptions o;
    o.node = std::string(kNode);
    o.devices = std::move(devices);
    o.register_interval = 50ms;
    o.handshake_interval = 20ms;
    o.retry_backoff = 20ms;
    return o;
  }

  struct Running {
    std::unique_ptr<DevicePlugin> plugin;
    asio::cancellation_signal stop;
    bool done = false;
    std::vector<std::string> log;
  };

  DevicePlugin& Start(const Backend& backend, sim::DevicePluginOptions options) {
    auto running = std::make_unique<Running>();
    running->plugin = std::make_unique<DevicePlugin>(*client_, backend, std::move(options));
    Running* r = running.get();
    r->plugin->on_log = [r](const std::string& line) { r->log.push_back(line); };
    asio::co_spawn(ioc_, r->plugin->Run(),
                   asio::bind_cancellation_slot(r->stop.slot(), [r](std::exception_ptr) { r->done = true; }));
    running_.push_back(std::move(running));
    return *r->plugin;
  }

  // Cancels the plugin and runs the loop until Run() has ended, so nothing refers to it afterwards.
  void Stop(Running& running) {
    if (running.done) return;
    running.stop.emit(asio::cancellation_type::terminal);
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!running.done && std::chrono::steady_clock::now() < deadline) ioc_.run_one_for(10ms);
    EXPECT_TRUE(running.done) << "the plugin did not end on cancellation";
  }

  asio::io_context ioc_;
  sim::ApiServer server_{ioc_};
  std::uint16_t port_ = 0;
  std::unique_ptr<k8s::ApiClient> client_;
  BackendRegistry registry_;
  std::vector<BackendPtr> backends_;
  std::vector<std::unique_ptr<Running>> running_;
};

// ---- Registration, for each vendor ----

class Registration : public DevicePluginTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(Registration, DiscoverReadsBackThePublishedDevicesAndPatchesOnlyOnChange) {
  const Backend& backend = MakeBackend(GetParam());
  const std::string count = backend.Spec().resources.count;
  CreateNode();
  std::vector<SimDevice> devices = DevicesFor(GetParam());
  DevicePlugin& plugin = Start(backend, Options(devices));
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        const std::function<bool()> registered = [&] { return Discovered(backend).size() == devices.size(); };
        CO_ASSERT_TRUE(co_await WaitUntil(registered));
        ExpectDiscovered(backend, devices, Discovered(backend));
        const std::function<bool()> counted = [&] { return Allocatable(count) == SplitSum(devices); };
        CO_ASSERT_TRUE(co_await WaitUntil(counted));
        EXPECT_EQ(Node().capacity[count], SplitSum(devices));
        // Two more checks begin: the check that published has ended (its answers are counted).
        const auto registered_at = plugin.stats().checks;
        const std::function<bool()> quiet = [&] { return plugin.stats().checks >= registered_at + 2; };
        CO_ASSERT_TRUE(co_await WaitUntil(quiet));

        // Same devices: checks go by, nothing is sent (the server sees no request at all).
        const auto published = plugin.stats().registrations;
        const auto requests = server_.requests_served();
        const auto checks = plugin.stats().checks;
        plugin.SetDevices(devices);
        plugin.RegisterNow();
        const std::function<bool()> checked_twice = [&] { return plugin.stats().checks >= checks + 2; };
        CO_ASSERT_TRUE(co_await WaitUntil(checked_twice));
        EXPECT_EQ(plugin.stats().registrations, published);
        EXPECT_EQ(server_.requests_served(), requests);

        // Changed memory: exactly one PATCH (the manifest, or the capacity for capacity vendors).
        for (auto& d : devices) d.memory_mib *= 2;
        plugin.SetDevices(devices);
        plugin.RegisterNow();
        const std::function<bool()> republished = [&] {
          return plugin.stats().registrations == published + 1;
        };
        CO_ASSERT_TRUE(co_await WaitUntil(republished));
        const auto after_change = plugin.stats().checks;
        const std::function<bool()> settled = [&] { return plugin.stats().checks >= after_change + 2; };
        CO_ASSERT_TRUE(co_await WaitUntil(settled));
        EXPECT_EQ(server_.requests_served(), requests + 1);
        EXPECT_EQ(plugin.stats().registrations, published + 1);
        ExpectDiscovered(backend, devices, Discovered(backend));

        // A dropped device disappears from what the scheduler discovers, on the next check.
        devices.pop_back();
        plugin.SetDevices(devices);
        const std::function<bool()> dropped = [&] { return Discovered(backend).size() == devices.size(); };
        CO_ASSERT_TRUE(co_await WaitUntil(dropped));
        ExpectDiscovered(backend, devices, Discovered(backend));
        const std::function<bool()> recounted = [&] { return Allocatable(count) == SplitSum(devices); };
        EXPECT_TRUE(co_await WaitUntil(recounted));
        EXPECT_EQ(plugin.stats().api_errors, 0u);
      }(),
      20s);
}

INSTANTIATE_TEST_SUITE_P(Vendors, Registration, ::testing::Values("nvidia", "hygon", "cambricon", "mthreads"),
                         [](const auto& p) { return p.param; });

TEST_F(DevicePluginTest, NothingIsPublishedWhenTheNodeAlreadyCarriesTheDevices) {
  const Backend& backend = MakeBackend("nvidia");
  const std::vector<SimDevice> devices = DevicesFor("nvidia");
  const std::string manifest = codec::EncodeDeviceManifest(sim::ManifestOf(devices));
  const json::object quantities{{"nvidia.com/gpu", SplitSum(devices)}};
  CreateNode({{"hami.io/node-nvidia-register", manifest}},
             {{"capacity", quantities}, {"allocatable", quantities}});
  DevicePlugin& plugin = Start(backend, Options(devices));
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    const std::function<bool()> checked_twice = [&] { return plugin.stats().checks >= 2; };
    CO_ASSERT_TRUE(co_await WaitUntil(checked_twice));
    EXPECT_EQ(plugin.stats().registrations, 0u);
    EXPECT_EQ(NodeAnnotation("hami.io/node-nvidia-register"), manifest);
  }());
}

TEST_F(DevicePluginTest, UnhealthyDevicesAreListedButNotCounted) {
  const Backend& backend = MakeBackend("nvidia");
  CreateNode();
  std::vector<SimDevice> devices = DevicesFor("nvidia");
  devices[1].healthy = false;
  Start(backend, Options(devices));
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    const std::function<bool()> counted = [&] { return Allocatable("nvidia.com/gpu") == "10"; };
    CO_ASSERT_TRUE(co_await WaitUntil(counted));
    const auto found = Discovered(backend);
    CO_ASSERT_TRUE(found.size() == 2u);
    EXPECT_TRUE(found[0].health);
    EXPECT_FALSE(found[1].health);
  }());
}

// ---- Handshake ----

TEST_F(DevicePluginTest, HygonAnswersHandshakesExceptWhenSilent) {
  const Backend& backend = MakeBackend("hygon");
  const std::string key = backend.Spec().keys.handshake;
  const std::string count = backend.Spec().resources.count;
  CreateNode();
  DevicePlugin& plugin = Start(backend, Options(DevicesFor("hygon")));
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    const std::function<bool()> counted = [&] { return Allocatable(count) == "8"; };
    CO_ASSERT_TRUE(co_await WaitUntil(counted));
    const std::function<bool()> reported = [&] {
      auto v = NodeAnnotation(key);
      return v && v->starts_with("Reported ");
    };
    std::size_t answers = 0;  // expected so far
    const std::function<bool()> answered = [&] { return plugin.stats().handshakes == answers && reported(); };

    co_await PatchNodeAnnotation(key, "Requesting_2024-01-23 04:30:04");
    answers = 1;
    CO_ASSERT_TRUE(co_await WaitUntil(answered));
    const std::string answer = NodeAnnotation(key).value();
    EXPECT_TRUE(codec::ParseRfc3339(answer.substr(std::string("Reported ").size())))
        << "not an RFC 3339 time: " << answer;

    // The scheduler asks again (same text): a new request, answered again.
    co_await PatchNodeAnnotation(key, "Requesting_2024-01-23 04:30:04");
    answers = 2;
    CO_ASSERT_TRUE(co_await WaitUntil(answered));

    // Silent: the count goes to 0 as kubelet's would, and requests stay unanswered.
    plugin.SetMode(PluginMode::kSilent);
    const std::function<bool()> zeroed = [&] { return Allocatable(count) == "0"; };
    CO_ASSERT_TRUE(co_await WaitUntil(zeroed));
    EXPECT_EQ(Node().capacity[count], "8");
    co_await PatchNodeAnnotation(key, "Requesting_2024-01-23 04:31:04");
    EXPECT_FALSE(co_await WaitUntil(reported, kQuietWindow));
    EXPECT_EQ(plugin.stats().handshakes, 2u);

    // Back to normal: the pending request is answered and the count re-published.
    plugin.SetMode(PluginMode::kNormal);
    answers = 3;
    CO_ASSERT_TRUE(co_await WaitUntil(answered));
    CO_ASSERT_TRUE(co_await WaitUntil(counted));
  }());
}

TEST_F(DevicePluginTest, NvidiaNeverWritesTheHandshakeAndGoesToZeroWhenSilent) {
  const Backend& backend = MakeBackend("nvidia");
  const std::string key = backend.Spec().keys.handshake;
  CreateNode();
  DevicePlugin& plugin = Start(backend, Options(DevicesFor("nvidia")));
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    const std::function<bool()> counted = [&] { return Allocatable("nvidia.com/gpu") == "15"; };
    CO_ASSERT_TRUE(co_await WaitUntil(counted));
    const std::string request = "Requesting_2024-01-23 04:30:04";
    co_await PatchNodeAnnotation(key, request);
    const std::function<bool()> changed = [&] { return NodeAnnotation(key) != request; };
    EXPECT_FALSE(co_await WaitUntil(changed, kQuietWindow));
    EXPECT_EQ(plugin.stats().handshakes, 0u);

    plugin.SetMode(PluginMode::kSilent);
    const std::function<bool()> zeroed = [&] { return Allocatable("nvidia.com/gpu") == "0"; };
    CO_ASSERT_TRUE(co_await WaitUntil(zeroed));
  }());
}

// ---- Allocation ----

// The lock value the scheduler writes for `pod` with this backend's rule (bare timestamp for Cambricon).
std::string LockValue(const Backend& backend, const std::string& pod) {
  const auto now = std::chrono::system_clock::now();
  return backend.Spec().lock.owner_aware ? codec::FormatNodeLock(now, "default", pod)
                                         : codec::FormatRfc3339(now);
}

class Allocation : public DevicePluginTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(Allocation, PopsToAllocateSetsSuccessAndReleasesTheLock) {
  const Backend& backend = MakeBackend(GetParam());
  const BackendSpec& spec = backend.Spec();
  const auto devices = DevicesFor(GetParam());
  json::object node_annotations;
  if (!spec.keys.node_lock.empty()) node_annotations[spec.keys.node_lock] = LockValue(backend, "p1");
  CreateNode(node_annotations);
  auto options = Options(devices);
  options.allocate_delay = 30ms;
  DevicePlugin& plugin = Start(backend, options);
  const std::string to_allocate = fmt::format("{},{},3000,30:;", devices[0].uuid, spec.vendor);
  CreatePod("p1", {{spec.keys.allocated, to_allocate}, {spec.keys.to_allocate, to_allocate}});
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    // Repeated watch events while the plugin works on it do not make it answer twice.
    co_await PatchPodAnnotation("p1", "touch", "1");
    co_await PatchPodAnnotation("p1", "touch", "2");
    const std::function<bool()> done = [&] {
      return plugin.stats().allocated == 1 &&
             PodAnnotation("p1", std::string(keys::kBindPhase)) == std::string(keys::kBindPhaseSuccess);
    };
    CO_ASSERT_TRUE(co_await WaitUntil(done));
    EXPECT_EQ(PodAnnotation("p1", spec.keys.to_allocate), ";");
    EXPECT_EQ(PodAnnotation("p1", spec.keys.allocated), to_allocate);
    if (!spec.keys.node_lock.empty()) {
      const std::function<bool()> unlocked = [&] {
        return plugin.stats().lock_releases == 1 && !NodeAnnotation(spec.keys.node_lock);
      };
      CO_ASSERT_TRUE(co_await WaitUntil(unlocked));
    }
    EXPECT_EQ(plugin.stats().allocated, 1u);
    EXPECT_EQ(plugin.stats().failed, 0u);
  }());
  const auto& log = running_.front()->log;
  const std::string allocated_line =
      fmt::format("allocated default/p1 {},{},3000,30", devices[0].uuid, spec.vendor);
  EXPECT_NE(std::find(log.begin(), log.end(), allocated_line), log.end()) << "log has no: " << allocated_line;
}

INSTANTIATE_TEST_SUITE_P(Vendors, Allocation, ::testing::Values("nvidia", "hygon", "cambricon", "mthreads"),
                         [](const auto& p) { return p.param; });

TEST_F(DevicePluginTest, LockHeldByAnotherPodIsLeftInPlace) {
  const Backend& backend = MakeBackend("nvidia");
  const std::string lock = LockValue(backend, "someone-else");
  CreateNode({{"hami.io/mutex.lock", lock}});
  DevicePlugin& plugin = Start(backend, Options(DevicesFor("nvidia")));
  CreatePod("p1", {{"hami.io/vgpu-devices-to-allocate", "GPU-aaaa,NVIDIA,3000,30:;"}});
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    const std::function<bool()> decided = [&] { return plugin.stats().locks_kept == 1; };
    CO_ASSERT_TRUE(co_await WaitUntil(decided));
    EXPECT_EQ(PodAnnotation("p1", "hami.io/bind-phase"), "success");
    EXPECT_EQ(NodeAnnotation("hami.io/mutex.lock"), lock);
    EXPECT_EQ(plugin.stats().lock_releases, 0u);
  }());
}

TEST_F(DevicePluginTest, AnAnswerWhoseReplyWasLostStillReleasesTheLock) {
  const Backend& backend = MakeBackend("nvidia");
  CreateNode({{"hami.io/mutex.lock", LockValue(backend, "p1")}});
  // The plugin's answer to the pod goes through, but its reply never arrives, twice: the HTTP client sends
  // a request that got no byte of answer on a reused connection once more, so the plugin sees the second.
  sim::FaultRule lost;
  lost.method = "PATCH";
  lost.path_prefix = "/api/v1/namespaces/default/pods/p1";
  lost.drop_answer = true;
  server_.FailNext(lost);
  server_.FailNext(lost);
  DevicePlugin& plugin = Start(backend, Options(DevicesFor("nvidia")));
  CreatePod("p1", {{"hami.io/vgpu-devices-to-allocate", "GPU-aaaa,NVIDIA,3000,30:;"}});
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    const std::function<bool()> answered = [&] {
      return PodAnnotation("p1", "hami.io/bind-phase") == "success";
    };
    CO_ASSERT_TRUE(co_await WaitUntil(answered));
    // The retry finds the pod answered already; the lock must not stay behind.
    const std::function<bool()> unlocked = [&] { return !NodeAnnotation("hami.io/mutex.lock"); };
    EXPECT_TRUE(co_await WaitUntil(unlocked));
    EXPECT_GE(plugin.stats().api_errors, 1u);
  }());
}

TEST_F(DevicePluginTest, FailAllocationSetsFailedKeepsToAllocateAndReleasesTheLock) {
  const Backend& backend = MakeBackend("hygon");
  CreateNode({{"hami.io/mutex.lock", LockValue(backend, "p1")}});
  auto options = Options(DevicesFor("hygon"));
  options.mode = PluginMode::kFailAllocation;
  DevicePlugin& plugin = Start(backend, options);
  const std::string to_allocate = "DCU-0001,DCU,3000,30:;";
  CreatePod("p1", {{"hami.io/hcu-devices-to-allocate", to_allocate}});
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    const std::function<bool()> failed = [&] {
      return PodAnnotation("p1", "hami.io/bind-phase") == "failed";
    };
    CO_ASSERT_TRUE(co_await WaitUntil(failed));
    EXPECT_EQ(PodAnnotation("p1", "hami.io/hcu-devices-to-allocate"), to_allocate);
    const std::function<bool()> unlocked = [&] { return !NodeAnnotation("hami.io/mutex.lock"); };
    CO_ASSERT_TRUE(co_await WaitUntil(unlocked));
    EXPECT_EQ(plugin.stats().failed, 1u);
    EXPECT_EQ(plugin.stats().allocated, 0u);
  }());
}

TEST_F(DevicePluginTest, UnreadableToAllocateFailsTheAllocation) {
  const Backend& backend = MakeBackend("nvidia");
  CreateNode({{"hami.io/mutex.lock", LockValue(backend, "p1")}});
  DevicePlugin& plugin = Start(backend, Options(DevicesFor("nvidia")));
  CreatePod("p1", {{"hami.io/vgpu-devices-to-allocate", "GPU-aaaa,NVIDIA:;"}});
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    const std::function<bool()> failed = [&] {
      return PodAnnotation("p1", "hami.io/bind-phase") == "failed";
    };
    CO_ASSERT_TRUE(co_await WaitUntil(failed));
    const std::function<bool()> unlocked = [&] { return !NodeAnnotation("hami.io/mutex.lock"); };
    CO_ASSERT_TRUE(co_await WaitUntil(unlocked));
    EXPECT_EQ(plugin.stats().failed, 1u);
  }());
}

TEST_F(DevicePluginTest, NeverAnswerLeavesThePodAllocatingUntilTheModeChanges) {
  const Backend& backend = MakeBackend("nvidia");
  const std::string lock = LockValue(backend, "p1");
  CreateNode({{"hami.io/mutex.lock", lock}});
  auto options = Options(DevicesFor("nvidia"));
  options.mode = PluginMode::kNeverAnswer;
  DevicePlugin& plugin = Start(backend, options);
  CreatePod("p1", {{"hami.io/vgpu-devices-to-allocate", "GPU-aaaa,NVIDIA,3000,30:;"}});
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    const std::function<bool()> registered = [&] { return Allocatable("nvidia.com/gpu") == "15"; };
    CO_ASSERT_TRUE(co_await WaitUntil(registered));  // it registers
    const std::function<bool()> answered = [&] {
      return PodAnnotation("p1", "hami.io/bind-phase") != std::optional<std::string>("allocating");
    };
    EXPECT_FALSE(co_await WaitUntil(answered, kQuietWindow));
    EXPECT_EQ(NodeAnnotation("hami.io/mutex.lock"), lock);

    plugin.SetMode(PluginMode::kNormal);
    CO_ASSERT_TRUE(co_await WaitUntil(answered));
    EXPECT_EQ(PodAnnotation("p1", "hami.io/bind-phase"), "success");
    const std::function<bool()> unlocked = [&] { return !NodeAnnotation("hami.io/mutex.lock"); };
    CO_ASSERT_TRUE(co_await WaitUntil(unlocked));
  }());
}

TEST_F(DevicePluginTest, EachVendorAnswersItsOwnKeyOfAMultiVendorPod) {
  const Backend& nvidia = MakeBackend("nvidia");
  const Backend& hygon = MakeBackend("hygon");
  CreateNode({{"hami.io/mutex.lock", LockValue(nvidia, "p1")}});
  DevicePlugin& gpu_plugin = Start(nvidia, Options(DevicesFor("nvidia")));
  auto dcu_options = Options(DevicesFor("hygon"));
  dcu_options.allocate_delay = 50ms;  // answers after the NVIDIA plugin has set `success`
  DevicePlugin& dcu_plugin = Start(hygon, dcu_options);
  CreatePod("p1", {{"hami.io/vgpu-devices-to-allocate", "GPU-aaaa,NVIDIA,3000,30:;"},
                   {"hami.io/hcu-devices-to-allocate", "DCU-0001,DCU,2000,50:;"}});
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    const std::function<bool()> both = [&] {
      return PodAnnotation("p1", "hami.io/vgpu-devices-to-allocate") == ";" &&
             PodAnnotation("p1", "hami.io/hcu-devices-to-allocate") == ";";
    };
    CO_ASSERT_TRUE(co_await WaitUntil(both));
    EXPECT_EQ(PodAnnotation("p1", "hami.io/bind-phase"), "success");
    // The store holds a patch before its reply reaches the plugin that counts it.
    const std::function<bool()> counted = [&] {
      return gpu_plugin.stats().allocated == 1 && dcu_plugin.stats().allocated == 1;
    };
    CO_ASSERT_TRUE(co_await WaitUntil(counted));
    const std::function<bool()> unlocked = [&] {
      return gpu_plugin.stats().lock_releases + dcu_plugin.stats().lock_releases == 1 &&
             !NodeAnnotation("hami.io/mutex.lock");
    };
    CO_ASSERT_TRUE(co_await WaitUntil(unlocked));
  }());
}

TEST_F(DevicePluginTest, PodsOfOtherNodesAndFinishedPodsAreLeftAlone) {
  const Backend& backend = MakeBackend("nvidia");
  CreateNode();
  DevicePlugin& plugin = Start(backend, Options(DevicesFor("nvidia")));
  CreatePod("done", {{"hami.io/vgpu-devices-to-allocate", ";"}});
  json::object other{
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata",
       {{"name", "elsewhere"},
        {"namespace", "default"},
        {"annotations",
         {{"hami.io/bind-phase", "allocating"},
          {"hami.io/vgpu-devices-to-allocate", "GPU-x,NVIDIA,1,1:;"}}}}},
      {"spec", {{"nodeName", "n2"}, {"containers", json::array{{{"name", "c"}, {"image", "x"}}}}}}};
  ASSERT_TRUE(server_.store().Create(json::value(other)));
  CreatePod("p1", {{"hami.io/vgpu-devices-to-allocate", "GPU-aaaa,NVIDIA,3000,30:;"}});
  RunCoro(ioc_, [&]() -> asio::awaitable<void> {
    const std::function<bool()> answered = [&] {
      return plugin.stats().allocated == 1 && PodAnnotation("p1", "hami.io/bind-phase") == "success";
    };
    CO_ASSERT_TRUE(co_await WaitUntil(answered));
    EXPECT_EQ(PodAnnotation("done", "hami.io/bind-phase"), "allocating");
    EXPECT_EQ(PodAnnotation("elsewhere", "hami.io/bind-phase"), "allocating");
  }());
}

}  // namespace
}  // namespace hami
