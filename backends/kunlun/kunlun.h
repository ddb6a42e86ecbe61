#pragma once
// Kunlunxin XPUs (HAMi's `kunlun:` section): two backends. `kunlun` takes whole XPUs, discovered from the
// node's capacity; `XPU` shares a card between vXPUs of one size (a quarter, a half or the whole card),
// listed by the device plugin in a register annotation. Both place multi-card requests on the 8-card
// interconnect: two wings of four (indexes 0-3 and 4-7), each card linked to its twin in the other wing.
// The rules are written in docs/DECISIONS.md "Kunlunxin".
#include <cstdint>
#include <span>
#include <vector>

#include "core/backend.h"

namespace hami::backends::kunlun {

inline constexpr std::int64_t kCardMemory = 98304;  // MiB of one XPU

// A vXPU's memory: the smallest of a quarter, a half and the whole card that holds `memory` MiB (a larger
// request gets the whole card).
std::int64_t RoundToSize(std::int64_t memory);

// The card indexes a request of `want` cards takes among the `usable` ones (ascending, each once): the
// wing the request fills best, else a cross-wing link or group; empty when no arrangement serves it (and
// for counts other than 1, 2, 4 and 8).
std::vector<std::int32_t> SelectByWings(std::span<const std::int32_t> usable, std::int32_t want);

// How well `chosen` packs on top of `in_use` (card indexes): 3000 when the pod closes a gap in a wing,
// down to 0 when it opens two.
double WingScore(std::span<const std::int32_t> in_use, std::span<const std::int32_t> chosen);

VendorModule Module();

}  // namespace hami::backends::kunlun
