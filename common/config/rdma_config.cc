#include "common/config/rdma_config.h"

#include "common/config/yaml_fields.h"

namespace osprey::config {

void ParseRdma(YamlFields& f, RdmaConfig* r) {
  f.Get("device", &r->device);
  f.Get("port", &r->port, 1, 255);
  f.Get("gid_index", &r->gid_index, 0, 255);
  f.Get("inline_threshold", &r->inline_threshold, 0, 1024);
  f.Get("ring_slots", &r->ring_slots, 1, 2048);
  f.Get("slot_bytes", &r->slot_bytes, 256, (1 << 20) - 1);
  f.Get("rendezvous_threshold", &r->rendezvous_threshold, 1, 1 << 30);
}

}  // namespace osprey::config
