// The whole system over real loopback HTTP on one event loop, as `hami-scheduler demo` wires it: the embedded
// API server, nodes whose simulated device plugins register, handshake and allocate, the scheduler service
// exactly as `serve` runs it (watches, ledger, health pass, /filter, /bind, node locks), and the
// kube-scheduler stand-in driving it. What must hold end to end: every backend's full life, no device ever
// over-committed (checked from the API server's own state after every step), the ledger equal to what the
// annotations say, a restart in the middle of a run, API faults, throughput to one node, plugin health, and
// failed allocations leaving nothing behind.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>
#include <cctype>
#include <deque>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cmd/service.h"
#include "core/codec/pod_devices.h"
#include "core/codec/stamps.h"
#include "core/keys.h"
#include "core/base64.h"
#include "k8s/http_client.h"
#include "k8s/json_patch.h"
#include "k8s/objects.h"
#include "sim/apiserver/api_server.h"
#include "sim/device_plugins/device_plugin.h"
#include "sim/scheduler/kube_scheduler.h"
#include "sim/apiserver/resources.h"
#include "tests/support/builders.h"
#include "tests/support/run_coro.h"
#include "tests/support/test_certs.h"

namespace hami {
namespace {
namespace asio = boost::asio;
namespace json = boost::json;
using namespace std::chrono_literals;
using ::testing::HasSubstr;
using sim::PluginMode;
using sim::PodOutcome;
using sim::SimDevice;
using testing::Pause;
using testing::RunCoro;
using testing::WaitUntil;
using SteadyClock = std::chrono::steady_clock;

constexpr std::string_view kNamespace = "default";
// More memory than any simulated card has: a pod asking this is unschedulable by design.
constexpr std::int64_t kTooMuchMemory = 200000;

// Cards as each vendor's device plugin describes them (capacity vendors: memory a multiple of the memory
// unit, the vendor's per-card cores).
std::vector<SimDevice> Cards(const std::string& vendor, const std::string& node, int n,
                             std::int32_t split = 4) {
  std::vector<SimDevice> out;
  for (int i = 0; i < n; ++i) {
    SimDevice d;
    d.split = split;
    d.cores = 100;
    if (vendor == "nvidia") {
      d.uuid = fmt::format("GPU-{}-{}", node, i);
      d.memory_mib = 16384;
      d.type = "NVIDIA-Tesla T4";
    } else if (vendor == "hygon") {
      d.uuid = fmt::format("DCU-{}-{}", node, i);
      d.memory_mib = 16384;
      d.type = "DCU-K100";
    } else if (vendor == "cambricon") {
      d.uuid = fmt::format("MLU-{}-{}", node, i);
      d.memory_mib = 24576;
      d.type = "MLU370";
    } else {
      d.uuid = fmt::format("MT-{}-{}", node, i);
      d.memory_mib = 49152;
      d.cores = 16;
      d.type = "MTT S4000";
    }
    out.push_back(std::move(d));
  }
  return out;
}

// What one pod asks of one vendor (memory in MiB, converted to the vendor's unit).
struct Ask {
  std::string vendor;  // config section: nvidia, cambricon, mthreads, hygon
  std::int32_t count = 1;
  std::int64_t memory_mib = 1024;
  std::int32_t cores = 10;
};

// A random ask of `vendor`; one in `unschedulable_one_in` asks more memory than any card has.
Ask RandomAsk(std::mt19937& rng, const std::string& vendor, int unschedulable_one_in, bool small) {
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Ask a;
  a.vendor = vendor;
  if (vendor == "nvidia") {
    a.count = !small && pick(0, 4) == 0 ? 2 : 1;
    a.memory_mib = small ? 500 * pick(1, 3) : 500 * pick(1, 12);
    a.cores = small ? pick(0, 1) * 10 : 10 * pick(0, 5);
  } else if (vendor == "hygon") {
    a.memory_mib = small ? 500 * pick(1, 3) : 500 * pick(1, 12);
    a.cores = small ? 10 : 10 * pick(1, 5);
  } else if (vendor == "cambricon") {
    a.memory_mib = 256 * (small ? pick(1, 4) : pick(1, 16));
    a.cores = small ? 10 : 10 * pick(1, 5);
  } else {
    static constexpr int kUnits[] = {2, 4, 8, 16};
    a.memory_mib = 512 * (small ? 2 : kUnits[pick(0, 3)]);
    a.cores = small ? 1 : pick(1, 8);
  }
  if (unschedulable_one_in > 0 && pick(1, unschedulable_one_in) == 1) a.memory_mib = kTooMuchMemory;
  return a;
}

json::value PodJson(const std::string& name, const json::object& limits) {
  const json::object container{
      {"name", "main"}, {"image", "registry.example/app:1"}, {"resources", {{"limits", limits}}}};
  return json::object{{"apiVersion", "v1"},
                      {"kind", "Pod"},
                      {"metadata", {{"name", name}, {"namespace", kNamespace}}},
                      {"spec", {{"schedulerName", "hami-scheduler"}, {"containers", json::array{container}}}},
                      {"status", {{"phase", "Pending"}}}};
}

std::string Annotation(const PodView& pod, std::string_view key) {
  auto it = pod.annotations.find(key);
  return it == pod.annotations.end() ? "" : it->second;
}

// What live pods hold on one device, read from their allocation annotations.
struct Held {
  std::int64_t slots = 0, memory = 0, cores = 0;
  std::vector<std::string> pods;
};

// The API server's own account of allocations: every live, unfinished pod carrying hami.io/vgpu-node.
struct AnnotatedState {
  struct Pod {
    std::string key;
    std::string node;
    std::vector<DeviceCharge> charges;
  };
  std::map<std::string, Pod> pods;                                 // uid ->
  std::map<std::string, std::map<std::string, Held>> held;         // node -> "vendor/uuid" ->
  std::map<std::string, std::map<std::string, DeviceInfo>> cards;  // node -> "vendor/uuid" -> as published
  std::vector<std::string> problems;                               // annotations or nodes that do not decode
};

std::string DeviceKey(std::string_view vendor, std::string_view uuid) {
  return fmt::format("{}/{}", vendor, uuid);
}

class SystemTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::uint16_t port = api_.Start().value();
    rest_ = k8s::LoopbackHttp(port);
    cfg_.serving.http_bind = "127.0.0.1:0";
    cfg_.serving.metrics_bind_address = "";
    cfg_.kube.qps = 0;
    backends_ = testing::BuiltinBackends();
    k8s::ClientOptions co;
    co.qps = 0;
    co.backoff_initial = 5ms;
    co.backoff_max = 50ms;
    plugin_client_ = k8s::ApiClient::Create(ioc_.get_executor(), rest_, co).value();
    scheduler_client_ = k8s::ApiClient::Create(ioc_.get_executor(), rest_, co).value();
  }

  void TearDown() override {
    RunCoro(ioc_, StopEverything(), 15s);
    api_.Stop();
  }

  // ---- The cluster.

  const Backend& BackendFor(const std::string& section) const {
    for (const auto& b : backends_) {
      if (b->Spec().config_section == section) return *b;
    }
    throw std::invalid_argument("no backend for config section " + section);
  }

  // A node as kubelet registers it, and one device plugin per vendor on it.
  void AddNode(const std::string& name,
               const std::vector<std::pair<std::string, std::vector<SimDevice>>>& plugins,
               std::chrono::milliseconds allocate_delay = 5ms) {
    const json::value node = {{"apiVersion", "v1"},
                              {"kind", "Node"},
                              {"metadata", {{"name", name}, {"labels", {{"kubernetes.io/hostname", name}}}}}};
    ASSERT_TRUE(api_.store().Create(node));
    for (const auto& [vendor, devices] : plugins) {
      sim::DevicePluginOptions po;
      po.node = name;
      po.devices = devices;
      po.register_interval = 100ms;
      po.handshake_interval = 50ms;
      po.allocate_delay = allocate_delay;
      po.retry_backoff = 20ms;
      RunningPlugin& running = plugins_.emplace_back();
      running.node = name;
      running.vendor = vendor;
      running.plugin = std::make_unique<sim::DevicePlugin>(*plugin_client_, BackendFor(vendor), po);
      asio::co_spawn(ioc_, running.plugin->Run(),
                     asio::bind_cancellation_slot(running.stop.slot(),
                                                  [&running](std::exception_ptr) { running.ended = true; }));
      expected_devices_[name] += devices.size();
    }
  }

  sim::DevicePlugin& PluginOf(const std::string& node, const std::string& vendor) {
    for (auto& p : plugins_) {
      if (p.node == node && p.vendor == vendor) return *p.plugin;
    }
    throw std::invalid_argument("no " + vendor + " plugin on " + node);
  }

  void StartService() {
    cmd::ServiceOptions so;
    so.health_interval = health_interval_;
    so.reflector_backoff = 5ms;
    so.hostname = "system-test";
    auto created = cmd::SchedulerService::Create(ioc_, cfg_, backends_, rest_, clock_, so);
    ASSERT_TRUE(created) << created.error().message;
    service_ = std::move(*created);
    ASSERT_TRUE(service_->Listen());
    service_->Start();
  }

  void StartStandIn() {
    sim::StandInOptions o;
    o.extender_url = service_->url();
    o.initial_backoff = 10ms;
    o.max_backoff = 300ms;
    stand_in_stop_ = std::make_unique<asio::cancellation_signal>();
    stand_in_ = std::make_unique<sim::KubeSchedulerStandIn>(*scheduler_client_, o);
    stand_in_ended_ = std::make_shared<bool>(false);
    asio::co_spawn(
        ioc_, stand_in_->Run(),
        asio::bind_cancellation_slot(stand_in_stop_->slot(),
                                     [ended = stand_in_ended_](std::exception_ptr) { *ended = true; }));
  }

  void StartAll() {
    StartService();
    StartStandIn();
  }

  asio::awaitable<void> StopStandIn() {
    if (!stand_in_) co_return;
    stand_in_stop_->emit(asio::cancellation_type::terminal);
    const std::function<bool()> ended = [this] { return *stand_in_ended_; };
    EXPECT_TRUE(co_await WaitUntil(ended, 5s)) << "the stand-in did not stop";
    stand_in_.reset();
  }

  asio::awaitable<void> KillService() {
    if (!service_) co_return;
    service_->Kill();
    const std::function<bool()> stopped = [this] { return service_->stopped(); };
    EXPECT_TRUE(co_await WaitUntil(stopped, 5s)) << "the service did not stop after Kill()";
  }

  // A crash and a fresh start: Kill() the service, then a new one (new port) on the same API server, and a
  // new stand-in pointed at it.
  asio::awaitable<void> RestartService() {
    co_await KillService();
    co_await StopStandIn();
    service_.reset();  // stopped() means nothing of it runs any more (KilledServiceMakesNoMoreApiCalls)
    StartAll();
    EXPECT_TRUE(co_await SystemReady()) << "the restarted service is not ready";
  }

  asio::awaitable<void> StopEverything() {
    const std::string all_paths;
    api_.SetLatency(0ms, all_paths);  // the event backlog drains at full speed
    co_await StopStandIn();
    co_await KillService();
    for (auto& p : plugins_) p.stop.emit(asio::cancellation_type::terminal);
    const std::function<bool()> plugins_ended = [this] {
      for (const auto& p : plugins_) {
        if (!p.ended) return false;
      }
      return true;
    };
    EXPECT_TRUE(co_await WaitUntil(plugins_ended, 5s)) << "a device plugin did not stop";
  }

  // Ready to schedule: the controller is ready and every plugin's devices are in the ledger.
  asio::awaitable<bool> SystemReady() {
    const std::function<bool()> ready = [this] {
      if (!service_->extender().ready()) return false;
      for (const auto& [node, count] : expected_devices_) {
        const NodeEntry* e = service_->extender().state().FindNode(node);
        if (e == nullptr || e->devices.size() != count) return false;
      }
      return true;
    };
    co_return co_await WaitUntil(ready, 10s);
  }

  // ---- Pods.

  void CreatePod(const std::string& name, const Ask& ask) {
    const ResourceNames& r = BackendFor(ask.vendor).Spec().resources;
    json::object limits;
    limits[r.count] = std::to_string(ask.count);
    limits[r.memory] = std::to_string(ask.memory_mib / std::max<std::int64_t>(1, r.memory_factor));
    limits[r.cores] = std::to_string(ask.cores);
    auto created = api_.store().Create(PodJson(name, limits));
    EXPECT_TRUE(created) << name;
    created_.push_back(name);
    asks_[name] = ask;
  }

  void DeletePod(const std::string& name) {
    auto deleted = api_.store().Delete(*sim::FindResourceByName("pods"), kNamespace, name);
    EXPECT_TRUE(deleted) << name;
  }

  std::optional<PodView> StoredPod(const std::string& name) const {
    auto o = api_.store().Find("pods", kNamespace, name);
    if (!o) return std::nullopt;
    auto view = k8s::PodFromJson(json::value(*o));
    if (!view) return std::nullopt;
    return *view;
  }

  std::optional<NodeView> StoredNode(const std::string& name) const {
    auto o = api_.store().Find("nodes", "", name);
    if (!o) return std::nullopt;
    auto view = k8s::NodeFromJson(json::value(*o));
    if (!view) return std::nullopt;
    return *view;
  }

  // Bound, and every vendor's plugin has answered: bind-phase success, nothing left to allocate.
  bool BoundAndAllocated(const PodView& pod) const {
    if (pod.node_name.empty() || Annotation(pod, keys::kBindPhase) != keys::kBindPhaseSuccess) return false;
    if (Annotation(pod, keys::kAssignedNode) != pod.node_name) return false;
    for (const auto& b : backends_) {
      auto it = pod.annotations.find(b->Spec().keys.to_allocate);
      if (it != pod.annotations.end() && !codec::NothingLeftToAllocate(it->second)) return false;
    }
    return true;
  }

  // Not bound, and the stand-in's last filter found no node, with a reason for each.
  bool UnschedulableForAReason(const PodView& pod) const {
    if (!pod.node_name.empty() || !stand_in_) return false;
    auto it = stand_in_->outcomes().find(pod.Key());
    return it != stand_in_->outcomes().end() && it->second.state == PodOutcome::State::kUnschedulable &&
           !it->second.failed_nodes.empty() && !it->second.message.empty();
  }

  // A Cambricon pod bound (or being bound) whose plugin has not answered yet.
  bool BetweenBindAndAllocation(const std::string& name) const {
    auto pod = StoredPod(name);
    return pod && asks_.at(name).vendor == "cambricon" && !pod->node_name.empty() &&
           Annotation(*pod, keys::kBindPhase) == keys::kBindPhaseAllocating;
  }

  // Every pod created that still exists is bound and allocated, or unschedulable for a reason. `why` gets the
  // first that is neither.
  bool Settled(std::string* why = nullptr) const {
    for (const auto& name : created_) {
      auto pod = StoredPod(name);
      if (!pod) continue;  // deleted
      if (BoundAndAllocated(*pod) || UnschedulableForAReason(*pod)) continue;
      if (why != nullptr) {
        std::string seen = "no stand-in";
        if (stand_in_) {
          auto it = stand_in_->outcomes().find(pod->Key());
          seen = it == stand_in_->outcomes().end() ? "never seen" : it->second.message;
        }
        *why = fmt::format("pod {}: node '{}', bind-phase '{}', stand-in: {}", name, pod->node_name,
                           Annotation(*pod, keys::kBindPhase), seen);
      }
      return false;
    }
    return true;
  }

  std::vector<std::string> LockedNodes() const {
    std::vector<std::string> out;
    for (const auto& o : api_.store().Objects("nodes")) {
      auto node = k8s::NodeFromJson(json::value(*o));
      if (!node) continue;
      for (const auto& b : backends_) {
        const std::string& key = b->Spec().keys.node_lock;
        if (!key.empty() && node->annotations.contains(key))
          out.push_back(fmt::format("{} {}={}", node->name, key, node->annotations.at(key)));
      }
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }

  // ---- The invariant, from the API server's own state.

  AnnotatedState ReadAnnotatedState() const {
    AnnotatedState s;
    for (const auto& o : api_.store().Objects("nodes")) {
      auto node = k8s::NodeFromJson(json::value(*o));
      if (!node) {
        s.problems.push_back("a node does not decode: " + node.error().message);
        continue;
      }
      for (const auto& b : backends_) {
        auto devices = b->Discover(*node);
        if (!devices) {
          s.problems.push_back(fmt::format("node {}: {}", node->name, devices.error().message));
          continue;
        }
        for (auto& d : *devices) s.cards[node->name][DeviceKey(b->Vendor(), d.id)] = d;
      }
    }
    for (const auto& o : api_.store().Objects("pods")) {
      auto pod = k8s::PodFromJson(json::value(*o));
      if (!pod) {
        s.problems.push_back("a pod does not decode: " + pod.error().message);
        continue;
      }
      const std::string node = Annotation(*pod, keys::kAssignedNode);
      if (node.empty() || pod->Finished()) continue;
      PodDevices devices;
      for (const auto& b : backends_) {
        auto it = pod->annotations.find(b->Spec().keys.allocated);
        if (it == pod->annotations.end()) continue;
        auto decoded = codec::DecodePodDevices(it->second);
        if (!decoded) {
          s.problems.push_back(
              fmt::format("pod {}: {}: {}", pod->Key(), b->Spec().keys.allocated, decoded.error().message));
          continue;
        }
        devices[b->Vendor()] = std::move(*decoded);
      }
      AnnotatedState::Pod& entry = s.pods[pod->uid];
      entry.key = pod->Key();
      entry.node = node;
      entry.charges = codec::CollapseDevices(devices, pod->init_containers.size());
      for (const auto& c : entry.charges) {
        Held& h = s.held[node][DeviceKey(c.vendor, c.uuid)];
        h.slots += c.slots;
        h.memory += c.mem.value();
        h.cores += c.cores.value();
        h.pods.push_back(pod->name);
      }
    }
    return s;
  }

  // Devices holding more tasks, memory or cores than they have (or charges naming no published device).
  std::vector<std::string> Overcommits() const {
    const AnnotatedState s = ReadAnnotatedState();
    std::vector<std::string> out = s.problems;
    for (const auto& [node, devices] : s.held) {
      for (const auto& [key, h] : devices) {
        const auto pods = fmt::format("{}", fmt::join(h.pods, ","));
        auto nit = s.cards.find(node);
        if (nit == s.cards.end() || !nit->second.contains(key)) {
          out.push_back(fmt::format("{} {}: charged by [{}] but not published by the node", node, key, pods));
          continue;
        }
        const DeviceInfo& d = nit->second.at(key);
        if (h.slots > d.count || h.memory > d.devmem.value() || h.cores > d.devcore.value())
          out.push_back(fmt::format("{} {}: {} tasks/{} MiB/{} cores held by [{}], has {}/{}/{}", node, key,
                                    h.slots, h.memory, h.cores, pods, d.count, d.devmem.value(),
                                    d.devcore.value()));
      }
    }
    return out;
  }

  // Checks the invariant now; the first violation fails the test (later ones would repeat it).
  void CheckInvariant(const std::string& when) {
    ++invariant_checks_;
    if (invariant_failed_) return;
    const auto problems = Overcommits();
    if (problems.empty()) return;
    invariant_failed_ = true;
    ADD_FAILURE() << "over-commit " << when << ":\n  " << fmt::format("{}", fmt::join(problems, "\n  "));
  }

  // Where the controller's ledger and the annotations differ (pods, their charges, per-device usage).
  std::vector<std::string> LedgerDisagreements() const {
    const AnnotatedState s = ReadAnnotatedState();
    const ClusterState& state = service_->extender().state();
    std::vector<std::string> out;
    std::map<std::string, std::pair<std::string, std::vector<DeviceCharge>>> ledger;
    state.ForEachPod([&](const PodAllocation& a, const std::vector<DeviceCharge>& charges) {
      ledger[a.uid] = {a.node, charges};
    });
    for (const auto& [uid, pod] : s.pods) {
      auto it = ledger.find(uid);
      if (it == ledger.end()) {
        out.push_back(fmt::format("pod {} (node {}) is annotated but not in the ledger", pod.key, pod.node));
      } else if (it->second.first != pod.node || it->second.second != pod.charges) {
        out.push_back(fmt::format("pod {}: the ledger holds other charges (node {} vs {})", pod.key,
                                  it->second.first, pod.node));
      }
    }
    // Decisions our filter holds for pods not bound (yet; the Binding writes them) count as the ledger says.
    std::map<std::string, std::map<std::string, Held>> reserved;
    for (const auto& [uid, entry] : ledger) {
      if (s.pods.contains(uid) || !service_->extender().Reserved(uid)) continue;
      for (const auto& c : entry.second) {
        Held& h = reserved[entry.first][DeviceKey(c.vendor, c.uuid)];
        h.slots += c.slots;
        h.memory += c.mem.value();
        h.cores += c.cores.value();
      }
    }
    for (const auto& [uid, entry] : ledger) {
      if (!s.pods.contains(uid) && !service_->extender().Reserved(uid))
        out.push_back(
            fmt::format("the ledger holds pod uid {} on node {}, which no live pod's annotations "
                        "claim",
                        uid, entry.first));
    }
    for (const auto& name : state.NodeNames()) {
      const NodeEntry* e = state.FindNode(name);
      for (std::size_t i = 0; i < e->devices.size(); ++i) {
        const DeviceInfo& d = e->devices[i];
        Held h;
        if (auto n = s.held.find(name); n != s.held.end()) {
          if (auto it = n->second.find(DeviceKey(d.vendor, d.id)); it != n->second.end()) h = it->second;
        }
        if (auto n = reserved.find(name); n != reserved.end()) {
          if (auto it = n->second.find(DeviceKey(d.vendor, d.id)); it != n->second.end()) {
            h.slots += it->second.slots;
            h.memory += it->second.memory;
            h.cores += it->second.cores;
          }
        }
        const DeviceUsage& u = e->usage[i];
        if (u.used != h.slots || u.mem.value() != h.memory || u.cores.value() != h.cores)
          out.push_back(fmt::format("{} {}: ledger usage {}/{}/{}, annotations say {}/{}/{}", name, d.id,
                                    u.used, u.mem.value(), u.cores.value(), h.slots, h.memory, h.cores));
      }
    }
    return out;
  }

  // Waits until every pod has settled, checking the invariant all along; then the end-of-run checks.
  asio::awaitable<void> SettleAndVerify(std::chrono::milliseconds budget) {
    const std::function<bool()> settled = [this] {
      CheckInvariant("while settling");
      return Settled();
    };
    const bool done = co_await WaitUntil(settled, budget, 20ms);
    std::string why;
    EXPECT_TRUE(done && Settled(&why)) << "not settled: " << why;
    // The ledger follows the annotations through the watch: give the last events time to arrive.
    const std::function<bool()> agrees = [this] { return LedgerDisagreements().empty(); };
    EXPECT_TRUE(co_await WaitUntil(agrees, 5s))
        << fmt::format("ledger != annotations:\n  {}", fmt::join(LedgerDisagreements(), "\n  "));
    CheckInvariant("at the end");
    const std::function<bool()> unlocked = [this] { return LockedNodes().empty(); };
    EXPECT_TRUE(co_await WaitUntil(unlocked, 5s))
        << fmt::format("locks left behind: {}", fmt::join(LockedNodes(), "; "));
  }

  // With room for all: every pod that does not ask too much by design is placed; the others are refused.
  void ExpectEverySchedulablePodPlaced() const {
    std::size_t placed = 0, refused = 0;
    for (const auto& name : created_) {
      auto pod = StoredPod(name);
      if (!pod) continue;
      if (asks_.at(name).memory_mib == kTooMuchMemory) {
        EXPECT_TRUE(UnschedulableForAReason(*pod)) << name << " asks too much but was not refused";
        ++refused;
      } else {
        std::string seen = "never seen by the stand-in";
        if (auto it = stand_in_->outcomes().find(pod->Key()); it != stand_in_->outcomes().end())
          seen = it->second.message;
        EXPECT_TRUE(BoundAndAllocated(*pod))
            << name << " (" << asks_.at(name).vendor << ") was not placed: " << seen;
        ++placed;
      }
    }
    fmt::print("{} pods placed, {} refused (too big by design)\n", placed, refused);
  }

  struct RunningPlugin {
    std::string node, vendor;
    std::unique_ptr<sim::DevicePlugin> plugin;
    asio::cancellation_signal stop;
    bool ended = false;
  };

  asio::io_context ioc_;
  sim::ApiServer api_{ioc_};
  k8s::RestConfig rest_;
  config::Config cfg_;
  Backends backends_;
  SystemClock clock_;
  std::unique_ptr<k8s::ApiClient> plugin_client_, scheduler_client_;
  std::deque<RunningPlugin> plugins_;
  std::map<std::string, std::size_t> expected_devices_;  // node -> devices its plugins publish
  std::unique_ptr<cmd::SchedulerService> service_;
  std::chrono::milliseconds health_interval_ = 100ms;  // the service's --health-check-interval
  std::unique_ptr<asio::cancellation_signal> stand_in_stop_;
  std::shared_ptr<bool> stand_in_ended_;
  std::unique_ptr<sim::KubeSchedulerStandIn> stand_in_;
  std::vector<std::string> created_;  // every pod name created, in order
  std::map<std::string, Ask> asks_;
  std::size_t invariant_checks_ = 0;
  bool invariant_failed_ = false;
};

// ---------------------------------------------------------------------------------------------------------
// 1. Each backend's full life.

class BackendLifeTest : public SystemTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(BackendLifeTest, RegistersSchedulesAllocatesChargesAndReleases) {
  const std::string vendor = GetParam();
  const std::string node = "node-" + vendor;
  AddNode(node, {{vendor, Cards(vendor, node, 2)}});
  StartAll();
  const Backend& backend = BackendFor(vendor);
  const BackendKeys& keys = backend.Spec().keys;
  Ask ask{vendor, 1, vendor == "mthreads" ? 4096 : 2048, vendor == "mthreads" ? 8 : 30};
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        // Registered and healthy: the devices are in the ledger.
        CO_ASSERT_TRUE(co_await SystemReady());
        const NodeEntry* entry = service_->extender().state().FindNode(node);
        CO_ASSERT_TRUE(entry != nullptr && entry->devices.size() == 2);
        for (const auto& d : entry->devices) EXPECT_EQ(d.vendor, backend.Vendor());

        CreatePod("life", ask);
        const std::string name = "life";
        const std::function<bool()> allocated = [&] {
          auto pod = StoredPod(name);
          return pod && BoundAndAllocated(*pod);
        };
        CO_ASSERT_TRUE(co_await WaitUntil(allocated, 10s));
        const PodView pod = *StoredPod(name);
        EXPECT_EQ(pod.node_name, node);
        EXPECT_EQ(Annotation(pod, keys.to_allocate), ";");
        const std::string devices = Annotation(pod, keys.allocated);
        EXPECT_TRUE(devices.find(backend.Vendor()) != std::string::npos) << devices;
        if (!keys.node_lock.empty()) {
          const std::function<bool()> unlocked = [&] { return LockedNodes().empty(); };
          EXPECT_TRUE(co_await WaitUntil(unlocked, 5s)) << fmt::format("{}", fmt::join(LockedNodes(), "; "));
        }

        // The ledger charges the chosen device with what the pod asked.
        const std::function<bool()> charged = [&] { return LedgerDisagreements().empty(); };
        EXPECT_TRUE(co_await WaitUntil(charged, 5s))
            << fmt::format("{}", fmt::join(LedgerDisagreements(), "\n"));
        entry = service_->extender().state().FindNode(node);
        std::int32_t tasks = 0;
        for (std::size_t i = 0; i < entry->devices.size(); ++i) {
          const DeviceUsage& u = entry->usage[i];
          if (u.used == 0) continue;
          tasks += u.used;
          EXPECT_TRUE(devices.starts_with(entry->devices[i].id + ",")) << devices;
          EXPECT_EQ(u.mem.value(), ask.memory_mib);
          EXPECT_EQ(u.cores.value(), ask.cores);
        }
        EXPECT_EQ(tasks, 1);
        EXPECT_EQ(service_->extender().state().PodCount(), 1u);

        // Deleted: usage back to zero.
        DeletePod(name);
        const std::function<bool()> released = [&] {
          const NodeEntry* e = service_->extender().state().FindNode(node);
          if (e == nullptr || service_->extender().state().PodCount() != 0) return false;
          for (const auto& u : e->usage) {
            if (u.used != 0 || u.mem.value() != 0 || u.cores.value() != 0) return false;
          }
          return true;
        };
        EXPECT_TRUE(co_await WaitUntil(released, 5s));
      }(),
      20s);
}

INSTANTIATE_TEST_SUITE_P(AllVendors, BackendLifeTest,
                         ::testing::Values("nvidia", "cambricon", "mthreads", "hygon"),
                         [](const ::testing::TestParamInfo<std::string>& vendor) { return vendor.param; });

// ---------------------------------------------------------------------------------------------------------
// 2. The invariant under a randomized run.

TEST_F(SystemTest, RandomRunNeverOvercommitsAndLedgerMatchesAnnotations) {
  AddNode("nv-a", {{"nvidia", Cards("nvidia", "nv-a", 2)}});
  AddNode("nv-b", {{"nvidia", Cards("nvidia", "nv-b", 2)}});
  AddNode("dcu-a", {{"hygon", Cards("hygon", "dcu-a", 2)}});
  AddNode("mlu-a", {{"cambricon", Cards("cambricon", "mlu-a", 2)}});
  AddNode("mt-a", {{"mthreads", Cards("mthreads", "mt-a", 2)}});
  AddNode("mix-a", {{"nvidia", Cards("nvidia", "mix-a", 1)}, {"hygon", Cards("hygon", "mix-a", 1)}});
  AddNode("mix-b",
          {{"cambricon", Cards("cambricon", "mix-b", 1)}, {"mthreads", Cards("mthreads", "mix-b", 1)}});
  StartAll();
  std::mt19937 rng(20240611);
  const std::vector<std::string> vendors = {"nvidia", "cambricon", "mthreads", "hygon"};
  constexpr int kPods = 240;
  constexpr std::size_t kMostLive = 45;  // about the cluster's capacity: some wait for deletions
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        CO_ASSERT_TRUE(co_await SystemReady());
        std::vector<std::string> live;
        const auto delete_one = [&] {
          std::size_t i = std::uniform_int_distribution<std::size_t>(0, live.size() - 1)(rng);
          // Not a Cambricon pod between its binding and its allocation: its owner-less lock would stay behind
          // for two minutes (LockOfADeletedPodDoesNotBlockTheNode/cambricon shows it).
          for (std::size_t tries = 0; tries < live.size() && BetweenBindAndAllocation(live[i]); ++tries)
            i = (i + 1) % live.size();
          if (BetweenBindAndAllocation(live[i])) return;
          const std::string name = live[i];
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
          DeletePod(name);
          CheckInvariant("after deleting " + name);
        };
        for (int step = 0; step < kPods; ++step) {
          const std::string name = fmt::format("r{:03}", step);
          const std::string& vendor = vendors[std::uniform_int_distribution<std::size_t>(0, 3)(rng)];
          CreatePod(name, RandomAsk(rng, vendor, 15, false));
          live.push_back(name);
          CheckInvariant("after creating " + name);
          if (std::uniform_int_distribution<int>(0, 99)(rng) < 40 || live.size() > kMostLive) delete_one();
          co_await Pause(4ms);  // pacing: the system schedules while pods keep coming
          CheckInvariant(fmt::format("while scheduling (step {})", step));
        }
        co_await SettleAndVerify(25s);
        std::size_t placed = 0, unschedulable = 0;
        for (const auto& name : live) {
          auto pod = StoredPod(name);
          if (pod && BoundAndAllocated(*pod)) ++placed;
          if (pod && UnschedulableForAReason(*pod)) ++unschedulable;
        }
        EXPECT_GT(placed, 20u);
        EXPECT_GT(unschedulable, 0u);  // some asked too much by design
        fmt::print(
            "random run: {} pods created, {} live at the end: {} placed, {} unschedulable; {} checks\n",
            kPods, live.size(), placed, unschedulable, invariant_checks_);
      }(),
      60s);
}

// ---------------------------------------------------------------------------------------------------------
// 3. A restart in the middle of a run.

// The cluster has room for every pod that does not ask too much by design (small asks: NVIDIA, Hygon and
// Cambricon 40 tasks each, Moore Threads 32 by cores).
TEST_F(SystemTest, RestartMidRunKeepsDevicesConsistentAndPlacesEveryPod) {
  AddNode("nv-a", {{"nvidia", Cards("nvidia", "nv-a", 4, 10)}});
  AddNode("dcu-a", {{"hygon", Cards("hygon", "dcu-a", 4, 10)}});
  AddNode("mlu-a", {{"cambricon", Cards("cambricon", "mlu-a", 4)}});
  AddNode("mt-a", {{"mthreads", Cards("mthreads", "mt-a", 2)}});
  StartAll();
  std::mt19937 rng(7);
  const std::vector<std::string> vendors = {"nvidia", "cambricon", "mthreads", "hygon"};
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        CO_ASSERT_TRUE(co_await SystemReady());
        for (int step = 0; step < 70; ++step) {
          const std::string name = fmt::format("s{:02}", step);
          CreatePod(name,
                    RandomAsk(rng, vendors[std::uniform_int_distribution<std::size_t>(0, 3)(rng)], 12, true));
          CheckInvariant("after creating " + name);
          if (step == 25 || step == 50) {
            std::size_t in_flight = 0;
            for (const auto& n : created_) {
              auto pod = StoredPod(n);
              in_flight += pod && !BoundAndAllocated(*pod) && !UnschedulableForAReason(*pod);
            }
            fmt::print("restart at step {}: {} pods not settled yet\n", step, in_flight);
            co_await RestartService();
            CheckInvariant(fmt::format("after the restart at step {}", step));
          }
          co_await Pause(5ms);
          CheckInvariant(fmt::format("while scheduling (step {})", step));
        }
        co_await SettleAndVerify(25s);
        ExpectEverySchedulablePodPlaced();
      }(),
      60s);
}

// ---------------------------------------------------------------------------------------------------------
// 4. API faults during a run.

// Room for all again (NVIDIA 50 tasks, Hygon 30, Cambricon 40).
TEST_F(SystemTest, FaultsDuringARunEndConsistentWithNoLockLeft) {
  AddNode("nv-a", {{"nvidia", Cards("nvidia", "nv-a", 2, 10)}});
  AddNode("nv-b", {{"nvidia", Cards("nvidia", "nv-b", 2, 10)}});
  AddNode("dcu-a", {{"hygon", Cards("hygon", "dcu-a", 2, 10)}});
  AddNode("mlu-a", {{"cambricon", Cards("cambricon", "mlu-a", 4)}});
  AddNode("mix-a", {{"nvidia", Cards("nvidia", "mix-a", 1, 10)}, {"hygon", Cards("hygon", "mix-a", 1, 10)}});
  const std::string all_paths;
  api_.SetLatency(20ms, all_paths);
  StartAll();
  std::mt19937 rng(11);
  const std::vector<std::string> vendors = {"nvidia", "cambricon", "hygon"};
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        CO_ASSERT_TRUE(co_await SystemReady());
        sim::FaultRule lock_conflict;  // node lock patches (and anything else patching a node) answer 409
        lock_conflict.status = 409;
        lock_conflict.method = "PATCH";
        lock_conflict.path_prefix = "/api/v1/nodes";
        sim::FaultRule pod_patch_error;  // pod patches answer 500 (the client retries)
        pod_patch_error.status = 500;
        pod_patch_error.method = "PATCH";
        pod_patch_error.path_prefix = "/api/v1/namespaces/default/pods";
        for (int step = 0; step < 48; ++step) {
          const std::string name = fmt::format("f{:02}", step);
          CreatePod(name,
                    RandomAsk(rng, vendors[std::uniform_int_distribution<std::size_t>(0, 2)(rng)], 12, true));
          CheckInvariant("after creating " + name);
          if (step % 5 == 0) api_.DropWatches();
          if (step % 7 == 3) api_.ExpireNextWatches(1);
          if (step % 6 == 1) api_.FailNext(lock_conflict);
          if (step % 4 == 2) api_.FailNext(pod_patch_error);
          co_await Pause(10ms);
          CheckInvariant(fmt::format("while scheduling (step {})", step));
        }
        co_await SettleAndVerify(30s);
        ExpectEverySchedulablePodPlaced();
      }(),
      60s);
}

// ---------------------------------------------------------------------------------------------------------
// 5. Forty pods to one node.

TEST_F(SystemTest, FortyPodsToOneNodeAreBoundAndAllocatedWellUnderTenSeconds) {
  // Device plugins answering within 100 ms: each allocation takes 50 ms.
  AddNode("big", {{"nvidia", Cards("nvidia", "big", 4, 10)}}, 50ms);
  StartAll();
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        CO_ASSERT_TRUE(co_await SystemReady());
        const auto start = SteadyClock::now();
        for (int i = 0; i < 40; ++i) CreatePod(fmt::format("p{:02}", i), Ask{"nvidia", 1, 1000, 5});
        const std::function<bool()> all_done = [this] {
          for (const auto& name : created_) {
            auto pod = StoredPod(name);
            if (!pod || !BoundAndAllocated(*pod)) return false;
          }
          return true;
        };
        const bool done = co_await WaitUntil(all_done, 15s);
        const double seconds = std::chrono::duration<double>(SteadyClock::now() - start).count();
        std::string why;
        EXPECT_TRUE(done && Settled(&why)) << why;
        EXPECT_LT(seconds, 8.0);
        fmt::print("40 pods to one node: all bound and allocated in {:.2f} s (lock waits {})\n", seconds,
                   service_->extender().stats().lock_waits);
        CheckInvariant("at the end");
      }(),
      20s);
}

// Bursts under binpack (docs/DECISIONS.md): a burst under binpack (the default) with slow device plugins
// fills the nodes binpack fills and leaves the others empty; several of them take pods at once.
TEST_F(SystemTest, ABurstUnderBinpackLeavesAsManyNodesEmptyAsStrictBinpack) {
  // Six nodes of two cards; three pods of 30 cores per card: binpack puts 18 pods on three nodes.
  for (int n = 0; n < 6; ++n) {
    const std::string node = fmt::format("node-{}", n);
    AddNode(node, {{"nvidia", Cards("nvidia", node, 2, 10)}}, 100ms);
  }
  StartAll();
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        CO_ASSERT_TRUE(co_await SystemReady());
        for (int i = 0; i < 18; ++i) CreatePod(fmt::format("p{:02}", i), Ask{"nvidia", 1, 3000, 30});
        const std::function<bool()> all_done = [this] {
          for (const auto& name : created_) {
            auto pod = StoredPod(name);
            if (!pod || !BoundAndAllocated(*pod)) return false;
          }
          return true;
        };
        const bool done = co_await WaitUntil(all_done, 20s);
        std::string why;
        EXPECT_TRUE(done && Settled(&why)) << why;
        std::map<std::string, int> per_node;
        for (const auto& name : created_) {
          if (auto pod = StoredPod(name)) ++per_node[pod->node_name];
        }
        EXPECT_EQ(per_node.size(), 3u) << fmt::format("{}", per_node);
        for (const auto& [node, pods] : per_node) EXPECT_EQ(pods, 6) << node;
        CheckInvariant("at the end");
      }(),
      30s);
}

// ---------------------------------------------------------------------------------------------------------
// 6. Health: a device plugin that goes silent.

TEST_F(SystemTest, SilentHygonPluginLosesItsDevicesAndGetsThemBack) {
  cfg_.extender.handshake_timeout = 1s;
  AddNode("dcu-h", {{"hygon", Cards("hygon", "dcu-h", 2)}});
  StartAll();
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        CO_ASSERT_TRUE(co_await SystemReady());
        const std::string node = "dcu-h";
        const auto device_count = [this, node] {
          const NodeEntry* e = service_->extender().state().FindNode(node);
          return e == nullptr ? std::size_t{0} : e->devices.size();
        };
        PluginOf(node, "hygon").SetMode(PluginMode::kSilent);
        const std::function<bool()> withheld = [&] { return device_count() == 0; };
        CO_ASSERT_TRUE(co_await WaitUntil(withheld, 8s));

        // Not placed there while the plugin is silent.
        CreatePod("while-silent", Ask{"hygon", 1, 2000, 30});
        const std::string name = "while-silent";
        const std::function<bool()> refused = [&] {
          auto pod = StoredPod(name);
          return pod && UnschedulableForAReason(*pod);
        };
        CO_ASSERT_TRUE(co_await WaitUntil(refused, 5s));
        EXPECT_TRUE(StoredPod(name)->node_name.empty());
        EXPECT_TRUE(stand_in_->outcomes().at("default/while-silent").failed_nodes.contains(node));

        // Back: the devices return, and the waiting pod lands there.
        PluginOf(node, "hygon").SetMode(PluginMode::kNormal);
        const std::function<bool()> back = [&] { return device_count() == 2; };
        CO_ASSERT_TRUE(co_await WaitUntil(back, 8s));
        const std::function<bool()> placed = [&] {
          auto pod = StoredPod(name);
          return pod && BoundAndAllocated(*pod);
        };
        EXPECT_TRUE(co_await WaitUntil(placed, 8s));
        EXPECT_EQ(StoredPod(name)->node_name, node);
      }(),
      30s);
}

// ---------------------------------------------------------------------------------------------------------
// 7. A failed allocation.

TEST_F(SystemTest, FailedAllocationMarksThePodFailedAndReleasesTheLock) {
  AddNode("nv-f", {{"nvidia", Cards("nvidia", "nv-f", 2)}});
  StartAll();
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        CO_ASSERT_TRUE(co_await SystemReady());
        PluginOf("nv-f", "nvidia").SetMode(PluginMode::kFailAllocation);
        // Two in turn: the second could not bind if the first had left its lock behind.
        for (const char* p : {"fail-1", "fail-2"}) {
          const std::string name = p;
          CreatePod(name, Ask{"nvidia", 1, 2000, 20});
          const std::function<bool()> failed = [&] {
            auto pod = StoredPod(name);
            return pod && pod->node_name == "nv-f" &&
                   Annotation(*pod, keys::kBindPhase) == keys::kBindPhaseFailed;
          };
          EXPECT_TRUE(co_await WaitUntil(failed, 10s)) << name;
          const std::function<bool()> unlocked = [this] { return LockedNodes().empty(); };
          EXPECT_TRUE(co_await WaitUntil(unlocked, 5s)) << fmt::format("{}", fmt::join(LockedNodes(), "; "));
        }
        EXPECT_EQ(PluginOf("nv-f", "nvidia").stats().failed, 2u);
        EXPECT_EQ(PluginOf("nv-f", "nvidia").stats().allocated, 0u);
      }(),
      30s);
}

// ---------------------------------------------------------------------------------------------------------
// Kill() means stopped: nothing the killed service started may keep talking to the API server.

TEST_F(SystemTest, KilledServiceMakesNoMoreApiCalls) {
  AddNode("nv-k", {{"nvidia", Cards("nvidia", "nv-k", 1)}});
  StartAll();
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        CO_ASSERT_TRUE(co_await SystemReady());
        // Slow event writes keep the controller's event queue busy when the kill comes.
        const std::string events_path = "/api/v1/namespaces/default/events";
        api_.SetLatency(300ms, events_path);
        for (int i = 0; i < 3; ++i)
          CreatePod(fmt::format("too-big-{}", i), Ask{"nvidia", 1, kTooMuchMemory, 10});
        const std::function<bool()> queued = [this] { return service_->extender().events().queued() >= 1; };
        CO_ASSERT_TRUE(co_await WaitUntil(queued, 5s));
        co_await KillService();
        const std::size_t sent = service_->client().requests_sent();
        const std::function<bool()> more = [&] { return service_->client().requests_sent() > sent; };
        EXPECT_FALSE(co_await WaitUntil(more, 1500ms))
            << "the killed service (stopped() == true) sent " << service_->client().requests_sent() - sent
            << " more API requests: the event sender outlives Kill()";
        api_.SetLatency(0ms, events_path);
      }(),
      20s);
}

// ---------------------------------------------------------------------------------------------------------
// A lock whose pod was deleted between its binding and its allocation (the plugin never answers a deleted
// pod) must not block the node: an owner-aware lock names a pod that no longer exists and is taken over.
// Cambricon's lock is a bare timestamp that names no holder: the scheduler remembers which pod it took it for
// and releases it when that pod goes away before its allocation.

class LeftoverLockTest : public SystemTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(LeftoverLockTest, LockOfADeletedPodDoesNotBlockTheNode) {
  const std::string vendor = GetParam();
  const std::string node = "node-" + vendor;
  cfg_.extender.bind.node_lock_retry_timeout = 2s;
  AddNode(node, {{vendor, Cards(vendor, node, 2)}});
  StartAll();
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        CO_ASSERT_TRUE(co_await SystemReady());
        sim::DevicePlugin& plugin = PluginOf(node, vendor);
        plugin.SetMode(PluginMode::kNeverAnswer);
        const std::string first = "bound-then-deleted";
        CreatePod(first, Ask{vendor, 1, 1024, 10});
        const std::function<bool()> bound_and_locked = [&] {
          auto pod = StoredPod(first);
          return pod && pod->node_name == node && !LockedNodes().empty();
        };
        CO_ASSERT_TRUE(co_await WaitUntil(bound_and_locked, 5s));
        DeletePod(first);
        plugin.SetMode(PluginMode::kNormal);

        const std::string second = "next";
        CreatePod(second, Ask{vendor, 1, 1024, 10});
        const std::function<bool()> placed = [&] {
          auto pod = StoredPod(second);
          return pod && BoundAndAllocated(*pod);
        };
        EXPECT_TRUE(co_await WaitUntil(placed, 8s))
            << "the next pod could not bind: " << fmt::format("{}", fmt::join(LockedNodes(), "; "));
      }(),
      20s);
}

INSTANTIATE_TEST_SUITE_P(LockKinds, LeftoverLockTest, ::testing::Values("nvidia", "cambricon"),
                         [](const ::testing::TestParamInfo<std::string>& vendor) { return vendor.param; });

// Kill() is "an abrupt stop, as a killed process": a /bind waiting for a busy node lock ends at once instead
// of keeping the service alive until node-lock-retry-timeout.
TEST_F(SystemTest, KillEndsABindWaitingForALock) {
  cfg_.extender.bind.node_lock_retry_timeout = 4s;  // long enough to tell, short enough for the teardown
  AddNode("nv-w", {{"nvidia", Cards("nvidia", "nv-w", 2)}});
  StartAll();
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        CO_ASSERT_TRUE(co_await SystemReady());
        PluginOf("nv-w", "nvidia").SetMode(PluginMode::kNeverAnswer);  // the first pod keeps the lock
        CreatePod("holder", Ask{"nvidia", 1, 1024, 10});
        CreatePod("waiter", Ask{"nvidia", 1, 1024, 10});
        const std::function<bool()> waiting = [this] { return service_->extender().stats().lock_waits >= 1; };
        CO_ASSERT_TRUE(co_await WaitUntil(waiting, 5s));
        service_->Kill();
        const std::function<bool()> stopped = [this] { return service_->stopped(); };
        EXPECT_TRUE(co_await WaitUntil(stopped, 1s)) << "a bind waiting for a node lock outlives Kill()";
        const std::function<bool()> eventually = [this] { return service_->stopped(); };
        EXPECT_TRUE(co_await WaitUntil(eventually, 6s));
      }(),
      20s);
}

// ---------------------------------------------------------------------------------------------------------
// charts/hami-scheduler/files/hami-scheduler.json (also deploy/grafana/): valid JSON with panels, and every
// metric its queries name is one a running scheduler exports (read from its own /metrics, with devices, a pod
// holding some and a quota).

// The hami_* series names in a PromQL expression.
std::set<std::string> MetricNames(std::string_view expr) {
  std::set<std::string> out;
  for (std::size_t i = expr.find("hami_"); i != std::string_view::npos; i = expr.find("hami_", i)) {
    std::size_t end = i;
    while (end < expr.size() && (std::isalnum(static_cast<unsigned char>(expr[end])) || expr[end] == '_'))
      ++end;
    out.emplace(expr.substr(i, end - i));
    i = end;
  }
  return out;
}

// The family a series name belongs to, given the exported families and their types: itself, or for a
// histogram's _bucket/_sum/_count series the histogram; "" when none.
std::string FamilyOf(const std::string& series, const std::map<std::string, std::string>& types) {
  if (types.contains(series)) return series;
  for (std::string_view suffix : {"_bucket", "_sum", "_count"}) {
    if (!series.ends_with(suffix)) continue;
    const std::string base = series.substr(0, series.size() - suffix.size());
    auto it = types.find(base);
    if (it != types.end() && it->second == "histogram") return base;
  }
  return "";
}

void CollectExprs(const json::value& v, std::vector<std::string>& out) {
  if (v.is_object()) {
    for (const auto& kv : v.get_object()) {
      if ((kv.key() == "expr" || kv.key() == "definition") && kv.value().is_string()) {
        out.emplace_back(kv.value().get_string());
      } else {
        CollectExprs(kv.value(), out);
      }
    }
  } else if (v.is_array()) {
    for (const auto& e : v.get_array()) CollectExprs(e, out);
  }
}

TEST_F(SystemTest, TheGrafanaDashboardQueriesOnlyMetricsWeExport) {
  std::ifstream file(std::string(HAMI_SOURCE_DIR) + "/charts/hami-scheduler/files/hami-scheduler.json");
  ASSERT_TRUE(file);
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  boost::system::error_code ec;
  const json::value dashboard = json::parse(text, ec);
  ASSERT_FALSE(ec) << ec.message();
  ASSERT_GE(dashboard.at("panels").as_array().size(), 10u);
  std::vector<std::string> exprs;
  CollectExprs(dashboard, exprs);
  ASSERT_GE(exprs.size(), 20u);

  AddNode("nv-a", {{"nvidia", Cards("nvidia", "nv-a", 2)}});
  const json::value quota = {{"apiVersion", "v1"},
                             {"kind", "ResourceQuota"},
                             {"metadata", {{"name", "gpu"}, {"namespace", std::string(kNamespace)}}},
                             {"spec", {{"hard", {{"limits.nvidia.com/gpumem", "100000"}}}}}};
  ASSERT_TRUE(api_.store().Create(quota));
  StartAll();
  std::string metrics;
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        CO_ASSERT_TRUE(co_await SystemReady());
        CreatePod("charged", Ask{"nvidia", 1, 2048, 30});
        const std::function<bool()> allocated = [&] {
          auto pod = StoredPod("charged");
          return pod && BoundAndAllocated(*pod);
        };
        CO_ASSERT_TRUE(co_await WaitUntil(allocated, 10s));
        auto client =
            k8s::HttpClient::Create(ioc_.get_executor(), k8s::LoopbackHttp(service_->port())).value();
        const k8s::HttpRequest get{boost::beast::http::verb::get, "/metrics", "", "", "", ""};
        auto r = co_await client->Send(get, 10s);
        CO_ASSERT_TRUE(r);
        metrics = r->body;
      }(),
      30s);
  std::map<std::string, std::string> types;  // family -> type, from the "# TYPE name type" lines
  std::istringstream lines(metrics);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("# TYPE ")) continue;
    const std::size_t space = line.find(' ', 7);
    types[line.substr(7, space - 7)] = line.substr(space + 1);
  }
  ASSERT_GE(types.size(), 30u) << metrics.substr(0, 500);
  std::set<std::string> queried;
  for (const auto& e : exprs) {
    for (const auto& name : MetricNames(e)) {
      const std::string family = FamilyOf(name, types);
      EXPECT_FALSE(family.empty()) << name << " in: " << e;
      queried.insert(family);
    }
  }
  // The latency histograms HAMi has none of are on the dashboard.
  for (const char* h : {"hami_scheduler_filter_duration_seconds", "hami_scheduler_bind_duration_seconds",
                        "hami_scheduler_admission_duration_seconds"}) {
    EXPECT_TRUE(queried.contains(h)) << h;
  }
}

// ---------------------------------------------------------------------------------------------------------
// Hostile requests and annotations, replayed over loopback HTTP; the API server's state afterwards
// shows that nothing but the named object was touched, and the process goes on.

class HostileInputTest : public SystemTest {
 protected:
  // POSTs `body` to the extender as kube-scheduler would; the answer's body.
  asio::awaitable<std::string> Post(const std::string& path, const std::string& body,
                                    const std::string& content_type = "application/json") {
    if (!extender_)
      extender_ = k8s::HttpClient::Create(ioc_.get_executor(), k8s::LoopbackHttp(service_->port())).value();
    k8s::HttpRequest request{boost::beast::http::verb::post, path, body, content_type, "", ""};
    auto r = co_await extender_->Send(request, 10s);
    EXPECT_TRUE(r) << path << ": " << (r ? "" : r.error().message);
    co_return r ? r->body : std::string();
  }
  static std::string ErrorOf(const std::string& answer) {
    boost::system::error_code ec;
    const json::value v = json::parse(answer, ec);
    if (ec || !v.is_object() || !v.as_object().contains("Error"))
      return "<not an extender answer: " + answer + ">";
    return std::string(v.at("Error").as_string());
  }
  static json::value FilterArgs(const std::string& pod_name, const std::string& ns,
                                const std::vector<std::string>& nodes) {
    json::value pod = PodJson(pod_name, {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "1000"}});
    pod.as_object()["metadata"].as_object()["namespace"] = ns;
    json::array names;
    for (const auto& n : nodes) names.emplace_back(n);
    return json::object{{"Pod", pod}, {"NodeNames", names}};
  }
  std::vector<std::string> NodeNamesInStore() const {
    std::vector<std::string> out;
    for (const auto& o : api_.store().Objects("nodes"))
      out.emplace_back(o->at("metadata").at("name").as_string());
    std::sort(out.begin(), out.end());
    return out;
  }
  std::unique_ptr<k8s::HttpClient> extender_;
};

TEST_F(HostileInputTest, NamesFromRequestsAndLocksNeverReachAnotherObject) {
  cfg_.extender.bind.node_lock_retry_timeout = 300ms;
  AddNode("nv-a", {{"nvidia", Cards("nvidia", "nv-a", 2)}});
  AddNode("nv-b", {{"nvidia", Cards("nvidia", "nv-b", 2)}});
  StartService();
  const std::string split =
      " HTTP/1.1\r\nHost: x\r\n\r\nDELETE /api/v1/nodes/nv-b HTTP/1.1\r\nHost: x\r\n\r\n";
  // /filter: traversal, query injection and request splitting in the pod's name and namespace, and in a
  // candidate node name.
  std::vector<std::string> hostile_filters;
  for (const auto& args :
       {FilterArgs("../../../nodes/nv-b", "default", {"nv-a"}),
        FilterArgs("victim?dryRun=All", "default", {"nv-a"}), FilterArgs("p" + split, "default", {"nv-a"}),
        FilterArgs("p", "default/pods/victim/../../..", {"nv-a"}),
        FilterArgs("p", "default", {"nv-a", "nv-b" + split})})
    hostile_filters.push_back(json::serialize(args));
  const std::vector<std::string> hostile_binds = {
      R"({"PodName":"../../../nodes/nv-b","PodNamespace":"default","Node":"nv-a"})",
      R"({"PodName":"victim","PodNamespace":"default","Node":"nv-b/../../namespaces/default/pods/victim"})",
      json::serialize(json::object{{"PodName", "victim" + split}, {"Node", "nv-a"}})};
  CreatePod("victim", Ask{"nvidia", 1, 1000, 0});
  // kube-scheduler sends the pod as it is stored, uid included.
  json::value victim_args = FilterArgs("victim", "default", {"nv-a"});
  victim_args.at("Pod").at("metadata").as_object()["uid"] = StoredPod("victim")->uid;
  const std::string victim_to_a = json::serialize(victim_args);
  victim_args.at("NodeNames") = json::array{"nv-b"};
  const std::string victim_to_b = json::serialize(victim_args);
  const std::string bind_victim = json::serialize(json::object{{"PodName", "victim"},
                                                               {"PodNamespace", "default"},
                                                               {"PodUID", StoredPod("victim")->uid},
                                                               {"Node", "nv-a"}});
  // A lock whose owner is a request line, not a pod.
  const std::string lock_key = BackendFor("nvidia").Spec().keys.node_lock;
  const std::string forged = codec::FormatRfc3339(clock_.Now()) + ",default,x" + split;
  const json::value lock_patch = {{"metadata", {{"annotations", {{lock_key, forged}}}}}};
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        CO_ASSERT_TRUE(co_await SystemReady());
        const std::vector<std::string> nodes_before = NodeNamesInStore();
        // (The bodies are built outside the coroutine: GCC 12 cannot keep an initializer_list in its frame.)
        for (const std::string& body : hostile_filters) {
          const std::string error = ErrorOf(co_await Post("/filter", body));
          EXPECT_NE(error.find("is not a valid"), std::string::npos) << error;
        }
        // /bind: the same in every name it carries.
        for (const std::string& body : hostile_binds) {
          const std::string error = ErrorOf(co_await Post("/bind", body));
          EXPECT_NE(error.find("is not a valid"), std::string::npos) << error;
        }
        // The forged lock is a malformed lock (docs/DECISIONS.md, D8), never a name to look up.
        CO_ASSERT_TRUE(api_.store().Patch(*sim::FindResourceByName("nodes"), "", "nv-a",
                                          sim::PatchType::kMerge, lock_patch));
        const std::string filtered = co_await Post("/filter", victim_to_a);
        EXPECT_EQ(ErrorOf(filtered), "");
        const std::string bound = ErrorOf(co_await Post("/bind", bind_victim));
        EXPECT_NE(bound.find("unreadable lock"), std::string::npos) << bound;

        // Nothing else was touched: both nodes and the victim are there, the forged lock is as written.
        EXPECT_EQ(NodeNamesInStore(), nodes_before);
        EXPECT_TRUE(StoredPod("victim"));
        EXPECT_EQ(StoredNode("nv-a")->annotations.at(lock_key), forged);
        EXPECT_EQ(service_->extender().stats().binds, 4u);
        // The service still answers, and its API connections stayed in step.
        EXPECT_EQ(ErrorOf(co_await Post("/filter", victim_to_b)), "");
      }(),
      30s);
}

// A request names a pod but never speaks for another (docs/DECISIONS.md, "Identity"): a bind naming a missing
// pod or another pod with a running pod's uid, a filter of a made-up pod carrying that uid, and a filter of
// the running pod itself all leave its devices charged, so a second whole-card pod finds no room.
TEST_F(HostileInputTest, NoRequestFreesTheDevicesOfAPodItDoesNotName) {
  AddNode("nv-a", {{"nvidia", Cards("nvidia", "nv-a", 1, 2)}});
  StartService();
  CreatePod("real", Ask{"nvidia", 1, 16000, 0});
  CreatePod("next", Ask{"nvidia", 1, 16000, 0});
  const std::string uid = StoredPod("real")->uid;
  const auto filter_of = [&](const std::string& stored, const std::string& name) {
    json::value pod(*api_.store().Find("pods", kNamespace, stored));
    pod.at("metadata").as_object()["name"] = name;
    return json::serialize(json::object{{"Pod", pod}, {"NodeNames", json::array{"nv-a"}}});
  };
  const auto bind_of = [&](const std::string& name, const std::string& pod_uid) {
    return json::serialize(json::object{
        {"PodName", name}, {"PodNamespace", kNamespace}, {"PodUID", pod_uid}, {"Node", "nv-a"}});
  };
  const std::string filter_real = filter_of("real", "real"), filter_fake = filter_of("real", "fake"),
                    filter_next = filter_of("next", "next");
  const std::string bind_real = bind_of("real", uid), bind_ghost = bind_of("ghost", uid),
                    bind_as_next = bind_of("next", uid);
  const std::function<bool()> allocated = [&] {
    auto p = StoredPod("real");
    return p && Annotation(*p, keys::kBindPhase) == keys::kBindPhaseSuccess;
  };
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        CO_ASSERT_TRUE(co_await SystemReady());
        EXPECT_EQ(ErrorOf(co_await Post("/filter", filter_real)), "");
        EXPECT_EQ(ErrorOf(co_await Post("/bind", bind_real)), "");
        CO_ASSERT_TRUE(co_await WaitUntil(allocated, 10s));
        EXPECT_THAT(ErrorOf(co_await Post("/bind", bind_ghost)), HasSubstr("not found"));
        EXPECT_THAT(ErrorOf(co_await Post("/bind", bind_as_next)), HasSubstr("was re-created"));
        EXPECT_THAT(ErrorOf(co_await Post("/filter", filter_fake)),
                    HasSubstr("pod default/fake does not exist"));
        const json::value again = json::parse(co_await Post("/filter", filter_real));
        EXPECT_EQ(again.at("NodeNames"), json::array{"nv-a"});
        const json::value next = json::parse(co_await Post("/filter", filter_next));
        EXPECT_EQ(next.at("NodeNames"), json::array{});
        EXPECT_TRUE(next.at("FailedNodes").as_object().contains("nv-a")) << next;
        const PodAllocation* held = service_->extender().state().FindPod(uid);
        CO_ASSERT_TRUE(held != nullptr);
        EXPECT_EQ(held->name, "real");
      }(),
      30s);
}

// /webhook on the extender's listener: a review answers in its own version; what cannot be a review is
// refused with the reason; a pod named with CR/LF is answered like any other (its value refused).
TEST_F(HostileInputTest, TheWebhookAnswersEveryReviewAndRefusesWhatIsNotOne) {
  AddNode("nv-a", {{"nvidia", Cards("nvidia", "nv-a", 2)}});
  StartService();
  const auto review = [](const std::string& name, const json::value& limits) {
    const json::value pod = {
        {"metadata", {{"name", name}}},
        {"spec",
         {{"containers", json::array{json::object{{"name", "app"}, {"resources", {{"limits", limits}}}}}}}}};
    const json::value r = {{"apiVersion", "admission.k8s.io/v1beta1"},
                           {"kind", "AdmissionReview"},
                           {"request",
                            {{"uid", "u-" + name.substr(0, 3)},
                             {"kind", {{"kind", "Pod"}}},
                             {"namespace", "default"},
                             {"operation", "CREATE"},
                             {"object", pod}}}};
    return json::serialize(r);
  };
  const std::string memory_only = review("train", {{"nvidia.com/gpumem", "2000"}});
  const std::string hostile = review("p\r\nINFO forged line", {{"nvidia.com/gpumem", "16Gi"}});
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        CO_ASSERT_TRUE(co_await SystemReady());
        const json::value patched = json::parse(co_await Post("/webhook", memory_only));
        EXPECT_EQ(patched.at("apiVersion"), "admission.k8s.io/v1beta1");
        EXPECT_EQ(patched.at("response").at("uid"), "u-tra");
        EXPECT_EQ(patched.at("response").at("allowed"), true);
        EXPECT_EQ(patched.at("response").at("patchType"), "JSONPatch");
        const json::value denied = json::parse(co_await Post("/webhook", hostile));
        EXPECT_EQ(denied.at("response").at("allowed"), false);
        EXPECT_EQ(denied.at("response").at("status").at("code"), 400);
        const json::value wrong_type = json::parse(co_await Post("/webhook", memory_only, "text/plain"));
        EXPECT_EQ(wrong_type.at("response").at("allowed"), false);
        EXPECT_EQ(wrong_type.at("response").at("status").at("message"),
                  "Content-Type \"text/plain\" is not application/json");
        const json::value not_json = json::parse(co_await Post("/webhook", "{"));
        EXPECT_EQ(not_json.at("response").at("status").at("code"), 400);
        const auto& s = service_->extender().admission().stats();
        EXPECT_EQ(s.patched, 1u);
        EXPECT_EQ(s.denied, 1u);
        EXPECT_EQ(s.invalid, 2u);
      }(),
      30s);
}

// The vendor rules HAMi v2.10's own webhook applies, through /webhook (docs/DECISIONS.md "AWS Neuron" and
// "Ascend"): a Neuron count of 0 is refused before the privileged container is; a super-pod 910C request
// of one NPU, a vNPU too, asks for the module pair in limits and requests; with overwriteEnv a container
// without NPUs sees none, whatever it set, and a native sidecar holding NPUs keeps them.
TEST_F(HostileInputTest, TheWebhookAppliesHamisVendorRules) {
  VendorSettings vnpus;
  vnpus.Set("overwriteEnv", true);
  backends_ = testing::BuiltinBackends({{"vnpus", vnpus}});
  StartService();
  const auto review = [](const std::string& name, json::value spec) {
    const json::value pod = {{"metadata", {{"name", name}, {"namespace", "default"}}},
                             {"spec", std::move(spec)}};
    return json::serialize(json::value{{"apiVersion", "admission.k8s.io/v1"},
                                       {"kind", "AdmissionReview"},
                                       {"request",
                                        {{"uid", "u-" + name},
                                         {"kind", {{"kind", "Pod"}}},
                                         {"namespace", "default"},
                                         {"operation", "CREATE"},
                                         {"object", pod}}}});
  };
  const auto container = [](const std::string& name, json::object resources, json::array env = {}) {
    json::object c{{"name", name}, {"image", "busybox"}, {"resources", std::move(resources)}};
    if (!env.empty()) c["env"] = std::move(env);
    return c;
  };
  // The pod as the answer's patch leaves it.
  const auto patched = [&](const std::string& body, const std::string& name, json::value spec) {
    const json::value answer = json::parse(body);
    json::value pod = {{"metadata", {{"name", name}, {"namespace", "default"}}},
                       {"spec", std::move(spec)}};
    const json::object& response = answer.at("response").as_object();
    EXPECT_EQ(response.at("allowed"), true) << body;
    if (const json::value* patch = response.if_contains("patch")) {
      const json::value ops = json::parse(Base64Decode(patch->as_string()).value());
      EXPECT_TRUE(k8s::ApplyJsonPatch(pod, ops)) << ops;
    }
    return pod;
  };
  const auto env_of = [](const json::value& c) {
    std::vector<std::string> out;
    if (const json::value* env = c.as_object().if_contains("env")) {
      for (const json::value& e : env->as_array()) {
        const json::value* value = e.as_object().if_contains("value");
        out.push_back(fmt::format("{}={}", e.at("name").as_string().c_str(),
                                  value == nullptr ? "" : value->as_string().c_str()));
      }
    }
    return out;
  };

  const json::object privileged_zero = {{"name", "a"},
                                        {"securityContext", {{"privileged", true}}},
                                        {"resources", {{"limits", {{"aws.amazon.com/neuron", "0"}}}}}};
  const json::value neuron_zero = {{"containers", json::array{privileged_zero}}};
  const json::object npu = {{"huawei.com/Ascend910C", "1"},
                            {"huawei.com/Ascend910C-memory", "16384"}};
  const json::value one_npu = {{"containers", json::array{container("a", {{"limits", npu}, {"requests", npu}})}}};
  json::object sidecar = container("sidecar", {{"limits", {{"huawei.com/Ascend910B3", "1"}}}});
  sidecar["restartPolicy"] = "Always";
  const json::value with_sidecar = {
      {"initContainers",
       json::array{container("plain-init", {}, json::array{json::object{{"name", "ASCEND_VISIBLE_DEVICES"},
                                                                        {"value", "0"}}}),
                   sidecar}},
      {"containers", json::array{container("main", {})}}};
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        CO_ASSERT_TRUE(co_await SystemReady());
        const json::value denied = json::parse(co_await Post("/webhook", review("neuron", neuron_zero)));
        EXPECT_EQ(denied.at("response").at("allowed"), false);
        EXPECT_THAT(std::string(denied.at("response").at("status").at("message").as_string()),
                    ::testing::HasSubstr("aws.amazon.com/neuron must be greater than 0"))
            << "the value's refusal comes before the privileged container's, as upstream orders them";

        const json::value pair = patched(co_await Post("/webhook", review("pair", one_npu)), "pair", one_npu);
        const json::value& resources = pair.at("spec").at("containers").at(0).at("resources");
        EXPECT_EQ(resources.at("limits").at("huawei.com/Ascend910C"), "2") << resources;
        EXPECT_EQ(resources.at("requests").at("huawei.com/Ascend910C"), "2") << resources;
        EXPECT_EQ(resources.at("limits").at("huawei.com/Ascend910C-memory"), "16384") << resources;

        const json::value pod =
            patched(co_await Post("/webhook", review("sidecar", with_sidecar)), "sidecar", with_sidecar);
        const json::value& spec = pod.at("spec");
        EXPECT_EQ(env_of(spec.at("initContainers").at(0)),
                  (std::vector<std::string>{"ASCEND_VISIBLE_DEVICES=0", "ASCEND_VISIBLE_DEVICES="}))
            << "the last entry is what the container gets";
        EXPECT_EQ(env_of(spec.at("initContainers").at(1)), std::vector<std::string>{})
            << "the sidecar keeps the NPUs its device plugin gives it";
        EXPECT_EQ(env_of(spec.at("containers").at(0)), std::vector<std::string>{"ASCEND_VISIBLE_DEVICES="});
      }(),
      30s);
}

// The API server sends reviews of up to 3 MiB of pod: on --http_bind (HAMi's layout) too, every one is
// answered with its uid (the extender's 1 MiB limit cut them, and an empty uid is a webhook failure, which
// `failurePolicy: Ignore` turns into an unmutated pod).
TEST_F(HostileInputTest, AReviewOfSeveralMiBOnTheExtendersListenerIsAnsweredWithItsUid) {
  AddNode("nv-a", {{"nvidia", Cards("nvidia", "nv-a", 1)}});
  StartService();
  json::value pod = PodJson("big", {{"nvidia.com/gpumem", "2000"}});
  pod.at("metadata").as_object()["annotations"] = {{"notes", std::string(3 << 20, 'x')}};
  const std::string review = json::serialize(json::object{
      {"apiVersion", "admission.k8s.io/v1"},
      {"kind", "AdmissionReview"},
      {"request",
       {{"uid", "u-big"}, {"kind", {{"kind", "Pod"}}}, {"namespace", "default"}, {"operation", "CREATE"},
        {"object", pod}}}});
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        CO_ASSERT_TRUE(co_await SystemReady());
        const json::value answer = json::parse(co_await Post("/webhook", review));
        EXPECT_EQ(answer.at("response").at("uid"), "u-big");
        EXPECT_EQ(answer.at("response").at("allowed"), true);
        EXPECT_EQ(answer.at("response").at("patchType"), "JSONPatch");
      }(),
      30s);
}

// --webhook-bind: the webhook on a TLS listener of its own, the extender's routes not there, /webhook not on
// the extender's listener (which can then stay on loopback).
TEST_F(HostileInputTest, AWebhookListenerOfItsOwnServesOnlyTheWebhookOverTls) {
  const auto& pki = testing::SharedTestPki();
  cfg_.serving.webhook_bind = "127.0.0.1:0";
  cfg_.serving.webhook_cert_file = ::testing::TempDir() + "webhook.crt";
  cfg_.serving.webhook_key_file = ::testing::TempDir() + "webhook.key";
  std::ofstream(cfg_.serving.webhook_cert_file) << pki.server.cert_pem;
  std::ofstream(cfg_.serving.webhook_key_file) << pki.server.key_pem;
  AddNode("nv-a", {{"nvidia", Cards("nvidia", "nv-a", 2)}});
  StartService();
  ASSERT_NE(service_->webhook_port(), service_->port());
  k8s::RestConfig tls;
  tls.host = "127.0.0.1";
  tls.port = std::to_string(service_->webhook_port());
  tls.ca_pem = pki.ca.cert_pem;
  auto webhook = k8s::HttpClient::Create(ioc_.get_executor(), tls).value();
  const std::string review = R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
      "uid":"u-1","kind":{"kind":"Pod"},"namespace":"default","operation":"CREATE","object":{
      "metadata":{"name":"p"},"spec":{"containers":[{"name":"a","resources":{"limits":{"nvidia.com/gpumem":"100"}}}]}}}})";
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        CO_ASSERT_TRUE(co_await SystemReady());
        using boost::beast::http::verb;
        const k8s::HttpRequest review_request{verb::post, "/webhook", review, "application/json", "", ""};
        const k8s::HttpRequest filter_request{verb::post, "/filter", "{}", "application/json", "", ""};
        auto answered = co_await webhook->Send(review_request, 10s);
        EXPECT_TRUE(answered) << answered.error().message;
        CO_ASSERT_TRUE(answered);
        EXPECT_EQ(answered->status, 200u);
        EXPECT_EQ(json::parse(answered->body).at("response").at("patchType"), "JSONPatch");
        auto filter = co_await webhook->Send(filter_request, 10s);
        CO_ASSERT_TRUE(filter);
        EXPECT_EQ(filter->status, 404u);
        if (!extender_)
          extender_ =
              k8s::HttpClient::Create(ioc_.get_executor(), k8s::LoopbackHttp(service_->port())).value();
        auto on_extender = co_await extender_->Send(review_request, 10s);
        CO_ASSERT_TRUE(on_extender);
        EXPECT_EQ(on_extender->status, 404u);
      }(),
      30s);
}

// --leader-elect, HAMi's way: the replica follows the co-located kube-scheduler's Lease. A follower keeps its
// caches warm, writes nothing (no health pass, no labels), refuses /filter with the reason, says so on
// /readyz and exports no device gauges; once the Lease names our host it runs a pass at once, decides, and
// labels the scheduler pods leader/follower.
TEST_F(HostileInputTest, AFollowerWritesNothingUntilTheLeaseNamesItsHost) {
  cfg_.extender.leadership.enabled = true;
  cfg_.extender.leadership.name = "hami-scheduler";
  cfg_.extender.leadership.ns = "kube-system";
  // Long enough that a pass after the Lease changes can only come from the change itself.
  health_interval_ = 60s;
  struct Env {
    Env() {
      setenv("POD_NAME", "hami-scheduler-0", 1);
      setenv("POD_NAMESPACE", "kube-system", 1);
    }
    ~Env() {
      unsetenv("POD_NAME");
      unsetenv("POD_NAMESPACE");
    }
  } env;
  const json::value lease = {{"apiVersion", "coordination.k8s.io/v1"},
                             {"kind", "Lease"},
                             {"metadata", {{"name", "hami-scheduler"}, {"namespace", "kube-system"}}},
                             {"spec", {{"holderIdentity", "other-host_5e1f"}, {"leaseDurationSeconds", 15}}}};
  ASSERT_TRUE(api_.store().Create(lease));
  // Two replicas of our release, and one of another release in the same namespace (left alone).
  for (auto [name, release] : {std::pair{"hami-scheduler-0", "hami"}, std::pair{"hami-scheduler-1", "hami"},
                               std::pair{"other-scheduler-0", "other"}}) {
    const json::value pod = {
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata",
         {{"name", name},
          {"namespace", "kube-system"},
          {"labels",
           {{"app.kubernetes.io/component", "hami-scheduler"}, {"app.kubernetes.io/instance", release}}}}},
        {"spec", {{"containers", json::array{json::object{{"name", "extender"}, {"image", "hami"}}}}}}};
    ASSERT_TRUE(api_.store().Create(pod));
  }
  AddNode("nv-a", {{"nvidia", Cards("nvidia", "nv-a", 2)}});
  CreatePod("train", Ask{"nvidia", 1, 1000, 0});
  StartService();
  json::value train = FilterArgs("train", "default", {"nv-a"});
  train.at("Pod").at("metadata").as_object()["uid"] = StoredPod("train")->uid;
  const std::string filter_body = json::serialize(train);
  const std::string bind_body = json::serialize(
      json::object{{"PodName", "train"}, {"PodNamespace", "default"}, {"PodUID", "u"}, {"Node", "nv-a"}});
  // Requests that change something, sent by the scheduler's decisions client.
  const auto writes = [this] {
    std::uint64_t n = 0;
    for (const auto& [kind, count] : service_->client().requests_by_kind()) {
      if (kind.first != "get" && kind.first != "list" && kind.first != "watch") n += count;
    }
    return n;
  };
  const auto role = [this](const char* pod) {
    auto o = api_.store().Find("pods", "kube-system", pod);
    if (!o) return std::string("?");
    const json::value v(*o);
    const auto* labels = v.at("metadata").as_object().if_contains("labels");
    const auto* r = labels ? labels->as_object().if_contains("hami.io/scheduler-role") : nullptr;
    return r ? std::string(r->as_string()) : std::string();
  };
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        const std::function<bool()> synced = [this] { return service_->extender().synced(); };
        CO_ASSERT_TRUE(co_await WaitUntil(synced, 10s));
        co_await testing::Pause(300ms);
        EXPECT_EQ(service_->extender().stats().health_passes, 0u);
        const std::string refused = ErrorOf(co_await Post("/filter", filter_body));
        EXPECT_EQ(refused,
                  "hami-scheduler is not the leader (follower: Lease kube-system/hami-scheduler is held by "
                  "other-host_5e1f (we are system-test)); retry");
        EXPECT_NE(ErrorOf(co_await Post("/bind", bind_body)).find("is not the leader"), std::string::npos);
        EXPECT_EQ(writes(), 0u);
        std::string metrics = service_->extender().Metrics();
        EXPECT_NE(metrics.find("\nhami_scheduler_leader 0\n"), std::string::npos);
        EXPECT_EQ(metrics.find("hami_gpu_memory_limit_bytes{"), std::string::npos);
        EXPECT_EQ(role("hami-scheduler-0"), "");
        const k8s::HttpRequest readyz{boost::beast::http::verb::get, "/readyz", "", "", "", ""};
        auto ready = co_await extender_->Send(readyz, 10s);
        CO_ASSERT_TRUE(ready);
        EXPECT_EQ(ready->status, 200u);
        EXPECT_EQ(ready->body.substr(0, 14), "ok (follower: ") << ready->body;

        // kube-scheduler on this host takes the Lease.
        const json::value take = {{"spec", {{"holderIdentity", "system-test_0b7a"}}}};
        CO_ASSERT_TRUE(api_.store().Patch(*sim::FindResourceByName("leases"), "kube-system", "hami-scheduler",
                                          sim::PatchType::kMerge, take));
        const std::function<bool()> leading = [&] {
          return service_->extender().stats().health_passes > 0 && role("hami-scheduler-0") == "leader" &&
                 role("hami-scheduler-1") == "follower";
        };
        CO_ASSERT_TRUE(co_await WaitUntil(leading, 10s));
        EXPECT_EQ(role("other-scheduler-0"), "");  // another release's pod
        EXPECT_EQ(ErrorOf(co_await Post("/filter", filter_body)), "");
        metrics = service_->extender().Metrics();
        EXPECT_NE(metrics.find("\nhami_scheduler_leader 1\n"), std::string::npos);
        EXPECT_NE(metrics.find("hami_gpu_memory_limit_bytes{"), std::string::npos);
      }(),
      30s);
}

TEST_F(HostileInputTest, DeviceIdsWithSeparatorsAreRefusedWithAnEventNotCommitted) {
  // One "device" whose id reads as two in a pod's allocation annotation ("GPU-0,NVIDIA,16000,0:GPU-1").
  const std::string forged_id = "GPU-x0,NVIDIA,16000,0:GPU-x1";
  const json::value node = {
      {"apiVersion", "v1"},
      {"kind", "Node"},
      {"metadata",
       {{"name", "nv-forged"},
        {"annotations",
         {{BackendFor("nvidia").Spec().keys.register_annotation,
           fmt::format(R"([{{"id":"{}","count":8,"devmem":16384,"devcore":100,"type":"T4","health":true}}])",
                       forged_id)}}}}}};
  ASSERT_TRUE(api_.store().Create(node));
  AddNode("nv-good", {{"nvidia", Cards("nvidia", "nv-good", 1)}});
  StartAll();
  RunCoro(
      ioc_,
      [&]() -> asio::awaitable<void> {
        CO_ASSERT_TRUE(co_await SystemReady());
        const NodeEntry* forged = service_->extender().state().FindNode("nv-forged");
        CO_ASSERT_TRUE(forged != nullptr);
        EXPECT_TRUE(forged->devices.empty());
        std::size_t nvidia = 0;
        while (backends_.at(nvidia).Spec().config_section != "nvidia") ++nvidia;
        EXPECT_NE(forged->discovery_error[nvidia].find("may not contain"), std::string::npos)
            << forged->discovery_error[nvidia];
        EXPECT_EQ(service_->extender().stats().registration_errors, 1u);
        EXPECT_NE(service_->extender().Metrics().find("hami_scheduler_unreadable_registrations 1"),
                  std::string::npos);
        // A node event says why, once.
        const std::function<bool()> evented = [this] {
          for (const auto& e : api_.store().Objects("events")) {
            const json::object& involved = e->at("involvedObject").as_object();
            if (involved.at("kind").as_string() == "Node" && involved.at("name").as_string() == "nv-forged" &&
                e->at("reason").as_string() == "InvalidDeviceRegistration")
              return true;
          }
          return false;
        };
        EXPECT_TRUE(co_await WaitUntil(evented, 5s));
        // Pods go to the node whose devices are real, and never over-commit.
        for (int i = 0; i < 4; ++i) CreatePod(fmt::format("p{}", i), Ask{"nvidia", 1, 4000, 0});
        const std::function<bool()> settled = [this] { return Settled(); };
        EXPECT_TRUE(co_await WaitUntil(settled, 15s));
        std::vector<std::string> problems = Overcommits();
        std::erase_if(problems, [](const std::string& p) { return p.starts_with("node nv-forged: "); });
        EXPECT_TRUE(problems.empty()) << fmt::format("{}", fmt::join(problems, "\n"));
        for (int i = 0; i < 4; ++i) EXPECT_EQ(StoredPod(fmt::format("p{}", i))->node_name, "nv-good");
      }(),
      30s);
}

}  // namespace
}  // namespace hami
