#pragma once
// A simulated vendor device plugin: the node side of HAMi's protocol (docs/DECISIONS.md), spoken only
// through k8s::ApiClient and informers, so it runs against sim::ApiServer and a real kube-apiserver alike.
//
// What it does, per the backend's BackendSpec (config overrides included) and what the backend says its
// vendor's plugin publishes (Backend::Publish, the inverse of its Discover):
// - Registration. Merge-patches the register annotation (a JSON manifest, Hygon's legacy list; none for the
//   vendors that read node capacity) only when it differs from what it last published (at startup: from
//   what the node carries), and keeps status.capacity and status.allocatable at the published resources (the
//   count resource at the sum of the split counts of healthy devices, as kubelet would from the plugin's
//   ListAndWatch; core and memory resources for capacity vendors). Status is patched on /status, again only
//   when it changed.
// - Handshake (backends with a handshake key whose plugin answers it, NodePublication::answers_handshake):
//   answers a `Requesting_...` value seen on the watched node with `Reported <RFC3339>`.
// - Allocation: for each pod bound to the node with bind-phase `allocating` and something left under the
//   backend's to-allocate key, after `allocate_delay`, ONE merge patch sets to-allocate to ";" and
//   bind-phase to `success`, then the node lock is released if this pod owns it (or it is a bare timestamp
//   with no owner). A pod that asks for several vendors is answered by each vendor's plugin for its own key:
//   each sets `success` once its own key is done, so the phase may read `success` before the other
//   vendor's plugin has finished (which therefore also takes up pods in phase `success` whose key still has
//   something left). A pod is answered at most once (watch events repeat).
//
// Capacity mode carries less than the annotations: the backend synthesizes ids ("<node>-<infix>-<i>"),
// count 100 and type = vendor key. A card's cores are the vendor's fixed per-card value, memory is published
// in units of the backend's memory factor (rounded down) and shared evenly between cards, and only healthy
// devices are published.
//
// Everything runs on the caller's io_context thread; the object must outlive Run().
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/clock.h"
#include "core/model.h"
#include "k8s/api_client.h"
#include "k8s/reflector.h"

namespace hami::sim {

struct SimDevice {
  std::string uuid;
  std::int32_t split = 10;  // count: tasks that may share it
  std::int64_t memory_mib = 16384;
  std::int32_t cores = 100;
  std::string type;  // card model, e.g. "NVIDIA-Tesla T4"
  std::int32_t numa = 0;
  bool healthy = true;
  friend bool operator==(const SimDevice&, const SimDevice&) = default;
};

// How a plugin misbehaves (tests switch modes at run time).
enum class PluginMode {
  kNormal,
  kNeverAnswer,     // registers, but never allocates (pods stay `allocating`, the lock is never released)
  kFailAllocation,  // sets hami.io/bind-phase=failed and releases the node lock
  kSilent,          // stops everything: no handshake answers, no registration refresh, no allocation; and
                    // sets the node's allocatable count resource to 0 (as kubelet does when a plugin dies)
};

struct DevicePluginOptions {
  std::string node;
  std::vector<SimDevice> devices;
  // How often the manifest is checked and re-published if changed.
  std::chrono::milliseconds register_interval{30000};
  // How often a pending Requesting_ handshake is re-checked (answers follow node events at once; the tick
  // retries one whose patch failed).
  std::chrono::milliseconds handshake_interval{5000};
  std::chrono::milliseconds allocate_delay{0};  // simulated time to set a pod's devices up
  // Wait after a failed API call before trying again.
  std::chrono::milliseconds retry_backoff{500};
  PluginMode mode = PluginMode::kNormal;
  const Clock* clock = nullptr;  // dates handshake answers; nullptr: the system clock
};

// The device entries the plugin publishes in annotation modes (index = position, mode hami-core).
std::vector<DeviceInfo> ManifestOf(const std::vector<SimDevice>& devices);

// What a plugin of `backend`'s vendor publishes for `devices` (the vendor's Backend::Publish): the register
// annotation, the node's capacity (= allocatable) resources, and whether it answers handshakes.
NodePublication PublishFor(const Backend& backend, const std::vector<SimDevice>& devices);

class DevicePlugin {
 public:
  // `backend` gives the vendor, keys, resource names and what to publish (config overrides apply). Both
  // `client` and `backend` must outlive the plugin.
  DevicePlugin(k8s::ApiClient& client, const Backend& backend, DevicePluginOptions options);
  DevicePlugin(const DevicePlugin&) = delete;
  DevicePlugin& operator=(const DevicePlugin&) = delete;

  // Publishes the devices, then answers handshakes and allocates pods bound to its node, until cancelled
  // (the caller's cancellation slot). API errors are logged and retried; nothing else ends it.
  boost::asio::awaitable<void> Run();

  void SetMode(PluginMode mode);
  // Manifest change, dropped device...: published on the next check (RegisterNow() does it at once).
  void SetDevices(std::vector<SimDevice> devices);
  void RegisterNow();

  PluginMode mode() const { return options_.mode; }
  const std::vector<SimDevice>& devices() const { return options_.devices; }

  struct Stats {
    std::size_t registrations = 0;  // publishing patches that succeeded (annotation or node status)
    std::size_t checks = 0;         // registration checks done (with or without a patch)
    std::size_t handshakes = 0;     // Requesting_ values answered
    std::size_t allocated = 0;      // pods set to success
    std::size_t failed = 0;         // pods set to failed
    std::size_t lock_releases = 0;  // node locks removed
    std::size_t locks_kept = 0;     // node locks left in place after an answer: held by another pod
    std::size_t api_errors = 0;     // failed API calls (each retried later)
  };
  const Stats& stats() const;

  // Optional observer, e.g. for the demo's log: "allocated default/p1 GPU-1,NVIDIA,3000,30".
  std::function<void(const std::string& line)> on_log;

 private:
  // A loop's wake-up call: Notify() ends the loop's current Wait() early, or the next one if it is busy.
  struct Wakeup {
    std::unique_ptr<boost::asio::steady_timer> timer;
    bool pending = false;
    void Notify();
  };
  using Resources = std::map<std::string, std::string>;  // resource name -> quantity
  struct NodeStatus {
    Resources capacity, allocatable;
    friend bool operator==(const NodeStatus&, const NodeStatus&) = default;
  };

  boost::asio::awaitable<void> RegisterLoop();
  boost::asio::awaitable<void> HandshakeLoop();
  boost::asio::awaitable<void> AllocateLoop();
  boost::asio::awaitable<void> Wait(Wakeup& wakeup, std::chrono::milliseconds timeout);
  void OnNodeChanged();
  k8s::Informer<NodeView>::Handlers NodeHandlers();
  k8s::Informer<PodView>::Handlers PodHandlers();

  // One registration check; false when an API call failed.
  boost::asio::awaitable<bool> CheckRegistration();
  boost::asio::awaitable<bool> PublishAnnotation(const std::string& value);
  boost::asio::awaitable<bool> PublishStatus(const NodeStatus& status);
  std::optional<std::string> DesiredAnnotation() const;
  NodeStatus DesiredStatus() const;
  void SeedPublishedFromNode(const NodeView& node);

  bool AnswersHandshakes() const;
  // The Requesting_ value waiting for an answer on the cached node, if any.
  std::optional<std::string> PendingRequest() const;
  boost::asio::awaitable<bool> AnswerHandshake(const std::string& request);

  bool WantsAllocation(const PodView& pod) const;
  void Consider(const PodView& pod);
  void RescanPods();
  // Allocates (or fails) one queued pod; false when it must be retried.
  boost::asio::awaitable<bool> Allocate(const std::string& pod_key);
  boost::asio::awaitable<void> ReleaseLock(const PodView& pod);

  void Log(const std::string& line);
  const NodeView* CachedNode() const;
  std::string NodePath() const;

  k8s::ApiClient* client_;
  const Backend* backend_;
  DevicePluginOptions options_;
  SystemClock system_clock_;
  const Clock* clock_;

  k8s::Informer<NodeView> nodes_;
  k8s::Informer<PodView> pods_;

  Wakeup register_wakeup_, handshake_wakeup_, allocate_wakeup_;
  bool seeded_ = false;  // last-published values read from the node at startup
  std::optional<std::string> published_annotation_;
  NodeStatus published_status_;  // the managed resources as last written
  std::optional<std::string> last_answered_request_;
  std::set<std::string> taken_;    // uids of pods queued or done (watch events repeat)
  std::deque<std::string> queue_;  // pod keys waiting for allocation, in arrival order
  Stats stats_;
  std::mt19937 rng_{std::random_device{}()};  // lock-release backoff jitter
};

}  // namespace hami::sim
