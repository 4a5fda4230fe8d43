#include "common/config/security_config.h"

#include "common/config/yaml_fields.h"
#include "common/logging.h"
#include "common/zmq_curve.h"

namespace osprey::config {

void ParseSecurity(YamlFields& f, SecurityConfig* s) {
  f.GetEnum("mode", &s->mode, {{"none", SecurityMode::kNone}, {"curve", SecurityMode::kCurve}});
  f.Get("keys_dir", &s->keys_dir);
  if (f.ok() && s->mode == SecurityMode::kCurve && !CurveAvailable()) {
    f.Fail("mode", "curve, but this libzmq was built without CURVE (libsodium)");
  }
}

StatusOr<TransportOptions> MakeTransportOptions(const SecurityConfig& s, PeerRole self,
                                                PeerRole dials) {
  TransportOptions options;
  if (s.mode == SecurityMode::kNone) return options;
  if (s.keys_dir.empty()) {
    return InvalidArgument("security.keys_dir is empty but security.mode is curve (make keys with "
                           "`osprey keygen DIR` and set security.keys_dir=DIR)");
  }
  auto curve = LoadCurveOptions(s.keys_dir, self, dials);
  if (!curve.ok()) return curve.status().WithContext("security.keys_dir");
  options.curve = std::move(curve).value();
  return options;
}

void LogSecurityMode(const SecurityConfig& s) {
  if (s.mode == SecurityMode::kCurve) {
    OSPREY_LOG_INFO("security: curve (encrypted; only the keys in {} are admitted)", s.keys_dir);
  } else {
    OSPREY_LOG_WARN("security: none -- no authentication or encryption, any process that can "
                    "reach a port is trusted (loopback development only)");
  }
}

}  // namespace osprey::config
