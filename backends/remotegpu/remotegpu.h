#pragma once
// Remote GPUs (lupine): GPU-less client nodes borrow whole GPU servers over the network. The servers (nodes
// labelled hami.io/lupine-server) form the cluster's pool from their NVIDIA registrations; a pod asking for
// nvidia.com/remote-gpu gets every healthy card of one unused server, and the server's endpoint.
#include <string>
#include <string_view>

#include "core/backend.h"

namespace hami::backends::remotegpu {

inline constexpr std::int64_t kDefaultPort = 14833;
// The custominfo entry of a pool card naming its server's endpoint, <InternalIP>:<port>.
inline constexpr std::string_view kEndpointInfo = "lupine-endpoint";

// The section `remotegpu`: its schema and factory, for the explicit registration list (backends/builtin.cc).
VendorModule Module();
Result<BackendPtr> Create(const VendorSettings& settings);
BackendSpec DefaultSpec();

// The lupine port a server's label value names: `fallback` when empty, not a number or not a port.
std::int64_t PortOf(std::string_view label_value, std::int64_t fallback);
// host:port, the host in brackets when it is an IPv6 address.
std::string JoinHostPort(std::string_view host, std::int64_t port);

}  // namespace hami::backends::remotegpu
