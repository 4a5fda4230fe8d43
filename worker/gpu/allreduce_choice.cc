#include "worker/gpu/allreduce_choice.h"

#include <cmath>
#include <cstdio>

namespace osprey::worker::gpu {
namespace {

std::string Size(size_t bytes) {
  char s[32];
  if (bytes >= (size_t{1} << 20) && bytes % (size_t{1} << 20) == 0) {
    std::snprintf(s, sizeof(s), "%zu MiB", bytes >> 20);
  } else if (bytes >= 1024 && bytes % 1024 == 0) {
    std::snprintf(s, sizeof(s), "%zu KiB", bytes >> 10);
  } else {
    std::snprintf(s, sizeof(s), "%zu B", bytes);
  }
  return s;
}

bool IpcFaster(const AllreduceTiming& t) { return t.ipc_us < t.nccl_us; }

}  // namespace

StatusOr<AllreduceChoice> AllreduceChoice::Fixed(const std::string& mode) {
  AllreduceChoice c;
  if (mode == "nccl") return c;
  if (mode == "ipc") {
    c.fixed_ = AllreducePath::kIpc;
    return c;
  }
  if (mode == "auto") return InvalidArgument("host_allreduce: auto picks from calibration timings (FromTimings)");
  return InvalidArgument("host_allreduce: '" + mode + "' (one of auto, nccl, ipc)");
}

StatusOr<AllreduceChoice> AllreduceChoice::FromTimings(std::vector<AllreduceTiming> timings) {
  if (timings.empty()) return InvalidArgument("host_allreduce auto: no calibration timings");
  for (size_t i = 0; i < timings.size(); ++i) {
    const AllreduceTiming& t = timings[i];
    if (t.bytes == 0 || (i > 0 && t.bytes <= timings[i - 1].bytes)) {
      return InvalidArgument("host_allreduce auto: calibration sizes must be positive and increasing (entry " +
                             std::to_string(i) + ": " + std::to_string(t.bytes) + " bytes)");
    }
    if (!(t.nccl_us > 0) || !(t.ipc_us > 0) || !std::isfinite(t.nccl_us) || !std::isfinite(t.ipc_us)) {
      return InvalidArgument("host_allreduce auto: calibration at " + Size(t.bytes) + " has a non-positive time");
    }
  }
  AllreduceChoice c;
  c.timings_ = std::move(timings);
  return c;
}

AllreducePath AllreduceChoice::For(size_t bytes) const {
  if (timings_.empty()) return fixed_;
  // The nearest calibrated size in log scale (sizes below the first take the first, above the
  // last the last).
  const double x = std::log(static_cast<double>(bytes > 0 ? bytes : 1));
  const AllreduceTiming* best = &timings_[0];
  double gap = std::fabs(std::log(static_cast<double>(best->bytes)) - x);
  for (const AllreduceTiming& t : timings_) {
    const double g = std::fabs(std::log(static_cast<double>(t.bytes)) - x);
    if (g < gap) best = &t, gap = g;
  }
  return IpcFaster(*best) ? AllreducePath::kIpc : AllreducePath::kNccl;
}

bool AllreduceChoice::uses_ipc() const {
  if (timings_.empty()) return fixed_ == AllreducePath::kIpc;
  for (const AllreduceTiming& t : timings_) {
    if (IpcFaster(t)) return true;
  }
  return false;
}

std::string AllreduceChoice::Describe() const {
  if (timings_.empty()) return fixed_ == AllreducePath::kIpc ? "ipc" : "nccl";
  std::string s = "auto:";
  for (const AllreduceTiming& t : timings_) {
    char line[128];
    const bool ipc = IpcFaster(t);
    std::snprintf(line, sizeof(line), " %s %s %.1f us (%s %.1f)", Size(t.bytes).c_str(), ipc ? "ipc" : "nccl",
                  ipc ? t.ipc_us : t.nccl_us, ipc ? "nccl" : "ipc", ipc ? t.nccl_us : t.ipc_us);
    s += (&t == &timings_[0] ? "" : ",") + std::string(line);
  }
  return s;
}

std::vector<size_t> CalibrationSizes(size_t max_bytes) {
  std::vector<size_t> sizes;
  for (size_t b = size_t{64} << 10; b < max_bytes; b *= 4) sizes.push_back(b);
  if (max_bytes > 0) sizes.push_back(max_bytes);
  return sizes;
}

}  // namespace osprey::worker::gpu
