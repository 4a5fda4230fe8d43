// Authorization of server requests: which peer role may make which op, and where an on-demand
// checkpoint may be written. Pure functions of their arguments (thread-safe).
//
// Roles come from the transport (Message::peer_role: under CURVE the ZAP handler's answer for the
// peer's key). With `roles_required` false (security: none) an unauthenticated peer may do
// anything -- that mode trusts the network; with it true (security: curve) it may do nothing.
#pragma once

#include <string>

#include "common/status.h"
#include "common/transport.h"
#include "proto/wire.h"

namespace osprey::server {

// The classes of refusal (RefusalLog kinds): each is logged once.
enum class Refusal : unsigned { kUnauthenticated = 0, kControlOp = 1, kDataOp = 2, kCheckpointDir = 3 };

// OK, or PermissionDenied naming the op and the role: control ops (OP_SERVER_STATS,
// OP_CHECKPOINT, OP_SHUTDOWN, OP_ROWS_DIGEST) only from the coordinator or admin role,
// OP_MIGRATE_ROWS only from another server (kind kControlOp), data ops (pulls, pushes,
// OP_INIT_DENSE, OP_APPLIED_CLOCKS) only from workers. Other ops are left to the request checks.
// *kind says which rule refused.
Status AuthorizeServerOp(proto::Op op, PeerRole role, bool roles_required, Refusal* kind);

// The directory an OP_CHECKPOINT may name: the configured checkpoint.dir or a directory beneath
// it (compared after resolving "..", "." and symlinks of the existing part). PermissionDenied
// naming both paths otherwise, and when no checkpoint.dir is configured. In every security mode.
Status CheckCheckpointDir(const std::string& requested, const std::string& configured);

}  // namespace osprey::server
