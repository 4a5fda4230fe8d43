#include "server/native_store.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "server/sparse_table.h"

namespace osprey::server {

// The chunks of one dense table that this server owns: weights, optimizer state, and whether the
// chunk has been given its initial values yet.
class DenseTable {
 public:
  DenseTable(const config::TableConfig& cfg, std::unique_ptr<Optimizer> optimizer,
             const std::vector<uint64_t>& owned)
      : size_(cfg.size), chunk_floats_(cfg.chunk_floats), optimizer_(std::move(optimizer)) {
    for (uint64_t c : owned) {
      Chunk& ch = chunks_[c];
      size_t n = ChunkFloats(c);
      ch.w.assign(n, 0.0f);
      ch.state.resize(optimizer_->state_floats(n));
      optimizer_->InitState(ch.state.data(), n);
    }
  }

  size_t ChunkFloats(uint64_t c) const {
    uint64_t begin = c * chunk_floats_;
    return begin >= size_ ? 0 : static_cast<size_t>(std::min<uint64_t>(chunk_floats_, size_ - begin));
  }

  // nullptr when this server does not own chunk c.
  struct Chunk {
    std::vector<float> w;
    std::vector<float> state;
    bool initialized = false;
  };
  Chunk* Get(uint64_t c) {
    auto it = chunks_.find(c);
    return it == chunks_.end() ? nullptr : &it->second;
  }
  const Optimizer& optimizer() const { return *optimizer_; }
  // fn(chunk id, chunk) for every owned chunk, in chunk order; stops at the first error.
  template <typename Fn>
  Status ForEachChunk(Fn&& fn) const {
    std::vector<uint64_t> ids;
    for (const auto& [c, ch] : chunks_) ids.push_back(c);
    std::sort(ids.begin(), ids.end());
    for (uint64_t c : ids) OSPREY_RETURN_IF_ERROR(fn(c, chunks_.at(c)));
    return Status::OK();
  }

 private:
  const uint64_t size_;
  const uint64_t chunk_floats_;
  const std::unique_ptr<Optimizer> optimizer_;
  std::unordered_map<uint64_t, Chunk> chunks_;
};

NativeStore::NativeStore() = default;
NativeStore::~NativeStore() = default;

Status NativeStore::CreateTable(const StoreTableSpec& spec) {
  OSPREY_ASSIGN_OR_RETURN(auto optimizer, Optimizer::Make(spec.config.optimizer));
  if (spec.id >= sparse_.size()) {
    sparse_.resize(spec.id + 1);
    dense_.resize(spec.id + 1);
  }
  if (sparse_[spec.id] || dense_[spec.id]) {
    return Internal("table id " + std::to_string(spec.id) + " created twice");
  }
  if (spec.config.type == "sparse") {
    sparse_[spec.id] = std::make_unique<SparseTable>(spec.id, spec.config.dim, spec.config.init,
                                                     std::move(optimizer));
  } else {
    dense_[spec.id] = std::make_unique<DenseTable>(spec.config, std::move(optimizer),
                                                   spec.owned_chunks);
  }
  return Status::OK();
}

SparseTable* NativeStore::sparse(uint32_t table) const {
  return table < sparse_.size() ? sparse_[table].get() : nullptr;
}

DenseTable* NativeStore::dense(uint32_t table) const {
  return table < dense_.size() ? dense_[table].get() : nullptr;
}

Status NativeStore::PullRows(uint32_t table, const uint64_t* keys, size_t n, float* out) {
  SparseTable* t = sparse(table);
  if (t == nullptr) return Internal("no sparse table " + std::to_string(table));
  t->Pull(keys, n, out);
  return Status::OK();
}

Status NativeStore::PushRows(uint32_t table, const uint64_t* keys, size_t n, const float* grads,
                             const RowUpdate& update) {
  SparseTable* t = sparse(table);
  if (t == nullptr) return Internal("no sparse table " + std::to_string(table));
  t->Push(keys, n, grads, update);
  return Status::OK();
}

Status NativeStore::PushRows(uint32_t table, const uint64_t* keys, size_t n,
                             const float* const* grads, const RowUpdate& update) {
  SparseTable* t = sparse(table);
  if (t == nullptr) return Internal("no sparse table " + std::to_string(table));
  t->Push(keys, n, grads, update);
  return Status::OK();
}

Status NativeStore::FindOrCreateRowIds(uint32_t table, const uint64_t* keys, size_t n,
                                       uint32_t* ids) {
  SparseTable* t = sparse(table);
  if (t == nullptr) return Internal("no sparse table " + std::to_string(table));
  t->FindOrCreateIds(keys, n, ids);
  return Status::OK();
}

Status NativeStore::PushRowsById(uint32_t table, const uint32_t* ids, size_t n,
                                 const float* const* grads, const RowUpdate& update) {
  SparseTable* t = sparse(table);
  if (t == nullptr) return Internal("no sparse table " + std::to_string(table));
  if (n > 0 && *std::max_element(ids, ids + n) >= t->num_rows()) {
    return Internal("row id out of range in table " + std::to_string(table));
  }
  t->PushIds(ids, n, grads, update);
  return Status::OK();
}

Status NativeStore::RowStaleness(uint32_t table, const uint64_t* keys, size_t n, uint64_t since,
                                 uint64_t cap, uint64_t* out) const {
  SparseTable* t = sparse(table);
  if (t == nullptr) return Internal("no sparse table " + std::to_string(table));
  t->Staleness(keys, n, since, cap, out);
  return Status::OK();
}

Status NativeStore::PullChunks(uint32_t table, const uint64_t* chunks, size_t n, float* out) {
  DenseTable* t = dense(table);
  if (t == nullptr) return Internal("no dense table " + std::to_string(table));
  for (size_t i = 0; i < n; ++i) {
    DenseTable::Chunk* c = t->Get(chunks[i]);
    if (c == nullptr) return Internal("chunk " + std::to_string(chunks[i]) + " not owned");
    std::memcpy(out, c->w.data(), c->w.size() * sizeof(float));
    out += c->w.size();
  }
  return Status::OK();
}

Status NativeStore::PushChunks(uint32_t table, const uint64_t* chunks, size_t n,
                               const float* grads, const ApplyOptions& options) {
  DenseTable* t = dense(table);
  if (t == nullptr) return Internal("no dense table " + std::to_string(table));
  for (size_t i = 0; i < n; ++i) {
    DenseTable::Chunk* c = t->Get(chunks[i]);
    if (c == nullptr) return Internal("chunk " + std::to_string(chunks[i]) + " not owned");
    t->optimizer().Apply(c->w.data(), c->state.data(), grads, c->w.size(), options);
    grads += c->w.size();
  }
  return Status::OK();
}

Status NativeStore::PushChunks(uint32_t table, const uint64_t* chunks, size_t n,
                               const float* const* grads, const ApplyOptions& options) {
  DenseTable* t = dense(table);
  if (t == nullptr) return Internal("no dense table " + std::to_string(table));
  for (size_t i = 0; i < n; ++i) {
    DenseTable::Chunk* c = t->Get(chunks[i]);
    if (c == nullptr) return Internal("chunk " + std::to_string(chunks[i]) + " not owned");
    t->optimizer().Apply(c->w.data(), c->state.data(), grads[i], c->w.size(), options);
  }
  return Status::OK();
}

Status NativeStore::InitChunks(uint32_t table, const uint64_t* chunks, size_t n,
                               const float* values) {
  DenseTable* t = dense(table);
  if (t == nullptr) return Internal("no dense table " + std::to_string(table));
  for (size_t i = 0; i < n; ++i) {
    DenseTable::Chunk* c = t->Get(chunks[i]);
    if (c == nullptr) return Internal("chunk " + std::to_string(chunks[i]) + " not owned");
    if (!c->initialized) std::memcpy(c->w.data(), values, c->w.size() * sizeof(float));
    c->initialized = true;
    values += c->w.size();
  }
  return Status::OK();
}

Status NativeStore::ExportRecords(uint32_t table, const RecordVisitor& visit) const {
  if (SparseTable* t = sparse(table)) {
    Status first;
    t->ForEachRow([&](uint64_t key, const float* row) {
      if (first.ok()) first = visit(key, row, t->row_floats());
    });
    return first;
  }
  DenseTable* t = dense(table);
  if (t == nullptr) return Internal("no table " + std::to_string(table));
  std::vector<float> record;
  return t->ForEachChunk([&](uint64_t c, const DenseTable::Chunk& ch) -> Status {
    if (!ch.initialized) return Status::OK();
    record.assign(ch.w.begin(), ch.w.end());
    record.insert(record.end(), ch.state.begin(), ch.state.end());
    return visit(c, record.data(), record.size());
  });
}

Status NativeStore::ImportRecord(uint32_t table, uint64_t key, const float* data, size_t floats) {
  size_t want = RecordFloats(table, key);
  if (floats != want) {
    return InvalidArgument("table " + std::to_string(table) + " record " + std::to_string(key) +
                           " has " + std::to_string(floats) + " floats, this server's layout needs " +
                           std::to_string(want) + " (another optimizer or dim?)");
  }
  if (SparseTable* t = sparse(table)) {
    std::memcpy(t->FindOrCreate(key), data, floats * sizeof(float));
    return Status::OK();
  }
  DenseTable* t = dense(table);
  DenseTable::Chunk* c = t == nullptr ? nullptr : t->Get(key);
  if (c == nullptr) return InvalidArgument("chunk " + std::to_string(key) + " is not owned here");
  std::memcpy(c->w.data(), data, c->w.size() * sizeof(float));
  std::memcpy(c->state.data(), data + c->w.size(), c->state.size() * sizeof(float));
  c->initialized = true;
  return Status::OK();
}

size_t NativeStore::RecordFloats(uint32_t table, uint64_t key) const {
  if (SparseTable* t = sparse(table)) return t->row_floats();
  DenseTable* t = dense(table);
  if (t == nullptr) return 0;
  DenseTable::Chunk* c = t->Get(key);
  return c == nullptr ? 0 : c->w.size() + c->state.size();
}

size_t NativeStore::ChunkFloats(uint32_t table, uint64_t chunk) const {
  DenseTable* t = dense(table);
  return t == nullptr ? 0 : t->ChunkFloats(chunk);
}

uint64_t NativeStore::num_rows(uint32_t table) const {
  SparseTable* t = sparse(table);
  return t == nullptr ? 0 : t->num_rows();
}

StatusOr<std::unique_ptr<Store>> MakeStore(const std::string& kind) {
  if (kind == "native") return std::unique_ptr<Store>(std::make_unique<NativeStore>());
  return InvalidArgument("store kind '" + kind + "' is not one of: native");
}

}  // namespace osprey::server
