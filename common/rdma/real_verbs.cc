// RealVerbs' data path (registration, posting, polling, CQ events) and OpenRealVerbs. Written
// against libibverbs, never run: no RDMA hardware here (real_verbs.h).
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/rdma/real_verbs_impl.h"

namespace osprey::rdma {

namespace internal {

namespace {
void DrainEventFd(int fd) {
  uint64_t v;
  while (::read(fd, &v, sizeof(v)) == static_cast<ssize_t>(sizeof(v))) {
  }
}
void SetNonBlocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }
}  // namespace

RealVerbs::RealVerbs(const RealVerbsOptions& options, RealDevice device)
    : options_(options), dev_(device) {
  event_thread_ = std::thread([this] { EventLoop(); });
}

RealVerbs::~RealVerbs() {
  stopping_ = true;
  uint64_t one = 1;
  (void)!::write(dev_.events_wake_fd, &one, sizeof(one));
  if (event_thread_.joinable()) event_thread_.join();
  StopListening();
  std::vector<QpId> ids;
  {
    MutexLock lock(&mu_);
    for (const auto& [id, conn] : conns_) ids.push_back(id);
  }
  for (QpId id : ids) DestroyQp(id);
  rdma_destroy_event_channel(dev_.events);
  ibv_destroy_cq(dev_.cq);
  ibv_destroy_comp_channel(dev_.cq_channel);
  ibv_dealloc_pd(dev_.pd);
  rdma_free_devices(dev_.devices);
  ::close(dev_.cq_wake_fd);
  ::close(dev_.events_wake_fd);
}

StatusOr<MemoryRegion> RealVerbs::RegisterMemory(const void* addr, size_t length) {
  ibv_mr* mr = ibv_reg_mr(dev_.pd, const_cast<void*>(addr), length,
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                              IBV_ACCESS_REMOTE_READ);
  if (mr == nullptr) {
    return ResourceExhausted("rdma: ibv_reg_mr of " + std::to_string(length) +
                             " B failed: " + std::strerror(errno));
  }
  return MemoryRegion{addr, length, mr->lkey, mr->rkey, reinterpret_cast<uint64_t>(mr)};
}

Status RealVerbs::DeregisterMemory(const MemoryRegion& mr) {
  if (int rc = ibv_dereg_mr(reinterpret_cast<ibv_mr*>(mr.handle)); rc != 0) {
    return Internal(std::string("rdma: ibv_dereg_mr failed: ") + std::strerror(rc));
  }
  return Status::OK();
}

Status RealVerbs::PostWriteWithImm(QpId qp, uint64_t wr_id, const void* local, uint32_t lkey,
                                   uint32_t length, uint64_t remote_addr, uint32_t rkey,
                                   uint32_t imm, bool inline_data) {
  ibv_sge sge{reinterpret_cast<uint64_t>(local), length, lkey};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = length > 0 ? &sge : nullptr;
  wr.num_sge = length > 0 ? 1 : 0;  // a control word: a zero-length write with immediate
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED | (inline_data ? IBV_SEND_INLINE : 0);
  wr.imm_data = htobe32(imm);
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  return PostSend(qp, &wr, length);
}

Status RealVerbs::PostRead(QpId qp, uint64_t wr_id, void* local, uint32_t lkey, uint32_t length,
                           uint64_t remote_addr, uint32_t rkey) {
  ibv_sge sge{reinterpret_cast<uint64_t>(local), length, lkey};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_READ;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  return PostSend(qp, &wr, length);
}

// mu_ is held across ibv_post_send so DestroyQp cannot free the QP under it (posting is short).
Status RealVerbs::PostSend(QpId qp, ibv_send_wr* wr, uint32_t length) {
  MutexLock lock(&mu_);
  auto it = conns_.find(qp);
  if (it == conns_.end()) return NotFound("rdma: no QP " + std::to_string(qp));
  if (it->second.id == nullptr || it->second.id->qp == nullptr) {
    return FailedPrecondition("rdma: QP " + std::to_string(qp) + " is not connected");
  }
  if (length > it->second.max_inline) wr->send_flags &= ~IBV_SEND_INLINE;
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(it->second.id->qp, wr, &bad); rc != 0) {
    return rc == ENOMEM ? ResourceExhausted("rdma: send queue of QP " + std::to_string(qp) +
                                            " is full (max_send_wr " +
                                            std::to_string(options_.max_send_wr) + ")")
                        : Internal("rdma: ibv_post_send on QP " + std::to_string(qp) +
                                   " failed: " + std::strerror(rc));
  }
  return Status::OK();
}

Status RealVerbs::PostRecv(QpId qp, uint64_t wr_id) {
  MutexLock lock(&mu_);
  auto it = conns_.find(qp);
  if (it == conns_.end()) return NotFound("rdma: no QP " + std::to_string(qp));
  if (it->second.id == nullptr || it->second.id->qp == nullptr) {
    it->second.early_recvs.push_back(wr_id);  // posted once rdma_create_qp made the QP
    return Status::OK();
  }
  ibv_recv_wr wr{};  // no buffer: a write with immediate lands where the writer put it
  wr.wr_id = wr_id;
  ibv_recv_wr* bad = nullptr;
  if (int rc = ibv_post_recv(it->second.id->qp, &wr, &bad); rc != 0) {
    return Internal("rdma: ibv_post_recv on QP " + std::to_string(qp) + " failed: " +
                    std::strerror(rc));
  }
  return Status::OK();
}

StatusOr<int> RealVerbs::PollCq(std::vector<WorkCompletion>* out, int max) {
  MutexLock lock(&cq_mu_);
  std::vector<ibv_wc> wcs;
  wcs.swap(stash_);
  if (static_cast<int>(wcs.size()) < max) {
    const size_t have = wcs.size();
    wcs.resize(static_cast<size_t>(max));
    int n = ibv_poll_cq(dev_.cq, max - static_cast<int>(have), wcs.data() + have);
    if (n < 0) return Internal("rdma: ibv_poll_cq failed (CQ overrun or device error)");
    wcs.resize(have + static_cast<size_t>(n));
  } else if (static_cast<int>(wcs.size()) > max) {
    stash_.assign(wcs.begin() + max, wcs.end());
    wcs.resize(static_cast<size_t>(max));
  }
  MutexLock qps(&mu_);
  for (const ibv_wc& w : wcs) {
    WorkCompletion wc;
    wc.wr_id = w.wr_id;
    auto q = by_qpn_.find(w.qp_num);
    wc.qp = q == by_qpn_.end() ? 0 : q->second;  // 0: a destroyed QP's late completion
    wc.ok = w.status == IBV_WC_SUCCESS;
    if (!wc.ok) {
      wc.error = std::string(ibv_wc_status_str(w.status)) + " (vendor error " +
                 std::to_string(w.vendor_err) + ")";
    }
    wc.opcode = w.opcode == IBV_WC_RDMA_READ          ? WcOpcode::kRead
                : w.opcode == IBV_WC_RECV_RDMA_WITH_IMM ? WcOpcode::kRecvWithImm
                                                        : WcOpcode::kWrite;
    wc.imm = (w.wc_flags & IBV_WC_WITH_IMM) ? be32toh(w.imm_data) : 0;
    wc.byte_len = w.byte_len;
    out->push_back(std::move(wc));
  }
  return static_cast<int>(wcs.size());
}

void RealVerbs::WaitCqEvent(int timeout_ms) {
  {
    MutexLock lock(&cq_mu_);
    if (!stash_.empty()) return;
    if (ibv_req_notify_cq(dev_.cq, 0) != 0) return;
    // A completion that arrived before the request raises no event: look once more.
    ibv_wc w[16];
    int n = ibv_poll_cq(dev_.cq, 16, w);
    if (n != 0) {
      if (n > 0) stash_.assign(w, w + n);
      return;  // n < 0: PollCq reports the failure
    }
  }
  pollfd fds[2] = {{dev_.cq_channel->fd, POLLIN, 0}, {dev_.cq_wake_fd, POLLIN, 0}};
  if (::poll(fds, 2, timeout_ms) <= 0) return;
  if (fds[1].revents & POLLIN) DrainEventFd(dev_.cq_wake_fd);
  ibv_cq* cq = nullptr;
  void* ctx = nullptr;
  if ((fds[0].revents & POLLIN) && ibv_get_cq_event(dev_.cq_channel, &cq, &ctx) == 0) {
    ibv_ack_cq_events(cq, 1);
  }
}

void RealVerbs::Wake() {
  uint64_t one = 1;
  (void)!::write(dev_.cq_wake_fd, &one, sizeof(one));
}

std::string RealVerbs::DeviceName(ibv_context* ctx) const {
  return ctx == nullptr ? std::string("(none)") : ibv_get_device_name(ctx->device);
}

}  // namespace internal

StatusOr<std::shared_ptr<Verbs>> OpenRealVerbs(const RealVerbsOptions& o) {
  internal::RealDevice d;
  int n = 0;
  d.devices = rdma_get_devices(&n);
  for (int i = 0; d.devices != nullptr && i < n && d.ctx == nullptr; ++i) {
    if (o.device.device.empty() || o.device.device == ibv_get_device_name(d.devices[i]->device)) {
      d.ctx = d.devices[i];
    }
  }
  const std::string name = o.device.device.empty() ? std::string("(any)") : o.device.device;
  if (d.ctx == nullptr || ibv_query_device(d.ctx, &d.attr) != 0) {
    if (d.devices != nullptr) rdma_free_devices(d.devices);
    return FailedPrecondition("rdma: cannot open RDMA device " + name + " through rdma_cm (" +
                              std::to_string(n) + " devices listed)");
  }
  RealVerbsOptions opts = o;
  opts.cq_depth = std::min(opts.cq_depth, d.attr.max_cqe);
  opts.max_send_wr = std::min<uint32_t>(opts.max_send_wr, d.attr.max_qp_wr);
  opts.max_recv_wr = std::min<uint32_t>(opts.max_recv_wr, d.attr.max_qp_wr);
  d.pd = ibv_alloc_pd(d.ctx);
  d.cq_channel = d.pd ? ibv_create_comp_channel(d.ctx) : nullptr;
  d.cq = d.cq_channel ? ibv_create_cq(d.ctx, opts.cq_depth, nullptr, d.cq_channel, 0) : nullptr;
  d.events = d.cq ? rdma_create_event_channel() : nullptr;
  d.cq_wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  d.events_wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (d.events == nullptr || d.cq_wake_fd < 0 || d.events_wake_fd < 0) {
    const std::string why = std::strerror(errno);
    if (d.events) rdma_destroy_event_channel(d.events);
    if (d.cq) ibv_destroy_cq(d.cq);
    if (d.cq_channel) ibv_destroy_comp_channel(d.cq_channel);
    if (d.pd) ibv_dealloc_pd(d.pd);
    if (d.cq_wake_fd >= 0) ::close(d.cq_wake_fd);
    if (d.events_wake_fd >= 0) ::close(d.events_wake_fd);
    rdma_free_devices(d.devices);
    return ResourceExhausted("rdma: cannot create a protection domain, a CQ of " +
                             std::to_string(opts.cq_depth) + " entries or the rdma_cm event "
                             "channel on " + name + ": " + why);
  }
  internal::SetNonBlocking(d.cq_channel->fd);
  internal::SetNonBlocking(d.events->fd);
  return std::shared_ptr<Verbs>(std::make_shared<internal::RealVerbs>(opts, d));
}

}  // namespace osprey::rdma
