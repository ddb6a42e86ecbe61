#pragma once
// Huawei Ascend NPUs (HAMi's `vnpus:` section): one backend per configured chip, each with its own vendor
// key (the chip's commonWord, e.g. Ascend910B3), resources, annotations and handshake. Hard-split vNPUs are
// memory templates the driver carves; the hami-core soft split shares a card by memory and core percent.
// The rules are written in docs/DECISIONS.md "Ascend".
#include <cstdint>
#include <string>
#include <vector>

#include "core/backend.h"

namespace hami::backends::ascend {

struct VnpuTemplate {
  std::string name;         // vir05_1c_16g
  std::int64_t memory = 0;  // MiB
};

// One entry of `vnpus.configs`.
struct Chip {
  std::string common_word;  // vendor key and the middle of every protocol key: Ascend910B3
  std::string count_resource, memory_resource, core_resource;
  std::int64_t memory_allocatable = 0;  // MiB a whole card gives a pod
  std::int64_t memory_capacity = 0;     // MiB of the card: requests above the largest template up to this
                                        // get the whole card
  std::int64_t memory_factor = 1;       // MiB per unit of the memory resource
  std::string runtime_class;            // set on pods that have none ("" = leave)
  bool overwrite_env = false;           // containers asking for no card get ASCEND_VISIBLE_DEVICES=""
  bool super_pod = false;               // 910C: a request of one NPU takes its module's pair
  std::vector<VnpuTemplate> templates;  // ascending memory
};

// The seven chips HAMi v2.10's chart configures (used when the section lists none).
std::vector<Chip> ChartChips();

// What a hard-split vNPU of `memory` MiB becomes: the smallest template that holds it; above the largest
// template and within the card's capacity, the whole card (name "", memory_allocatable); memory 0 when
// the card cannot hold it.
struct Rounded {
  std::int64_t memory = 0;
  std::string name;
};
Rounded RoundToTemplate(const Chip& chip, std::int64_t memory);

// One chip's backend; `soft_split_by_default` is `vnpus.hamiVnpuCore` (a node's hami-vnpu-core wins).
// `npu_resources`: the count resources of every chip of the section (empty: this chip's alone); a container
// that asks for none of them is the one `overwriteEnv` hides the NPUs from.
Result<BackendPtr> MakeBackend(const Chip& chip, bool soft_split_by_default,
                               std::vector<std::string> npu_resources = {});

VendorModule Module();

}  // namespace hami::backends::ascend
