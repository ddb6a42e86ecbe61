#pragma once
// AMD Instinct GPUs (HAMi's `amd:` section): cards the device plugin lists in a JSON register annotation,
// each with its memory in MiB and its compute units as `devcore`, while the node's capacity counts them. A
// container asks for cards, memory in MiB (none: the whole card) and a percent of each card's compute units
// (none: all of them), in its limits only. The rules are written in docs/DECISIONS.md "AMD".
#include <cstdint>
#include <string_view>

#include "core/backend.h"

namespace hami::backends::amd {

// The compute units of the Instinct model named in a card's product name (`type`, any case), or 0 when the
// model is not one the simulated device plugin knows.
std::int32_t ComputeUnits(std::string_view type);

BackendSpec DefaultSpec();
VendorModule Module();

}  // namespace hami::backends::amd
