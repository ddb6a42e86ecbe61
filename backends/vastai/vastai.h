#pragma once
// Vastai accelerators (HAMi's `vastai:` section): devices the device plugin lists in a JSON register
// annotation (with a handshake), shared by count alone. In die mode the plugin lists each die of a card
// (custominfo `DeviceStrategy: die`, and `AIC`: the card that hosts it): a pod's dies are taken from as few
// cards as possible, a mutex pod keeps a card to itself, and nodes that keep each container's dies on one
// card rank first. The rules are written in docs/DECISIONS.md "Vastai".
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/backend.h"

namespace hami::backends::vastai {

// The dies to take among `candidates` (in the policy's order), `want` of them: by card, the cards with the
// most candidates first (equal ones in the order of their first candidate), dies without a card last, one
// by one; the first `want` when they are not all dies. Positions into `candidates`; empty when fewer.
std::vector<std::size_t> ChooseDies(std::span<const DeviceInfo* const> candidates, std::int32_t want);

BackendSpec DefaultSpec();
VendorModule Module();

}  // namespace hami::backends::vastai
