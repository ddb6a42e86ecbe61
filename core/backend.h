#pragma once
// The vendor seam. A Backend decodes a node's devices, turns a container's resources into a request, writes
// the pod annotations of an allocation and mutates pods at admission. It is pure: no I/O, no clock (time is
// passed in), and says what its vendor's device plugin publishes (the inverse of its discovery, for the
// simulated plugins). Besides those it gives the shared core a description (BackendSpec: protocol keys,
// resource names, health rule, the shared fit rules it opts into) and, optionally, fit hooks of its own: its
// card checks and charges, its placement of several cards, its pod classes, its score. A hook is on when
// the backend overrides it, and only then (BackendHooks, read once per backend). Registration is explicit
// (BackendRegistry, filled by backends/builtin.cc from main).
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/clock.h"
#include "core/model.h"
#include "core/policy.h"
#include "core/reason.h"
#include "core/result.h"
#include "core/settings.h"

namespace hami {

enum class HealthRule { kAlwaysHealthy, kHandshake, kHandshakeAndDeviceChecks };

// Every protocol key one backend uses (docs/DECISIONS.md, "HAMi's protocol"); each may be set in config.
struct BackendKeys {
  std::string register_annotation;   // node annotation with the device list ("" for capacity discovery)
  std::string score_annotation;      // node annotation with topology pair scores ("" = none)
  std::string handshake;             // node handshake annotation ("" = no handshake)
  std::string allocated;             // pod annotation: devices chosen per container
  std::string to_allocate;           // pod annotation: devices the device plugin still has to set up
  std::string node_lock;             // node lock annotation ("" = the vendor takes no lock)
  std::string use_uuid, nouse_uuid;  // pod annotations restricting device UUIDs
  // A second pair that restricts them as well (a card must pass both): a vendor's legacy keys.
  std::string use_uuid_alt, nouse_uuid_alt;
  std::string use_type, nouse_type;  // pod annotations restricting card types ("" = not supported)
};

struct ResourceNames {
  std::string count;               // e.g. nvidia.com/gpu (the Allocatable gate of the health check)
  std::string memory;              // e.g. nvidia.com/gpumem
  std::string memory_percentage;   // NVIDIA only
  std::string cores;               // e.g. nvidia.com/gpucores
  std::string priority;            // NVIDIA only
  std::int64_t memory_factor = 1;  // MiB per unit of the memory resource
  // The core resource is percent of a card whose devcore counts compute units rather than percent: a
  // request takes that share of each card's units (at least one), its allocation carries the units, and
  // the namespace quota counts the percent again (rounded up).
  bool cores_share_of_units = false;
};

// A soft-split (hami-core) mode a pod asks for with an annotation and a node offers with another: such a pod
// is refused (ModeNotFit) on a node that does not offer it, and counts a card's cores as 100 percent.
struct SoftSplitRule {
  std::string pod_annotation;   // the pod asks with this annotation...
  std::string pod_value;        // ...set to this value ("hami-core")
  std::string node_annotation;  // a node's annotation: "true" offers it; any other value does not
  bool offered_by_default = false;  // when the node carries no such annotation
};

// Rules of the shared fit that a vendor opts into. The vendor's own fit hooks are not switched here: each
// is on when the backend overrides it (BackendHooks). The rules that hand part of the shared checks to a
// hook need that hook; BackendRegistry::Create refuses a backend that sets one without it.
struct FitRules {
  bool cordon = false;                         // honours node annotation hami.io/device-cordon
  std::string numa_bind_annotation;            // pod annotation that keeps a request within one NUMA node
  std::string mode_annotation;                 // pod annotation restricting device modes (substring match)
  bool quota_in_fit = false;                   // ResourceQuota checked per candidate device
  bool mig = false;                            // MIG-mode devices are split into instances
  bool same_device_across_containers = false;  // later containers must sit on the earlier ones' device
  std::optional<SoftSplitRule> soft_split;
  // A card's split count bounds how many tasks share it; false: the vendor's own rule (RefuseCard) does.
  bool split_count_limits = true;
  // Backend::RefuseCard runs once more before any shared check of a card (CardCheckView::before_shared),
  // for a vendor whose own checks come first, health included.
  bool vendor_checks_first = false;
  // Backend::RefuseCard checks a card's free memory and cores against what Backend::Charged will charge,
  // and the shared memory and core checks do not run (e.g. hard partitions sized by the node's profiles).
  bool vendor_sizes = false;
  // Backend::AllocationScore measures how well each container's own cards are kept together (e.g. in one
  // interconnect group) rather than how the pod packs on the node: it ranks first under either policy
  // (spread subtracts it).
  bool vendor_score_together = false;
  // Backend::ChooseCards may choose more cards than the request's count (a whole server of a pool): a
  // choice of at least that many fits, and every chosen card is the request's.
  bool choice_beyond_count = false;
};

// A vendor whose cards are no node's own but a cluster-wide pool (GPUs served over the network): the nodes
// carrying `server_label` contribute their cards (Backend::Discover lists them there, each named
// `<server>/<uuid>`) and host no pod of this vendor; every other node is a client that offers the whole
// pool, whose usage is charged once for the cluster (ClusterState keeps it).
struct PoolRule {
  std::string server_label;  // "" = the vendor's cards are its nodes' own
  bool Active() const { return !server_label.empty(); }
};

struct NodeLockRule {
  bool owner_aware = true;  // value carries <ns>,<pod>; false = bare timestamp (Cambricon)
  std::optional<std::chrono::seconds> fixed_expiry;  // nullopt: the configured --node-lock-timeout
};

// What a vendor's device plugin writes on its node for a set of cards: the inverse of Backend::Discover.
// The simulated device plugins (sim/) write exactly this; the vendor contract checks that Discover reads it
// back.
struct NodePublication {
  std::optional<std::string> annotation;         // the register annotation's value; nullopt: none written
  std::map<std::string, std::string> resources;  // status.capacity (= allocatable)
  bool answers_handshake = true;  // the NVIDIA plugin does not: its allocatable count carries its health
  std::map<std::string, std::string> labels;  // node labels that go with it (a pool server's)
};

struct BackendSpec {
  std::string vendor;          // vendor key written in pod annotations and used as request type: "NVIDIA"
  std::string config_section;  // HAMi device-config section: "nvidia"
  std::string display_name;    // "NVIDIA GPU"
  HealthRule health = HealthRule::kAlwaysHealthy;
  BackendKeys keys;
  ResourceNames resources;
  FitRules fit;
  NodeLockRule lock;
  PoolRule pool;
};

// What one card taken for a request is charged.
struct CardCharge {
  MiB mem;
  Cores cores;
};

// How many pods of one class (Backend::PodClass) hold a card.
struct ClassCount {
  std::uint8_t pod_class = 0;
  std::int32_t pods = 0;
  friend bool operator==(const ClassCount&, const ClassCount&) = default;
};
// The pods holding one card, per class (classes 0 are not counted), each class once, in class order.
using CardClasses = std::vector<ClassCount>;

// What Backend::RefuseCard may read besides the card: this vendor's cards on the node with their usage so far
// (index-aligned; the card under test is one of them) and whether the pod asks for cards no one else uses.
struct CardCheckView {
  std::span<const DeviceInfo> cards;
  std::span<const DeviceUsage> used;
  bool mutex = false;  // the pod's GPU policy contains `mutex`
  // With pod classes (Backend::PodClass): the recorded holders of each card by class (index-aligned with
  // cards) and the class of the pod being placed; empty and 0 otherwise.
  std::span<const CardClasses> classes;
  std::uint8_t pod_class = 0;
  // FitRules::vendor_checks_first: this call comes before the shared checks (the other one after them).
  bool before_shared = false;
};

// What Backend::ChoosesCards and ChooseCards may read besides the candidates: the request, whether the pod's
// GPU policy asks for topology-aware placement, and, for ChooseCards only (empty for ChoosesCards, which is
// asked of every candidate node and reads nothing of the node), this vendor's cards on the node (usable or
// not) and, for a vendor with pod classes (Backend::PodClass), the class of the pod and each candidate's
// recorded holders by class (index-aligned with the candidates).
struct ChoiceView {
  const DeviceRequest* request = nullptr;
  std::span<const DeviceInfo> cards;
  bool topology = false;
  std::uint8_t pod_class = 0;
  std::span<const CardClasses* const> classes;
};

// A vendor's placement of one request (Backend::ChooseCards): the positions taken among the candidates,
// exactly the request's count of them when it fits. When it does not, `refusal` names why in the node's
// refusal counts (`refused` cards, counted against the request's count or against the vendor's cards on the
// node); without one, the shared reasons alone say why (e.g. fewer usable cards than asked).
struct CardChoice {
  std::vector<std::size_t> chosen;
  std::optional<Reason> refusal;
  int refused = 0;
  bool over_request = false;
};
// The answer of a vendor that arranges `want` cards among enough candidates: its `chosen` positions when
// there are `want` of them; otherwise no arrangement of the usable cards serves the request (NumaNotFit,
// once, against the vendor's cards).
inline CardChoice Arranged(std::vector<std::size_t> chosen, std::int32_t want) {
  if (static_cast<std::int32_t>(chosen.size()) == want) return CardChoice{std::move(chosen), std::nullopt, 0, false};
  return CardChoice{{}, Reason::kNumaNotFit, 1, false};
}
// Whether `candidates` are fewer than `want`: no arrangement to choose, the shared reasons say why.
inline bool TooFew(std::span<const DeviceInfo* const> candidates, std::int32_t want) {
  return static_cast<std::int64_t>(candidates.size()) < want;
}

// Which of a backend's fit hooks it overrides: each is called only then (HooksOf).
struct BackendHooks {
  bool refuse_card = false;       // RefuseCard
  bool charged = false;           // Charged
  bool chooses_cards = false;     // ChoosesCards and ChooseCards (a pair: overridden together)
  bool pod_class = false;         // PodClass
  bool allocation_score = false;  // AllocationScore
};

// One vendor's part of a fitted node, for Backend::AllocationScore.
struct AllocationView {
  std::span<const DeviceInfo> node_cards;  // every card of the node, all vendors
  std::span<const DeviceInfo> cards;       // this vendor's
  std::span<const DeviceUsage> before;     // their usage before the pod (index-aligned with cards)
  std::span<const int> chosen;             // positions in cards taken by the pod, each once, ascending
  // The same positions per container of the pod (init containers first; empty for a container without
  // cards of this vendor), in the order they were chosen.
  std::span<const std::vector<int>> containers;
  // Per container: its request of this vendor, or null.
  std::span<const DeviceRequest* const> requests;
  const PodView* pod = nullptr;
  bool spread = false;  // the pod's node policy is spread (else binpack)
  // With pod classes (Backend::PodClass): the class of the pod, and each card's holders by class before it
  // (index-aligned with cards; empty otherwise).
  std::uint8_t pod_class = 0;
  std::span<const CardClasses> classes_before;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual const BackendSpec& Spec() const = 0;
  const std::string& Vendor() const { return Spec().vendor; }

  // The node's devices of this vendor: empty when the node publishes none (no device plugin of this vendor),
  // an error when what it publishes is malformed (the message names the annotation or resource and what was
  // expected). A registry keeps a vendor's previous devices when discovery errors.
  virtual Result<std::vector<DeviceInfo>> Discover(const NodeView& node) const = 0;
  // What this vendor's device plugin publishes for `cards` (unhealthy ones included, as the plugin lists
  // them); Discover of a node carrying it finds those cards.
  virtual NodePublication Publish(const std::vector<DeviceInfo>& cards) const = 0;
  // What this vendor's device plugin knows of its cards beyond what a simulated node is given (e.g. the
  // interconnect group of each card by its position): filled in by the simulated plugin before Publish, so
  // that Publish stays the exact inverse of Discover.
  virtual void AddPluginFacts(std::vector<DeviceInfo>& /*cards*/) const {}

  // What the container asks of this vendor: nullopt when it asks nothing, an error when a value cannot be
  // read (docs/DECISIONS.md, D7: e.g. `nvidia.com/gpumem: 16Gi` is not a MiB count).
  virtual Result<std::optional<DeviceRequest>> RequestFor(const ContainerView& container) const = 0;

  // Adds the pod annotations for this vendor's part of an allocation of `pod` (`devices` is index-aligned
  // with the pod's containers, init first, and holds at least one device). `written` holds what was decided
  // so far (hami.io/vgpu-node...).
  virtual void Annotate(const PodView& pod, const PodVendorDevices& devices, const Annotations& written,
                        TimePoint now, Annotations& out) const = 0;
  // Annotate, for a vendor whose annotations name facts of the cards taken that the allocation does not
  // carry (e.g. the partition profile carved on each, which the node's manifest names): `cards` are this
  // vendor's cards on the pod's node. The scheduler calls this one; by default it is Annotate.
  virtual void AnnotateOnNode(const PodView& pod, const PodVendorDevices& devices,
                              std::span<const DeviceInfo> /*cards*/, const Annotations& written,
                              TimePoint now, Annotations& out) const {
    Annotate(pod, devices, written, now, out);
  }

  // Admission: may rewrite the container (and pod); true when the container uses this vendor's resources.
  virtual Result<bool> Admit(ContainerView& container, PodView& pod) const = 0;

  // --- fit hooks: each is called only by a backend that overrides it (BackendHooks). A concrete backend
  // derives through Hooked<Self, Base>, which reads its overrides.
  virtual BackendHooks Hooks() const = 0;

  // The vendor's own refusal of a card that passed the shared checks, or nullopt when `request` may use it;
  // `node` shows the vendor's other cards on the node.
  virtual std::optional<Reason> RefuseCard(const DeviceInfo& /*card*/, const DeviceUsage& /*used*/,
                                           const DeviceRequest& /*request*/,
                                           const CardCheckView& /*node*/) const {
    return std::nullopt;
  }
  // What a card taken for `request` is charged, e.g. a mask of its cores; `shared` is what the shared rules
  // would charge; `node` as for RefuseCard.
  virtual CardCharge Charged(const DeviceInfo& /*card*/, const DeviceUsage& /*used*/,
                             const DeviceRequest& /*request*/, CardCharge shared,
                             const CardCheckView& /*node*/) const {
    return shared;
  }
  // Whether this vendor places the request itself (ChooseCards): the fit then collects every usable card,
  // in the policy's order, before choosing; otherwise it takes the first `count` of them. The answer may
  // depend on the request's count and the pod's policy only: a decision asks once per count.
  virtual bool ChoosesCards(const ChoiceView& /*view*/) const { return false; }
  // The cards to take among the usable `candidates` (in the policy's order; perhaps fewer than `want`).
  virtual CardChoice ChooseCards(std::span<const DeviceInfo* const> /*candidates*/, std::int32_t /*want*/,
                                 const ChoiceView& /*view*/) const {
    return {};
  }
  // The class of `pod` as this vendor's rules see it, recorded with each card the pod holds (the ledger
  // counts each card's holders per class, e.g. online and offline workloads that may not mix on a card);
  // 0 = a pod of no class.
  virtual std::uint8_t PodClass(const PodView& /*pod*/) const { return 0; }
  // How well the cards chosen for a pod pack on the node, added to the node score as the node's usage is:
  // binpack prefers the highest, spread the lowest (FitRules::vendor_score_together: kept together instead).
  virtual double AllocationScore(const AllocationView& /*view*/) const { return 0; }

  // Whether a MIG profile may be used on a card of `model` (config allow-list; empty list = all).
  virtual bool MigProfileAllowed(std::string_view model, std::string_view profile) const {
    (void)model;
    (void)profile;
    return true;
  }
};

// The hooks `Self` overrides (directly or through a base between it and Backend). ChoosesCards and
// ChooseCards go together: one without the other would never be called, or always answer "in order".
template <class Self>
constexpr BackendHooks HooksOf() {
  constexpr bool chooses = !std::is_same_v<decltype(&Self::ChoosesCards), decltype(&Backend::ChoosesCards)>;
  constexpr bool choose = !std::is_same_v<decltype(&Self::ChooseCards), decltype(&Backend::ChooseCards)>;
  static_assert(chooses == choose, "a backend overrides ChoosesCards and ChooseCards together");
  return BackendHooks{
      !std::is_same_v<decltype(&Self::RefuseCard), decltype(&Backend::RefuseCard)>,
      !std::is_same_v<decltype(&Self::Charged), decltype(&Backend::Charged)>,
      chooses,
      !std::is_same_v<decltype(&Self::PodClass), decltype(&Backend::PodClass)>,
      !std::is_same_v<decltype(&Self::AllocationScore), decltype(&Backend::AllocationScore)>,
  };
}

// The base every concrete backend derives through: `class X final : public Hooked<X, BasicBackend>`.
template <class Self, class Base = Backend>
class Hooked : public Base {
 public:
  using Base::Base;
  BackendHooks Hooks() const final { return HooksOf<Self>(); }
};

// Whether the shared fit rules `backend` sets have the hooks they hand work to: an error naming the rule.
Result<void> CheckFitRules(const Backend& backend);

using BackendPtr = std::unique_ptr<Backend>;
// Builds the backends of one config section: most vendors build one; a section that lists chips builds one
// per chip (each its own vendor key, resources, annotations and handshake); none is a valid answer.
using BackendFactory = std::function<Result<std::vector<BackendPtr>>(const VendorSettings&)>;

// A factory of exactly one backend, for the vendors whose section describes one.
template <class Create>
BackendFactory SingleBackend(Create create) {
  return [create](const VendorSettings& settings) -> Result<std::vector<BackendPtr>> {
    auto backend = create(settings);
    if (!backend) return backend.error();
    std::vector<BackendPtr> list;
    list.push_back(std::move(*backend));
    return list;
  };
}

// A flag of HAMi's command line that belongs to one vendor; config/ parses it with the others.
struct VendorFlag {
  enum class Effect {
    kEnables,   // a switch: true builds the section's backends (HAMi's --enable-<vendor>)
    kNoEffect,  // accepted so HAMi's chart command line works; a warning says the device config decides
  };
  std::string name;  // without the leading dashes: "enable-<vendor>"
  Effect effect = Effect::kNoEffect;
  bool boolean = false;  // a switch: `--name` alone means true; else it takes a value (shown as NAME)
  std::string help;      // one line for --help
};

// What `hami-scheduler demo` runs of a vendor: nodes with the cards its device plugin would list, and sample
// pods, a YAML list of {name, limits, second: a sidecar's limits, init: an init container's limits}.
struct DemoNode {
  std::string name;
  std::vector<DeviceInfo> cards;
  std::string vendor = {};  // the backend whose plugin lists them; "" = the section's only backend
};
struct VendorDemo {
  std::vector<DemoNode> nodes;
  std::string pods;
};

// Everything the rest of the binary needs to know of one vendor: its device-config section, that section's
// schema, its flags, its demo and the factory. Each backends/<vendor>/ folder exports one (`Module()`).
struct VendorModule {
  std::string section;  // HAMi device-config section: "nvidia"
  VendorSchema schema;
  BackendFactory create;
  // Start-up warnings about settings that are valid but likely wrong for the device plugins in use (e.g.
  // Hygon's to-allocate key under HAMi's own device config, docs/DECISIONS.md). Optional.
  std::function<std::vector<std::string>(const VendorSettings&)> advise = nullptr;
  std::vector<VendorFlag> flags = {};
  // False: the section builds backends only when a flag or its `enabled: true` turns it on.
  bool enabled_by_default = true;
  VendorDemo demo = {};
};

// A HAMi vendor this build does not implement: its device-config sections and flags are accepted with a
// warning, so that HAMi's chart runs us unchanged.
struct UnimplementedVendor {
  std::string name;                   // as HAMi calls the vendor
  std::vector<std::string> sections;  // its device-config sections
  std::vector<VendorFlag> flags;
};

// One vendor flag and whom it belongs to.
struct VendorFlagOwner {
  const VendorFlag* flag;
  std::string section;  // the module's section; "" for an unimplemented vendor
  std::string vendor;   // the unimplemented vendor's name ("" for a module)
};

// The backends in use, sorted by vendor key (the order node locks are taken in). Owned by main.
class Backends {
 public:
  Backends() = default;
  explicit Backends(std::vector<BackendPtr> backends);
  Backends(Backends&&) = default;
  Backends& operator=(Backends&&) = default;

  std::size_t size() const { return list_.size(); }
  const Backend& at(std::size_t i) const { return *list_[i]; }
  // Index of the backend with this vendor key, or -1.
  int IndexOf(std::string_view vendor) const;
  const Backend* Find(std::string_view vendor) const;
  // The fit hooks backend `i` overrides, and its spec (both read once: the fit asks for every candidate).
  const BackendHooks& hooks(std::size_t i) const { return hooks_[i]; }
  const BackendSpec& spec(std::size_t i) const { return *specs_[i]; }
  auto begin() const { return list_.begin(); }
  auto end() const { return list_.end(); }

 private:
  std::vector<BackendPtr> list_;
  std::vector<BackendHooks> hooks_;
  std::vector<const BackendSpec*> specs_;
};

// Section -> vendor module. Filled explicitly (backends/builtin.cc); a duplicate section is a startup error.
class BackendRegistry {
 public:
  // A section, or a flag name, registered twice is an error.
  Result<void> Register(VendorModule module);
  Result<void> RegisterUnimplemented(UnimplementedVendor vendor);
  Result<std::vector<BackendPtr>> Create(std::string_view section, const VendorSettings& settings) const;
  // The module's start-up warnings for these settings (none when it has no `advise`).
  std::vector<std::string> Advise(std::string_view section, const VendorSettings& settings) const;
  // The schema of a registered section, or null.
  const VendorSchema* Schema(std::string_view section) const;
  std::vector<std::string> Names() const;                              // sorted
  const std::vector<std::string>& Sections() const { return order_; }  // in registration order
  // The demo of a registered section, or null.
  const VendorDemo* Demo(std::string_view section) const;
  // The module of a registered section, or null.
  const VendorModule* Module(std::string_view section) const;
  // Whether a section absent from the configuration builds its backends.
  bool EnabledByDefault(std::string_view section) const;
  // The unimplemented vendor a device-config section belongs to, or null.
  const UnimplementedVendor* Unimplemented(std::string_view section) const;
  // Every vendor flag, modules' first (in registration order), then the unimplemented vendors'.
  std::vector<VendorFlagOwner> Flags() const;

 private:
  Result<void> ClaimFlags(const std::vector<VendorFlag>& flags);

  std::map<std::string, VendorModule, std::less<>> modules_;
  std::vector<std::string> order_;
  std::vector<UnimplementedVendor> unimplemented_;
  std::vector<std::string> flag_names_;
};

}  // namespace hami
