#include "tools/progress.h"

#include <algorithm>
#include <cstdio>

namespace osprey::tools {
namespace {

constexpr int kBarWidth = 20;
constexpr std::chrono::seconds kRateWindow(5);

}  // namespace

std::string FormatCount(double value) {
  char buf[32];
  if (value < 1e3) {
    std::snprintf(buf, sizeof(buf), "%.0f", value);
  } else if (value < 1e6) {
    std::snprintf(buf, sizeof(buf), "%.1fk", value / 1e3);
  } else if (value < 1e9) {
    std::snprintf(buf, sizeof(buf), "%.2fM", value / 1e6);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1fG", value / 1e9);
  }
  return buf;
}

std::string ProgressMeter::Signature(const proto::ClusterState& state) const {
  std::string sig = std::to_string(state.nodes_size()) + "|" +
                    std::to_string(state.reports_size()) + "|" + std::to_string(state.epoch()) +
                    "|" + (state.done() ? "d" : "") + (state.shutting_down() ? "s" : "") + "|" +
                    state.failure();
  for (const proto::NodeState& n : state.nodes()) {
    sig += "|" + std::to_string(n.clock()) + (n.alive() ? "a" : "x");
  }
  return sig;
}

bool ProgressMeter::Update(const proto::ClusterState& state, Clock::time_point now) {
  std::string sig = Signature(state);
  const bool moved = !have_state_ || sig != signature_;
  signature_ = std::move(sig);
  have_state_ = true;
  last_ = state;

  int64_t min_clock = -1;
  uint64_t samples = 0;
  double loss_sum = 0;
  int loss_n = 0;
  for (const proto::NodeState& n : state.nodes()) {
    if (n.role() != proto::ROLE_WORKER) continue;
    samples += n.samples();
    if (!n.alive()) continue;
    min_clock = min_clock < 0 ? n.clock() : std::min(min_clock, n.clock());
    if (n.clock() > 0) {
      loss_sum += n.loss();
      ++loss_n;
    }
  }
  step_ = std::max<int64_t>(min_clock, 0);
  have_loss_ = loss_n > 0;
  loss_ = have_loss_ ? loss_sum / loss_n : 0;

  samples_.emplace_back(now, samples);
  while (samples_.size() > 2 && now - samples_[1].first >= kRateWindow) samples_.pop_front();
  const auto& [t0, s0] = samples_.front();
  const double dt = std::chrono::duration<double>(now - t0).count();
  rate_ = dt > 0 && samples >= s0 ? static_cast<double>(samples - s0) / dt : 0;
  RecordCurve(now);
  return moved;
}

void ProgressMeter::RecordCurve(Clock::time_point now) {
  if (curve_.empty() && first_poll_ == Clock::time_point{}) first_poll_ = now;
  const int64_t last = curve_.empty() ? 0 : curve_.back().step;
  if (step_ <= 0 || (!curve_.empty() && step_ < last + curve_every_)) return;
  CurvePoint p;
  p.seconds = std::chrono::duration<double>(now - first_poll_).count();
  p.step = step_;
  if (have_loss_) p.loss = loss_;
  p.samples_per_sec = rate_;
  curve_.push_back(p);
  if (curve_.size() >= kMaxCurvePoints) {
    std::vector<CurvePoint> kept;
    for (size_t i = 0; i < curve_.size(); i += 2) kept.push_back(curve_[i]);
    curve_ = std::move(kept);
    curve_every_ *= 2;
  }
}

std::string ProgressMeter::Line() const {
  if (!have_state_) return "";
  if (last_.epoch() == 0) {  // the rendezvous has not completed
    int servers = 0;
    int workers = 0;
    for (const proto::NodeState& n : last_.nodes()) {
      (n.role() == proto::ROLE_SERVER ? servers : workers) += 1;
    }
    char buf[128];
    std::snprintf(buf, sizeof(buf), "waiting for nodes: %d/%d servers, %d/%d workers", servers,
                  last_.num_servers(), workers, last_.num_workers());
    return buf;
  }
  const int64_t total = std::max<int64_t>(total_steps_, 1);
  const int filled = static_cast<int>(std::clamp<int64_t>(step_ * kBarWidth / total, 0, kBarWidth));
  std::string line = "[" + std::string(filled, '#') + std::string(kBarWidth - filled, '.') + "]";
  char buf[160];
  std::snprintf(buf, sizeof(buf), " step %lld/%lld  %s samples/s", static_cast<long long>(step_),
                static_cast<long long>(total_steps_), FormatCount(rate_).c_str());
  line += buf;
  if (have_loss_) {
    std::snprintf(buf, sizeof(buf), "  loss %.4f", loss_);
    line += buf;
  }
  if (last_.reports_size() > 0) {
    line += "  " + std::to_string(last_.reports_size()) + "/" +
            std::to_string(last_.num_workers()) + " reported";
  }
  for (const proto::NodeState& n : last_.nodes()) {  // the first worker whose compression is unhealthy
    if (n.role() != proto::ROLE_WORKER || n.compression_warning().empty()) continue;
    line += "  WARNING worker " + std::to_string(n.rank()) + ": " + n.compression_warning();
    break;
  }
  return line;
}

}  // namespace osprey::tools
