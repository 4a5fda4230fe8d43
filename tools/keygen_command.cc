// `osprey keygen DIR [--force]`: the job's CURVE keypairs (common/zmq_curve.h WriteCurveKeys).
#include <cstdio>

#include "common/zmq_curve.h"
#include "tools/commands.h"

namespace osprey::tools {

int RunKeygen(const std::string& dir, bool force) {
  Status s = WriteCurveKeys(dir, force);
  if (!s.ok()) {
    std::fprintf(stderr, "osprey keygen: %s\n", s.ToString().c_str());
    return s.code() == StatusCode::kAlreadyExists ? 2 : 1;
  }
  for (PeerRole role : CurveRoles()) {
    std::printf("%s/%s.pub  %s/%s.secret (0600)\n", dir.c_str(), PeerRoleName(role), dir.c_str(),
                PeerRoleName(role));
  }
  std::printf("set security: {mode: curve, keys_dir: %s} in the job config; give each host only "
              "the .secret of its role(s)\n", dir.c_str());
  return 0;
}

}  // namespace osprey::tools
