#include "server/hold_budget.h"

#include <string>

namespace osprey::server {

Status HoldBudget::CheckLocked(PeerId peer, uint64_t bytes) const {
  auto it = per_peer_.find(peer);
  const uint64_t held = it == per_peer_.end() ? 0 : it->second;
  if (held >= static_cast<uint64_t>(limits_.max_inflight_per_peer)) {
    return ResourceExhausted("peer " + std::to_string(peer) + " already has " + std::to_string(held) +
                             " requests held unanswered: limits.max_inflight_per_peer is " +
                             std::to_string(limits_.max_inflight_per_peer));
  }
  if (bytes_ + bytes > limits_.max_held_bytes) {
    return ResourceExhausted("holding this request (" + std::to_string(bytes) + " bytes) would bring " +
                             "held requests to " + std::to_string(bytes_ + bytes) +
                             " bytes: limits.max_held_bytes is " + std::to_string(limits_.max_held_bytes));
  }
  return Status::OK();
}

Status HoldBudget::Check(PeerId peer, uint64_t bytes) const {
  MutexLock lock(&mu_);
  return CheckLocked(peer, bytes);
}

Status HoldBudget::Admit(PeerId peer, uint64_t bytes) {
  MutexLock lock(&mu_);
  Status s = CheckLocked(peer, bytes);
  if (!s.ok()) {
    ++refused_;
    return s;
  }
  ++per_peer_[peer];
  bytes_ += bytes;
  ++requests_;
  return Status::OK();
}

void HoldBudget::Release(PeerId peer, uint64_t bytes) {
  MutexLock lock(&mu_);
  auto it = per_peer_.find(peer);
  if (it == per_peer_.end()) return;  // not admitted: a caller bug, but never underflow
  if (--it->second == 0) per_peer_.erase(it);
  bytes_ -= bytes < bytes_ ? bytes : bytes_;
  --requests_;
}

uint64_t HoldBudget::held_bytes() const {
  MutexLock lock(&mu_);
  return bytes_;
}

uint64_t HoldBudget::held_requests() const {
  MutexLock lock(&mu_);
  return requests_;
}

uint64_t HoldBudget::held_by(PeerId peer) const {
  MutexLock lock(&mu_);
  auto it = per_peer_.find(peer);
  return it == per_peer_.end() ? 0 : it->second;
}

uint64_t HoldBudget::refused() const {
  MutexLock lock(&mu_);
  return refused_;
}

}  // namespace osprey::server
