// RdmaConfig: the `rdma` section of a job config, read when cluster.transport is rdma (see the
// README's "RDMA" section).
//
//   rdma:
//     device: ""                   # RDMA device name (ibv_devices); "" = the first one
//     port: 1                      # its port
//     gid_index: 0                 # the GID for RoCE (Ethernet link layer)
//     inline_threshold: 128        # writes up to this many bytes go inline
//     ring_slots: 64               # receive slots per peer (in-flight messages per peer)
//     slot_bytes: 65536            # bytes per slot (one small message)
//     rendezvous_threshold: 32768  # frames this large are RDMA-READ from the sender's memory
#pragma once

#include <cstdint>
#include <string>

namespace osprey::config {

class YamlFields;

struct RdmaConfig {
  std::string device;
  int port = 1;
  int gid_index = 0;
  int inline_threshold = 128;
  int ring_slots = 64;
  int slot_bytes = 64 << 10;
  int rendezvous_threshold = 32 << 10;
};

// Reads the `rdma` section into *r (ranges as the transport accepts them).
void ParseRdma(YamlFields& f, RdmaConfig* r);

}  // namespace osprey::config
