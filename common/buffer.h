// Buffer: a ref-counted, immutable view of bytes.
//
// Payloads (keys, values) travel through Osprey as Buffers so that no layer copies them: a Buffer
// keeps its owner alive (a std::vector, a received ZeroMQ message, a pooled block) through a
// shared_ptr, and Slice() makes sub-views that share the owner. The bytes must not be modified
// while more than one Buffer refers to them; the code that creates a Buffer with Allocate() may
// fill it through mutable_data() before handing it out.
//
// Thread-safety: like std::shared_ptr; a Buffer may be copied to and read from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

namespace osprey {

class Buffer {
 public:
  Buffer() = default;
  // Views [data, data+size) kept alive by `owner`.
  Buffer(std::shared_ptr<const void> owner, const void* data, size_t size)
      : owner_(std::move(owner)), data_(static_cast<const uint8_t*>(data)), size_(size) {}

  // A new, owned, uninitialized buffer of `size` bytes (64-byte aligned).
  static Buffer Allocate(size_t size);
  // A new buffer holding a copy of [data, data+size).
  static Buffer Copy(const void* data, size_t size);
  // Takes ownership of a vector without copying its elements.
  template <typename T>
  static Buffer FromVector(std::vector<T>&& v) {
    auto owner = std::make_shared<std::vector<T>>(std::move(v));
    const void* p = owner->data();
    size_t n = owner->size() * sizeof(T);
    return Buffer(std::shared_ptr<const void>(owner, p), p, n);
  }

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Only for the creator of an Allocate()d buffer, before sharing it.
  uint8_t* mutable_data() const { return const_cast<uint8_t*>(data_); }

  template <typename T>
  const T* as() const { return reinterpret_cast<const T*>(data_); }
  template <typename T>
  size_t count() const { return size_ / sizeof(T); }

  // A view of [offset, offset+len) sharing the owner. Precondition: offset+len <= size().
  Buffer Slice(size_t offset, size_t len) const { return Buffer(owner_, data_ + offset, len); }

  const std::shared_ptr<const void>& owner() const { return owner_; }

 private:
  std::shared_ptr<const void> owner_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace osprey
