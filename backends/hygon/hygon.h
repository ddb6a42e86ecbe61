#pragma once
// Hygon DCUs: legacy colon-format device list, the shared handshake, type/UUID selectors, shared node lock.
#include "core/backend.h"

namespace hami::backends::hygon {

// The section `hygon`: its schema and factory, for the explicit registration list (backends/builtin.cc).
VendorModule Module();
Result<BackendPtr> Create(const VendorSettings& settings);
BackendSpec DefaultSpec();

}  // namespace hami::backends::hygon
