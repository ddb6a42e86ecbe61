#pragma once
// Pod allocation codecs: the per-container device lists (`uuid,vendor,mem,cores:` per device, `;` per
// container) and NVIDIA's MIG allocation JSON.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/model.h"
#include "core/result.h"

namespace hami::codec {

// Encodes one vendor's per-container lists. Every container contributes its devices and then ';', so a
// container without devices is a bare ';'. An empty list encodes to "".
std::string EncodePodDevices(const PodVendorDevices& containers);

// Decodes one annotation value. Pieces between ';' are kept even when empty so positions line up with the
// pod's containers (init first); like upstream, the piece after the final ';' is kept too, so "X:;" decodes
// to two entries, the second empty. A value made only of ';' has no devices. Errors name the container
// position and the device text.
Result<PodVendorDevices> DecodePodDevices(std::string_view value);

// True when a to-allocate value has nothing left for the device plugin ("", ";", ";;", ...).
bool NothingLeftToAllocate(std::string_view value);

// One MIG instance recorded in hami.io/vgpu-mig-allocations.
struct MigAllocation {
  int container_index = 0;
  int device_index = 0;  // position within the container's device list
  std::string gpu_uuid;
  std::string profile;
  MigPlacement placement;
  // Filled by the device plugin once the instance exists: all three or none.
  std::optional<std::string> mig_uuid;
  std::optional<int> gpu_instance_id;
  std::optional<int> compute_instance_id;
  friend bool operator==(const MigAllocation&, const MigAllocation&) = default;
};

std::string EncodeMigAllocations(const std::vector<MigAllocation>& allocations);
Result<std::vector<MigAllocation>> DecodeMigAllocations(std::string_view json_text);
// The MIG allocations implied by one vendor's per-container devices (entries that carry a MigSlot).
std::vector<MigAllocation> MigAllocationsOf(const PodVendorDevices& containers);

// What the pod consumes per device: init containers count by their peak, app containers by their sum,
// the effective charge is max(init peak, app sum) per dimension and slots = max(init 1, app count).
// `num_init` is the number of init containers; entries are sorted by vendor then uuid.
std::vector<DeviceCharge> CollapseDevices(const PodDevices& devices, std::size_t num_init);
// Same, counting only app containers (used once all init containers have finished).
std::vector<DeviceCharge> AppOnlyCharges(const PodDevices& devices, std::size_t num_init);

}  // namespace hami::codec
