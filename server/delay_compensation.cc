#include "server/delay_compensation.h"

#include <cstring>

namespace osprey::server {

DelayCompensation::DelayCompensation(float lambda, bool sparse,
                                     std::function<size_t(uint64_t)> width)
    : lambda_(lambda), sparse_(sparse), width_(std::move(width)) {}

void DelayCompensation::RecordPull(int worker, const uint64_t* keys, size_t n,
                                   const float* values) {
  Memory& m = workers_[worker];
  for (size_t i = 0, off = 0; i < n; ++i) {
    const size_t w = width_(keys[i]);
    auto it = m.at_pull.find(keys[i]);
    if (it != m.at_pull.end()) {
      it->second.assign(values + off, values + off + w);
    } else if (m.floats + w <= kMaxFloatsPerWorker) {
      m.at_pull.emplace(keys[i], std::vector<float>(values + off, values + off + w));
      m.floats += w;
    } else {
      ++counts_.not_remembered;
    }
    off += w;
  }
}

void DelayCompensation::Compensate(int worker, const uint64_t* keys, size_t n, const float* g,
                                   const float* w_now, float* out) {
  auto mit = workers_.find(worker);
  Memory* m = mit == workers_.end() ? nullptr : &mit->second;
  for (size_t i = 0, off = 0; i < n; ++i) {
    const size_t w = width_(keys[i]);
    const float* gi = g + off;
    float* oi = out + off;
    off += w;
    auto it = m ? m->at_pull.find(keys[i]) : decltype(m->at_pull.end()){};
    if (m == nullptr || it == m->at_pull.end()) {
      std::memcpy(oi, gi, w * sizeof(float));
      ++counts_.uncompensated;
      continue;
    }
    const float* wp = it->second.data();
    const float* wn = w_now + (oi - out);
    for (size_t j = 0; j < w; ++j) oi[j] = gi[j] + lambda_ * gi[j] * gi[j] * (wn[j] - wp[j]);
    ++counts_.compensated;
    if (sparse_) {
      m->floats -= w;
      m->at_pull.erase(it);
    }
  }
}

size_t DelayCompensation::floats(int worker) const {
  auto it = workers_.find(worker);
  return it == workers_.end() ? 0 : it->second.floats;
}

}  // namespace osprey::server
