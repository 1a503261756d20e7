// Redis Cluster key slots against the specification's check value and values printed
// by `redis-cli CLUSTER KEYSLOT` (the cluster integration test also compares hundreds
// of keys against a live server).
#include "store/redis_slot.h"

#include <gtest/gtest.h>

namespace kvstash::store {
namespace {

TEST(RedisSlot, Crc16CheckValue) {
  EXPECT_EQ(Crc16Xmodem("123456789"), 0x31C3);
  EXPECT_EQ(Crc16Xmodem(""), 0x0000);
}

TEST(RedisSlot, KnownSlots) {
  EXPECT_EQ(RedisKeySlot("123456789"), 0x31C3 % 16384);
  EXPECT_EQ(RedisKeySlot("foo"), 12182);
  EXPECT_EQ(RedisKeySlot("somekey"), 11058);
  EXPECT_EQ(RedisKeySlot("hello"), 866);
}

TEST(RedisSlot, HashTags) {
  // Only the first {...} with non-empty content is hashed (cluster spec examples).
  EXPECT_EQ(RedisKeySlot("{user1000}.following"), RedisKeySlot("user1000"));
  EXPECT_EQ(RedisKeySlot("{user1000}.followers"), RedisKeySlot("{user1000}.following"));
  EXPECT_EQ(RedisKeySlot("foo{}{bar}"), Crc16Xmodem("foo{}{bar}") % 16384);
  EXPECT_EQ(RedisKeySlot("foo{{bar}}zap"), RedisKeySlot("{bar"));
  EXPECT_EQ(RedisKeySlot("foo{bar}{zap}"), RedisKeySlot("bar"));
  EXPECT_EQ(RedisKeySlot("no-close{brace"), Crc16Xmodem("no-close{brace") % 16384);
}

}  // namespace
}  // namespace kvstash::store
