#pragma once
// AWS Neuron devices (Inferentia, Trainium; HAMi's `awsneuron:` section): whole devices or NeuronCores, both
// from the node's capacity. A device's cores are a bit mask (two cores at most, mask 3); a request for one
// core takes a free bit, several devices are taken as a contiguous window. The rules are written in
// docs/DECISIONS.md "AWS Neuron".
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/backend.h"

namespace hami::backends::awsneuron {

inline constexpr std::int32_t kCoresPerMask = 2;  // the cores a device's mask covers

// A request for `cores` NeuronCores as (devices, cores on each): up to two on one device, else whole devices
// of two; an error (naming `resource`) for an odd count above two.
Result<std::pair<std::int32_t, std::int32_t>> SplitCores(std::int64_t cores, std::string_view resource);

// The device indexes of a window of `want` idle devices among the `usable` ones (ascending): on Inferentia
// (`inferentia`) any run of consecutive indexes; elsewhere windows aligned to `want`, which must be 1, 4, 8
// or 16. Empty when none is free.
std::vector<std::int32_t> ContiguousWindow(std::span<const std::int32_t> usable, std::int32_t want,
                                           bool inferentia);

VendorModule Module();

}  // namespace hami::backends::awsneuron
