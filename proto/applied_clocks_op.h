// OP_APPLIED_CLOCKS (proto/osprey.proto, Op 185): a restarted worker asks a server what it took
// from its rank (server/applied_clocks.h, worker/resume_plan.h). The one name the code uses.
#pragma once

#include "osprey.pb.h"

namespace osprey {

inline constexpr proto::Op kOpAppliedClocks = proto::OP_APPLIED_CLOCKS;

}  // namespace osprey
