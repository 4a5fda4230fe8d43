#include "server/native_store.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include "common/buffer.h"
#include "server/sparse_table.h"

namespace osprey::server {

// The chunks of one dense table that this server owns: weights, optimizer state, and whether the
// chunk has been given its initial values yet.
//
// The weights of all owned chunks live back to back, in chunk-id order, in one block, so that a
// pull of consecutive owned chunks (what a client asks every server for) is one view of it that
// the server sends without copying (View). The block is copy-on-write: a view shares it, and
// the next write (Weights) while a view is still alive -- a pull reply ZeroMQ has not finished
// sending -- moves the table to a fresh copy first, so a view never changes under its holder.
class DenseTable {
 public:
  DenseTable(const config::TableConfig& cfg, const StateLayout& state, std::vector<uint64_t> owned)
      : DenseTable(cfg.size, cfg.chunk_floats, state, std::move(owned)) {}
  DenseTable(uint64_t size, uint64_t chunk_floats, const StateLayout& state,
             std::vector<uint64_t> owned)
      : size_(size), chunk_floats_(chunk_floats), layout_(state) {
    std::sort(owned.begin(), owned.end());
    owned.erase(std::unique(owned.begin(), owned.end()), owned.end());
    size_t offset = 0;
    for (uint64_t c : owned) {
      Chunk& ch = chunks_[c];
      ch.offset = offset;
      ch.floats = ChunkFloats(c);
      ch.state.resize(state.floats(ch.floats));
      state.init(ch.state.data(), ch.floats);
      offset += ch.floats;
    }
    block_ = Buffer::Allocate(offset * sizeof(float));
    if (offset > 0) std::memset(block_.mutable_data(), 0, offset * sizeof(float));
  }

  size_t ChunkFloats(uint64_t c) const {
    uint64_t begin = c * chunk_floats_;
    return begin >= size_ ? 0 : static_cast<size_t>(std::min<uint64_t>(chunk_floats_, size_ - begin));
  }

  struct Chunk {
    size_t offset = 0;  // in floats, into the weights block
    size_t floats = 0;
    std::vector<float> state;
    bool initialized = false;
  };
  // nullptr when this server does not own chunk c.
  Chunk* Get(uint64_t c) {
    auto it = chunks_.find(c);
    return it == chunks_.end() ? nullptr : &it->second;
  }
  // The chunk's weights, to read.
  const float* weights(const Chunk& ch) const { return block_.as<float>() + ch.offset; }
  // The chunk's weights, to write: first unshares the block (see the class comment).
  float* Weights(const Chunk& ch) {
    // Views are only made and dropped by other holders, never made by them, so a count of 1
    // stays 1; the fence orders this thread's writes after the last holder's reads (the
    // shared_ptr release that dropped the count is acq_rel, use_count() a relaxed load).
    if (block_.owner().use_count() > 1) {
      block_ = Buffer::Copy(block_.data(), block_.size());
    } else {
      std::atomic_thread_fence(std::memory_order_acquire);
    }
    return reinterpret_cast<float*>(block_.mutable_data()) + ch.offset;
  }
  // A view of the weights of chunks[0..n) when they are owned and stored back to back in that
  // order (the values PullChunks would write); false otherwise.
  bool View(const uint64_t* chunks, size_t n, Buffer* out) {
    if (n == 0) return false;
    const Chunk* first = Get(chunks[0]);
    if (first == nullptr) return false;
    size_t end = first->offset + first->floats;
    for (size_t i = 1; i < n; ++i) {
      const Chunk* c = Get(chunks[i]);
      if (c == nullptr || c->offset != end) return false;
      end += c->floats;
    }
    *out = block_.Slice(first->offset * sizeof(float), (end - first->offset) * sizeof(float));
    return true;
  }
  // Store::VisitChunks: the chunks' weights (unshared first) and state, in one block.
  Status Visit(const uint64_t* chunks, size_t n, const ChunkBlockFn& fn) {
    weights_.resize(n);
    state_.resize(n);
    floats_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      Chunk* c = Get(chunks[i]);
      if (c == nullptr) return Internal("chunk " + std::to_string(chunks[i]) + " not owned");
      // The first Weights() unshares the block; later ones find it unshared, so every pointer
      // taken here stays valid for the callback.
      weights_[i] = Weights(*c);
      state_[i] = c->state.data();
      floats_[i] = c->floats;
    }
    return fn(ChunkBlock{n, chunks, weights_.data(), state_.data(), floats_.data()});
  }
  // Store::SetOwnedChunks: a table owning `owned`, with the chunks this one owned too carried
  // over (weights, state, initialized); the others start uninitialized.
  std::unique_ptr<DenseTable> Reowned(std::vector<uint64_t> owned) const {
    auto next = std::make_unique<DenseTable>(size_, chunk_floats_, layout_, std::move(owned));
    for (auto& [c, ch] : next->chunks_) {
      auto old = chunks_.find(c);
      if (old == chunks_.end()) continue;
      std::memcpy(next->Weights(ch), weights(old->second), ch.floats * sizeof(float));
      ch.state = old->second.state;
      ch.initialized = old->second.initialized;
    }
    return next;
  }
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
  const StateLayout layout_;
  std::unordered_map<uint64_t, Chunk> chunks_;
  Buffer block_;  // the owned chunks' weights; shared with the views handed out
  std::vector<float*> weights_, state_;  // Visit's scratch
  std::vector<size_t> floats_;
};

NativeStore::NativeStore() = default;
NativeStore::~NativeStore() = default;

Status NativeStore::CreateTable(const StoreTableSpec& spec) {
  if (!spec.state.floats || !spec.state.init) {
    return Internal("table id " + std::to_string(spec.id) + " has no state layout");
  }
  if (spec.id >= sparse_.size()) {
    sparse_.resize(spec.id + 1);
    dense_.resize(spec.id + 1);
  }
  if (sparse_[spec.id] || dense_[spec.id]) {
    return Internal("table id " + std::to_string(spec.id) + " created twice");
  }
  if (spec.config.type == config::TableType::kSparse) {
    sparse_[spec.id] = std::make_unique<SparseTable>(spec.id, spec.config.dim, spec.config.init,
                                                     spec.state);
  } else {
    dense_[spec.id] = std::make_unique<DenseTable>(spec.config, spec.state, spec.owned_chunks);
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

Status NativeStore::VisitRows(uint32_t table, const uint64_t* keys, size_t n, RowAccess access,
                              const RowBlockFn& fn) {
  SparseTable* t = sparse(table);
  if (t == nullptr) return Internal("no sparse table " + std::to_string(table));
  return t->Visit(keys, n, access, fn);
}

Status NativeStore::FindOrCreateRowIds(uint32_t table, const uint64_t* keys, size_t n,
                                       uint32_t* ids) {
  SparseTable* t = sparse(table);
  if (t == nullptr) return Internal("no sparse table " + std::to_string(table));
  t->FindOrCreateIds(keys, n, ids);
  return Status::OK();
}

Status NativeStore::FindRowIds(uint32_t table, const uint64_t* keys, size_t n, uint32_t* ids) const {
  const SparseTable* t = sparse(table);
  if (t == nullptr) return Internal("no sparse table " + std::to_string(table));
  t->FindIds(keys, n, ids);
  return Status::OK();
}

Status NativeStore::VisitRowsById(uint32_t table, const uint32_t* ids, size_t n,
                                  const RowBlockFn& fn) {
  SparseTable* t = sparse(table);
  if (t == nullptr) return Internal("no sparse table " + std::to_string(table));
  if (n > 0 && *std::max_element(ids, ids + n) >= t->id_bound()) {
    return Internal("row id out of range in table " + std::to_string(table));
  }
  return t->VisitIds(ids, n, fn);
}

Status NativeStore::EraseRows(uint32_t table, const uint64_t* keys, size_t n, size_t* erased) {
  SparseTable* t = sparse(table);
  if (t == nullptr) return Internal("no sparse table " + std::to_string(table));
  size_t count = 0;
  for (size_t i = 0; i < n; ++i) count += t->Erase(keys[i]) ? 1 : 0;
  if (erased != nullptr) *erased = count;
  return Status::OK();
}

Status NativeStore::SetOwnedChunks(uint32_t table, std::vector<uint64_t> owned) {
  DenseTable* t = dense(table);
  if (t == nullptr) return Internal("no dense table " + std::to_string(table));
  dense_[table] = t->Reowned(std::move(owned));
  return Status::OK();
}

Status NativeStore::PullChunks(uint32_t table, const uint64_t* chunks, size_t n, float* out) {
  DenseTable* t = dense(table);
  if (t == nullptr) return Internal("no dense table " + std::to_string(table));
  for (size_t i = 0; i < n; ++i) {
    DenseTable::Chunk* c = t->Get(chunks[i]);
    if (c == nullptr) return Internal("chunk " + std::to_string(chunks[i]) + " not owned");
    std::memcpy(out, t->weights(*c), c->floats * sizeof(float));
    out += c->floats;
  }
  return Status::OK();
}

bool NativeStore::PullChunksView(uint32_t table, const uint64_t* chunks, size_t n, Buffer* out) {
  DenseTable* t = dense(table);
  return t != nullptr && t->View(chunks, n, out);
}

Status NativeStore::VisitChunks(uint32_t table, const uint64_t* chunks, size_t n,
                                const ChunkBlockFn& fn) {
  DenseTable* t = dense(table);
  if (t == nullptr) return Internal("no dense table " + std::to_string(table));
  return t->Visit(chunks, n, fn);
}

Status NativeStore::InitChunks(uint32_t table, const uint64_t* chunks, size_t n,
                               const float* values) {
  DenseTable* t = dense(table);
  if (t == nullptr) return Internal("no dense table " + std::to_string(table));
  for (size_t i = 0; i < n; ++i) {
    DenseTable::Chunk* c = t->Get(chunks[i]);
    if (c == nullptr) return Internal("chunk " + std::to_string(chunks[i]) + " not owned");
    if (!c->initialized) std::memcpy(t->Weights(*c), values, c->floats * sizeof(float));
    c->initialized = true;
    values += c->floats;
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
    record.assign(t->weights(ch), t->weights(ch) + ch.floats);
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
    std::memcpy(t->FindOrCreateForOverwrite(key), data, floats * sizeof(float));
    return Status::OK();
  }
  DenseTable* t = dense(table);
  DenseTable::Chunk* c = t == nullptr ? nullptr : t->Get(key);
  if (c == nullptr) return InvalidArgument("chunk " + std::to_string(key) + " is not owned here");
  std::memcpy(t->Weights(*c), data, c->floats * sizeof(float));
  std::memcpy(c->state.data(), data + c->floats, c->state.size() * sizeof(float));
  c->initialized = true;
  return Status::OK();
}

void NativeStore::ReserveRecords(uint32_t table, uint64_t n) {
  if (SparseTable* t = sparse(table)) t->Reserve(t->num_rows() + n);
}

size_t NativeStore::RecordFloats(uint32_t table, uint64_t key) const {
  if (SparseTable* t = sparse(table)) return t->row_floats();
  DenseTable* t = dense(table);
  if (t == nullptr) return 0;
  DenseTable::Chunk* c = t->Get(key);
  return c == nullptr ? 0 : c->floats + c->state.size();
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
