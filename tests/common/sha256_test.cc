// SHA-256 against FIPS 180-4's examples (csrc.nist.gov, SHA256.pdf): one shot, streamed
// in pieces, from a file, and the streaming errors.
#include "kvstash/sha256.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "kvstash/prefix_key.h"
#include "tests/support/test_util.h"

namespace kvstash {
namespace {

std::span<const uint8_t> AsBytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

constexpr const char* kAbc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
constexpr const char* kTwoBlocks = "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1";
const std::string kTwoBlocksText = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";

TEST(Sha256Test, FipsExamplesOneShotAndStreamed) {
  EXPECT_EQ(ToHex(Sha256(AsBytes("abc"))), kAbc);
  EXPECT_EQ(ToHex(Sha256(AsBytes(kTwoBlocksText))), kTwoBlocks);
  Sha256Stream h;
  h.Update(AsBytes(kTwoBlocksText.substr(0, 5)));
  h.Update({});
  h.Update(AsBytes(kTwoBlocksText.substr(5)));
  ASSERT_OK_AND_ASSIGN(Digest256 d, h.Finish());
  EXPECT_EQ(ToHex(d), kTwoBlocks);
  EXPECT_STATUS(h.Finish(), kInternal);  // once only
}

TEST(Sha256Test, FilesStreamBetweenBytes) {
  const std::string base = ::testing::TempDir() + "kvstash_sha256_" + std::to_string(getpid());
  const std::string path = base + "_bc";
  std::ofstream(path, std::ios::binary) << "bc";
  ASSERT_OK_AND_ASSIGN(Digest256 whole, Sha256File(path));
  EXPECT_EQ(ToHex(whole), ToHex(Sha256(AsBytes("bc"))));
  Sha256Stream h;
  h.Update(AsBytes("a"));
  ASSERT_OK(h.UpdateFromFile(path));
  ASSERT_OK_AND_ASSIGN(Digest256 d, h.Finish());
  EXPECT_EQ(ToHex(d), kAbc);
  // A missing file is NotFound, and the error sticks.
  Sha256Stream bad;
  EXPECT_STATUS(bad.UpdateFromFile(base + "_missing"), kNotFound);
  bad.Update(AsBytes("abc"));
  EXPECT_STATUS(bad.Finish(), kNotFound);
  EXPECT_STATUS(Sha256File(base + "_missing"), kNotFound);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kvstash
