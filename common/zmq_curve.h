// CURVE for ZmqTransport: key files, socket options and the ZAP handler.
//
// Key files (what `osprey keygen DIR` writes, one pair per role): DIR/<role>.pub holds the Z85
// public key (mode 0644), DIR/<role>.secret the Z85 secret key (mode 0600), each 40 characters
// and a newline; <role> is coordinator, server, worker or admin (PeerRoleName).
//
// ZAP (ZeroMQ RFC 27): a CURVE server asks the handler bound at inproc://zeromq.zap.01 of ITS
// context whether a client key may connect. Without a handler libzmq 4.3 admits every key (fails
// open), so ZmqTransport starts a ZapHandler before its first CURVE bind and treats a handler
// that cannot bind as a start error. The handler answers 200 with the role's name as the ZAP
// user id for a listed key and 400 otherwise; the transport reads the user id back from each
// received message (zmq_msg_gets "User-Id").
#pragma once

#include <atomic>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "common/transport.h"

namespace osprey {

// Whether this libzmq was built with CURVE (zmq_has("curve")).
bool CurveAvailable();

// The roles every job has keys for, in key-file order.
const std::vector<PeerRole>& CurveRoles();

// Writes a fresh keypair per role into `dir` (created 0700 if absent). Refuses (AlreadyExists,
// naming the file) to replace an existing key file unless `force`. Errors: Unimplemented
// (no CURVE in libzmq), Unavailable (cannot create or write a file).
Status WriteCurveKeys(const std::string& dir, bool force);

// The CurveOptions of a process that acts as `self`: its own keypair, `server_key` = the public
// key of `dials` (the listeners its dialers connect to; kUnauthenticated: none), and every role's
// public key admitted. Errors name the file that is missing, unreadable, not 40 Z85 characters,
// or a secret readable by others (FailedPrecondition: "chmod 600 ...").
StatusOr<CurveOptions> LoadCurveOptions(const std::string& dir, PeerRole self, PeerRole dials);

// InvalidArgument unless every key is 40 Z85 characters and `allowed` is not empty;
// Unimplemented when libzmq has no CURVE.
Status CheckCurveOptions(const CurveOptions& curve);

// Socket options: a CURVE server (a ROUTER) or a CURVE client (a DEALER). Return the errno of the
// failing zmq_setsockopt, or 0.
int ApplyCurveServer(void* socket, const CurveOptions& curve);
int ApplyCurveClient(void* socket, const CurveOptions& curve);

// The role a received frame's ZAP user id names (kUnauthenticated when there is none).
PeerRole CurvePeerRole(void* zmq_msg);

// Serves ZAP requests of one ZeroMQ context on its own thread. Start() binds the REP socket
// (inproc://zeromq.zap.01 can be bound once per context: a second handler fails with
// Unavailable). Stop() joins the thread; the destructor Stop()s. Thread-safe counters.
class ZapHandler {
 public:
  ZapHandler(void* ctx, const std::vector<std::pair<std::string, PeerRole>>& allowed);
  ~ZapHandler();
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

  // `watched`: the CURVE server socket (or nullptr), monitored for failed handshakes -- a peer
  // without CURVE or with the wrong server key never reaches ZAP, so it is counted from there.
  // Call before that socket binds, with the caller holding whatever guards `watched`.
  Status Start(void* watched);
  void Stop();

  uint64_t admitted() const { return admitted_.load(); }
  // Keys ZAP refused plus handshakes that failed (no CURVE, wrong server key, bad CURVE frames).
  uint64_t refused() const { return refused_.load(); }

 private:
  void Run();
  void Answer(void* socket);
  void OnMonitorEvent(void* monitor);
  void CountRefusal(const std::string& from, const std::string& why);

  void* ctx_;
  std::unordered_map<std::string, PeerRole> allowed_;  // binary 32-byte key -> role
  void* socket_ = nullptr;   // owned by the thread once started
  void* monitor_ = nullptr;  // PAIR receiving the watched socket's handshake events
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> admitted_{0}, refused_{0};
};

}  // namespace osprey
