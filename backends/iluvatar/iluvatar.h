#pragma once
// Iluvatar CoreX GPUs (HAMi's `iluvatars:` list, `--enable-iluvatar`): one backend per configured chip, each
// with its own vendor key (the chip's commonWord, e.g. MR-V100), resources, annotations and handshake. The
// device plugin lists its cards in the legacy colon format; memory is asked in units of 256 MiB. The rules
// are written in docs/DECISIONS.md "Iluvatar".
#include <string>
#include <vector>

#include "core/backend.h"

namespace hami::backends::iluvatar {

// One entry of the `iluvatars:` list.
struct Chip {
  std::string common_word;  // vendor key and the middle of every protocol key: MR-V100
  std::string count_resource, memory_resource, core_resource;
};

// The four chips HAMi v2.10's chart configures (used when the section lists none).
std::vector<Chip> ChartChips();

Result<BackendPtr> MakeBackend(const Chip& chip);

VendorModule Module();

}  // namespace hami::backends::iluvatar
