#pragma once
// MetaX GPUs (HAMi's `metax:` section), two backends:
// - `Metax-GPU`: whole cards counted in the node's capacity, each taken whole; a node may publish how much
//   interconnect bandwidth a pod of k cards loses (binpack) or keeps (spread), and those figures rank it.
// - `Metax-SGPU`: cards the device plugin lists in metax-tech.com/node-gpu-devices, shared by memory and
//   compute share (sGPUs). Pods may be of an app class (online workloads that preempt offline ones on a
//   card, which may not mix with pods of no class) and ask for a QoS policy a shared card must agree on;
//   exclusive requests prefer cards of one MetaLink zone.
// The rules are written in docs/DECISIONS.md "MetaX".
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/backend.h"

namespace hami::backends::metax {

inline constexpr std::string_view kAppClassAnnotation = "metax-tech.com/sgpu-app-class";
inline constexpr std::string_view kQosAnnotation = "metax-tech.com/sgpu-qos-policy";
inline constexpr std::string_view kTopologyAwareAnnotation = "metax-tech.com/sgpu-topology-aware";
inline constexpr std::string_view kLossesAnnotation = "metax-tech.com/gpu.topology.losses";
inline constexpr std::string_view kScoresAnnotation = "metax-tech.com/gpu.topology.scores";

enum class AppClass : std::uint8_t {
  kNone,     // no app class annotation
  kOnline,   // "online"
  kOffline,  // "offline"
  kOther,    // any other value (the webhook refuses it): a pod of no class that is not prioritised
};
enum class Qos : std::uint8_t { kNone, kBestEffort, kFixedShare, kBurstShare, kOther };

// A pod's class for the ledger (Backend::PodClass): its app class and, unless online, its QoS policy.
std::uint8_t EncodeClass(AppClass app, Qos qos);
AppClass AppOf(std::uint8_t pod_class);
Qos QosOf(std::uint8_t pod_class);

// How many online and offline pods hold a card.
struct ClassHolders {
  std::int32_t online = 0;
  std::int32_t offline = 0;
};
ClassHolders HoldersOf(const CardClasses& classes);

// Whether a pod of `app` may join a card: an idle card takes any pod; otherwise pods of a class go to cards
// held by pods of a class, pods of none to cards held by none, and offline pods never join online ones.
bool AppClassAllows(AppClass app, bool idle, const ClassHolders& holders);
// Whether a shared (not exclusive) request of `qos` may join a card whose non-online holders are `classes`:
// each holder's policy is none or `qos`.
bool QosAllows(Qos qos, const CardClasses& classes);

// Online prioritisation among candidates (their holders, in the policy's order): cards held by offline pods
// alone come last (fewer of them first); the others by fewer online pods, then fewer offline pods; ties
// keep the policy's order. The positions of the first `want`.
std::vector<std::size_t> ChooseForOnline(std::span<const ClassHolders> holders, std::size_t want);
// Link-zone prioritisation of an exclusive request (zones <= 0: no MetaLink): the first `want` of the
// smallest zone that holds them all; else whole zones from the smallest up; else the cards without a link
// appended; zones of one size in the order they first appear. The positions chosen, in that order.
std::vector<std::size_t> ChooseByLinkZone(std::span<const std::int32_t> zones, std::size_t want);

// 10 for each pair of distinct cards (by id) in one non-zero link zone.
struct LinkCard {
  std::string_view id;
  std::int32_t zone = 0;
};
std::int64_t LinkPairScore(std::span<const LinkCard> cards);
// The exclusive score: 10 x the pairs the pod's exclusive cards keep together, less the pairs among the idle
// cards it breaks (those neither wholly its own nor wholly left).
std::int64_t ExclusiveScore(std::span<const LinkCard> allocated, std::span<const LinkCard> idle);
// The online score of one card's holders before the pod: -100 per offline pod on a card of offline pods
// alone, else -20 per online pod and -2 per offline pod.
std::int64_t OnlineScore(const ClassHolders& holders);

// A topology annotation of whole-card nodes ({"<cards>": <value>, ...}): the value for `cards`, 0 when the
// annotation has none. `encoded` is its compact form as discovery keeps it (ParseTopology).
std::int64_t TopologyValue(std::string_view encoded, std::int64_t cards);
// The compact form of a topology annotation (entries for 1 to kMaxCardsPerNode cards), or an error saying
// what was expected.
Result<std::string> ParseTopology(std::string_view json_text);

BackendSpec GpuSpec();
BackendSpec SgpuSpec();
VendorModule Module();

}  // namespace hami::backends::metax
