#include "sim/device_plugins/device_plugin.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <boost/system/system_error.hpp>

#include "core/codec/node_devices.h"
#include "core/codec/pod_devices.h"
#include "core/codec/stamps.h"
#include "core/keys.h"
#include "k8s/objects.h"
#include "k8s/waits.h"

namespace hami::sim {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using namespace asio::experimental::awaitable_operators;

constexpr int kLockReleaseAttempts = 5;
// A compare-and-swap that lost to another write of the node (a handshake, another vendor's lock) is tried
// again, this many times: a node written every few tens of milliseconds (the tests' 100 ms health pass, two
// plugins answering) would otherwise make a release give up and leave the lock to its timeout.
constexpr int kLockReleaseConflicts = 20;
// Nothing left to allocate is a value made only of `;`, not "" nor a removed key (docs/DECISIONS.md).
constexpr std::string_view kAllocatedEverything = ";";

std::string_view ModeName(PluginMode mode) {
  switch (mode) {
    case PluginMode::kNormal:
      return "normal";
    case PluginMode::kNeverAnswer:
      return "never-answer";
    case PluginMode::kFailAllocation:
      return "fail-allocation";
    case PluginMode::kSilent:
      return "silent";
  }
  return "unknown";
}

const std::string* AnnotationOf(const Annotations& annotations, const std::string& key) {
  if (key.empty()) return nullptr;
  auto it = annotations.find(key);
  return it == annotations.end() ? nullptr : &it->second;
}

json::object AnnotationsPatch(json::object annotations) {
  json::object metadata;
  metadata["annotations"] = std::move(annotations);
  json::object patch;
  patch["metadata"] = std::move(metadata);
  return patch;
}

json::object ResourcesJson(const std::map<std::string, std::string>& resources) {
  json::object out;
  for (const auto& [name, quantity] : resources) out[name] = quantity;
  return out;
}

// "GPU-1,NVIDIA,3000,30 GPU-2,NVIDIA,3000,30" for the log.
std::string DescribeDevices(const PodVendorDevices& containers) {
  std::string out;
  for (const auto& container : containers) {
    for (const auto& d : container) {
      if (!out.empty()) out += ' ';
      out += fmt::format("{},{},{},{}", d.uuid, d.vendor, d.mem.value(), d.cores.value());
    }
  }
  return out;
}

k8s::Reflector::Options WatchOptions(std::string path, std::string field_selector) {
  k8s::Reflector::Options o;
  o.path = std::move(path);
  o.field_selector = std::move(field_selector);
  return o;
}

}  // namespace

std::vector<DeviceInfo> ManifestOf(const std::vector<SimDevice>& devices) {
  std::vector<DeviceInfo> out;
  out.reserve(devices.size());
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const SimDevice& d = devices[i];
    DeviceInfo info;
    info.id = d.uuid;
    info.index = static_cast<std::int32_t>(i);
    info.count = d.split;
    info.devmem = MiB(d.memory_mib);
    info.devcore = Cores(d.cores);
    info.type = d.type;
    info.numa = d.numa;
    info.mode = "hami-core";
    info.health = d.healthy;
    out.push_back(std::move(info));
  }
  return out;
}

void DevicePlugin::Wakeup::Notify() {
  pending = true;
  if (timer) timer->cancel();
}

DevicePlugin::DevicePlugin(k8s::ApiClient& client, const Backend& backend, DevicePluginOptions options)
    : client_(&client),
      backend_(&backend),
      options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : &system_clock_),
      nodes_(client, WatchOptions("/api/v1/nodes", fmt::format("metadata.name={}", options_.node)),
             k8s::NodeFromJson, NodeHandlers()),
      pods_(client, WatchOptions("/api/v1/pods", fmt::format("spec.nodeName={}", options_.node)),
            k8s::PodFromJson, PodHandlers()) {}

k8s::Informer<NodeView>::Handlers DevicePlugin::NodeHandlers() {
  k8s::Informer<NodeView>::Handlers h;
  h.on_add = [this](const NodeView&) { OnNodeChanged(); };
  h.on_update = [this](const NodeView&, const NodeView&) { OnNodeChanged(); };
  h.on_synced = [this] { OnNodeChanged(); };
  return h;
}

k8s::Informer<PodView>::Handlers DevicePlugin::PodHandlers() {
  k8s::Informer<PodView>::Handlers h;
  h.on_add = [this](const PodView& pod) { Consider(pod); };
  h.on_update = [this](const PodView&, const PodView& pod) { Consider(pod); };
  h.on_delete = [this](const PodView& pod) { taken_.erase(pod.uid); };
  return h;
}

const DevicePlugin::Stats& DevicePlugin::stats() const { return stats_; }

void DevicePlugin::SetMode(PluginMode mode) {
  if (mode == options_.mode) return;
  Log(fmt::format("mode {} -> {}", ModeName(options_.mode), ModeName(mode)));
  options_.mode = mode;
  register_wakeup_.Notify();  // kSilent zeroes the allocatable count at once; leaving it re-publishes
  handshake_wakeup_.Notify();
  RescanPods();  // pods left alone while not answering are taken up again
}

void DevicePlugin::SetDevices(std::vector<SimDevice> devices) { options_.devices = std::move(devices); }

void DevicePlugin::RegisterNow() { register_wakeup_.Notify(); }

asio::awaitable<void> DevicePlugin::Run() {
  const auto executor = co_await asio::this_coro::executor;
  for (Wakeup* w : {&register_wakeup_, &handshake_wakeup_, &allocate_wakeup_}) {
    w->timer = std::make_unique<asio::steady_timer>(executor);
  }
  Log(fmt::format("{} device plugin on node {} with {} devices ({})", backend_->Vendor(), options_.node,
                  options_.devices.size(), ModeName(options_.mode)));
  co_await (nodes_.Run() || pods_.Run() || RegisterLoop() || HandshakeLoop() || AllocateLoop());
}

asio::awaitable<void> DevicePlugin::Wait(Wakeup& wakeup, std::chrono::milliseconds timeout) {
  if (!wakeup.pending) {
    wakeup.timer->expires_after(timeout);
    (void)co_await wakeup.timer->async_wait(asio::as_tuple(asio::use_awaitable));
  }
  wakeup.pending = false;
  co_await k8s::ThrowIfCancelled();
}

void DevicePlugin::OnNodeChanged() {
  if (!seeded_) register_wakeup_.Notify();  // the first check waits for the node
  if (PendingRequest()) {
    handshake_wakeup_.Notify();
  } else {
    // Seen answered (or cleared): the same request text written again later is a new request. Done per
    // event, since the loop may only wake after several events.
    last_answered_request_.reset();
  }
}

// ---- Registration ----

asio::awaitable<void> DevicePlugin::RegisterLoop() {
  for (;;) {
    bool ok = true;
    if (CachedNode() != nullptr) {
      ok = co_await CheckRegistration();
    }
    co_await Wait(register_wakeup_, ok ? options_.register_interval
                                       : std::min(options_.register_interval, options_.retry_backoff));
  }
}

asio::awaitable<bool> DevicePlugin::CheckRegistration() {
  if (!seeded_) {
    SeedPublishedFromNode(*CachedNode());
    seeded_ = true;
  }
  ++stats_.checks;
  NodeStatus status = published_status_;
  bool ok = true;
  if (options_.mode == PluginMode::kSilent) {
    status.allocatable[backend_->Spec().resources.count] = "0";
  } else {
    status = DesiredStatus();
    if (auto annotation = DesiredAnnotation(); annotation && annotation != published_annotation_) {
      ok = co_await PublishAnnotation(*annotation);
    }
  }
  if (status != published_status_) ok = (co_await PublishStatus(status)) && ok;
  co_return ok;
}

void DevicePlugin::SeedPublishedFromNode(const NodeView& node) {
  if (const std::string* value = AnnotationOf(node.annotations, backend_->Spec().keys.register_annotation)) {
    published_annotation_ = *value;
  }
  const auto copy_managed = [&](const ResourceList& from, Resources& to) {
    for (const auto& [name, quantity] : DesiredStatus().capacity) {
      (void)quantity;
      if (auto it = from.find(name); it != from.end()) to[name] = it->second;
    }
  };
  copy_managed(node.capacity, published_status_.capacity);
  copy_managed(node.allocatable, published_status_.allocatable);
}

NodePublication PublishFor(const Backend& backend, const std::vector<SimDevice>& devices) {
  std::vector<DeviceInfo> cards = ManifestOf(devices);
  backend.AddPluginFacts(cards);
  return backend.Publish(cards);
}

std::optional<std::string> DevicePlugin::DesiredAnnotation() const {
  return PublishFor(*backend_, options_.devices).annotation;
}

DevicePlugin::NodeStatus DevicePlugin::DesiredStatus() const {
  Resources resources = PublishFor(*backend_, options_.devices).resources;
  return NodeStatus{resources, resources};
}

asio::awaitable<bool> DevicePlugin::PublishAnnotation(const std::string& value) {
  json::object annotations;
  annotations[backend_->Spec().keys.register_annotation] = value;
  json::object patch_object = AnnotationsPatch(std::move(annotations));
  // A pool server's label goes with its registration (set by its operator, in a real cluster).
  if (const auto labels = PublishFor(*backend_, options_.devices).labels; !labels.empty())
    patch_object["metadata"].get_object()["labels"] = ResourcesJson(labels);
  const json::value patch = std::move(patch_object);
  const std::string path = NodePath();
  auto patched = co_await client_->MergePatch(path, patch);
  if (!patched) {
    ++stats_.api_errors;
    spdlog::warn("device plugin {}: publishing {} failed: {}", options_.node,
                 backend_->Spec().keys.register_annotation, patched.error().message);
    co_return false;
  }
  published_annotation_ = value;
  ++stats_.registrations;
  Log(fmt::format("registered {} {}", backend_->Spec().keys.register_annotation, value));
  co_return true;
}

asio::awaitable<bool> DevicePlugin::PublishStatus(const NodeStatus& status) {
  json::object fields;
  fields["capacity"] = ResourcesJson(status.capacity);
  fields["allocatable"] = ResourcesJson(status.allocatable);
  json::object body;
  body["status"] = std::move(fields);
  const json::value patch = std::move(body);
  const std::string path = NodePath() + "/status";
  auto patched = co_await client_->MergePatch(path, patch);
  if (!patched) {
    ++stats_.api_errors;
    spdlog::warn("device plugin {}: publishing node status failed: {}", options_.node,
                 patched.error().message);
    co_return false;
  }
  published_status_ = status;
  ++stats_.registrations;
  Log(fmt::format("published {} allocatable {}", options_.node,
                  json::serialize(ResourcesJson(status.allocatable))));
  co_return true;
}

// ---- Handshake ----

bool DevicePlugin::AnswersHandshakes() const {
  const BackendSpec& spec = backend_->Spec();
  return !spec.keys.handshake.empty() && spec.health != HealthRule::kAlwaysHealthy &&
         PublishFor(*backend_, options_.devices).answers_handshake;
}

std::optional<std::string> DevicePlugin::PendingRequest() const {
  const NodeView* node = CachedNode();
  if (node == nullptr) return std::nullopt;
  const std::string* value = AnnotationOf(node->annotations, backend_->Spec().keys.handshake);
  if (value == nullptr) return std::nullopt;
  const auto kind = codec::ParseHandshake(*value, true).kind;
  if (kind != codec::Handshake::Kind::kRequesting && kind != codec::Handshake::Kind::kMalformedRequest) {
    return std::nullopt;
  }
  return *value;
}

asio::awaitable<void> DevicePlugin::HandshakeLoop() {
  for (;;) {
    co_await Wait(handshake_wakeup_, options_.handshake_interval);
    if (!AnswersHandshakes() || options_.mode == PluginMode::kSilent) continue;
    const std::optional<std::string> request = PendingRequest();
    // The cached node still shows an answered request until our own patch comes back through the watch.
    if (!request || request == last_answered_request_) continue;
    if (co_await AnswerHandshake(*request)) last_answered_request_ = *request;
  }
}

asio::awaitable<bool> DevicePlugin::AnswerHandshake(const std::string& request) {
  const std::string& key = backend_->Spec().keys.handshake;
  const std::string answer = "Reported " + codec::FormatRfc3339(clock_->Now());
  json::object annotations;
  annotations[key] = answer;
  const json::value patch = AnnotationsPatch(std::move(annotations));
  const std::string path = NodePath();
  auto patched = co_await client_->MergePatch(path, patch);
  if (!patched) {
    ++stats_.api_errors;
    spdlog::warn("device plugin {}: answering {}='{}' failed: {}", options_.node, key, request,
                 patched.error().message);
    co_return false;
  }
  ++stats_.handshakes;
  Log(fmt::format("answered {} '{}' with '{}'", key, request, answer));
  co_return true;
}

// ---- Allocation ----

bool DevicePlugin::WantsAllocation(const PodView& pod) const {
  if (pod.node_name != options_.node || pod.terminating) return false;
  // `success` too: with several vendors, another vendor's plugin may have answered its own key first.
  const std::string* phase = AnnotationOf(pod.annotations, std::string(keys::kBindPhase));
  if (phase == nullptr || (*phase != keys::kBindPhaseAllocating && *phase != keys::kBindPhaseSuccess)) {
    return false;
  }
  // As HAMi's plugins find their pod: the scheduler's bind-time and its chosen node are there too.
  const std::string* assigned = AnnotationOf(pod.annotations, std::string(keys::kAssignedNode));
  if (assigned == nullptr || *assigned != options_.node) return false;
  if (AnnotationOf(pod.annotations, std::string(keys::kBindTime)) == nullptr) return false;
  const BackendKeys& keys = backend_->Spec().keys;
  // A vendor whose plugin is handed no to-allocate list sets up what the allocated list names, once.
  if (keys.to_allocate.empty()) {
    return *phase == keys::kBindPhaseAllocating && AnnotationOf(pod.annotations, keys.allocated) != nullptr;
  }
  const std::string* to_allocate = AnnotationOf(pod.annotations, keys.to_allocate);
  return to_allocate != nullptr && !codec::NothingLeftToAllocate(*to_allocate);
}

void DevicePlugin::Consider(const PodView& pod) {
  if (options_.mode != PluginMode::kNormal && options_.mode != PluginMode::kFailAllocation) return;
  if (taken_.contains(pod.uid) || !WantsAllocation(pod)) return;
  taken_.insert(pod.uid);
  queue_.push_back(pod.Key());
  allocate_wakeup_.Notify();
}

void DevicePlugin::RescanPods() {
  for (const auto& [key, pod] : pods_.views()) {
    (void)key;
    Consider(pod);
  }
}

asio::awaitable<void> DevicePlugin::AllocateLoop() {
  for (;;) {
    if (queue_.empty()) {
      co_await Wait(allocate_wakeup_, options_.register_interval);
      continue;
    }
    const std::string pod_key = queue_.front();
    queue_.pop_front();
    if (options_.allocate_delay.count() > 0) co_await k8s::SleepFor(options_.allocate_delay);
    if (!co_await Allocate(pod_key)) {
      co_await k8s::SleepFor(options_.retry_backoff);
      queue_.push_back(pod_key);
    }
  }
}

asio::awaitable<bool> DevicePlugin::Allocate(const std::string& pod_key) {
  auto it = pods_.views().find(pod_key);
  if (it == pods_.views().end()) co_return true;  // deleted meanwhile
  const PodView pod = it->second;
  if (options_.mode != PluginMode::kNormal && options_.mode != PluginMode::kFailAllocation) {
    taken_.erase(pod.uid);  // switched to not answering while queued: a later SetMode takes it up again
    co_return true;
  }
  if (!WantsAllocation(pod)) {
    // Answered already: an earlier attempt's patch went through with its answer lost. Its lock release
    // never ran.
    const std::string* phase = AnnotationOf(pod.annotations, std::string(keys::kBindPhase));
    if (pod.node_name == options_.node && phase != nullptr &&
        (*phase == keys::kBindPhaseSuccess || *phase == keys::kBindPhaseFailed))
      co_await ReleaseLock(pod);
    co_return true;
  }
  const std::string& to_allocate_key = backend_->Spec().keys.to_allocate;
  const std::string& list_key = to_allocate_key.empty() ? backend_->Spec().keys.allocated : to_allocate_key;
  const std::string devices = pod.annotations.at(list_key);
  bool success = options_.mode == PluginMode::kNormal;
  std::string described = devices;
  if (auto decoded = codec::DecodePodDevices(devices); decoded) {
    described = DescribeDevices(*decoded);
  } else {
    spdlog::warn("device plugin {}: pod {} {}='{}' is unreadable ({}); failing its allocation", options_.node,
                 pod.Key(), list_key, devices, decoded.error().message);
    success = false;
  }
  json::object annotations;
  annotations[std::string(keys::kBindPhase)] = success ? keys::kBindPhaseSuccess : keys::kBindPhaseFailed;
  if (success && !to_allocate_key.empty()) annotations[to_allocate_key] = kAllocatedEverything;
  const json::value patch = AnnotationsPatch(std::move(annotations));
  const std::string path = k8s::PathFor("v1", "pods", pod.ns, pod.name);
  auto patched = co_await client_->MergePatch(path, patch);
  if (!patched) {
    if (patched.error().kind == k8s::ApiErrorKind::kNotFound) co_return true;
    ++stats_.api_errors;
    spdlog::warn("device plugin {}: answering pod {} failed: {}", options_.node, pod.Key(),
                 patched.error().message);
    co_return false;
  }
  ++(success ? stats_.allocated : stats_.failed);
  Log(fmt::format("{} {} {}", success ? "allocated" : "failed", pod.Key(), described));
  co_await ReleaseLock(pod);
  co_return true;
}

asio::awaitable<void> DevicePlugin::ReleaseLock(const PodView& pod) {
  const std::string& key = backend_->Spec().keys.node_lock;
  if (key.empty()) co_return;
  const std::string path = NodePath();
  int conflicts = 0;
  for (int attempt = 0; attempt < kLockReleaseAttempts; ++attempt) {
    auto fresh = co_await client_->Get(path);  // the cache may lag: the compare-and-swap needs the current rv
    if (!fresh) {
      ++stats_.api_errors;
      spdlog::warn("device plugin {}: reading the node to release {} failed: {}", options_.node, key,
                   fresh.error().message);
      co_await k8s::SleepFor(options_.retry_backoff);
      continue;
    }
    auto node = k8s::NodeFromJson(*fresh);
    if (!node) {
      spdlog::warn("device plugin {}: {}", options_.node, node.error().message);
      co_return;
    }
    const std::string* value = AnnotationOf(node->annotations, key);
    if (value == nullptr) co_return;  // released already (the other vendor's plugin, or the scheduler)
    auto lock = codec::ParseNodeLock(*value);
    if (!lock) {
      spdlog::warn("device plugin {}: lock {}='{}' is unreadable ({}); left in place", options_.node, key,
                   *value, lock.error().message);
      co_return;
    }
    if (!lock->legacy && !lock->OwnedBy(pod.ns, pod.name)) {
      ++stats_.locks_kept;
      Log(fmt::format("left {}='{}' in place: not held by {}", key, *value, pod.Key()));
      co_return;
    }
    json::object annotations;
    annotations[key] = nullptr;
    json::object patch_object = AnnotationsPatch(std::move(annotations));
    patch_object["metadata"].as_object()["resourceVersion"] = node->resource_version;
    const json::value patch = std::move(patch_object);
    auto patched = co_await client_->MergePatch(path, patch);
    if (patched) {
      ++stats_.lock_releases;
      Log(fmt::format("released {} on {} after {}", key, options_.node, pod.Key()));
      co_return;
    }
    if (patched.error().kind != k8s::ApiErrorKind::kConflict) {
      ++stats_.api_errors;
      spdlog::warn("device plugin {}: releasing {} failed: {}", options_.node, key, patched.error().message);
      co_await k8s::SleepFor(options_.retry_backoff);
    } else if (++conflicts < kLockReleaseConflicts) {
      --attempt;  // the node moved on under us: read it again after a random pause, out of step with its
                  // writers
      std::uniform_int_distribution<int> pause_ms(10, 100);
      co_await k8s::SleepFor(std::chrono::milliseconds(pause_ms(rng_)));
    }
  }
  spdlog::warn(
      "device plugin {}: gave up releasing {} for {} after {} failed attempts and {} lost to other "
      "writes of the node",
      options_.node, key, pod.Key(), kLockReleaseAttempts, conflicts);
}

// ---- Helpers ----

void DevicePlugin::Log(const std::string& line) {
  spdlog::info("device plugin {} {}: {}", backend_->Vendor(), options_.node, line);
  if (on_log) on_log(line);
}

const NodeView* DevicePlugin::CachedNode() const {
  auto it = nodes_.views().find(options_.node);
  return it == nodes_.views().end() ? nullptr : &it->second;
}

std::string DevicePlugin::NodePath() const { return k8s::PathFor("v1", "nodes", "", options_.node); }

}  // namespace hami::sim
