#include "common/config/limits_config.h"

#include <string>

#include "common/config/yaml_fields.h"

namespace osprey::config {

void ParseLimits(YamlFields& f, LimitsConfig* l) {
  f.Get("max_frame_bytes", &l->max_frame_bytes, 4096, uint64_t{1} << 40);
  f.Get("max_keys_per_request", &l->max_keys_per_request, 1, uint64_t{1} << 34);
  f.Get("max_inflight_per_peer", &l->max_inflight_per_peer, 1, 1 << 24);
  f.Get("max_held_bytes", &l->max_held_bytes, 4096, uint64_t{1} << 40);
  f.Get("max_control_frame_bytes", &l->max_control_frame_bytes, 4096, uint64_t{1} << 40);
  if (f.ok() && l->max_keys_per_request > l->max_frame_bytes / sizeof(uint64_t)) {
    f.Fail("max_keys_per_request", "needs a keys frame of " +
                                       std::to_string(l->max_keys_per_request * sizeof(uint64_t)) +
                                       " bytes, more than max_frame_bytes (" +
                                       std::to_string(l->max_frame_bytes) + ")");
  }
}

}  // namespace osprey::config
