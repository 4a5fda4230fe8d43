// CRC16-XMODEM and key slots against the Redis Cluster spec's vectors, and endpoint parsing.
#include <gtest/gtest.h>

#include "common/redis/redis_client.h"

namespace osprey::redis {
namespace {

TEST(RedisSlotTest, Crc16MatchesSpecVector) {
  const std::string s = "123456789";
  EXPECT_EQ(Crc16(s.data(), s.size()), 0x31C3);
  EXPECT_EQ(Crc16("", 0), 0);
}

TEST(RedisSlotTest, KeySlotVectors) {
  EXPECT_EQ(RedisClient::KeySlot("foo"), 12182);
  EXPECT_EQ(RedisClient::KeySlot("{user1}.a"), 8106);
  EXPECT_EQ(RedisClient::KeySlot("{user1}.b"), 8106);
  EXPECT_EQ(RedisClient::KeySlot("123456789"), 0x31C3 & 16383);
}

TEST(RedisSlotTest, HashTagEdgeRules) {
  // Only the bytes between the first '{' and the first '}' after it are hashed, and only when
  // there is at least one of them.
  EXPECT_EQ(RedisClient::KeySlot("foo{bar}zap"), RedisClient::KeySlot("bar"));
  EXPECT_EQ(RedisClient::KeySlot("{bar}{zap}"), RedisClient::KeySlot("bar"));
  EXPECT_EQ(RedisClient::KeySlot("{{bar}}"), RedisClient::KeySlot("{bar"));
  // "{}" is empty: the whole key is hashed.
  const std::string empty_tag = "{}.a";
  EXPECT_EQ(RedisClient::KeySlot(empty_tag), Crc16(empty_tag.data(), empty_tag.size()) & 16383);
  EXPECT_NE(RedisClient::KeySlot("{}.a"), RedisClient::KeySlot("{}.b"));
  // An unclosed '{' or a '}' before any '{' hashes the whole key.
  const std::string open = "{user1.a";
  EXPECT_EQ(RedisClient::KeySlot(open), Crc16(open.data(), open.size()) & 16383);
  const std::string close_first = "}user1{";
  EXPECT_EQ(RedisClient::KeySlot(close_first), Crc16(close_first.data(), close_first.size()) & 16383);
  // Binary keys hash every byte.
  const std::string with_nul("a\0b", 3);
  EXPECT_NE(RedisClient::KeySlot(with_nul), RedisClient::KeySlot("a"));
}

TEST(RedisSlotTest, ParseEndpointsAcceptsListsAndDefaultPort) {
  auto eps = ParseEndpoints("127.0.0.1:7000, redis-b:7001,redis-c");
  ASSERT_TRUE(eps.ok()) << eps.status().ToString();
  ASSERT_EQ(eps->size(), 3u);
  EXPECT_EQ((*eps)[0].ToString(), "127.0.0.1:7000");
  EXPECT_EQ((*eps)[1].ToString(), "redis-b:7001");
  EXPECT_EQ((*eps)[2].ToString(), "redis-c:6379");
}

TEST(RedisSlotTest, ParseEndpointsNamesTheBadEntry) {
  for (const std::string bad : {"", "a:1,,b:2", "a:notaport", "a:0", "a:70000", ":7000", "a:", "a:1:2"}) {
    auto eps = ParseEndpoints(bad);
    ASSERT_FALSE(eps.ok()) << bad;
    EXPECT_EQ(eps.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  auto eps = ParseEndpoints("a:1,b:x");
  ASSERT_FALSE(eps.ok());
  EXPECT_NE(eps.status().message().find("#2 'b:x'"), std::string::npos) << eps.status().ToString();
}

}  // namespace
}  // namespace osprey::redis
