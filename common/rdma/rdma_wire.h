// The RdmaTransport's wire format: what a sender writes into a receive slot, what the 32-bit
// immediate says, and the private data of a connection request / accept.
//
// Immediate of a write with immediate:
//   bit 31 = 0: a message in a slot: bits 20..30 the slot (< 2048), bits 0..19 the byte count
//               written (< 1 MiB, so slot_bytes <= 1 MiB);
//   bit 31 = 1: a control word with no payload (a zero-length write): bits 28..30 the type,
//               bits 0..27 the value -- kCredits (value: slots the writer's side freed) or
//               kReadDone (value: the rendezvous id whose frames the reader has fetched).
// A slot holds a SlotHeader, then the inline frames' bytes in frame order. A frame of at least
// rendezvous_threshold bytes (or one that does not fit) is not inline: its address and rkey in the
// sender's registered memory are in the header and the receiver RDMA-READs it.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/rdma/verbs.h"

namespace osprey::rdma::wire {

constexpr uint32_t kMaxSlots = 1u << 11;
constexpr uint32_t kMaxSlotBytes = 1u << 20;  // slot_bytes must be below it
constexpr uint32_t kMaxControlValue = (1u << 28) - 1;
enum ControlType : uint32_t { kCredits = 1, kReadDone = 2 };

inline uint32_t DataImm(uint32_t slot, uint32_t len) { return (slot << 20) | len; }
inline uint32_t ControlImm(ControlType t, uint32_t value) {
  return 0x80000000u | (static_cast<uint32_t>(t) << 28) | (value & kMaxControlValue);
}
inline bool IsControl(uint32_t imm) { return (imm & 0x80000000u) != 0; }
inline uint32_t ImmSlot(uint32_t imm) { return (imm >> 20) & (kMaxSlots - 1); }
inline uint32_t ImmLen(uint32_t imm) { return imm & (kMaxSlotBytes - 1); }
inline uint32_t ControlTypeOf(uint32_t imm) { return (imm >> 28) & 7; }
inline uint32_t ControlValue(uint32_t imm) { return imm & kMaxControlValue; }

struct SlotHeader {
  uint32_t magic;    // kSlotMagic
  uint32_t credits;  // piggybacked: slots the sender's side freed since it last said so
  uint32_t rendezvous_id;  // meaningful when any frame is remote
  uint32_t remote_mask;    // bit i: frame i is fetched by RDMA READ
  uint32_t len[3];
  uint32_t rkey[3];
  uint64_t addr[3];
};
constexpr uint32_t kSlotMagic = 0x4f535052;  // "OSPR"

// Connection private data (fits the 56 bytes of an rdma_cm RC connect).
struct Hello {
  uint32_t magic;  // kHelloMagic
  uint32_t ring_rkey;
  uint64_t ring_addr;
  uint32_t ring_slots;
  uint32_t slot_bytes;
  uint64_t instance;  // the dialer transport's id: a reconnect keeps the listener's PeerId
};
constexpr uint32_t kHelloMagic = 0x4f534831;  // "OSH1"
static_assert(sizeof(Hello) <= kMaxPrivateData, "Hello must fit rdma_cm private data");

inline PrivateData PackHello(const Hello& h) {
  PrivateData d(sizeof(Hello));
  std::memcpy(d.data(), &h, sizeof(Hello));
  return d;
}
// False for anything that is not a Hello with sane ring geometry.
inline bool UnpackHello(const PrivateData& d, Hello* h) {
  if (d.size() < sizeof(Hello)) return false;
  std::memcpy(h, d.data(), sizeof(Hello));
  return h->magic == kHelloMagic && h->ring_slots >= 1 && h->ring_slots <= kMaxSlots &&
         h->slot_bytes > sizeof(SlotHeader) && h->slot_bytes < kMaxSlotBytes;
}

}  // namespace osprey::rdma::wire
