#include "backends/nvidia/nvidia.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <span>

#include "backends/common.h"
#include "core/codec/node_devices.h"
#include "core/codec/pod_devices.h"
#include "core/keys.h"
#include "core/strings.h"

namespace hami::backends::nvidia {
namespace {

// Topology-aware placement among more usable GPUs than asked (their NVLink pair scores): one GPU takes the
// one least connected to the others, keeping the well-connected ones free for multi-GPU pods; several take
// the combination of the highest sum of pairwise scores (in candidate order, the first maximum wins).
std::vector<std::size_t> ChooseTopology(std::span<const DeviceInfo* const> cards, std::int32_t want) {
  const auto score = [&](std::size_t a, std::size_t b) -> std::int64_t {
    auto it = cards[a]->pair_scores.find(cards[b]->id);
    return it == cards[a]->pair_scores.end() ? 0 : it->second;
  };
  const std::size_t n = cards.size();
  if (want == 1) {
    std::size_t best = 0;
    std::int64_t best_sum = std::numeric_limits<std::int64_t>::max();
    for (std::size_t i = 0; i < n; ++i) {
      std::int64_t sum = 0;
      for (std::size_t j = 0; j < n; ++j) {
        if (i != j) sum += score(i, j);
      }
      if (sum < best_sum) {
        best_sum = sum;
        best = i;
      }
    }
    return {best};
  }
  const auto k = static_cast<std::size_t>(want);
  std::vector<std::size_t> idx(k), best;
  for (std::size_t i = 0; i < k; ++i) idx[i] = i;
  std::int64_t best_sum = std::numeric_limits<std::int64_t>::min();
  for (;;) {
    std::int64_t sum = 0;
    for (std::size_t a = 0; a < k; ++a) {
      for (std::size_t b = a + 1; b < k; ++b) sum += score(idx[a], idx[b]);
    }
    if (sum > best_sum) {
      best_sum = sum;
      best = idx;
    }
    std::size_t i = k;
    while (i > 0 && idx[i - 1] == n - k + (i - 1)) --i;
    if (i == 0) break;
    ++idx[i - 1];
    for (std::size_t j = i; j < k; ++j) idx[j] = idx[j - 1] + 1;
  }
  return best;
}

constexpr std::string_view kCorePolicyDefault = "default";

void SetEnv(ContainerView& c, std::string name, std::string value) {
  // Replace rather than append: re-admitting a pod must not stack duplicates (upstream appends). The last
  // entry of that name is the one the kubelet applies, so that one is set: an earlier duplicate cannot undo
  // it.
  for (auto e = c.env.rbegin(); e != c.env.rend(); ++e) {
    if (e->name == name) {
      *e = EnvVar{std::move(name), std::move(value)};  // a literal now, whatever source it had
      return;
    }
  }
  c.env.push_back(EnvVar{std::move(name), std::move(value)});
}

// HAMi's nvidia.migProfileAllowlist: cards whose model contains one of `models` may use only `profiles`.
struct MigAllowEntry {
  std::vector<std::string> models;
  std::vector<std::string> profiles;
};

std::vector<MigAllowEntry> MigAllowlist(const VendorSettings& s) {
  std::vector<MigAllowEntry> out;
  for (const SettingRecord& r : s.Records("migProfileAllowlist")) {
    out.push_back(MigAllowEntry{r.StringList("models"), r.StringList("profiles")});
  }
  return out;
}

class NvidiaBackend final : public Hooked<NvidiaBackend, BasicBackend> {
 public:
  NvidiaBackend(BackendSpec spec, const VendorSettings& s)
      : Hooked(std::move(spec)),
        default_memory_(s.Int("defaultMemory").value_or(0)),
        default_cores_(s.Int("defaultCores").value_or(0)),
        default_gpu_num_(s.Int("defaultGPUNum").value_or(1)),
        overwrite_env_(s.Bool("overwriteEnv").value_or(false)),
        gpu_core_policy_(s.String("gpuCorePolicy").value_or(std::string(kCorePolicyDefault))),
        runtime_class_(s.String("runtimeClassName").value_or("")),
        mig_allowlist_(MigAllowlist(s)) {}

  Result<std::vector<DeviceInfo>> Discover(const NodeView& node) const override {
    auto devices = ManifestDevices(node, spec_.keys.register_annotation);
    if (!devices || devices->empty()) return devices;
    if (!spec_.keys.score_annotation.empty()) {
      if (auto s = node.annotations.find(spec_.keys.score_annotation); s != node.annotations.end()) {
        auto ok = codec::ApplyPairScores(s->second, *devices);
        if (!ok)
          return Error{fmt::format("annotation {}: {}", spec_.keys.score_annotation, ok.error().message)};
      }
    }
    return devices;
  }

  // Its health is carried by the allocatable count: the NVIDIA plugin never answers the handshake.
  NodePublication Publish(const std::vector<DeviceInfo>& cards) const override {
    NodePublication out = BasicBackend::Publish(cards);
    out.answers_handshake = false;
    return out;
  }

  Result<std::optional<DeviceRequest>> RequestFor(const ContainerView& c) const override {
    const auto& r = spec_.resources;
    auto ask = ReadAsk(c, r, "MiB", "percent of a GPU");
    if (!ask) return ask.error();
    if (!*ask) return std::optional<DeviceRequest>();
    auto pct = IntegerResource(c, r.memory_percentage, "percent", std::numeric_limits<std::int64_t>::min(),
                               std::numeric_limits<std::int64_t>::max());
    if (!pct) return pct.error();
    DeviceRequest req;
    req.vendor = spec_.vendor;
    req.count = (*ask)->count;
    std::int64_t memnum = (*ask)->memory.value_or(0) * std::max<std::int64_t>(1, r.memory_factor);
    req.mem_percent = kPercentUnset;  // like HAMi: above 100 means 100, 0 or less means "not given"
    if (*pct && **pct > 0) req.mem_percent = static_cast<std::int32_t>(std::min<std::int64_t>(**pct, 100));
    if (req.mem_percent == kPercentUnset && memnum == 0) {
      if (default_memory_ != 0) {
        memnum = default_memory_;
      } else {
        req.mem_percent = 100;
      }
    }
    req.memory = MiB(memnum);
    req.cores = Cores((*ask)->cores.value_or(default_cores_));
    return std::optional<DeviceRequest>(req);
  }

  void Annotate(const PodView& pod, const PodVendorDevices& devices, const Annotations& written,
                TimePoint now, Annotations& out) const override {
    BasicBackend::Annotate(pod, devices, written, now, out);
    auto mig = codec::MigAllocationsOf(devices);
    if (!mig.empty()) out[std::string(keys::kMigAllocations)] = codec::EncodeMigAllocations(mig);
  }

  Result<bool> Admit(ContainerView& c, PodView& pod) const override {
    const auto& r = spec_.resources;
    if (!r.memory_percentage.empty()) {
      auto pct = ResourceValue(c, r.memory_percentage);
      if (!pct) return pct.error();
      if (*pct) {
        auto v = (*pct)->AsInt64();
        if (!v || *v < 0 || *v > 100) {
          return Error{
              fmt::format("invalid {} value {} in container {}: must be an integer between 0 and 100",
                          r.memory_percentage, (*pct)->text(), c.name)};
        }
      }
    }
    if (!r.priority.empty()) {
      // The runtime reads a plain integer: the quantity's value rounded up, as HAMi writes it ("1k" -> 1000).
      if (auto p = c.limits.find(r.priority); p != c.limits.end()) {
        auto q = Quantity::Parse(p->second);
        if (!q) return Error{fmt::format("{} in container {}: {}", r.priority, c.name, q.error().message)};
        SetEnv(c, "CUDA_TASK_PRIORITY", std::to_string(q->CeilValue()));
      }
    }
    if (!gpu_core_policy_.empty() && gpu_core_policy_ != kCorePolicyDefault) {
      SetEnv(c, "GPU_CORE_UTILIZATION_POLICY", gpu_core_policy_);
    }
    const auto present = [&](const std::string& name) {
      return !name.empty() && (c.limits.contains(name) || c.requests.contains(name));
    };
    // A count in requests alone counts too: otherwise a second admission of this container's result (its
    // cores written by the first) would add a default count the first did not.
    bool found = present(r.count);
    if (!found && default_gpu_num_ > 0) {
      const bool asks = (!r.cores.empty() && c.limits.contains(r.cores)) ||
                        (!r.memory.empty() && c.limits.contains(r.memory)) ||
                        (!r.memory_percentage.empty() && c.limits.contains(r.memory_percentage));
      if (asks) {
        c.limits[r.count] = std::to_string(default_gpu_num_);
        found = true;
      }
    }
    if (present(r.count) && !present(r.cores)) {
      bool exclusive = r.memory.empty() || !present(r.memory);
      if (present(r.memory_percentage)) {
        auto pct = ResourceValue(c, r.memory_percentage);
        exclusive = pct && *pct && (*pct)->AsInt64() == 100;
      }
      if (exclusive && !r.cores.empty()) {
        c.limits[r.cores] = "100";
        found = true;
      }
    }
    if (found && !pod.runtime_class_name && !runtime_class_.empty()) pod.runtime_class_name = runtime_class_;
    if (!found && overwrite_env_) SetEnv(c, "NVIDIA_VISIBLE_DEVICES", "none");
    return found;
  }

  // The topology-aware policy places a request by the GPUs' pair scores.
  bool ChoosesCards(const ChoiceView& view) const override { return view.topology; }
  CardChoice ChooseCards(std::span<const DeviceInfo* const> candidates, std::int32_t want,
                         const ChoiceView&) const override {
    if (TooFew(candidates, want)) return {};
    std::vector<std::size_t> chosen;
    if (static_cast<std::int32_t>(candidates.size()) == want) {
      for (std::size_t i = 0; i < candidates.size(); ++i) chosen.push_back(i);
    } else {
      chosen = ChooseTopology(candidates, want);
    }
    return CardChoice{std::move(chosen), {}, 0, false};
  }

  bool MigProfileAllowed(std::string_view model, std::string_view profile) const override {
    bool model_listed = false;
    for (const auto& entry : mig_allowlist_) {
      const bool matches = std::any_of(entry.models.begin(), entry.models.end(),
                                       [&](const std::string& m) { return ContainsIgnoreCase(model, m); });
      if (!matches) continue;
      model_listed = true;
      if (std::find(entry.profiles.begin(), entry.profiles.end(), profile) != entry.profiles.end())
        return true;
    }
    return !model_listed;
  }

 private:
  std::int64_t default_memory_;
  std::int64_t default_cores_;
  std::int64_t default_gpu_num_;
  bool overwrite_env_;
  std::string gpu_core_policy_;
  std::string runtime_class_;
  std::vector<MigAllowEntry> mig_allowlist_;
};

}  // namespace

BackendSpec DefaultSpec() {
  BackendSpec s;
  s.vendor = "NVIDIA";
  s.config_section = "nvidia";
  s.display_name = "NVIDIA GPU";
  s.health = HealthRule::kHandshakeAndDeviceChecks;
  s.keys.register_annotation = "hami.io/node-nvidia-register";
  s.keys.score_annotation = "hami.io/node-nvidia-score";
  s.keys.handshake = "hami.io/node-handshake";
  s.keys.allocated = "hami.io/vgpu-devices-allocated";
  s.keys.to_allocate = "hami.io/vgpu-devices-to-allocate";
  s.keys.node_lock = "hami.io/mutex.lock";
  s.keys.use_uuid = "nvidia.com/use-gpuuuid";
  s.keys.nouse_uuid = "nvidia.com/nouse-gpuuuid";
  s.keys.use_type = "nvidia.com/use-gputype";
  s.keys.nouse_type = "nvidia.com/nouse-gputype";
  s.resources = {"nvidia.com/gpu",      "nvidia.com/gpumem",   "nvidia.com/gpumem-percentage",
                 "nvidia.com/gpucores", "nvidia.com/priority", 1};
  s.fit.cordon = true;
  s.fit.numa_bind_annotation = "nvidia.com/numa-bind";
  s.fit.mode_annotation = "nvidia.com/vgpu-mode";
  s.fit.quota_in_fit = true;
  s.fit.mig = true;
  return s;
}

Result<BackendPtr> Create(const VendorSettings& settings) {
  BackendSpec spec = DefaultSpec();
  if (auto ok = ApplySettings(settings, true, spec); !ok) return ok.error();
  const auto non_negative = [&](const std::optional<std::int64_t>& v, std::string_view key) -> Result<void> {
    if (v && *v < 0) return Error{fmt::format("nvidia.{}: {} is negative", key, *v)};
    return {};
  };
  const auto default_cores = settings.Int("defaultCores");
  if (auto ok = non_negative(settings.Int("defaultMemory"), "defaultMemory"); !ok) return ok.error();
  if (auto ok = non_negative(default_cores, "defaultCores"); !ok) return ok.error();
  if (auto ok = non_negative(settings.Int("defaultGPUNum"), "defaultGPUNum"); !ok) return ok.error();
  if (default_cores && *default_cores > 100) {
    return Error{fmt::format("nvidia.defaultCores: {} is above 100 (percent of one GPU)", *default_cores)};
  }
  if (const auto policy = settings.String("gpuCorePolicy");
      policy && *policy != "default" && *policy != "force" && *policy != "disable") {
    return Error{fmt::format("nvidia.gpuCorePolicy: '{}' is not one of default, force, disable", *policy)};
  }
  for (const auto& entry : MigAllowlist(settings)) {
    if (entry.models.empty() || entry.profiles.empty()) {
      return Error{"nvidia.migProfileAllowlist: every entry needs both models and profiles"};
    }
    for (const auto& p : entry.profiles) {
      const auto g = p.find("g.");
      if (g == std::string::npos || g == 0 ||
          !std::all_of(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(g),
                       [](char ch) { return ch >= '0' && ch <= '9'; })) {
        return Error{
            fmt::format("nvidia.migProfileAllowlist: profile '{}' does not look like <N>g.<memory>", p)};
      }
    }
  }
  return BackendPtr(std::make_unique<NvidiaBackend>(std::move(spec), settings));
}

VendorModule Module() {
  std::vector<SettingField> fields;
  for (const char* key : {"resourceMemoryPercentageName", "resourcePriorityName"})
    fields.push_back({key, SettingKind::kString});
  fields.push_back({"overwriteEnv", SettingKind::kBool});
  for (const char* key : {"defaultMemory", "defaultCores", "defaultGPUNum", "memoryFactor"})
    fields.push_back({key, SettingKind::kInt32});
  for (const char* key : {"gpuCorePolicy", "runtimeClassName"}) fields.push_back({key, SettingKind::kString});
  fields.push_back({"migProfileAllowlist",
                    SettingKind::kRecordList,
                    {{"models", SettingKind::kStringList, {}, true},
                     {"profiles", SettingKind::kStringList, {}, true}}});
  // Keys HAMi's device plugin reads from the same section; the scheduler has no use for them.
  std::vector<std::string> plugin_keys{
      "deviceSplitCount", "deviceMemoryScaling", "deviceCoreScaling", "preConfiguredDeviceMemory",
      "libCudaLogLevel",  "enableNumaTopology",  "disableCoreLimit",  "knownMigGeometries"};
  VendorModule module{"nvidia", BasicSchema(std::move(fields), std::move(plugin_keys)),
                      SingleBackend(&Create)};
  module.demo.nodes = {{"gpu-t4-1", DemoCards("GPU-t4a", 2, 10, 15360, 100, "NVIDIA-Tesla T4")},
                       {"gpu-a100-1", DemoCards("GPU-a100a", 4, 4, 40960, 100, "NVIDIA-A100-SXM4-40GB")}};
  module.demo.pods = R"(
- {name: shared-gpu-1, limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: "3000", nvidia.com/gpucores: "30"}}
- {name: shared-gpu-2, limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: "3000", nvidia.com/gpucores: "30"}}
- {name: shared-gpu-3, limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: "3000", nvidia.com/gpucores: "30"}}
- {name: half-card, limits: {nvidia.com/gpu: "1", nvidia.com/gpumem-percentage: "50", nvidia.com/gpucores: "20"}}
- {name: two-whole-cards, limits: {nvidia.com/gpu: "2", nvidia.com/gpucores: "100"}}
- {name: two-containers, limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: "2000", nvidia.com/gpucores: "10"},
   second: {nvidia.com/gpu: "1", nvidia.com/gpumem: "2000", nvidia.com/gpucores: "10"}}
- {name: init-then-serve, init: {nvidia.com/gpu: "1", nvidia.com/gpumem: "6000", nvidia.com/gpucores: "20"},
   limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: "4000", nvidia.com/gpucores: "20"}}
- {name: too-big, limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: "100000"}}
)";
  return module;
}

}  // namespace hami::backends::nvidia
