#include "server/admission/eviction.h"

#include <algorithm>
#include <cmath>

namespace osprey::server::admission {

Eviction::Eviction(const config::EvictionConfig& config) : config_(config) {}

void Eviction::Unlink(uint32_t i) {
  Node& n = nodes_[i];
  if (n.prev != kNil) nodes_[n.prev].next = n.next; else head_ = n.next;
  if (n.next != kNil) nodes_[n.next].prev = n.prev; else tail_ = n.prev;
  n.prev = n.next = kNil;
}

void Eviction::PushBack(uint32_t i) {
  Node& n = nodes_[i];
  n.prev = tail_;
  n.next = kNil;
  if (tail_ != kNil) nodes_[tail_].next = i; else head_ = i;
  tail_ = i;
}

void Eviction::Remove(uint32_t i) {
  Unlink(i);
  index_.erase(nodes_[i].key);
  free_.push_back(i);
}

void Eviction::Touch(uint64_t key, uint64_t step, int64_t now_us) {
  last_step_ = std::max(last_step_, step);
  last_us_ = std::max(last_us_, now_us);
  auto [it, inserted] = index_.try_emplace(key, kNil);
  if (inserted) {
    if (free_.empty()) {
      it->second = static_cast<uint32_t>(nodes_.size());
      nodes_.emplace_back();
    } else {
      it->second = free_.back();
      free_.pop_back();
    }
  } else {
    Unlink(it->second);
  }
  Node& n = nodes_[it->second];
  n.key = key;
  n.step = last_step_;
  n.us = last_us_;
  PushBack(it->second);
}

void Eviction::Forget(uint64_t key) {
  auto it = index_.find(key);
  if (it != index_.end()) Remove(it->second);
}

void Eviction::Sweep(uint64_t step, int64_t now_us, size_t max_ttl, Evicted* out) {
  out->by_ttl.clear();
  out->by_cap.clear();
  const double ttl_us = config_.ttl_seconds * 1e6;
  while (head_ != kNil && out->by_ttl.size() < max_ttl) {
    const Node& n = nodes_[head_];
    const bool by_steps = config_.ttl_steps > 0 && step >= n.step && step - n.step >= config_.ttl_steps;
    const bool by_time = config_.ttl_seconds > 0 && static_cast<double>(now_us - n.us) >= ttl_us;
    if (!by_steps && !by_time) break;
    out->by_ttl.push_back(n.key);
    Remove(head_);
  }
  while (config_.max_rows > 0 && index_.size() > config_.max_rows) {
    out->by_cap.push_back(nodes_[head_].key);
    Remove(head_);
  }
}

void Eviction::ForEach(const std::function<void(uint64_t, uint64_t, int64_t)>& fn) const {
  for (uint32_t i = head_; i != kNil; i = nodes_[i].next) fn(nodes_[i].key, nodes_[i].step, nodes_[i].us);
}

}  // namespace osprey::server::admission
