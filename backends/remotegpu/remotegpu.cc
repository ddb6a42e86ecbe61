#include "backends/remotegpu/remotegpu.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <unordered_map>

#include "backends/common.h"
#include "core/codec/node_devices.h"

namespace hami::backends::remotegpu {
namespace {

constexpr std::string_view kSection = "remotegpu";
// How HAMi-core reaches a client pod, which has no device plugin to hand it over: an emptyDir that an init
// container of the library image fills, mounted in the container that preloads it (HAMi's names and paths).
constexpr std::string_view kLibVolume = "hami-remote-gpu-lib";
constexpr std::string_view kLibMountPath = "/hami-remote-gpu";
constexpr std::string_view kLibSourceGlob = "/k8s-vgpu/lib/nvidia/libvgpu.so.*";
constexpr char kServerSeparator = '/';  // pool card ids: <server>/<uuid>; outside the pod codec's separators

// The server part of a pool card id ("" when it names none).
std::string_view ServerOf(std::string_view id) {
  const auto slash = id.find(kServerSeparator);
  return slash == std::string_view::npos ? std::string_view() : id.substr(0, slash);
}

// A part of a pool card id (`what`: the server's name or the card's UUID) that the pod annotation codec
// carries as it is: none of its separators, no control characters.
Result<void> CheckIdPart(std::string_view part, std::string_view what) {
  if (part.empty()) return Error{fmt::format("an empty {}", what)};
  for (const char c : part) {
    if (c == ',' || c == ':' || c == ';' || c == kServerSeparator || static_cast<unsigned char>(c) < 0x20 ||
        c == 0x7f)
      return Error{fmt::format("{} {:?} contains a character the allocation annotation cannot carry", what,
                               std::string(part))};
  }
  return {};
}

// Sets `name` (the last entry of it, which the kubelet applies), or appends it.
void SetEnv(ContainerView& c, EnvVar var) {
  for (auto e = c.env.rbegin(); e != c.env.rend(); ++e) {
    if (e->name == var.name) {
      *e = std::move(var);
      return;
    }
  }
  c.env.push_back(std::move(var));
}

const EnvVar* EnvOf(const ContainerView& c, std::string_view name) {
  for (auto e = c.env.rbegin(); e != c.env.rend(); ++e) {
    if (e->name == name) return &*e;
  }
  return nullptr;
}

// One server, as the fit sees it: its healthy cards (positions among the candidates) and how many of them
// are large enough for the request.
struct Server {
  std::string_view name;
  std::vector<std::size_t> positions;
  int usable = 0;
  int small = 0;
  bool taken = false;  // a healthy card of it is not a candidate: it is in use
};

class RemoteGpuBackend final : public Hooked<RemoteGpuBackend, BasicBackend> {
 public:
  RemoteGpuBackend(BackendSpec spec, std::string endpoint_key, std::int64_t default_port,
                   std::string lib_image)
      : Hooked(std::move(spec)),
        endpoint_key_(std::move(endpoint_key)),
        default_port_(default_port),
        lib_image_(std::move(lib_image)) {}

  // A client node has none; a server lists its NVIDIA cards, each whole (one tenant) and named by the server.
  Result<std::vector<DeviceInfo>> Discover(const NodeView& node) const override {
    const auto label = node.labels.find(spec_.pool.server_label);
    if (label == node.labels.end()) return std::vector<DeviceInfo>();
    const auto fail = [&](const std::string& why) {
      return Error{fmt::format("lupine server {} (label {}): {}", node.name, spec_.pool.server_label, why)};
    };
    if (!node.annotations.contains(spec_.keys.register_annotation))
      return fail(
          fmt::format("no annotation {}: none of its cards are in the pool", spec_.keys.register_annotation));
    if (node.internal_ip.empty()) return fail("no InternalIP in status.addresses: its endpoint is unknown");
    auto cards = ManifestDevices(node, spec_.keys.register_annotation);
    if (!cards) return fail(cards.error().message);
    if (auto ok = CheckIdPart(node.name, "node name"); !ok) return fail(ok.error().message);
    const std::string endpoint = JoinHostPort(node.internal_ip, PortOf(label->second, default_port_));
    for (DeviceInfo& card : *cards) {
      if (auto ok = CheckIdPart(card.id, "card UUID"); !ok) return fail(ok.error().message);
      card.id = node.name + kServerSeparator + card.id;
      card.count = 1;  // whole cards: never split, whatever the plugin's split count
      card.custom_info = {{std::string(kEndpointInfo), endpoint}};
      card.facts = {};
    }
    return cards;
  }

  // A server's NVIDIA registration of its cards (their own UUIDs) and the server label.
  NodePublication Publish(const std::vector<DeviceInfo>& cards) const override {
    NodePublication out;
    out.resources = CountResource(spec_, cards);
    if (cards.empty()) return out;
    std::vector<DeviceInfo> own = cards;
    for (DeviceInfo& card : own) {
      if (const auto slash = card.id.find(kServerSeparator); slash != std::string::npos)
        card.id = card.id.substr(slash + 1);
      card.custom_info.clear();
    }
    out.annotation = codec::EncodeDeviceManifest(own);
    out.labels[spec_.pool.server_label] = "";
    return out;
  }

  Result<std::optional<DeviceRequest>> RequestFor(const ContainerView& c) const override {
    auto count = CountResource(c, spec_.resources.count);
    if (!count) return count.error();
    if (!*count) return std::optional<DeviceRequest>();
    auto memory = IntegerResource(c, spec_.resources.memory, "MiB", 0, kInt32Max);
    if (!memory) return memory.error();
    DeviceRequest request;
    request.vendor = spec_.vendor;
    request.count = **count;
    // Memory only filters cards: a server is handed out whole, every card of it at full memory and cores.
    request.memory = MiB(memory->value_or(0));
    request.cores = 100_cores;
    return std::optional<DeviceRequest>(request);
  }

  void AnnotateOnNode(const PodView& pod, const PodVendorDevices& devices, std::span<const DeviceInfo> cards,
                      const Annotations& written, TimePoint now, Annotations& out) const override {
    Annotate(pod, devices, written, now, out);
    // The fit never spans two servers: any card names the endpoint.
    for (const ContainerDevices& container : devices) {
      for (const ContainerDevice& d : container) {
        for (const DeviceInfo& card : cards) {
          const std::string* endpoint = card.id == d.uuid ? card.CustomInfo(kEndpointInfo) : nullptr;
          if (endpoint == nullptr) continue;
          out[endpoint_key_] = *endpoint;
          return;
        }
      }
    }
  }

  Result<bool> Admit(ContainerView& c, PodView& pod) const override;
  // With a library image and a memory request: HAMi-core preloaded in front of the client's CUDA calls, held
  // to the memory asked; true when the pod needs the library delivered.
  Result<bool> ArmMemoryLimit(ContainerView& c) const;

  // A card in use refuses; a card too small for the request is still the server's (it goes with it).
  std::optional<Reason> RefuseCard(const DeviceInfo&, const DeviceUsage& used, const DeviceRequest&,
                                   const CardCheckView&) const override {
    if (used.used > 0) return Reason::kExclusiveDeviceAllocateConflict;
    return std::nullopt;
  }

  CardCharge Charged(const DeviceInfo& card, const DeviceUsage&, const DeviceRequest&, CardCharge,
                     const CardCheckView&) const override {
    return CardCharge{card.devmem, card.devcore};
  }

  bool ChoosesCards(const ChoiceView&) const override { return true; }
  CardChoice ChooseCards(std::span<const DeviceInfo* const> candidates, std::int32_t want,
                         const ChoiceView& view) const override;

 private:
  std::vector<Server> Servers(std::span<const DeviceInfo* const> candidates, const ChoiceView& view) const;

  std::string endpoint_key_;
  std::int64_t default_port_;
  std::string lib_image_;
};

std::vector<Server> RemoteGpuBackend::Servers(std::span<const DeviceInfo* const> candidates,
                                              const ChoiceView& view) const {
  std::unordered_map<const DeviceInfo*, std::size_t> position;
  for (std::size_t i = 0; i < candidates.size(); ++i) position.emplace(candidates[i], i);
  const MiB memreq = view.request != nullptr ? view.request->memory : MiB(0);
  std::vector<Server> servers;
  for (const DeviceInfo& card : view.cards) {
    const std::string_view name = ServerOf(card.id);
    if (name.empty() || !card.health) continue;  // an unhealthy card is no one's to count on
    auto s = std::find_if(servers.begin(), servers.end(), [&](const Server& x) { return x.name == name; });
    if (s == servers.end()) s = servers.insert(servers.end(), Server{name, {}, 0, 0, false});
    const auto p = position.find(&card);
    if (p == position.end()) {
      s->taken = true;  // healthy yet refused: in use, and with it the whole server
      continue;
    }
    s->positions.push_back(p->second);
    if (card.devmem >= memreq) {
      ++s->usable;
    } else {
      ++s->small;
    }
  }
  std::erase_if(servers, [](const Server& s) { return s.taken; });
  // The smallest server that serves the request keeps the larger ones whole for larger requests; equal ones
  // by name, so that every decision picks the same.
  std::sort(servers.begin(), servers.end(), [](const Server& a, const Server& b) {
    if (a.positions.size() != b.positions.size()) return a.positions.size() < b.positions.size();
    return a.name < b.name;
  });
  return servers;
}

CardChoice RemoteGpuBackend::ChooseCards(std::span<const DeviceInfo* const> candidates, std::int32_t want,
                                         const ChoiceView& view) const {
  if (TooFew(candidates, want)) return {};
  int small = 0;
  for (const Server& s : Servers(candidates, view)) {
    if (s.usable >= want) return CardChoice{s.positions, std::nullopt, 0, false};  // in the server's order
    small += s.small;
  }
  // No one server has enough: cards too small for the request say so; otherwise the cards are too few on
  // every server (the shared reasons say it).
  if (small > 0) return CardChoice{{}, Reason::kCardInsufficientMemory, small, false};
  return {};
}

Result<bool> RemoteGpuBackend::ArmMemoryLimit(ContainerView& c) const {
  if (lib_image_.empty()) return false;
  auto memory = IntegerResource(c, spec_.resources.memory, "MiB", 0, kInt32Max);
  if (!memory) return memory.error();
  if (!*memory || **memory <= 0) return false;  // nothing asked, nothing to hold the pod to
  // Prepended: a workload's own preload stays, behind HAMi-core.
  std::string preload = fmt::format("{}/libvgpu.so", kLibMountPath);
  if (const EnvVar* existing = EnvOf(c, "LD_PRELOAD")) {
    if (existing->FromSource())
      return Error{fmt::format("container {} takes LD_PRELOAD from a source, which cannot be combined "
                               "with the memory limit of {}: set it literally, or drop the {} request",
                               c.name, spec_.resources.count, spec_.resources.memory)};
    // Admitted again, the value starts with ours already.
    const bool ours = existing->value == preload || existing->value.starts_with(preload + " ");
    if (ours) preload = existing->value;
    if (!ours && !existing->value.empty()) preload += " " + existing->value;
  }
  const auto mounted = [&](std::string_view name) {
    return std::find(c.volume_mounts.begin(), c.volume_mounts.end(), name) != c.volume_mounts.end() ||
           std::any_of(c.added_mounts.begin(), c.added_mounts.end(),
                       [&](const VolumeMount& m) { return m.name == name; });
  };
  if (!mounted(kLibVolume)) c.added_mounts.push_back({std::string(kLibVolume), std::string(kLibMountPath)});
  SetEnv(c, EnvVar{"LD_PRELOAD", preload, "", false});
  // The limit without a device index is HAMi-core's for every card: the request spread over them.
  SetEnv(c, EnvVar{"CUDA_DEVICE_MEMORY_LIMIT", fmt::format("{}m", **memory), "", false});
  // The pod's own cache: it holds its cards outright, with no peer to account against.
  SetEnv(c,
         EnvVar{"CUDA_DEVICE_MEMORY_SHARED_CACHE", fmt::format("{}/vgpu.cache", kLibMountPath), "", false});
  return true;
}

// The volume and the init container that fill it, once per pod however many containers ask.
void AddLibDelivery(PodView& pod, const std::string& image) {
  const auto named = [](const std::vector<std::string>& names) {
    return std::find(names.begin(), names.end(), kLibVolume) != names.end();
  };
  if (named(pod.volumes) || named(pod.added_empty_dirs)) return;
  pod.added_empty_dirs.emplace_back(kLibVolume);
  pod.added_init_containers.push_back(AddedContainer{
      std::string(kLibVolume),
      image,
      {"sh", "-c", fmt::format("cp {} {}/libvgpu.so", kLibSourceGlob, kLibMountPath)},
      {VolumeMount{std::string(kLibVolume), std::string(kLibMountPath)}}});
}

Result<bool> RemoteGpuBackend::Admit(ContainerView& c, PodView& pod) const {
  const auto asks = [&](const ContainerView& x) {
    return x.limits.contains(spec_.resources.count) || x.requests.contains(spec_.resources.count);
  };
  if (!asks(c)) return false;
  // One pod reaches one lupine server: a second app container asking would be handed a second server.
  for (const ContainerView& other : pod.containers) {
    if (other.name != c.name && asks(other))
      return Error{fmt::format("containers {} and {} both ask for {}: a pod reaches one lupine server, so "
                               "ask in one container",
                               c.name, other.name, spec_.resources.count)};
  }
  auto lib = ArmMemoryLimit(c);
  if (!lib) return lib.error();
  // The endpoint is known only once the pod is placed: the container reads the annotation the scheduler
  // writes (a literal value is replaced).
  SetEnv(c, EnvVar{"LUPINE_SERVER", "", fmt::format("metadata.annotations['{}']", endpoint_key_), false});
  SetEnv(c, EnvVar{"LUPINE_WORKLOAD_ID", "", "metadata.uid", false});
  if (*lib) AddLibDelivery(pod, lib_image_);
  return true;
}

Result<BackendPtr> CreateBackend(const VendorSettings& settings) {
  BackendSpec spec = DefaultSpec();
  if (auto ok = ApplySettings(settings, false, spec); !ok) return ok.error();
  if (auto label = settings.String("serverLabel")) spec.pool.server_label = *label;
  if (spec.pool.server_label.empty()) return Error{"remotegpu.serverLabel: must not be empty"};
  std::string endpoint_key = settings.String("annotations.endpoint").value_or("hami.io/lupine-server");
  if (endpoint_key.empty()) return Error{"remotegpu.annotations.endpoint: must not be empty"};
  std::int64_t port = settings.Int("defaultPort").value_or(kDefaultPort);
  if (port <= 0 || port > 65535) port = kDefaultPort;  // as HAMi: an unusable default is lupine's own
  return BackendPtr(std::make_unique<RemoteGpuBackend>(std::move(spec), std::move(endpoint_key), port,
                                                       settings.String("libImage").value_or("")));
}

}  // namespace

std::int64_t PortOf(std::string_view label_value, std::int64_t fallback) {
  std::int64_t port = 0;
  const char* end = label_value.data() + label_value.size();
  const auto [ptr, ec] = std::from_chars(label_value.data(), end, port);
  if (label_value.empty() || ec != std::errc() || ptr != end || port <= 0 || port > 65535) return fallback;
  return port;
}

std::string JoinHostPort(std::string_view host, std::int64_t port) {
  if (host.find(':') != std::string_view::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

BackendSpec DefaultSpec() {
  BackendSpec s;
  s.vendor = "RemoteGPU";
  s.config_section = std::string(kSection);
  s.display_name = "Remote GPU (lupine)";
  s.health = HealthRule::kAlwaysHealthy;  // a client node runs no device plugin to answer a handshake
  s.keys.register_annotation = "hami.io/node-nvidia-register";  // the servers' stock NVIDIA plugin
  s.keys.allocated = "hami.io/remote-gpu-devices-allocated";
  s.keys.to_allocate = "hami.io/remote-gpu-devices-to-allocate";
  s.resources.count = "nvidia.com/remote-gpu";
  s.resources.memory = "nvidia.com/remote-gpu-memory";
  s.fit.vendor_sizes = true;
  s.fit.split_count_limits = false;
  s.fit.choice_beyond_count = true;
  s.pool.server_label = "hami.io/lupine-server";
  return s;
}

Result<BackendPtr> Create(const VendorSettings& settings) { return CreateBackend(settings); }

VendorModule Module() {
  VendorSchema schema = BasicSchema({{"defaultPort", SettingKind::kInt32},
                                     {"libImage", SettingKind::kString},
                                     {"serverLabel", SettingKind::kString}});
  std::erase_if(schema.fields, [](const SettingField& f) { return f.key == "resourceCoreName"; });
  for (SettingField& f : schema.fields) {
    if (f.key == "annotations") f.fields.push_back({"endpoint", SettingKind::kString});
  }
  VendorModule module{std::string(kSection), std::move(schema), SingleBackend(&Create)};
  // HAMi turns remote GPUs on only where its device config names them.
  module.enabled_by_default = false;
  // A server of two cards and a client with none: the pod runs on the client, on the server's cards.
  module.demo.nodes = {
      {"lupine-server-1", DemoCards("GPU-lupine", 2, 10, 40960, 100, "NVIDIA-A100-SXM4-40GB")},
      {"lupine-client-1", {}}};
  module.demo.pods = R"(
- {name: remote-gpu-whole-server, limits: {nvidia.com/remote-gpu: "1", nvidia.com/remote-gpu-memory: "20000"}}
)";
  return module;
}

}  // namespace hami::backends::remotegpu
