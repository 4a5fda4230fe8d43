// QueryRdmaStack and CheckRdmaDevice: what `osprey doctor` lists and the start-up check decides on.
#include "common/rdma/real_verbs.h"

#include <dlfcn.h>
#include <infiniband/verbs.h>
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
  int cm = 0;
  if (ibv_context** cm_list = rdma_get_devices(&cm); cm_list != nullptr) {
    info.rdma_cm_devices = cm;
    rdma_free_devices(cm_list);
  }
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

}  // namespace osprey::rdma
