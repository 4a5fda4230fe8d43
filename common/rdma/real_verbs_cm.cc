// RealVerbs' connection setup through rdma_cm: listen / accept on the shared event channel, dial
// with a private channel, disconnect. Written against librdmacm, never run: no RDMA hardware
// here (real_verbs.h says how the seam maps onto rdma_cm).
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/logging.h"
#include "common/rdma/real_verbs_impl.h"

namespace osprey::rdma::internal {

namespace {

using Clock = std::chrono::steady_clock;

// Starts the reason an Osprey listener puts in a reject's private data (a reject for want of a
// listener carries none).
constexpr char kRejectPrefix[] = "OSPREY ";

// "host:port" -> a socket address ("*" or "" host with `passive`: any address).
StatusOr<sockaddr_storage> Resolve(const std::string& host_port, bool passive) {
  size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) {
    return InvalidArgument("rdma: endpoint '" + host_port + "' is not host:port");
  }
  std::string host = host_port.substr(0, colon), port = host_port.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  const bool any = passive && (host.empty() || host == "*");
  if (int rc = getaddrinfo(any ? nullptr : host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return InvalidArgument("rdma: cannot resolve '" + host_port + "': " + gai_strerror(rc));
  }
  sockaddr_storage out{};
  std::memcpy(&out, res->ai_addr, std::min<size_t>(res->ai_addrlen, sizeof(out)));
  freeaddrinfo(res);
  return out;
}

struct CmEvent {
  rdma_cm_event_type type = RDMA_CM_EVENT_ADDR_ERROR;
  int status = 0;
  PrivateData data;
};

// The next event on `ch` (a dialer's own channel) within `timeout_ms`, copied and acknowledged.
StatusOr<CmEvent> NextEvent(rdma_event_channel* ch, int timeout_ms, const std::string& what) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(ch, &ev) == 0) {
      CmEvent out;
      out.type = ev->event;
      out.status = ev->status;
      const auto* p = static_cast<const uint8_t*>(ev->param.conn.private_data);
      if (p != nullptr) out.data.assign(p, p + ev->param.conn.private_data_len);
      rdma_ack_cm_event(ev);
      return out;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return Internal("rdma: rdma_get_cm_event failed while " + what + ": " + std::strerror(errno));
    }
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    deadline - Clock::now()).count());
    if (left <= 0) return DeadlineExceeded("rdma: timed out " + what);
    pollfd pfd{ch->fd, POLLIN, 0};
    ::poll(&pfd, 1, left);
  }
}

// OK when `ev` is `want`; otherwise why not, Unavailable where a retry may succeed.
Status Expect(const CmEvent& ev, rdma_cm_event_type want, const std::string& where) {
  if (ev.type == want) return Status::OK();
  std::string got = std::string(rdma_event_str(ev.type)) + " (status " +
                    std::to_string(ev.status) + ")";
  std::string reason(ev.data.begin(), ev.data.end());
  reason = reason.substr(0, reason.find('\0'));
  if (ev.type == RDMA_CM_EVENT_REJECTED && reason.rfind(kRejectPrefix, 0) == 0) {
    return FailedPrecondition("rdma: " + where + " refused the connection: " + reason);
  }
  return Unavailable("rdma: " + where + ": " + got + " instead of " + rdma_event_str(want));
}

}  // namespace

rdma_conn_param RealVerbs::ConnParam(const PrivateData& data, uint8_t their_initiator,
                                     uint8_t their_responder) const {
  rdma_conn_param p{};
  p.private_data = data.empty() ? nullptr : data.data();
  p.private_data_len = static_cast<uint8_t>(data.size());
  // Both sides RDMA-READ (rendezvous frames): outstanding reads each way, as the device allows.
  p.responder_resources =
      static_cast<uint8_t>(std::min<int>({dev_.attr.max_qp_rd_atom, their_initiator, 16}));
  p.initiator_depth =
      static_cast<uint8_t>(std::min<int>({dev_.attr.max_qp_init_rd_atom, their_responder, 16}));
  p.retry_count = 7;
  p.rnr_retry_count = 7;  // see real_verbs.h: the protocol never lets a receive run out
  return p;
}

Status RealVerbs::CreateQpOn(rdma_cm_id* id, QpId qp) {
  if (id->verbs != dev_.ctx) {
    return FailedPrecondition("rdma: the route goes through device " + DeviceName(id->verbs) +
                              ", not " + DeviceName(dev_.ctx) + " (rdma.device)");
  }
  ibv_qp_init_attr a{};
  a.send_cq = a.recv_cq = dev_.cq;
  a.qp_type = IBV_QPT_RC;
  a.sq_sig_all = 0;
  a.cap.max_send_wr = options_.max_send_wr;
  a.cap.max_recv_wr = options_.max_recv_wr;
  a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  a.cap.max_inline_data = options_.max_inline;
  if (rdma_create_qp(id, dev_.pd, &a) != 0) {
    a.cap.max_inline_data = 0;  // a device without inline sends
    if (rdma_create_qp(id, dev_.pd, &a) != 0) {
      return ResourceExhausted(std::string("rdma: rdma_create_qp failed: ") +
                               std::strerror(errno));
    }
  }
  Conn& c = conns_[qp];
  c.id = id;
  c.max_inline = a.cap.max_inline_data;
  by_qpn_[id->qp->qp_num] = qp;
  for (uint64_t wr_id : c.early_recvs) {
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    ibv_recv_wr* bad = nullptr;
    if (int rc = ibv_post_recv(id->qp, &wr, &bad); rc != 0) {
      return Internal("rdma: ibv_post_recv failed: " + std::string(std::strerror(rc)));
    }
  }
  c.early_recvs.clear();
  return Status::OK();
}

StatusOr<std::string> RealVerbs::Listen(const std::string& host_port, AcceptHandler on_accept) {
  OSPREY_ASSIGN_OR_RETURN(sockaddr_storage addr, Resolve(host_port, /*passive=*/true));
  MutexLock lock(&mu_);
  if (listener_ != nullptr) return FailedPrecondition("rdma: already listening");
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(dev_.events, &id, nullptr, RDMA_PS_TCP) != 0) {
    return Internal(std::string("rdma: rdma_create_id failed: ") + std::strerror(errno));
  }
  on_accept_ = std::move(on_accept);  // before rdma_listen: a request may come at once
  if (rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&addr)) != 0 || rdma_listen(id, 128) != 0) {
    const int err = errno;
    rdma_destroy_id(id);
    on_accept_ = nullptr;
    std::string why = "rdma: cannot listen on " + host_port + ": " + std::strerror(err);
    return err == EADDRINUSE ? Unavailable(why) : InvalidArgument(why);
  }
  listener_ = id;
  std::string host = host_port.substr(0, host_port.rfind(':'));
  return host + ":" + std::to_string(ntohs(rdma_get_src_port(id)));
}

void RealVerbs::StopListening() {
  rdma_cm_id* id = nullptr;
  {
    MutexLock lock(&mu_);
    id = listener_;
    listener_ = nullptr;
    on_accept_ = nullptr;
    // A handler under way calls into the listener's owner: it must be done before that goes.
    accept_cv_.Wait(&lock, [this]() REQUIRES(mu_) { return accepting_ == 0; });
  }
  if (id != nullptr) rdma_destroy_id(id);
}

StatusOr<QpId> RealVerbs::CreateQp() {
  MutexLock lock(&mu_);
  QpId qp = next_qp_++;
  conns_[qp];  // the ibv QP itself comes with the route, in Connect
  return qp;
}

StatusOr<PrivateData> RealVerbs::Connect(QpId qp, const std::string& host_port,
                                         const PrivateData& mine) {
  if (mine.size() > kMaxPrivateData) return InvalidArgument("rdma: private data over 56 bytes");
  OSPREY_ASSIGN_OR_RETURN(sockaddr_storage addr, Resolve(host_port, /*passive=*/false));
  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id* id = nullptr;
  if (ch == nullptr || rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) != 0) {
    if (ch != nullptr) rdma_destroy_event_channel(ch);
    return Internal(std::string("rdma: rdma_create_id failed: ") + std::strerror(errno));
  }
  ::fcntl(ch->fd, F_SETFL, ::fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
  const int t = options_.connect_timeout_ms;
  Status st;
  StatusOr<CmEvent> ev = CmEvent{};
  auto step = [&](int rc, rdma_cm_event_type want, const char* what) {
    if (!st.ok()) return;
    if (rc != 0) {
      st = Unavailable("rdma: " + std::string(what) + " " + host_port + ": " +
                       std::strerror(errno));
      return;
    }
    ev = NextEvent(ch, t + 1000, std::string(what) + " " + host_port);
    st = ev.ok() ? Expect(*ev, want, host_port) : ev.status();
  };
  step(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&addr), t),
       RDMA_CM_EVENT_ADDR_RESOLVED, "resolving the address of");
  step(st.ok() ? rdma_resolve_route(id, t) : 0, RDMA_CM_EVENT_ROUTE_RESOLVED,
       "resolving the route to");
  if (st.ok()) {
    MutexLock lock(&mu_);
    st = conns_.count(qp) ? CreateQpOn(id, qp) : NotFound("rdma: no QP " + std::to_string(qp));
  }
  rdma_conn_param p = ConnParam(mine, 16, 16);
  step(st.ok() ? rdma_connect(id, &p) : 0, RDMA_CM_EVENT_ESTABLISHED, "connecting to");
  if (st.ok() && rdma_migrate_id(id, dev_.events) != 0) {
    st = Internal(std::string("rdma: rdma_migrate_id failed: ") + std::strerror(errno));
  }
  if (!st.ok()) {
    {
      MutexLock lock(&mu_);
      auto c = conns_.find(qp);
      if (c != conns_.end() && c->second.id == id) c->second.id = nullptr;
      if (id->qp != nullptr) by_qpn_.erase(id->qp->qp_num);
    }
    if (id->qp != nullptr) rdma_destroy_qp(id);
    rdma_destroy_id(id);
    rdma_destroy_event_channel(ch);
    return st;
  }
  rdma_destroy_event_channel(ch);
  return ev->data;  // the listener's private data (the IB CM may pad it: callers read a prefix)
}

rdma_cm_id* RealVerbs::TakeConn(QpId qp) {
  MutexLock lock(&mu_);
  auto it = conns_.find(qp);
  if (it == conns_.end()) return nullptr;
  rdma_cm_id* id = it->second.id;
  if (id != nullptr && id->qp != nullptr) by_qpn_.erase(id->qp->qp_num);
  conns_.erase(it);
  return id;
}

void RealVerbs::DestroyQp(QpId qp) {
  rdma_cm_id* id = TakeConn(qp);
  if (id == nullptr) return;
  rdma_disconnect(id);  // the peer gets DISCONNECTED; fails harmlessly if never connected
  if (id->qp != nullptr) rdma_destroy_qp(id);
  rdma_destroy_id(id);  // waits until this id's reported events are acknowledged
}

void RealVerbs::FailConnection(rdma_cm_id* id, bool disconnect) {
  MutexLock lock(&mu_);
  for (auto& [qp, c] : conns_) {
    if (c.id != id || id->qp == nullptr) continue;
    if (disconnect && rdma_disconnect(id) == 0) return;  // also moves the QP to the error state
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    ibv_modify_qp(id->qp, &a, IBV_QP_STATE);
    return;
  }
}

void RealVerbs::EventLoop() {
  while (!stopping_) {
    pollfd fds[2] = {{dev_.events->fd, POLLIN, 0}, {dev_.events_wake_fd, POLLIN, 0}};
    ::poll(fds, 2, 200);
    rdma_cm_event* ev = nullptr;
    while (!stopping_ && rdma_get_cm_event(dev_.events, &ev) == 0) {
      rdma_cm_id* id = ev->id;
      const rdma_cm_event_type type = ev->event;
      if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
        const auto* p = static_cast<const uint8_t*>(ev->param.conn.private_data);
        PrivateData remote;
        if (p != nullptr) remote.assign(p, p + ev->param.conn.private_data_len);
        const uint8_t ini = ev->param.conn.initiator_depth;
        const uint8_t resp = ev->param.conn.responder_resources;
        rdma_ack_cm_event(ev);  // before calling out: the new id is ours either way
        OnConnectRequest(id, remote, ini, resp);
        continue;
      }
      // Handled before the ack: the id cannot be destroyed while its event is unacknowledged.
      if (type == RDMA_CM_EVENT_DISCONNECTED) FailConnection(id, /*disconnect=*/true);
      if (type == RDMA_CM_EVENT_CONNECT_ERROR || type == RDMA_CM_EVENT_UNREACHABLE ||
          type == RDMA_CM_EVENT_REJECTED || type == RDMA_CM_EVENT_DEVICE_REMOVAL) {
        OSPREY_LOG_WARN("rdma: connection event {} (status {})", rdma_event_str(type), ev->status);
        FailConnection(id, /*disconnect=*/false);
      }
      rdma_ack_cm_event(ev);
    }
    uint64_t v;
    while (::read(dev_.events_wake_fd, &v, sizeof(v)) == static_cast<ssize_t>(sizeof(v))) {
    }
  }
}

void RealVerbs::OnConnectRequest(rdma_cm_id* id, const PrivateData& remote, uint8_t initiator,
                                 uint8_t responder) {
  AcceptHandler handler;
  QpId qp = 0;
  Status st;
  {
    MutexLock lock(&mu_);
    handler = on_accept_;
    if (!handler) {
      st = Unavailable("not listening");
    } else {
      accepting_++;
      qp = next_qp_++;
      conns_[qp];
      st = CreateQpOn(id, qp);
    }
  }
  StatusOr<PrivateData> mine = st.ok() ? handler(qp, remote) : StatusOr<PrivateData>(st);
  MutexLock lock(&mu_);
  if (handler) {
    accepting_--;
    accept_cv_.SignalAll();
  }
  auto it = conns_.find(qp);
  // The handler (or a Stop right after it) may have destroyed the QP, and with it the id.
  if (qp != 0 && (it == conns_.end() || (it->second.id != nullptr && it->second.id != id))) return;
  if (mine.ok()) {
    // Under mu_: DestroyQp cannot free the id while it is being accepted.
    rdma_conn_param p = ConnParam(*mine, initiator, responder);
    if (rdma_accept(id, &p) != 0) {
      OSPREY_LOG_WARN("rdma: rdma_accept failed: {}", std::strerror(errno));
      ibv_qp_attr a{};
      a.qp_state = IBV_QPS_ERR;  // the transport sees its receives flush and tears down
      ibv_modify_qp(id->qp, &a, IBV_QP_STATE);
    }
    return;
  }
  OSPREY_LOG_WARN("rdma: refused a connection: {}", mine.status().ToString());
  if (it != conns_.end()) {  // ours again: the handler never saw it, or refused it
    if (id->qp != nullptr) by_qpn_.erase(id->qp->qp_num);
    conns_.erase(it);
  }
  lock.Unlock();
  std::string reason = kRejectPrefix + mine.status().message();
  reason.resize(std::min<size_t>(reason.size(), kMaxPrivateData - 1));
  rdma_reject(id, reason.c_str(), static_cast<uint8_t>(reason.size() + 1));
  if (id->qp != nullptr) rdma_destroy_qp(id);
  rdma_destroy_id(id);
}

}  // namespace osprey::rdma::internal
