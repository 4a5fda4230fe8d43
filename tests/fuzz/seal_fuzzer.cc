// libFuzzer target over the sealed data plane's opening (common/zmq_seal.h): SealedSessionId and
// SealedSession::Open are the first code that a stranger's bytes on a CURVE listener's plain data
// port reach, before any authentication. Two properties per input, each a crash when broken:
//  1. Raw: the input's four frames, opened by a session whose id matches the header (so the
//     counter, direction, length and tag checks all run), are never accepted -- the fuzzer does
//     not know the key, so an accepted message would be a forgery -- and never read or written
//     out of bounds (each frame in its own allocation, for ASan).
//  2. Round trip, under another key: the input's three frames sealed by one session open to the
//     same bytes at the receiver; the same message again (a replay) is refused; a copy with one
//     byte changed anywhere (header or frame: position and mask from the input) is refused.
//
// Input: u8 mask, u16 LE position, u8 direction (low bit), then up to four frames, each a u16 LE
// length and its bytes (a length past the end takes what is left).
#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/buffer.h"
#include "common/zmq_seal.h"

namespace {

using osprey::Buffer;
using osprey::SealDirection;
using osprey::SealedSession;
using osprey::SealKey;
using Frames = std::array<std::vector<uint8_t>, 4>;

SealKey FixedKey(uint8_t fill) {
  SealKey k;
  k.fill(fill);
  return k;
}

bool Opens(SealedSession* s, SealDirection dir, Frames frames) {  // a copy: Open works in place
  uint8_t* data[4];
  size_t sizes[4];
  for (int i = 0; i < 4; ++i) {
    data[i] = frames[i].data();
    sizes[i] = frames[i].size();
  }
  return s->Open(dir, data, sizes).ok();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const uint8_t mask = data[0];
  const uint16_t position = static_cast<uint16_t>(data[1] | (data[2] << 8));
  const SealDirection dir = (data[3] & 1) ? SealDirection::kToListener : SealDirection::kToDialer;
  Frames raw;
  size_t at = 4;
  for (int i = 0; i < 4 && at + 2 <= size; ++i) {
    const size_t n = std::min<size_t>(data[at] | (data[at + 1] << 8), size - at - 2);
    raw[i].assign(data + at + 2, data + at + 2 + n);
    at += 2 + n;
  }

  // 1. Raw bytes at a receiver.
  uint64_t id = 1;
  (void)osprey::SealedSessionId(raw[0].data(), raw[0].size(), &id);
  SealedSession stranger_target(FixedKey(0x11), id);
  if (Opens(&stranger_target, dir, raw)) __builtin_trap();  // a forgery was accepted

  // 2. Round trip of the input's frames 1..3 under a key the raw inputs never see.
  SealedSession sender(FixedKey(0x22), 42), receiver(FixedKey(0x22), 42);
  Buffer plain[3], sealed[4];
  for (int i = 0; i < 3; ++i) plain[i] = Buffer::Copy(raw[i + 1].data(), raw[i + 1].size());
  if (!sender.Seal(dir, plain, sealed).ok()) __builtin_trap();
  Frames message;
  size_t total = 0;
  for (int i = 0; i < 4; ++i) {
    message[i].assign(sealed[i].data(), sealed[i].data() + sealed[i].size());
    total += message[i].size();
  }
  {
    Frames opened = message;
    uint8_t* ptrs[4];
    size_t sizes[4];
    for (int i = 0; i < 4; ++i) {
      ptrs[i] = opened[i].data();
      sizes[i] = opened[i].size();
    }
    if (!receiver.Open(dir, ptrs, sizes).ok()) __builtin_trap();  // the genuine message refused
    for (int i = 0; i < 3; ++i) {
      if (sizes[i + 1] != raw[i + 1].size() ||
          (sizes[i + 1] > 0 && std::memcmp(ptrs[i + 1], raw[i + 1].data(), sizes[i + 1]) != 0)) {
        __builtin_trap();  // opened to other bytes
      }
    }
  }
  if (Opens(&receiver, dir, message)) __builtin_trap();  // a replay was accepted
  if (mask != 0 && total > 0) {
    SealedSession fresh(FixedKey(0x22), 42);  // no counter seen yet: only the change can refuse
    Frames changed = message;
    size_t p = position % total;
    int f = 0;
    while (p >= changed[f].size()) p -= changed[f++].size();
    changed[f][p] ^= mask;
    if (Opens(&fresh, dir, changed)) __builtin_trap();  // a changed byte went unnoticed
  }
  return 0;
}
