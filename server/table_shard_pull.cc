// TableShard's pull side: readiness, held pulls and the pull replies (see table_shard.h).
#include <algorithm>
#include <cstring>
#include <vector>

#include "common/codec/codec_math.h"
#include "common/codec/row_cast.h"
#include "server/table_shard.h"

namespace osprey::server {

Status TableShard::Pull(const proto::Header& h, Message msg, int64_t now_us) {
  if (!failed_.ok()) {
    replier_->ReplyError(msg.peer, h, failed_);
    return failed_;
  }
  now_us_ = std::max(now_us_, now_us);
  bool ready = !policy_->tracks_progress() || h.clock() <= 0;
  if (!ready) {
    Progress(h.worker_rank(), h.clock());
    ready = policy_->PullReady(h.clock(), done_, clocks_.Slowest());
  }
  if (ready) {
    AnswerPull(h, msg);
    return Status::OK();
  }
  HeldPull p{std::move(msg), h};
  if (budget_ != nullptr) {
    Status s = budget_->Admit(p.msg.peer, HeldBytes(p));
    if (!s.ok()) {  // refused, not held: the peer learns which limit at once
      replier_->ReplyError(p.msg.peer, h, s.WithContext("table '" + spec_.name() + "': pull of clock " +
                                                         std::to_string(h.clock()) + " not held"));
      return Status::OK();
    }
  }
  counters_->pulls_held.fetch_add(1, std::memory_order_relaxed);
  held_.push_back(std::move(p));
  // The pull itself may be the progress the oldest bsp window waited for (a worker that pulls a
  // table it does not push, e.g. a GPU host group's non-owner): close what can close.
  return Advance(now_us);
}

void TableShard::ReleaseHeld() {
  if (held_.empty()) return;
  // With no live worker left nothing can advance the clocks: every held pull is answered.
  const int64_t slowest = clocks_.Slowest();
  std::vector<HeldPull> ready;
  size_t kept = 0;
  for (size_t i = 0; i < held_.size(); ++i) {
    if (policy_->Release(held_[i].header.clock(), done_, slowest)) {
      ReleasePull(held_[i]);
      ready.push_back(std::move(held_[i]));
    } else {
      if (kept != i) held_[kept] = std::move(held_[i]);
      ++kept;
    }
  }
  held_.resize(kept);
  if (policy_->ApplyBeforeRelease() && !ready.empty() && !windows_.empty()) {
    // ssp: released pulls see every push received.
    if (!ApplyWindow(&windows_.begin()->second, 0).ok()) {
      for (const HeldPull& p : ready) replier_->ReplyError(p.msg.peer, p.header, failed_);
      return;
    }
  }
  for (const HeldPull& p : ready) AnswerPull(p.header, p.msg);
}

void TableShard::AnswerPull(const proto::Header& h, const Message& msg) {
  proto::Header reply = ReplyHeader(h);
  Buffer values;
  Status s = ServePull(h, msg, &reply, &values);
  if (!s.ok()) {
    replier_->ReplyError(msg.peer, h, s);
  } else {
    replier_->Reply(msg.peer, reply, std::move(values));
  }
}

Status TableShard::ServePull(const proto::Header& h, const Message& msg, proto::Header* reply,
                             Buffer* values) {
  const uint64_t* keys = msg.keys.as<uint64_t>();
  const size_t n = h.num_keys();
  size_t floats = sparse() ? n * spec_.dim() : 0;
  if (!sparse()) {
    for (size_t i = 0; i < n; ++i) floats += store_->ChunkFloats(id_, keys[i]);
  }
  const bool cast = sparse() && h.codec() != proto::CODEC_NONE;  // validated by the Server: fp16 / bf16
  const auto type = static_cast<codec::ValueType>(h.codec_value_type());
  if (cast && !lifecycle_ && !dc_) {
    // Each row cast as it is read: no fp32 copy of the reply in between.
    *values = Buffer::Allocate(floats * codec::RowValueBytes(type));
    OSPREY_RETURN_IF_ERROR(PullSparseRowsAs(keys, n, type, values->mutable_data()));
  } else {
    // Dense: a snapshot of the store's own block when the message covers consecutive chunks (a
    // client's whole route does), sent without copying; the store copies on its next write while
    // the reply is still in flight, so the chunks of this reply are never torn.
    if (sparse() || !store_->PullChunksView(id_, keys, n, values) || values->size() != floats * sizeof(float)) {
      *values = Buffer::Allocate(floats * sizeof(float));
      float* out = reinterpret_cast<float*>(values->mutable_data());
      // Admission / eviction: missing rows are served from the initializer, not created.
      OSPREY_RETURN_IF_ERROR(!sparse()    ? store_->PullChunks(id_, keys, n, out)
                             : lifecycle_ ? lifecycle_->Pull(keys, n, out)
                                          : PullSparseRowsAs(keys, n, codec::ValueType::kFp32,
                                                             reinterpret_cast<uint8_t*>(out)));
    }
    RecordPull(h, keys, n, values->as<float>());  // DC-ASGD's weights at pull (no-op without it)
    if (cast) {
      Buffer rows = Buffer::Allocate(floats * codec::RowValueBytes(type));
      codec::CastRowValues(values->as<float>(), floats, type, rows.mutable_data());
      *values = std::move(rows);
    }
  }
  if (cast) {
    reply->set_codec(h.codec());
    reply->set_codec_value_type(h.codec_value_type());
    reply->set_codec_count(floats);
  }
  reply->set_version(version_);
  reply->set_num_keys(0);
  reply->set_value_bytes(values->size());
  return Status::OK();
}

namespace {

// One row of `dim` floats written as `type` at out: copied, or cast with codec::CastRowValues' bits.
inline void PutRow(const float* row, size_t dim, codec::ValueType type, uint8_t* out) {
  if (type == codec::ValueType::kFp32) {
    std::memcpy(out, row, dim * sizeof(float));
  } else if (type == codec::ValueType::kBf16) {
    uint16_t* o = reinterpret_cast<uint16_t*>(out);
    for (size_t k = 0; k < dim; ++k) o[k] = codec::SaturatingBf16Bits(row[k]);
  } else {
    codec::CastRowValues(row, dim, type, out);
  }
}

}  // namespace

Status TableShard::PullSparseRowsAs(const uint64_t* keys, size_t n, codec::ValueType type, uint8_t* out) {
  const size_t dim = spec_.dim();
  const size_t row_bytes = dim * codec::RowValueBytes(type);
  if (!store_->concurrent_row_visits(id_)) {  // e.g. the Redis store: its batched pull, then the cast
    if (type == codec::ValueType::kFp32) return store_->PullRows(id_, keys, n, reinterpret_cast<float*>(out));
    std::vector<float> rows(n * dim);
    OSPREY_RETURN_IF_ERROR(store_->PullRows(id_, keys, n, rows.data()));
    codec::CastRowValues(rows.data(), rows.size(), type, out);
    return Status::OK();
  }
  // A thread is worth its wake-up from about 64k floats of rows on (pulls only copy).
  constexpr size_t kMinFloatsPerRange = size_t{1} << 16;
  const size_t grain = ApplyPool::RowGrain(kMinFloatsPerRange, dim);
  const bool split = apply_pool_ != nullptr && apply_pool_->Ranges(n, grain) >= 2;
  // fp32 on one thread: the table's own pull (reads and creates in one pass).
  if (!split && type == codec::ValueType::kFp32) {
    return store_->PullRows(id_, keys, n, reinterpret_cast<float*>(out));
  }
  // Rows that exist are read (and cast) where they lie, in ranges over the pool when it is worth
  // it; keys without a row are created afterwards on this thread in key order, so row ids and
  // initial values are those of one thread's pull.
  std::vector<uint8_t>& absent = pull_absent_;
  absent.assign(n, 0);
  auto visit = [&](size_t begin, size_t end) {
    return store_->VisitRows(id_, keys + begin, end - begin, RowAccess::kRead, [&](const RowBlock& b) {
      for (size_t j = 0; j < b.n; ++j) {
        const size_t i = begin + b.begin + j;
        if (b.rows[j] == nullptr) {
          absent[i] = 1;
        } else {
          PutRow(b.rows[j], dim, type, out + i * row_bytes);
        }
      }
      return Status::OK();
    });
  };
  OSPREY_RETURN_IF_ERROR(split ? apply_pool_->Run(n, grain, visit) : visit(0, n));
  std::vector<uint64_t> missing;
  std::vector<size_t> at;
  for (size_t i = 0; i < n; ++i) {
    if (absent[i] == 0) continue;
    missing.push_back(keys[i]);
    at.push_back(i);
  }
  if (missing.empty()) return Status::OK();
  std::vector<float> rows(missing.size() * dim);
  OSPREY_RETURN_IF_ERROR(store_->PullRows(id_, missing.data(), missing.size(), rows.data()));
  for (size_t m = 0; m < missing.size(); ++m) PutRow(rows.data() + m * dim, dim, type, out + at[m] * row_bytes);
  return Status::OK();
}

void TableShard::RecordPull(const proto::Header& h, const uint64_t* keys, size_t n,
                            const float* values) {
  if (dc_) dc_->RecordPull(h.worker_rank(), keys, n, values);
}

}  // namespace osprey::server
