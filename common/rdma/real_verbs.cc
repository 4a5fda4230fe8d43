#include "common/rdma/real_verbs.h"

#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

#include <cstdio>
#include <cstring>

namespace osprey::rdma {

namespace {

const char* PortStateName(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_ACTIVE: return "active";
    case IBV_PORT_DOWN: return "down";
    case IBV_PORT_INIT: return "init";
    case IBV_PORT_ARMED: return "armed";
    default: return "other";
  }
}

std::string GidText(const ibv_gid& g) {
  char buf[64];
  const uint8_t* r = g.raw;
  std::snprintf(buf, sizeof(buf), "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x",
                r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12],
                r[13], r[14], r[15]);
  return buf;
}

bool ZeroGid(const ibv_gid& g) {
  for (uint8_t b : g.raw) {
    if (b != 0) return false;
  }
  return true;
}

}  // namespace

StatusOr<StackInfo> QueryRdmaStack() {
  StackInfo info;
  // Part of libibverbs since rdma-core 34 (Debian 12 ships 44); whether a given NIC and driver
  // accept device memory can only be told by registering a dmabuf fd on it (not done yet).
  info.dmabuf_mr_available = dlsym(RTLD_DEFAULT, "ibv_reg_dmabuf_mr") != nullptr;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return info;  // no devices (or no driver at all): nothing to list
  for (int i = 0; i < n; ++i) {
    DeviceInfo d;
    d.name = ibv_get_device_name(list[i]);
    ibv_context* ctx = ibv_open_device(list[i]);
    ibv_device_attr attr{};
    if (ctx != nullptr && ibv_query_device(ctx, &attr) == 0) {
      for (int p = 1; p <= attr.phys_port_cnt; ++p) {
        ibv_port_attr pa{};
        if (ibv_query_port(ctx, p, &pa) != 0) continue;
        PortInfo port;
        port.port = p;
        port.state = PortStateName(pa.state);
        port.link_layer = pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand";
        port.active_mtu = 128 << pa.active_mtu;  // IBV_MTU_256 == 1
        for (int g = 0; g < pa.gid_tbl_len && g < 16; ++g) {
          ibv_gid gid{};
          if (ibv_query_gid(ctx, p, g, &gid) == 0 && !ZeroGid(gid)) {
            port.gids.push_back({g, GidText(gid)});
          }
        }
        d.ports.push_back(port);
      }
    }
    if (ctx != nullptr) ibv_close_device(ctx);
    info.devices.push_back(d);
  }
  ibv_free_device_list(list);
  return info;
}

Status CheckRdmaDevice(const DeviceRequest& want, const StackInfo& stack) {
  std::string wanted = "looked for RDMA device " +
                       (want.device.empty() ? std::string("(any)") : "'" + want.device + "'") +
                       " port " + std::to_string(want.port) + " gid_index " +
                       std::to_string(want.gid_index);
  if (stack.devices.empty()) {
    return FailedPrecondition("cluster.transport is rdma but no RDMA device is usable: " + wanted +
                              "; found 0 devices (ibv_get_device_list)");
  }
  std::string names;
  const DeviceInfo* dev = nullptr;
  for (const DeviceInfo& d : stack.devices) {
    names += (names.empty() ? "" : ", ") + d.name;
    if (dev == nullptr && (want.device.empty() || d.name == want.device)) dev = &d;
  }
  if (dev == nullptr) {
    return FailedPrecondition("cluster.transport is rdma: " + wanted + "; found only " + names);
  }
  for (const PortInfo& p : dev->ports) {
    if (p.port != want.port) continue;
    if (p.state != "active") {
      return FailedPrecondition("cluster.transport is rdma: " + wanted + "; found " + dev->name +
                                " port " + std::to_string(p.port) + " " + p.state);
    }
    if (p.link_layer == "Ethernet") {
      for (const GidInfo& g : p.gids) {
        if (g.index == want.gid_index) return Status::OK();
      }
      return FailedPrecondition("cluster.transport is rdma: " + wanted + "; found " + dev->name +
                                " port " + std::to_string(p.port) +
                                " (RoCE) with no GID at that index (" +
                                std::to_string(p.gids.size()) + " GIDs)");
    }
    return Status::OK();
  }
  return FailedPrecondition("cluster.transport is rdma: " + wanted + "; found " + dev->name +
                            " with " + std::to_string(dev->ports.size()) + " port(s), not that one");
}

namespace {

// The data path over one device context. Connection setup (rdma_cm) is not written: see the
// header.
class RealVerbs final : public Verbs {
 public:
  RealVerbs(ibv_context* ctx, ibv_pd* pd, ibv_comp_channel* ch, ibv_cq* cq)
      : ctx_(ctx), pd_(pd), channel_(ch), cq_(cq) {}
  ~RealVerbs() override {
    ibv_destroy_cq(cq_);
    ibv_destroy_comp_channel(channel_);
    ibv_dealloc_pd(pd_);
    ibv_close_device(ctx_);
  }

  StatusOr<StackInfo> Query() override { return QueryRdmaStack(); }

  StatusOr<MemoryRegion> RegisterMemory(const void* addr, size_t length) override {
    ibv_mr* mr = ibv_reg_mr(pd_, const_cast<void*>(addr), length,
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                IBV_ACCESS_REMOTE_READ);
    if (mr == nullptr) {
      return ResourceExhausted("rdma: ibv_reg_mr of " + std::to_string(length) +
                               " B failed: " + std::strerror(errno));
    }
    return MemoryRegion{addr, length, mr->lkey, mr->rkey, reinterpret_cast<uint64_t>(mr)};
  }
  Status DeregisterMemory(const MemoryRegion& mr) override {
    if (ibv_dereg_mr(reinterpret_cast<ibv_mr*>(mr.handle)) != 0) {
      return Internal(std::string("rdma: ibv_dereg_mr failed: ") + std::strerror(errno));
    }
    return Status::OK();
  }

  StatusOr<std::string> Listen(const std::string& host_port, AcceptHandler) override {
    return NotWritten("listening on " + host_port);
  }
  void StopListening() override {}
  StatusOr<QpId> CreateQp() override { return NotWritten("creating a QP"); }
  StatusOr<PrivateData> Connect(QpId, const std::string& host_port, const PrivateData&) override {
    return NotWritten("connecting to " + host_port);
  }
  void DestroyQp(QpId) override {}

  Status PostWriteWithImm(QpId qp, uint64_t wr_id, const void* local, uint32_t lkey,
                          uint32_t length, uint64_t remote_addr, uint32_t rkey, uint32_t imm,
                          bool inline_data) override {
    ibv_sge sge{reinterpret_cast<uint64_t>(local), length, lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = length > 0 ? &sge : nullptr;
    wr.num_sge = length > 0 ? 1 : 0;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED | (inline_data ? IBV_SEND_INLINE : 0);
    wr.imm_data = htobe32(imm);
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
    return PostSend(qp, &wr);
  }
  Status PostRead(QpId qp, uint64_t wr_id, void* local, uint32_t lkey, uint32_t length,
                  uint64_t remote_addr, uint32_t rkey) override {
    ibv_sge sge{reinterpret_cast<uint64_t>(local), length, lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
    return PostSend(qp, &wr);
  }
  Status PostRecv(QpId qp, uint64_t wr_id) override {
    return NotWritten("posting a receive on QP " + std::to_string(qp));
  }

  StatusOr<int> PollCq(std::vector<WorkCompletion>* out, int max) override {
    ibv_wc wcs[64];
    int n = ibv_poll_cq(cq_, max < 64 ? max : 64, wcs);
    if (n < 0) return Internal("rdma: ibv_poll_cq failed (CQ overrun or device error)");
    for (int i = 0; i < n; ++i) {
      WorkCompletion wc;
      wc.wr_id = wcs[i].wr_id;
      wc.qp = wcs[i].qp_num;
      wc.ok = wcs[i].status == IBV_WC_SUCCESS;
      if (!wc.ok) wc.error = ibv_wc_status_str(wcs[i].status);
      wc.opcode = wcs[i].opcode == IBV_WC_RDMA_READ    ? WcOpcode::kRead
                  : wcs[i].opcode == IBV_WC_RDMA_WRITE ? WcOpcode::kWrite
                                                       : WcOpcode::kRecvWithImm;
      wc.imm = be32toh(wcs[i].imm_data);
      wc.byte_len = wcs[i].byte_len;
      out->push_back(std::move(wc));
    }
    return n;
  }
  void WaitCqEvent(int timeout_ms) override {
    if (ibv_req_notify_cq(cq_, 0) != 0) return;
    pollfd pfd{channel_->fd, POLLIN, 0};
    if (::poll(&pfd, 1, timeout_ms) <= 0) return;
    ibv_cq* cq = nullptr;
    void* ctx = nullptr;
    if (ibv_get_cq_event(channel_, &cq, &ctx) == 0) ibv_ack_cq_events(cq, 1);
  }
  void Wake() override {}  // the poller's WaitCqEvent times out within 10 ms

 private:
  static Status NotWritten(const std::string& what) {
    return Unimplemented("rdma: " + what + " needs rdma_cm connection setup, which is not "
                         "written yet (no RDMA hardware here to test it)");
  }
  Status PostSend(QpId qp, ibv_send_wr* wr) {
    return NotWritten("posting a send on QP " + std::to_string(qp));
  }

  ibv_context* ctx_;
  ibv_pd* pd_;
  ibv_comp_channel* channel_;
  ibv_cq* cq_;
};

}  // namespace

StatusOr<std::shared_ptr<Verbs>> OpenRealVerbs(const DeviceRequest& want, int cq_depth) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ibv_device* dev = nullptr;
  for (int i = 0; list != nullptr && i < n && dev == nullptr; ++i) {
    if (want.device.empty() || want.device == ibv_get_device_name(list[i])) dev = list[i];
  }
  ibv_context* ctx = dev != nullptr ? ibv_open_device(dev) : nullptr;
  if (list != nullptr) ibv_free_device_list(list);
  if (ctx == nullptr) {
    return FailedPrecondition("rdma: cannot open RDMA device " +
                              (want.device.empty() ? std::string("(any)") : want.device));
  }
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_comp_channel* ch = pd ? ibv_create_comp_channel(ctx) : nullptr;
  ibv_cq* cq = ch ? ibv_create_cq(ctx, cq_depth, nullptr, ch, 0) : nullptr;
  if (cq == nullptr) {
    if (ch) ibv_destroy_comp_channel(ch);
    if (pd) ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    return ResourceExhausted("rdma: cannot create a protection domain / CQ of " +
                             std::to_string(cq_depth) + " entries");
  }
  return std::shared_ptr<Verbs>(std::make_shared<RealVerbs>(ctx, pd, ch, cq));
}

}  // namespace osprey::rdma
