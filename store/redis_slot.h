// Redis Cluster key slots: HASH_SLOT = CRC16(key) mod 16384, where only the part
// between the first '{' and the next '}' is hashed when that part is non-empty (hash
// tags). CRC16 is CRC-16/XMODEM (poly 0x1021, init 0, no reflection; check value of
// "123456789" is 0x31C3), as in the Redis Cluster specification
// (redis.io/docs/reference/cluster-spec, "Key distribution model", and crc16.c).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string_view>

namespace kvstash::store {

inline constexpr uint32_t kRedisClusterSlots = 16384;

uint16_t Crc16Xmodem(std::string_view data);
uint16_t RedisKeySlot(std::string_view key);

}  // namespace kvstash::store
