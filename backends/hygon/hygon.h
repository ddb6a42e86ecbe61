#pragma once
// Hygon DCUs: legacy colon-format device list, the shared handshake, type/UUID selectors, shared node lock.
#include "core/backend.h"

namespace hami::backends::hygon {

Result<BackendPtr> Create(const VendorSettings& settings);
BackendSpec DefaultSpec();

}  // namespace hami::backends::hygon
