// ZmqTransport's sealed data plane (zmq_transport.h, zmq_seal.h): the session handshake over
// CURVE and the refusal of anything on the plain data port that does not open.
#include <zmq.h>

#include <cstring>
#include <string>

#include "common/logging.h"
#include "common/zmq_curve.h"
#include "common/zmq_endpoint.h"
#include "common/zmq_seal.h"
#include "common/zmq_transport.h"

namespace osprey {
namespace {

// One-frame messages on the CURVE connection (never a Message: those have three frames).
constexpr char kRequest[] = "OSPREY-SEAL?";             // dialer -> listener
constexpr char kOffer[] = "OSPREY-SEAL!";               // listener -> dialer: id, key, port
constexpr char kDecline[] = "OSPREY-SEAL-";             // listener -> dialer: stay on CURVE
constexpr size_t kTagLen = sizeof(kRequest) - 1;        // 12
constexpr size_t kOfferFixed = kTagLen + 8 + kSealKeyBytes;

int SendBytes(void* socket, const void* data, size_t size, int flags) {
  return zmq_send(socket, data, size, flags | ZMQ_DONTWAIT) < 0 ? zmq_errno() : 0;
}

}  // namespace

Status ZmqTransport::BindDataRouter(const std::string& endpoint) {
  const std::string any = endpoint.substr(0, endpoint.rfind(':')) + ":*";
  void* s = NewSocket(ZMQ_ROUTER, /*curve=*/false);
  if (s == nullptr) return Internal(std::string("zmq_socket: ") + zmq_strerror(zmq_errno()));
  if (options_.max_message_bytes > 0) {
    const int64_t max = options_.max_message_bytes + static_cast<int64_t>(kSealTagBytes);
    zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &max, sizeof(max));
  }
  char bound[1024];
  size_t len = sizeof(bound);
  if (zmq_bind(s, any.c_str()) != 0 || zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, bound, &len) != 0) {
    Status err = ZmqBindError(any + " (sealed data port)", zmq_errno());
    zmq_close(s);
    return err;
  }
  const std::string last(bound);
  data_port_ = last.substr(last.rfind(':') + 1);
  data_router_ = s;
  AddSocket(s, SocketKind::kDataRouter, -1);
  OSPREY_LOG_INFO("zmq transport: CURVE listener {}: sealed data plane on port {}", endpoint,
                  data_port_);
  return Status::OK();
}

std::string ZmqTransport::sealed_data_port() const {
  MutexLock lock(&mu_);
  return data_port_;
}

void ZmqTransport::RequestSession(PeerId peer) {
  Peer& p = peers_[peer];
  if (p.data_socket != nullptr) RemoveSocket(p.data_socket);
  p.data_socket = nullptr;
  p.session.reset();
  // Until the listener answers, Send holds this peer's messages.
  if (SendBytes(p.socket, kRequest, kTagLen, 0) == 0) {
    p.awaiting_session = true;
  } else {
    FlushPending(&p);  // over CURVE
  }
}

bool ZmqTransport::OfferSession(const std::string& routing_id, PeerRole role,
                                const uint8_t* request, size_t size) {
  if (size != kTagLen || std::memcmp(request, kRequest, kTagLen) != 0) return false;
  if (data_router_ == nullptr || role == PeerRole::kUnauthenticated) {
    if (SendBytes(router_, routing_id.data(), routing_id.size(), ZMQ_SNDMORE) == 0) {
      SendBytes(router_, kDecline, kTagLen, 0);
    }
    return true;
  }
  const PeerId peer = ListenerPeer(routing_id, router_);
  Peer& p = peers_[peer];
  if (p.session != nullptr) sessions_.erase(p.session->id());
  const SealKey key = RandomSealKey();
  const uint64_t id = RandomSessionId();
  p.session = std::make_shared<SealedSession>(key, id);
  p.role = role;
  p.data_routing_id.clear();  // set by the first sealed message that opens
  sessions_[id] = peer;
  std::string offer(kOffer, kTagLen);
  offer.append(reinterpret_cast<const char*>(&id), 8);
  offer.append(reinterpret_cast<const char*>(key.data()), key.size());
  offer += data_port_;
  if (SendBytes(router_, routing_id.data(), routing_id.size(), ZMQ_SNDMORE) == 0) {
    SendBytes(router_, offer.data(), offer.size(), 0);
  }
  std::memset(offer.data(), 0, offer.size());
  return true;
}

bool ZmqTransport::AcceptSession(PeerId peer, const uint8_t* offer, size_t size) {
  Peer& p = peers_[peer];
  if (size == kTagLen && std::memcmp(offer, kDecline, kTagLen) == 0) {
    FlushPending(&p);
    return true;
  }
  if (size <= kOfferFixed || std::memcmp(offer, kOffer, kTagLen) != 0) return false;
  const std::string port(reinterpret_cast<const char*>(offer) + kOfferFixed, size - kOfferFixed);
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) return false;
  uint64_t id;
  std::memcpy(&id, offer + kTagLen, 8);
  SealKey key;
  std::memcpy(key.data(), offer + kTagLen + 8, key.size());
  if (p.data_socket != nullptr) RemoveSocket(p.data_socket);
  p.data_socket = nullptr;
  p.session.reset();
  // The data port is on the host this peer dialed (the listener may have bound a wildcard).
  const std::string endpoint = p.endpoint.substr(0, p.endpoint.rfind(':') + 1) + port;
  void* s = NewSocket(ZMQ_DEALER, /*curve=*/false, /*fixed_identity=*/false);
  if (s != nullptr && zmq_connect(s, endpoint.c_str()) == 0) {
    p.session = std::make_shared<SealedSession>(key, id);
    p.data_socket = s;
    AddSocket(s, SocketKind::kDataDealer, peer);
  } else {
    OSPREY_LOG_WARN("zmq transport: cannot dial the sealed data port {} ({}); peer {} stays on "
                    "CURVE", endpoint, zmq_strerror(zmq_errno()), peer);
    if (s != nullptr) zmq_close(s);
  }
  FlushPending(&p);
  return true;
}

void ZmqTransport::OnMonitorEvent(void* monitor, PeerId peer) {
  for (;;) {
    zmq_msg_t event;
    zmq_msg_init(&event);
    if (zmq_msg_recv(&event, monitor, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&event);
      return;
    }
    uint16_t what = 0;
    if (zmq_msg_size(&event) >= 2) std::memcpy(&what, zmq_msg_data(&event), 2);
    const bool more = zmq_msg_more(&event);
    zmq_msg_close(&event);
    if (more) {  // the endpoint frame
      zmq_msg_t address;
      zmq_msg_init(&address);
      zmq_msg_recv(&address, monitor, ZMQ_DONTWAIT);
      zmq_msg_close(&address);
    }
    if (what == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) RequestSession(peer);
  }
}

bool ZmqTransport::OpenSealed(SocketKind kind, PeerId dealer_peer, const std::string& routing_id,
                              void* const* parts, size_t* sizes, PeerId* peer) {
  uint64_t id = 0;
  if (!SealedSessionId(static_cast<const uint8_t*>(parts[0]), sizes[0], &id)) {
    RefuseSealed(PermissionDenied("sealed data plane: not a sealed header"));
    return false;
  }
  SealDirection dir = SealDirection::kToDialer;
  if (kind == SocketKind::kDataRouter) {
    auto it = sessions_.find(id);
    if (it == sessions_.end()) {
      RefuseSealed(PermissionDenied("sealed data plane: unknown session"));
      return false;
    }
    *peer = it->second;
    dir = SealDirection::kToListener;
  } else {
    *peer = dealer_peer;
  }
  Peer& p = peers_[*peer];
  if (p.session == nullptr) {
    RefuseSealed(PermissionDenied("sealed data plane: no session"));
    return false;
  }
  Status opened = p.session->Open(dir, reinterpret_cast<uint8_t* const*>(parts), sizes);
  if (!opened.ok()) {
    RefuseSealed(opened);
    return false;
  }
  if (kind == SocketKind::kDataRouter && p.data_routing_id != routing_id) {
    p.data_routing_id = routing_id;  // replies to this peer go sealed from now on
  }
  counters_.sealed_received.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void ZmqTransport::RefuseSealed(const Status& why) {
  counters_.sealed_refused.fetch_add(1, std::memory_order_relaxed);
  if (!counters_.sealed_refusal_logged.exchange(true)) {
    OSPREY_LOG_WARN("zmq transport: refused a message on the sealed data port: {}; further "
                    "refusals are counted (auth_refused), not logged", why.message());
  }
}

}  // namespace osprey
