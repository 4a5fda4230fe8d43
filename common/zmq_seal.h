// The sealed data plane of a CURVE ZmqTransport (zmq_transport.h): AES-256-GCM over a plain
// ZeroMQ connection, keyed through the CURVE one.
//
// Why: libzmq's CURVE seals every message whole with XSalsa20-Poly1305 plus two copies, on the
// ZeroMQ I/O thread (~1.0 GB/s of CPU here, bench/security/cipher_cost.cc); OpenSSL's AES-256-GCM
// (AES-NI, VAES, VPCLMULQDQ) runs at ~2.4 GB/s and opens in place, without copies.
//
// A session: the listener draws a random 32-byte key and 64-bit id for one CURVE-authenticated
// dialer and hands both over that CURVE connection (so only that peer knows them); the session
// carries the peer's ZAP role. Each sealed message is four frames:
//   header: "OSD1", session id (8, little-endian), counter (8), direction (1)   (21 bytes)
//   and the three Message frames, each ciphertext + 16-byte tag,
// with nonce = direction (1) | frame index (3) | counter (8) and associated data = the header
// plus the frame index, so a frame cannot be moved, a header altered, or a direction reflected.
// Counters start at 1 and grow by one per message and direction; Open refuses a counter not above
// the last one opened (a replayed or reordered message). ZeroMQ keeps a connection's order.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/buffer.h"
#include "common/status.h"

struct evp_cipher_ctx_st;  // OpenSSL's EVP_CIPHER_CTX

namespace osprey {

constexpr size_t kSealKeyBytes = 32;
constexpr size_t kSealTagBytes = 16;
constexpr size_t kSealHeaderBytes = 21;

enum class SealDirection : uint8_t { kToListener = 1, kToDialer = 2 };

using SealKey = std::array<uint8_t, kSealKeyBytes>;

// A fresh key (OpenSSL RAND_bytes; aborts if the system has no randomness) and session id.
SealKey RandomSealKey();
uint64_t RandomSessionId();

// The session id of a sealed header; false when `header` is not one.
bool SealedSessionId(const uint8_t* header, size_t size, uint64_t* id);

// Not thread-safe: the transport calls it under its mutex.
class SealedSession {
 public:
  // Keeps the key only as OpenSSL's key schedules (one context to seal, one to open).
  SealedSession(const SealKey& key, uint64_t id);

  uint64_t id() const { return id_; }

  // Seals three frames for `dir`; out[0] is the header, out[1..3] the sealed frames.
  Status Seal(SealDirection dir, const Buffer* frames, Buffer* out);

  // Opens a four-frame message sent in `dir`, in place: frames[1..3] are decrypted where they lie
  // and sizes[1..3] lose the tag. PermissionDenied (saying why) for a header of another session
  // or direction, a counter not above the last (replay, reordering) or a frame whose tag does not
  // verify (tampered, or sealed with another key); the counter is unchanged then, and
  // the frames must be dropped (those before the failing one may be decrypted already).
  Status Open(SealDirection dir, uint8_t* const* frames, size_t* sizes);

 private:
  struct CtxFree {
    void operator()(evp_cipher_ctx_st* c) const;
  };
  uint64_t id_;
  std::unique_ptr<evp_cipher_ctx_st, CtxFree> seal_, open_;
  uint64_t sent_[3] = {0, 0, 0};    // by direction: the last counter sealed
  uint64_t opened_[3] = {0, 0, 0};  // by direction: the last counter opened
};

}  // namespace osprey
