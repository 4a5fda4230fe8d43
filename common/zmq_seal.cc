#include "common/zmq_seal.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

namespace osprey {
namespace {

constexpr char kMagic[4] = {'O', 'S', 'D', '1'};

void Put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

void Nonce(SealDirection dir, uint32_t frame, uint64_t counter, uint8_t nonce[12]) {
  nonce[0] = static_cast<uint8_t>(dir);
  nonce[1] = static_cast<uint8_t>(frame);
  nonce[2] = static_cast<uint8_t>(frame >> 8);
  nonce[3] = static_cast<uint8_t>(frame >> 16);
  Put64(nonce + 4, counter);
}

// AES-256-GCM of `n` bytes from `in` to `out` (may alias) with the header and frame index as
// associated data, on a context that holds the key schedule already. Encrypt: writes the tag to
// `tag`. Decrypt: checks it; false if it fails.
bool Gcm(EVP_CIPHER_CTX* c, bool encrypt, const uint8_t nonce[12], const uint8_t* header,
         uint32_t frame, const uint8_t* in, size_t n, uint8_t* out, uint8_t* tag) {
  if (c == nullptr) return false;
  int len = 0;
  uint8_t index[4] = {static_cast<uint8_t>(frame), 0, 0, 0};
  if (EVP_CipherInit_ex(c, nullptr, nullptr, nullptr, nonce, encrypt ? 1 : 0) != 1 ||
      EVP_CipherUpdate(c, nullptr, &len, header, kSealHeaderBytes) != 1 ||
      EVP_CipherUpdate(c, nullptr, &len, index, sizeof(index)) != 1) {
    return false;
  }
  // EVP_CipherUpdate takes an int length: feed large frames in pieces.
  size_t done = 0;
  while (done < n) {
    const int piece = static_cast<int>(std::min<size_t>(n - done, 1 << 30));
    if (EVP_CipherUpdate(c, out + done, &len, in + done, piece) != 1) return false;
    done += piece;
  }
  if (!encrypt && EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, kSealTagBytes, tag) != 1) {
    return false;
  }
  if (EVP_CipherFinal_ex(c, out + n, &len) != 1) return false;
  return !encrypt || EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, kSealTagBytes, tag) == 1;
}

EVP_CIPHER_CTX* KeyedCtx(const SealKey& key, bool encrypt) {
  EVP_CIPHER_CTX* c = EVP_CIPHER_CTX_new();
  if (c != nullptr &&
      EVP_CipherInit_ex(c, EVP_aes_256_gcm(), nullptr, key.data(), nullptr, encrypt ? 1 : 0) != 1) {
    EVP_CIPHER_CTX_free(c);
    return nullptr;
  }
  return c;
}

}  // namespace

void SealedSession::CtxFree::operator()(evp_cipher_ctx_st* c) const { EVP_CIPHER_CTX_free(c); }

SealedSession::SealedSession(const SealKey& key, uint64_t id)
    : id_(id), seal_(KeyedCtx(key, true)), open_(KeyedCtx(key, false)) {}

SealKey RandomSealKey() {
  SealKey key;
  if (RAND_bytes(key.data(), static_cast<int>(key.size())) != 1) std::abort();
  return key;
}

uint64_t RandomSessionId() {
  uint8_t b[8];
  if (RAND_bytes(b, sizeof(b)) != 1) std::abort();
  return Get64(b);
}

bool SealedSessionId(const uint8_t* header, size_t size, uint64_t* id) {
  if (size != kSealHeaderBytes || std::memcmp(header, kMagic, 4) != 0) return false;
  *id = Get64(header + 4);
  return true;
}

Status SealedSession::Seal(SealDirection dir, const Buffer* frames, Buffer* out) {
  const uint64_t counter = ++sent_[static_cast<int>(dir)];
  Buffer header = Buffer::Allocate(kSealHeaderBytes);
  uint8_t* h = header.mutable_data();
  std::memcpy(h, kMagic, 4);
  Put64(h + 4, id_);
  Put64(h + 12, counter);
  h[20] = static_cast<uint8_t>(dir);
  out[0] = header;
  for (uint32_t i = 0; i < 3; ++i) {
    const size_t n = frames[i].size();
    Buffer sealed = Buffer::Allocate(n + kSealTagBytes);
    uint8_t nonce[12];
    Nonce(dir, i, counter, nonce);
    if (!Gcm(seal_.get(), true, nonce, h, i, frames[i].data(), n, sealed.mutable_data(),
             sealed.mutable_data() + n)) {
      return Internal("sealed data plane: AES-256-GCM failed to seal a frame");
    }
    out[i + 1] = sealed;
  }
  return Status::OK();
}

Status SealedSession::Open(SealDirection dir, uint8_t* const* frames, size_t* sizes) {
  uint64_t id = 0;
  if (!SealedSessionId(frames[0], sizes[0], &id) || id != id_) {
    return PermissionDenied("sealed data plane: not a header of this session");
  }
  const uint8_t* h = frames[0];
  const uint64_t counter = Get64(h + 12);
  if (h[20] != static_cast<uint8_t>(dir)) {
    return PermissionDenied("sealed data plane: a message of the other direction");
  }
  uint64_t& last = opened_[static_cast<int>(dir)];
  if (counter <= last) {
    return PermissionDenied("sealed data plane: counter " + std::to_string(counter) +
                            " not above the last opened (" + std::to_string(last) +
                            "): replayed or reordered");
  }
  for (uint32_t i = 0; i < 3; ++i) {
    if (sizes[i + 1] < kSealTagBytes) {
      return PermissionDenied("sealed data plane: frame shorter than its tag");
    }
  }
  // In place, no copy: a refused message is dropped whole by the caller, so frames decrypted
  // before the one that failed are never used.
  for (uint32_t i = 0; i < 3; ++i) {
    const size_t n = sizes[i + 1] - kSealTagBytes;
    uint8_t nonce[12];
    Nonce(dir, i, counter, nonce);
    if (!Gcm(open_.get(), false, nonce, h, i, frames[i + 1], n, frames[i + 1], frames[i + 1] + n)) {
      return PermissionDenied("sealed data plane: frame " + std::to_string(i) +
                              " does not verify (tampered, or another key)");
    }
  }
  last = counter;
  for (int i = 1; i < 4; ++i) sizes[i] -= kSealTagBytes;
  return Status::OK();
}

}  // namespace osprey
