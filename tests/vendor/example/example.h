#pragma once
// A vendor that exists only for the tests: it proves that a vendor is one folder. It is registered the way
// backends/builtin.cc registers the real ones (`registry.Register(example::Module())`), and passes the same
// vendor contract suite (tests/unit/backends/vendor_contract_test.cc). Nothing outside this folder names it
// except that test and one line in tests/CMakeLists.txt.
//
// "Example accelerators": a JSON device manifest in example.com/node-register, a handshake, memory in
// 256 MiB units (configurable), its own node lock, and a `maxCards` setting of its own in its section.
#include "core/backend.h"

namespace hami::testing::example {

VendorModule Module();
Result<BackendPtr> Create(const VendorSettings& settings);

}  // namespace hami::testing::example
