// FaultInjectingStore: a Store wrapper for fault tests. It forwards every call to the store it
// owns and fails the writes (the blocks of VisitRows with kUpdate, VisitRowsById, VisitChunks)
// and Sync with an injected error once armed: FailWrites(after, status) lets `after` more writes
// succeed, then every write fails with `status` (after the callback ran, as a store whose
// write-back fails would). acks_after_apply() is settable, to test both ack modes.
// Thread-safety: as the wrapped store (one caller at a time).
#pragma once

#include <memory>
#include <utility>

#include "server/store.h"

namespace osprey::server::testing {

class FaultInjectingStore : public Store {
 public:
  explicit FaultInjectingStore(std::unique_ptr<Store> inner) : inner_(std::move(inner)) {}

  void FailWrites(int after, Status status) {
    writes_left_ = after;
    error_ = std::move(status);
  }
  void FailSync(Status status) { sync_error_ = std::move(status); }
  void set_acks_after_apply(bool on) { acks_after_apply_ = on; }
  int failed_writes() const { return failed_writes_; }

  Status CreateTable(const StoreTableSpec& s) override { return inner_->CreateTable(s); }
  Status PullRows(uint32_t t, const uint64_t* k, size_t n, float* out) override {
    return inner_->PullRows(t, k, n, out);
  }
  Status VisitRows(uint32_t t, const uint64_t* k, size_t n, RowAccess a,
                   const RowBlockFn& fn) override {
    if (a != RowAccess::kUpdate) return inner_->VisitRows(t, k, n, a, fn);
    return inner_->VisitRows(t, k, n, a, [&](const RowBlock& b) { return Write(fn(b)); });
  }
  Status EraseRows(uint32_t t, const uint64_t* k, size_t n, size_t* erased) override {
    return inner_->EraseRows(t, k, n, erased);
  }
  bool has_row_ids(uint32_t t) const override { return inner_->has_row_ids(t); }
  Status FindOrCreateRowIds(uint32_t t, const uint64_t* k, size_t n, uint32_t* ids) override {
    return inner_->FindOrCreateRowIds(t, k, n, ids);
  }
  Status VisitRowsById(uint32_t t, const uint32_t* ids, size_t n, const RowBlockFn& fn) override {
    return inner_->VisitRowsById(t, ids, n, [&](const RowBlock& b) { return Write(fn(b)); });
  }
  void ReleaseRowIds(uint32_t t) override { inner_->ReleaseRowIds(t); }
  Status Sync(uint32_t t) override {
    if (!sync_error_.ok()) return sync_error_;
    return inner_->Sync(t);
  }
  bool acks_after_apply() const override { return acks_after_apply_; }
  Status PullChunks(uint32_t t, const uint64_t* c, size_t n, float* out) override {
    return inner_->PullChunks(t, c, n, out);
  }
  bool PullChunksView(uint32_t t, const uint64_t* c, size_t n, Buffer* out) override {
    return inner_->PullChunksView(t, c, n, out);
  }
  Status VisitChunks(uint32_t t, const uint64_t* c, size_t n, const ChunkBlockFn& fn) override {
    return inner_->VisitChunks(t, c, n, [&](const ChunkBlock& b) { return Write(fn(b)); });
  }
  Status InitChunks(uint32_t t, const uint64_t* c, size_t n, const float* v) override {
    return inner_->InitChunks(t, c, n, v);
  }
  Status ExportRecords(uint32_t t, const RecordVisitor& v) const override {
    return inner_->ExportRecords(t, v);
  }
  Status ImportRecord(uint32_t t, uint64_t k, const float* d, size_t f) override {
    return inner_->ImportRecord(t, k, d, f);
  }
  size_t RecordFloats(uint32_t t, uint64_t k) const override { return inner_->RecordFloats(t, k); }
  size_t ChunkFloats(uint32_t t, uint64_t c) const override { return inner_->ChunkFloats(t, c); }
  uint64_t num_rows(uint32_t t) const override { return inner_->num_rows(t); }

 private:
  // The write-back of one block whose update returned `s`.
  Status Write(Status s) {
    if (!s.ok() || error_.ok()) return s;
    if (writes_left_ > 0) {
      --writes_left_;
      return s;
    }
    ++failed_writes_;
    return error_;
  }

  std::unique_ptr<Store> inner_;
  Status error_;       // OK: writes never fail
  int writes_left_ = 0;
  Status sync_error_;  // OK: Sync never fails
  bool acks_after_apply_ = false;
  int failed_writes_ = 0;
};

}  // namespace osprey::server::testing
