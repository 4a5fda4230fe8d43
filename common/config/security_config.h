// SecurityConfig: the `security` section of a job config, read by every binary of the job.
//
//   security:
//     mode: curve          # none | curve
//     keys_dir: /etc/osprey/keys   # what `osprey keygen DIR` wrote; osprey launch fills it in
//
// mode none: no authentication, no encryption -- anyone who can reach a port is trusted. For
// loopback development only; every binary says so in one log line at start (LogSecurityMode).
// mode curve: every ZeroMQ socket is CURVE-encrypted and only the job's keys connect (see
// common/zmq_curve.h); servers and the coordinator authorize ops by the peer's role.
#pragma once

#include <string>

#include "common/status.h"
#include "common/transport.h"

namespace osprey::config {

class YamlFields;

enum class SecurityMode { kNone, kCurve };

struct SecurityConfig {
  SecurityMode mode = SecurityMode::kNone;
  std::string keys_dir;  // curve: the key files (empty: osprey launch generates them)
};

// Reads the `security` section ("mode" an enum, "keys_dir" a path).
void ParseSecurity(YamlFields& f, SecurityConfig* s);

// The TransportOptions of a process acting as `self` whose dialers connect to listeners of role
// `dials` (PeerRole::kUnauthenticated: it only listens). mode none: plain options. mode curve:
// the keys loaded from keys_dir; errors name the missing or bad key file, or an empty keys_dir.
StatusOr<TransportOptions> MakeTransportOptions(const SecurityConfig& s, PeerRole self,
                                                PeerRole dials);

// Logs one line at start: the mode, and for none that the network is trusted.
void LogSecurityMode(const SecurityConfig& s);

}  // namespace osprey::config
