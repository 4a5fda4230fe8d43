#include "common/zmq_curve.h"

#include <sys/stat.h>
#include <zmq.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/logging.h"

namespace osprey {
namespace {

constexpr size_t kZ85KeyChars = 40;
constexpr char kZapEndpoint[] = "inproc://zeromq.zap.01";

bool IsZ85Key(const std::string& key) {
  uint8_t binary[32];
  return key.size() == kZ85KeyChars && zmq_z85_decode(binary, key.c_str()) != nullptr;
}

std::string FrameString(zmq_msg_t* m) {
  return std::string(static_cast<const char*>(zmq_msg_data(m)), zmq_msg_size(m));
}

// Writes `text` to `path` with `mode`, refusing to replace an existing file unless `force`.
Status WriteKeyFile(const std::string& path, const std::string& text, mode_t mode, bool force) {
  std::error_code ec;
  if (!force && std::filesystem::exists(path, ec)) {
    return AlreadyExists("keygen: '" + path + "' exists (use --force to replace the keys)");
  }
  std::filesystem::remove(path, ec);
  std::ofstream out(path, std::ios::trunc);
  if (!out) return Unavailable("keygen: cannot write '" + path + "': " + std::strerror(errno));
  // Restrict before the secret is written, so it is never readable by others.
  if (::chmod(path.c_str(), mode) != 0) {
    return Unavailable("keygen: cannot chmod '" + path + "': " + std::strerror(errno));
  }
  out << text << "\n";
  out.close();
  if (!out) return Unavailable("keygen: cannot write '" + path + "'");
  return Status::OK();
}

StatusOr<std::string> ReadKeyFile(const std::string& path, bool secret) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return NotFound("curve: key file '" + path + "' is missing (make the keys with `osprey keygen "
                    "DIR`)");
  }
  if (secret && (st.st_mode & 077) != 0) {
    return FailedPrecondition("curve: secret key '" + path + "' is readable by others (chmod 600 " +
                              path + ")");
  }
  std::ifstream in(path);
  std::string key;
  if (!in || !(in >> key)) return Unavailable("curve: cannot read key file '" + path + "'");
  if (!IsZ85Key(key)) {
    return InvalidArgument("curve: '" + path + "' does not hold a 40-character Z85 key");
  }
  return key;
}

}  // namespace

bool CurveAvailable() { return zmq_has("curve") != 0; }

const std::vector<PeerRole>& CurveRoles() {
  static const std::vector<PeerRole> roles = {PeerRole::kCoordinator, PeerRole::kServer,
                                              PeerRole::kWorker, PeerRole::kAdmin};
  return roles;
}

Status WriteCurveKeys(const std::string& dir, bool force) {
  if (!CurveAvailable()) return Unimplemented("keygen: this libzmq has no CURVE (libsodium)");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Unavailable("keygen: cannot create '" + dir + "': " + ec.message());
  ::chmod(dir.c_str(), 0700);
  if (!force) {
    for (PeerRole role : CurveRoles()) {
      for (const char* ext : {".pub", ".secret"}) {
        std::string path = dir + "/" + PeerRoleName(role) + ext;
        if (std::filesystem::exists(path, ec)) {
          return AlreadyExists("keygen: '" + path + "' exists (use --force to replace the keys)");
        }
      }
    }
  }
  for (PeerRole role : CurveRoles()) {
    char pub[kZ85KeyChars + 1], sec[kZ85KeyChars + 1];
    if (zmq_curve_keypair(pub, sec) != 0) {
      return Internal(std::string("keygen: zmq_curve_keypair: ") + zmq_strerror(zmq_errno()));
    }
    const std::string base = dir + "/" + PeerRoleName(role);
    OSPREY_RETURN_IF_ERROR(WriteKeyFile(base + ".secret", sec, 0600, force));
    OSPREY_RETURN_IF_ERROR(WriteKeyFile(base + ".pub", pub, 0644, force));
  }
  return Status::OK();
}

StatusOr<CurveOptions> LoadCurveOptions(const std::string& dir, PeerRole self, PeerRole dials) {
  if (dir.empty()) return InvalidArgument("curve: no key directory (security.keys_dir)");
  CurveOptions c;
  c.enabled = true;
  for (PeerRole role : CurveRoles()) {
    const std::string base = dir + "/" + PeerRoleName(role);
    OSPREY_ASSIGN_OR_RETURN(std::string pub, ReadKeyFile(base + ".pub", false));
    if (role == self) {
      c.public_key = pub;
      OSPREY_ASSIGN_OR_RETURN(c.secret_key, ReadKeyFile(base + ".secret", true));
    }
    if (role == dials) c.server_key = pub;
    c.allowed.emplace_back(pub, role);
  }
  if (c.secret_key.empty()) {
    return InvalidArgument(std::string("curve: no keys for role '") + PeerRoleName(self) + "'");
  }
  return c;
}

Status CheckCurveOptions(const CurveOptions& curve) {
  if (!CurveAvailable()) return Unimplemented("transport: this libzmq has no CURVE (libsodium)");
  if (!IsZ85Key(curve.public_key) || !IsZ85Key(curve.secret_key)) {
    return InvalidArgument("transport: curve public_key / secret_key must be 40-character Z85");
  }
  if (!curve.server_key.empty() && !IsZ85Key(curve.server_key)) {
    return InvalidArgument("transport: curve server_key must be a 40-character Z85 key");
  }
  if (curve.allowed.empty()) return InvalidArgument("transport: curve with no allowed keys");
  for (const auto& [key, role] : curve.allowed) {
    if (!IsZ85Key(key)) return InvalidArgument("transport: allowed key '" + key + "' is not Z85");
  }
  return Status::OK();
}

int ApplyCurveServer(void* socket, const CurveOptions& curve) {
  int one = 1;
  const char domain[] = "osprey";
  if (zmq_setsockopt(socket, ZMQ_CURVE_SERVER, &one, sizeof(one)) != 0 ||
      zmq_setsockopt(socket, ZMQ_CURVE_SECRETKEY, curve.secret_key.c_str(), kZ85KeyChars) != 0 ||
      zmq_setsockopt(socket, ZMQ_ZAP_DOMAIN, domain, sizeof(domain) - 1) != 0) {
    return zmq_errno();
  }
  return 0;
}

int ApplyCurveClient(void* socket, const CurveOptions& curve) {
  if (zmq_setsockopt(socket, ZMQ_CURVE_SERVERKEY, curve.server_key.c_str(), kZ85KeyChars) != 0 ||
      zmq_setsockopt(socket, ZMQ_CURVE_PUBLICKEY, curve.public_key.c_str(), kZ85KeyChars) != 0 ||
      zmq_setsockopt(socket, ZMQ_CURVE_SECRETKEY, curve.secret_key.c_str(), kZ85KeyChars) != 0) {
    return zmq_errno();
  }
  return 0;
}

PeerRole CurvePeerRole(void* zmq_msg) {
  const char* user = zmq_msg_gets(static_cast<zmq_msg_t*>(zmq_msg), "User-Id");
  PeerRole role = PeerRole::kUnauthenticated;
  if (user != nullptr) ParsePeerRole(user, &role);
  return role;
}

ZapHandler::ZapHandler(void* ctx, const std::vector<std::pair<std::string, PeerRole>>& allowed)
    : ctx_(ctx) {
  for (const auto& [z85, role] : allowed) {
    uint8_t binary[32];
    if (zmq_z85_decode(binary, z85.c_str()) != nullptr) {
      allowed_.emplace(std::string(reinterpret_cast<char*>(binary), sizeof(binary)), role);
    }
  }
}

ZapHandler::~ZapHandler() { Stop(); }

Status ZapHandler::Start(void* watched) {
  socket_ = zmq_socket(ctx_, ZMQ_REP);
  if (socket_ == nullptr) return Internal(std::string("zap: zmq_socket: ") + zmq_strerror(zmq_errno()));
  int linger = 0;
  zmq_setsockopt(socket_, ZMQ_LINGER, &linger, sizeof(linger));
  if (zmq_bind(socket_, kZapEndpoint) != 0) {
    int err = zmq_errno();
    zmq_close(socket_);
    socket_ = nullptr;
    // Without a handler CURVE would admit every key: this must stop the start.
    return Unavailable(std::string("zap: cannot bind ") + kZapEndpoint + ": " + zmq_strerror(err) +
                       " (CURVE without a ZAP handler would admit any key)");
  }
  if (watched != nullptr) {
    // One endpoint name per handler: each transport has its own context.
    const char kMonitor[] = "inproc://osprey.curve.monitor";
    const int events = ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                       ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
    monitor_ = zmq_socket(ctx_, ZMQ_PAIR);
    if (monitor_ == nullptr || zmq_socket_monitor(watched, kMonitor, events) != 0 ||
        zmq_setsockopt(monitor_, ZMQ_LINGER, &linger, sizeof(linger)) != 0 ||
        zmq_connect(monitor_, kMonitor) != 0) {
      return Internal(std::string("zap: cannot monitor the CURVE socket: ") +
                      zmq_strerror(zmq_errno()));
    }
  }
  thread_ = std::thread([this] { Run(); });
  return Status::OK();
}

void ZapHandler::Stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  if (socket_ != nullptr) zmq_close(socket_);
  if (monitor_ != nullptr) zmq_close(monitor_);
  socket_ = monitor_ = nullptr;
}

void ZapHandler::Run() {
  while (!stop_.load()) {
    zmq_pollitem_t items[2] = {{socket_, 0, ZMQ_POLLIN, 0}, {monitor_, 0, ZMQ_POLLIN, 0}};
    // A short timeout so Stop() is seen; handshakes are rare, so the wake-ups cost nothing.
    if (zmq_poll(items, monitor_ != nullptr ? 2 : 1, 50) <= 0) continue;
    if (items[0].revents & ZMQ_POLLIN) Answer(socket_);
    if (monitor_ != nullptr && (items[1].revents & ZMQ_POLLIN)) OnMonitorEvent(monitor_);
  }
}

// RFC 27: version, request id, domain, address, identity, mechanism, credentials (for CURVE the
// client's 32-byte public key) -> version, request id, status code, status text, user id, metadata.
void ZapHandler::Answer(void* socket) {
  std::vector<std::string> parts;
  int more = 1;
  while (more) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, socket, 0) < 0) {
      zmq_msg_close(&m);
      return;
    }
    parts.push_back(FrameString(&m));
    more = zmq_msg_more(&m);
    zmq_msg_close(&m);
  }
  std::string code = "400", text = "unknown key", user;
  if (parts.size() >= 7 && parts[5] == "CURVE") {
    auto it = allowed_.find(parts[6]);
    if (it != allowed_.end()) {
      code = "200";
      text = "OK";
      user = PeerRoleName(it->second);
    }
  } else {
    text = "not CURVE";
  }
  if (code == "200") {
    admitted_.fetch_add(1);
  } else {
    CountRefusal(parts.size() > 3 ? parts[3] : "?", text);
  }
  const std::string version = parts.empty() ? "1.0" : parts[0];
  const std::string request_id = parts.size() > 1 ? parts[1] : "";
  const std::string reply[] = {version, request_id, code, text, user, ""};
  for (size_t i = 0; i < 6; ++i) {
    zmq_send(socket, reply[i].data(), reply[i].size(), i + 1 < 6 ? ZMQ_SNDMORE : 0);
  }
}

// Monitor events: frame 1 = u16 event + u32 value, frame 2 = the peer's address.
void ZapHandler::OnMonitorEvent(void* monitor) {
  std::vector<std::string> parts;
  int more = 1;
  while (more) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, monitor, 0) < 0) {
      zmq_msg_close(&m);
      return;
    }
    parts.push_back(FrameString(&m));
    more = zmq_msg_more(&m);
    zmq_msg_close(&m);
  }
  if (parts.size() < 2 || parts[0].size() < 2) return;
  uint16_t event;
  std::memcpy(&event, parts[0].data(), sizeof(event));
  // A key ZAP refused shows up here too (FAILED_AUTH): it was counted when ZAP answered.
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) return;
  CountRefusal(parts[1], "CURVE handshake failed: the peer has no CURVE or the wrong server key");
}

void ZapHandler::CountRefusal(const std::string& from, const std::string& why) {
  if (refused_.fetch_add(1) == 0) {
    OSPREY_LOG_WARN("curve: refused a connection from {} ({}); further refusals are counted, "
                    "not logged", from, why);
  }
}

}  // namespace osprey
