#pragma once
// Helpers shared by the backends: reading container resources (limits first, then requests) with
// errors that name the resource and what was expected, applying config overrides, and a base class with the
// behaviour most vendors share.
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/backend.h"
#include "core/quantity.h"

namespace hami::backends {

// The container with its limits alone: for a vendor that reads its resources from the limits only.
ContainerView LimitsOnly(const ContainerView& c);

// The resource's quantity from limits, else requests; nullopt when absent; an error when unreadable.
Result<std::optional<Quantity>> ResourceValue(const ContainerView& c, const std::string& name);
// Same, as an exact integer in [lo, hi]; `unit` completes "is not a whole number of <unit>".
Result<std::optional<std::int64_t>> IntegerResource(const ContainerView& c, const std::string& name,
                                                    std::string_view unit, std::int64_t lo, std::int64_t hi);
// The device count: nullopt when absent or 0; an error when negative, fractional or too large.
Result<std::optional<std::int32_t>> CountResource(const ContainerView& c, const std::string& name);

// The count, memory and core resources of one container, read with the errors above; nullopt when the
// container asks for no device of this vendor. `memory` is in units of the memory resource (not yet scaled).
struct ContainerAsk {
  std::int32_t count = 0;
  std::optional<std::int64_t> memory;
  std::optional<std::int64_t> cores;
};
Result<std::optional<ContainerAsk>> ReadAsk(const ContainerView& c, const ResourceNames& names,
                                            std::string_view memory_unit, std::string_view core_unit);
// The request of a vendor whose cards are shared by memory and cores per card: the count, the memory in MiB
// (`mib_per_unit` per unit asked; none asked is the whole card) and the cores (`default_cores` when none).
// nullopt when the container asks for no device of this vendor.
Result<std::optional<DeviceRequest>> SharedCardRequest(const ContainerView& c, const BackendSpec& spec,
                                                       std::string_view memory_unit,
                                                       std::string_view core_unit, std::int64_t mib_per_unit,
                                                       std::int64_t default_cores);

// The request of a vendor whose cards are taken whole: the count (limits, else requests), the whole card's
// memory (`memory` MiB named in the allocation, 0 = none) and all its cores. nullopt when it asks none.
Result<std::optional<DeviceRequest>> WholeCardRequest(const ContainerView& c, const BackendSpec& spec,
                                                      MiB memory = MiB(0));

// Devices synthesized from node capacity (Cambricon, Moore Threads): one card per `cores_per_card` of the
// core resource, the memory resource (in units of `names.memory_factor` MiB) shared evenly, ids
// "<node>-<id_infix>-<i>". No core capacity means no device plugin: no devices, no error.
Result<std::vector<DeviceInfo>> CapacityDevices(const NodeView& node, const BackendSpec& spec,
                                                std::int64_t cores_per_card, std::string_view id_infix);
// What such a plugin publishes: no annotation; the count resource (slots of the healthy cards), the core
// resource (`cores_per_card` per healthy card) and the memory resource (their MiB over the memory factor).
NodePublication CapacityPublication(const BackendSpec& spec, const std::vector<DeviceInfo>& cards,
                                    std::int64_t cores_per_card);
// The count resource of a plugin that lists its cards in an annotation: the healthy cards' slots.
std::map<std::string, std::string> CountResource(const BackendSpec& spec,
                                                 const std::vector<DeviceInfo>& cards);

// A vendor section's schema: the three resource names every section has, then the vendor's own `fields`,
// then the `annotations` group of protocol key overrides (this project's extension; HAMi hard-codes the
// keys). `ignored`: keys others (HAMi's device plugin) read from the same section.
VendorSchema BasicSchema(std::vector<SettingField> fields = {}, std::vector<std::string> ignored = {});

// The schema of a section that names only its count resource (and the `annotations` group): a vendor whose
// pods ask for whole devices.
VendorSchema CountSchema();

// HAMi's flags `--<prefix>-name`, `--<prefix>-memory` and `--<prefix>-cores`: they never reach HAMi's
// scheduler either (the device config names the resources), so they are accepted with no effect.
std::vector<VendorFlag> ResourceNameFlags(std::string_view prefix, std::string_view section);

// `n` demo cards "<prefix>-<i>" as a device plugin lists them (two per NUMA node).
std::vector<DeviceInfo> DemoCards(std::string_view prefix, int n, std::int32_t split, std::int64_t memory_mib,
                                  std::int32_t cores, std::string_view type);

// Overrides keys and resource names in `spec` from `settings`; memory factor too when `factor_configurable`.
Result<void> ApplySettings(const VendorSettings& settings, bool factor_configurable, BackendSpec& spec);

// The JSON device manifest in the node's annotation `key`: no devices when the node has none (no plugin of
// this vendor), an error naming the annotation when it is malformed.
Result<std::vector<DeviceInfo>> ManifestDevices(const NodeView& node, const std::string& key);

// The same for a device list in the legacy colon format, and what such a plugin publishes (the list, ":" for
// none, and the count resource).
Result<std::vector<DeviceInfo>> LegacyDevices(const NodeView& node, const std::string& key);
NodePublication LegacyPublication(const BackendSpec& spec, const std::vector<DeviceInfo>& cards);

// A chip's commonWord (`at` names its config entry): it names the chip's annotation keys, so at most
// kMaxCommonWord letters, digits, '-', '_' or '.', starting and ending with a letter or digit.
inline constexpr std::size_t kMaxCommonWord = 63 - std::string_view("-devices-to-allocate").size();
Result<void> CheckCommonWord(std::string_view cw, std::string_view at);

// For Backend::ChooseCards: the candidates' card indexes, ascending and each once, and the positions of the
// candidates that have the chosen `indexes` (the first with each), in the order of `indexes`.
std::vector<std::int32_t> CandidateIndexes(std::span<const DeviceInfo* const> candidates);
std::vector<std::size_t> PositionsOf(std::span<const DeviceInfo* const> candidates,
                                     std::span<const std::int32_t> indexes);

// A count in a node's status.capacity: 0 when absent; an error when not a non-negative integer.
Result<std::int64_t> CapacityCount(const NodeView& node, const std::string& name);

inline constexpr std::int64_t kInt32Max = 2147483647;
// More cards than any node has: a capacity of "2Gi" would otherwise make millions (and exhaust memory).
inline constexpr std::int64_t kMaxCardsPerNode = 1024;

// A count of whole cards in a node's status.capacity (CapacityCount), at most kMaxCardsPerNode.
Result<std::int64_t> CapacityCards(const NodeView& node, const std::string& name);
// The whole cards such a count makes: card i is "<node>-<infix>-<i>", healthy, otherwise a copy of `card`
// (its split count, memory, cores and type).
Result<std::vector<DeviceInfo>> CapacityCardList(const NodeView& node, const std::string& name,
                                                 std::string_view infix, const DeviceInfo& card);
// What a plugin that counts whole cards in its capacity publishes: the healthy cards, under `name`.
NodePublication CapacityCardCount(const std::string& name, const std::vector<DeviceInfo>& cards);

// Behaviour shared by most vendors: both pod keys carry the same encoded list, admission only reports whether
// the count resource is in the limits.
class BasicBackend : public Backend {
 public:
  explicit BasicBackend(BackendSpec spec) : spec_(std::move(spec)) {}
  const BackendSpec& Spec() const override { return spec_; }
  void Annotate(const PodView& pod, const PodVendorDevices& devices, const Annotations& written,
                TimePoint now, Annotations& out) const override;
  Result<bool> Admit(ContainerView& container, PodView& pod) const override;
  // The JSON device manifest in the register annotation, and the count resource.
  NodePublication Publish(const std::vector<DeviceInfo>& cards) const override;

 protected:
  BackendSpec spec_;
};

// A vendor whose devices are shared by count alone (a task per slot of the register annotation's `count`,
// no memory or core share): its plugin lists them in a JSON register annotation, each scored as 100 cores
// (they publish none), and a container asks for a number of them (limits, else requests).
class CountBackend : public BasicBackend {
 public:
  using BasicBackend::BasicBackend;
  Result<std::vector<DeviceInfo>> Discover(const NodeView& node) const override;
  Result<std::optional<DeviceRequest>> RequestFor(const ContainerView& container) const override;
};
// CountBackend as it is, for a vendor with no rule of its own.
class PlainCountBackend final : public Hooked<PlainCountBackend, CountBackend> {
 public:
  using Hooked::Hooked;
};

}  // namespace hami::backends
