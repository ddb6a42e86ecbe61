#pragma once
// Biren GPUs (HAMi's `biren:` section): devices the device plugin lists in a JSON register annotation (with
// a handshake), shared by count alone, the first ones the policy prefers. The rules are written in
// docs/DECISIONS.md "Biren".
#include "core/backend.h"

namespace hami::backends::biren {

BackendSpec DefaultSpec();
VendorModule Module();

}  // namespace hami::backends::biren
