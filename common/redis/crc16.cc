// CRC16-XMODEM and the Redis Cluster key slot (hash tags), as the cluster spec defines them.
#include "common/redis/redis_client.h"

namespace osprey::redis {

namespace {

// The byte-at-a-time table of CRC16-XMODEM (poly 0x1021, init 0, no reflection, no final xor),
// built once from the bitwise definition: every key routed pays one lookup per byte.
struct Crc16Table {
  uint16_t t[256];
  Crc16Table() {
    for (int byte = 0; byte < 256; ++byte) {
      uint16_t crc = static_cast<uint16_t>(byte << 8);
      for (int b = 0; b < 8; ++b) {
        crc = (crc & 0x8000) ? static_cast<uint16_t>((crc << 1) ^ 0x1021) : static_cast<uint16_t>(crc << 1);
      }
      t[byte] = crc;
    }
  }
};

}  // namespace

uint16_t Crc16(const char* data, size_t len) {
  static const Crc16Table table;
  uint16_t crc = 0;
  for (size_t i = 0; i < len; ++i) {
    crc = static_cast<uint16_t>((crc << 8) ^ table.t[((crc >> 8) ^ static_cast<unsigned char>(data[i])) & 0xff]);
  }
  return crc;
}

uint16_t RedisClient::KeySlot(const std::string& key) {
  // Hash tag: when the key has a '{' followed later by a '}' with at least one byte between the
  // first '{' and the first '}' after it, only those bytes are hashed ("{user1}.a" -> "user1").
  // "{}x", "{x" and "x}" hash the whole key.
  const size_t open = key.find('{');
  if (open != std::string::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string::npos && close > open + 1) {
      return Crc16(key.data() + open + 1, close - open - 1) & (kNumSlots - 1);
    }
  }
  return Crc16(key.data(), key.size()) & (kNumSlots - 1);
}

}  // namespace osprey::redis
