#pragma once
// Enflame GCUs (HAMi's `enflame:` section): two backends. `GCU` takes whole cards, which the node's capacity
// `enflame.com/gcu` counts; `Enflame` carves DRS hard partitions out of the cards the device plugin lists in
// the node annotation `enflame.com/gcu-drs-capacity`, each partition one of the node's profiles (`3g.20gb`:
// 3 slices and 20 GB of a card), named directly (`enflame.com/drs-gcu`: slices) or chosen from memory and
// cores (`enflame.com/gcu-memory`, `enflame.com/gcu-core`). The rules are written in docs/DECISIONS.md
// "Enflame".
#include <boost/json/value.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/backend.h"

namespace hami::backends::enflame {

// A DRS profile of a node, as the fit offers it.
struct DrsProfile {
  std::string name;               // "3g.20gb", as the plugin wrote it
  std::string id;                 // the plugin's profile ID
  std::int64_t size = 0;          // slices of the card
  std::int64_t memory_gb = 0;     // GB of the card's memory
  std::int64_t core_percent = 0;  // ceil(size x 100 / the node's largest size)
  friend bool operator==(const DrsProfile&, const DrsProfile&) = default;
};

// A profile name's slices and GB ("3g.20gb" -> {3, 20}); size 0 when the name has no size, memory 0 when it
// has no readable memory. Case and spaces around the parts do not matter.
std::pair<std::int64_t, std::int64_t> ParseProfileName(std::string_view name);

// A device entry's `capacity` in slices: a JSON number (finite and within int32, any fraction dropped) or a
// string of an integer (past int32: int32's largest); an error for anything else. It may be 0 or negative.
Result<std::int32_t> DrsCapacity(const boost::json::value& capacity);

// The slices in use on a card whose DRS partitions are charged `used` cores percent, each partition
// ceil(size x 100 / max_slice): the sum of their sizes while fewer than 100 / max_slice share the card
// (saturating at int32's largest).
std::int64_t SlicesInUse(Cores used, std::int64_t max_slice);

// The profiles a DRS card offers (from its custominfo), sorted by size, then memory, then name; those whose
// size, memory or core share cannot be carved are left out.
std::vector<DrsProfile> CardProfiles(const DeviceInfo& card);

// The profile a request takes among `profiles` (sorted as CardProfiles returns them): the one of its
// partition's size, else the first with at least its memory (MiB, rounded up to GB) and cores.
std::optional<DrsProfile> ChooseProfile(const std::vector<DrsProfile>& profiles,
                                        const DeviceRequest& request);

VendorModule Module();

}  // namespace hami::backends::enflame
