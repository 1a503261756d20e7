// kvstash::Client::Get against a real kvstash-server process behind the fault-injection
// proxy (tests/support/fault_proxy.h): a server, proxy or storage fault that answers the
// GET of chunk A with chunk D's VALID payload (same codec, layout, token count and
// position, header CRC and body checksum intact, frame CRCs recomputed) must be refused.
//
// Check exercised: Client::GetAsync's CheckPayloadKey(reply payload, requested key)
// (client/client.cc; payload format version 2 binds each payload to its chunk key).
// Without it this test fails: Get(A) would return D's payload with Ok, since every
// other check on that path (frame CRCs, GetReply sizes) passes.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common/checksum.h"
#include "kvstash/client.h"
#include "kvstash/payload_format.h"
#include "tests/server/server_process.h"
#include "tests/support/fault_proxy.h"
#include "tests/support/test_util.h"

namespace kvstash {
namespace {

using server::testing::ServerProcess;
using server::testing::TempDir;
using testing::FaultProxy;

constexpr KvLayout kLayout{2, 2, 8, DType::kBF16};
constexpr uint32_t kTokens = 4;

StoredKey Key(uint8_t b) {
  StoredKey k{};
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<uint8_t>(b ^ (i * 29));
  return k;
}

// A raw (codec 0) first-chunk payload of random bf16 KV, as a codec writes it (format
// version 1, not yet bound: Client::Put binds it to the chunk's key).
std::vector<uint8_t> RawPayload(uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> body(kLayout.DataBytes(kTokens));
  for (auto& b : body) b = static_cast<uint8_t>(rng());
  PayloadHeader h;
  h.codec = CodecId::kRaw;
  h.layout = kLayout;
  h.tokens = kTokens;
  h.token_offset = 0;
  h.content_checksum = Xxh3_64(body);
  return BuildPayload(h, body).value();
}

class ClientFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK(server_.Start(KVSTASH_SERVER_BIN, dir_.path(),
                            {"--tenant", "t=secret", "--data-dir", dir_.path() + "/db"}));
    ASSERT_OK_AND_ASSIGN(proxy_, FaultProxy::Start(server_.address()));
    ClientOptions o;
    o.servers = {proxy_->address()};
    o.tenant = "t";
    o.credential = "secret";
    o.max_attempts = 1;
    ASSERT_OK_AND_ASSIGN(client_, Client::Create(o));
  }

  TempDir dir_;
  ServerProcess server_;
  std::unique_ptr<FaultProxy> proxy_;
  std::unique_ptr<Client> client_;
};

TEST_F(ClientFaultTest, GetServedAnotherKeysValidPayloadIsCorruption) {
  const StoredKey a = Key(0x11), d = Key(0x77);
  const std::vector<uint8_t> pa = RawPayload(1), pd = RawPayload(2);
  // Both stored (through the proxy: PUT and HELLO pass unchanged), both first chunks
  // of their chains at position 0.
  for (const auto& [key, payload] : {std::pair{a, pa}, std::pair{d, pd}}) {
    PutChunk c;
    c.route = key;
    c.key = key;
    c.payload = payload;
    ASSERT_OK(client_->Put(c));
  }
  ASSERT_OK_AND_ASSIGN(const std::vector<uint8_t> stored_a, BindPayloadToKey(pa, a));
  ASSERT_OK_AND_ASSIGN(const std::vector<uint8_t> stored_d, BindPayloadToKey(pd, d));

  // No rule: A's payload, as stored.
  ASSERT_OK_AND_ASSIGN(GetResult clean, client_->Get(a, a));
  EXPECT_EQ(clean.payload, stored_a);

  // D's payload is valid and describes the same chunk position as A's: only the key it
  // is bound to tells them apart.
  ASSERT_OK_AND_ASSIGN(PayloadView va, ParsePayload(stored_a));
  ASSERT_OK_AND_ASSIGN(PayloadView vd, ParsePayload(stored_d));
  EXPECT_EQ(va.header.layout, vd.header.layout);
  EXPECT_EQ(va.header.tokens, vd.header.tokens);
  EXPECT_EQ(va.header.token_offset, vd.header.token_offset);
  EXPECT_NE(va.header.content_checksum, vd.header.content_checksum);

  // substitute A D: the server is asked for D and answers with D's valid payload.
  proxy_->Substitute(a, d);
  Result<GetResult> sub = client_->Get(a, a);
  EXPECT_STATUS(sub, kCorruption);
  EXPECT_EQ(proxy_->substituted(), 1u) << "the proxy did not substitute: the test proved nothing";
  // The async form checks the same.
  EXPECT_STATUS(client_->GetAsync(a, a).get(), kCorruption);
  EXPECT_EQ(proxy_->substituted(), 2u);
  // D itself is unaffected.
  ASSERT_OK_AND_ASSIGN(GetResult own_d, client_->Get(d, d));
  EXPECT_EQ(own_d.payload, stored_d);

  // clear: A again.
  proxy_->Clear();
  ASSERT_OK_AND_ASSIGN(GetResult again, client_->Get(a, a));
  EXPECT_EQ(again.payload, stored_a);

  // flip A (one payload body byte, frame CRCs recomputed): the key still matches, so
  // only the payload's own body checksum can see it, and Get checks it: Corruption.
  proxy_->Flip(a);
  Result<GetResult> flipped = client_->Get(a, a);
  EXPECT_EQ(proxy_->flipped(), 1u);
  EXPECT_STATUS(flipped, kCorruption);
}

}  // namespace
}  // namespace kvstash
