#include "common/buffer.h"

#include <cstdlib>
#include <new>

namespace osprey {

Buffer Buffer::Allocate(size_t size) {
  // 64-byte alignment keeps float rows vector-friendly and avoids false sharing between buffers.
  size_t rounded = (size + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (p == nullptr) throw std::bad_alloc();
  std::shared_ptr<const void> owner(p, [](const void* q) { std::free(const_cast<void*>(q)); });
  return Buffer(std::move(owner), p, size);
}

Buffer Buffer::Copy(const void* data, size_t size) {
  Buffer b = Allocate(size);
  if (size > 0) std::memcpy(b.mutable_data(), data, size);
  return b;
}

}  // namespace osprey
