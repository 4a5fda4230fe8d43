#include "server/admission/row_lifecycle.h"

#include <algorithm>
#include <cstring>
#include <tuple>

#include "server/row_init.h"

namespace osprey::server::admission {
namespace {

constexpr uint32_t kStateVersion = 1;
constexpr uint8_t kHasSketch = 1;
constexpr uint8_t kHasRows = 2;

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

template <typename T>
bool Get(const std::string& s, size_t* pos, T* v) {
  if (s.size() - *pos < sizeof(T)) return false;
  std::memcpy(v, s.data() + *pos, sizeof(T));
  *pos += sizeof(T);
  return true;
}

struct RowEntry {
  uint64_t key, step;
  int64_t age_us;
};

}  // namespace

StatusOr<std::unique_ptr<RowLifecycle>> RowLifecycle::Make(uint32_t table,
                                                           const config::TableConfig& config,
                                                           Store* store,
                                                           LifecycleCounters* counters) {
  if (config.type != config::TableType::kSparse ||
      (!config.admission.enabled() && !config.eviction.enabled())) {
    return std::unique_ptr<RowLifecycle>();
  }
  if (config.eviction.enabled()) {
    Status probe = store->EraseRows(table, nullptr, 0, nullptr);
    if (!probe.ok()) {
      return FailedPrecondition("table '" + config.name + "' asks for eviction, but its store " +
                                "cannot delete rows: " + probe.message());
    }
  }
  return std::make_unique<RowLifecycle>(table, config, store, counters);
}

RowLifecycle::RowLifecycle(uint32_t table, const config::TableConfig& config, Store* store,
                           LifecycleCounters* counters)
    : table_(table),
      dim_(config.dim),
      min_count_(static_cast<uint32_t>(config.admission.min_count)),
      init_(config.init),
      store_(store),
      counters_(counters) {
  if (config.admission.enabled()) {
    sketch_.emplace(static_cast<uint32_t>(config.admission.sketch_width),
                    static_cast<uint32_t>(config.admission.sketch_depth));
  }
  if (config.eviction.enabled()) eviction_.emplace(config.eviction);
}

Status RowLifecycle::FilterPush(const uint64_t** keys, size_t* n, const float** g) {
  if (!sketch_ || *n == 0) return Status::OK();
  const uint64_t* k = *keys;
  const size_t m = *n;
  has_row_.assign(m, 0);
  OSPREY_RETURN_IF_ERROR(store_->VisitRows(table_, k, m, RowAccess::kRead, [&](const RowBlock& b) {
    for (size_t j = 0; j < b.n; ++j) has_row_[b.begin + j] = b.rows[j] != nullptr;
    return Status::OK();
  }));
  // has_row_[i] becomes "keep": rows that exist, and keys this sighting admits.
  uint64_t admitted = 0, dropped = 0;
  for (size_t i = 0; i < m; ++i) {
    if (has_row_[i] != 0) continue;
    const bool admit = sketch_->Add(k[i]) >= min_count_;
    has_row_[i] = admit ? 1 : 0;
    admitted += admit ? 1 : 0;
    dropped += admit ? 0 : 1;
  }
  if (dropped > 0) {
    kept_keys_.clear();
    kept_g_.clear();
    for (size_t i = 0; i < m; ++i) {
      if (has_row_[i] == 0) continue;
      kept_keys_.push_back(k[i]);
      kept_g_.insert(kept_g_.end(), *g + i * dim_, *g + (i + 1) * dim_);
    }
  }
  counters_->admitted.fetch_add(admitted, std::memory_order_relaxed);
  counters_->gradients_dropped.fetch_add(dropped, std::memory_order_relaxed);
  if (dropped == 0) return Status::OK();  // the push as it came (its frame may be merged by ref)
  *keys = kept_keys_.data();
  *n = kept_keys_.size();
  *g = kept_g_.data();
  return Status::OK();
}

Status RowLifecycle::Pull(const uint64_t* keys, size_t n, float* out) {
  return store_->VisitRows(table_, keys, n, RowAccess::kRead, [&](const RowBlock& b) {
    for (size_t j = 0; j < b.n; ++j) {
      float* dst = out + (b.begin + j) * dim_;
      if (b.rows[j] != nullptr) {
        std::memcpy(dst, b.rows[j], sizeof(float) * dim_);
      } else {
        InitialRowWeights(init_, table_, keys[b.begin + j], dim_, dst);
      }
    }
    return Status::OK();
  });
}

Status RowLifecycle::Erase(const std::vector<uint64_t>& keys) {
  return keys.empty() ? Status::OK() : store_->EraseRows(table_, keys.data(), keys.size(), nullptr);
}

Status RowLifecycle::Applied(const uint64_t* keys, size_t n, uint64_t step, int64_t now_us) {
  if (!eviction_) return Status::OK();
  for (size_t i = 0; i < n; ++i) eviction_->Touch(keys[i], step, now_us);
  eviction_->Sweep(step, now_us, kSweepRows, &evicted_);
  OSPREY_RETURN_IF_ERROR(Erase(evicted_.by_ttl));
  OSPREY_RETURN_IF_ERROR(Erase(evicted_.by_cap));
  counters_->evicted_ttl.fetch_add(evicted_.by_ttl.size(), std::memory_order_relaxed);
  counters_->evicted_cap.fetch_add(evicted_.by_cap.size(), std::memory_order_relaxed);
  return Status::OK();
}

std::string RowLifecycle::SaveState(int64_t now_us) const {
  std::string out;
  Put(&out, kStateVersion);
  Put(&out, static_cast<uint8_t>((sketch_ ? kHasSketch : 0) | (eviction_ ? kHasRows : 0)));
  if (sketch_) sketch_->AppendTo(&out);
  if (eviction_) {
    Put(&out, static_cast<uint64_t>(eviction_->size()));
    eviction_->ForEach([&](uint64_t key, uint64_t step, int64_t us) {
      Put(&out, key);
      Put(&out, step);
      Put(&out, static_cast<int64_t>(std::max<int64_t>(0, now_us - us)));
    });
  }
  return out;
}

Status RowLifecycle::RestoreState(const std::vector<std::string>& states, const std::string* own,
                                  int64_t now_us, const std::string& what) {
  std::optional<CountMinSketch> sketch;
  std::vector<RowEntry> rows;
  for (const std::string& s : states) {
    if (s.empty()) continue;  // a file saved without this state (or by an older build)
    const bool mine = own == nullptr || own == &s;
    size_t pos = 0;
    uint32_t version = 0;
    uint8_t flags = 0;
    if (!Get(s, &pos, &version) || !Get(s, &pos, &flags)) {
      return DataLoss(what + ": admission/eviction state is truncated");
    }
    if (version != kStateVersion) {
      return DataLoss(what + ": admission/eviction state has version " + std::to_string(version) +
                      ", this build reads " + std::to_string(kStateVersion));
    }
    if (flags & kHasSketch) {
      OSPREY_ASSIGN_OR_RETURN(CountMinSketch cms, CountMinSketch::Parse(s.data(), s.size(), &pos, what));
      if (mine && !sketch) {
        sketch.emplace(std::move(cms));
      } else if (mine) {
        OSPREY_RETURN_IF_ERROR(sketch->MergeFrom(cms).WithContext(what));
      }
    }
    if (flags & kHasRows) {
      uint64_t count = 0;
      if (!Get(s, &pos, &count) || (s.size() - pos) / 24 < count) {
        return DataLoss(what + ": admission/eviction row entries are truncated");
      }
      for (uint64_t i = 0; i < count; ++i) {
        RowEntry e{};
        Get(s, &pos, &e.key);
        Get(s, &pos, &e.step);
        Get(s, &pos, &e.age_us);
        rows.push_back(e);
      }
    }
    if (pos != s.size()) return DataLoss(what + ": bytes after the admission/eviction state");
  }
  if (sketch_ && sketch) {
    if (sketch->width() != sketch_->width() || sketch->depth() != sketch_->depth()) {
      return FailedPrecondition(what + ": the checkpoint's admission sketch is " +
                                std::to_string(sketch->width()) + "x" + std::to_string(sketch->depth()) +
                                ", the table's config asks for " + std::to_string(sketch_->width()) +
                                "x" + std::to_string(sketch_->depth()));
    }
    sketch_.emplace(std::move(*sketch));
  }
  if (!eviction_ || rows.empty()) return Status::OK();
  // Only rows this server restored; least recently updated first.
  std::vector<uint64_t> keys(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) keys[i] = rows[i].key;
  std::vector<uint8_t> present(rows.size(), 0);
  OSPREY_RETURN_IF_ERROR(store_->VisitRows(table_, keys.data(), keys.size(), RowAccess::kRead,
                                           [&](const RowBlock& b) {
    for (size_t j = 0; j < b.n; ++j) present[b.begin + j] = b.rows[j] != nullptr;
    return Status::OK();
  }));
  std::vector<RowEntry> kept;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (present[i]) kept.push_back(rows[i]);
  }
  std::stable_sort(kept.begin(), kept.end(), [](const RowEntry& a, const RowEntry& b) {
    return std::make_tuple(a.step, -a.age_us) < std::make_tuple(b.step, -b.age_us);
  });
  for (const RowEntry& e : kept) eviction_->Touch(e.key, e.step, now_us - e.age_us);
  return Status::OK();
}

}  // namespace osprey::server::admission
