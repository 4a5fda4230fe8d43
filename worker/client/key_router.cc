#include "worker/client/key_router.h"

#include "common/placement.h"

namespace osprey::worker {
namespace {

// The keys frame of the call's keys [first, first + count): a view of the caller's Buffer when
// there is one, else a copy.
Buffer KeysFrame(const uint64_t* keys, size_t first, size_t count, const Buffer* key_buffer) {
  if (key_buffer != nullptr) return key_buffer->Slice(first * sizeof(uint64_t), count * sizeof(uint64_t));
  return Buffer::Copy(keys + first, count * sizeof(uint64_t));
}

}  // namespace

std::vector<KeySlice> KeyRouter::Route(uint32_t table, const uint64_t* keys, size_t n,
                                       const Buffer* key_buffer) const {
  std::vector<KeySlice> slices;
  if (num_servers_ == 1) {  // nothing to hash: one slice, the keys in call order
    slices.push_back(KeySlice{0, n, KeysFrame(keys, 0, n, key_buffer), 0, Buffer()});
    return slices;
  }
  std::vector<int32_t> owner(n);
  std::vector<size_t> counts(num_servers_, 0);
  ServersForKeys(table, keys, n, num_servers_, owner.data());
  for (size_t i = 0; i < n; ++i) counts[owner[i]]++;
  // One pass writes every server's keys and positions; the positions of all servers share one
  // allocation (each slice a view of it).
  Buffer positions = Buffer::Allocate(n * sizeof(uint32_t));
  std::vector<uint64_t*> kp(num_servers_, nullptr);
  std::vector<uint32_t*> pp(num_servers_, nullptr);
  size_t offset = 0;
  for (int s = 0; s < num_servers_; ++s) {
    if (counts[s] == 0) continue;
    KeySlice slice;
    slice.server = s;
    slice.count = counts[s];
    slice.keys = Buffer::Allocate(counts[s] * sizeof(uint64_t));
    slice.positions = positions.Slice(offset * sizeof(uint32_t), counts[s] * sizeof(uint32_t));
    kp[s] = reinterpret_cast<uint64_t*>(slice.keys.mutable_data());
    pp[s] = reinterpret_cast<uint32_t*>(slice.positions.mutable_data());
    offset += counts[s];
    slices.push_back(std::move(slice));
  }
  for (size_t i = 0; i < n; ++i) {
    const int s = owner[i];
    *kp[s]++ = keys[i];
    *pp[s]++ = static_cast<uint32_t>(i);
  }
  return slices;
}

StatusOr<std::vector<KeySlice>> KeyRouter::Grouped(const uint64_t* keys, size_t n, const int32_t* counts,
                                                   const Buffer* key_buffer, const std::string& table_name,
                                                   const char* op) const {
  uint64_t sum = 0;
  for (int s = 0; s < num_servers_; ++s) {
    if (counts[s] < 0) {
      return InvalidArgument(std::string(op) + " by server to table '" + table_name + "': server " + std::to_string(s) +
                             " has a negative count " + std::to_string(counts[s]));
    }
    sum += static_cast<uint64_t>(counts[s]);
  }
  if (sum != n) {
    return InvalidArgument(std::string(op) + " by server to table '" + table_name + "': the server counts sum to " +
                           std::to_string(sum) + ", not to the " + std::to_string(n) + " keys");
  }
  std::vector<KeySlice> slices;
  size_t first = 0;
  for (int s = 0; s < num_servers_; ++s) {
    const size_t count = static_cast<size_t>(counts[s]);
    if (count == 0) continue;
    slices.push_back(KeySlice{s, count, KeysFrame(keys, first, count, key_buffer), first, Buffer()});
    first += count;
  }
  return slices;
}

}  // namespace osprey::worker
