// install_consumer: the README's client example against the installed package.
//
// Usage: install_consumer HOST:PORT TENANT CREDENTIAL PAYLOAD_FILE
// Built twice by install_check.sh: with CMake (find_package) and with pkg-config.
// Checks, each against a value derived outside this program (and kvstash/version.h
// against the build system's idea of the version):
//   1. the namespace digest and chunk keys of the first case of
//      tests/common/data/key_vectors.json (written by tools/gen_key_vectors.py, an
//      independent implementation), through kvstash/prefix_key.h;
//   2. PUTs of PAYLOAD_FILE under the first two chunk keys (a chain), a LOOKUP that
//      matches both, a GET that returns the payload bound to its key (BindPayloadToKey
//      of the file's bytes), a DELETE of chunk 1, then a GET that answers NotFound and a
//      LOOKUP that matches chunk 0 only;
//   3. one decision of the restore cost model (kvstash/restore_cost.h) from hand-derived
//      rates.
// Prints one line per check; exit 0 when all pass, 1 otherwise.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kvstash/client.h"
#include "kvstash/payload_format.h"
#include "kvstash/prefix_codec.h"
#include "kvstash/prefix_key.h"
#include "kvstash/restore_cost.h"
#include "kvstash/version.h"

namespace {

int failures = 0;

void Check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  if (!ok) ++failures;
}

std::string Unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

// Case "base" of tests/common/data/key_vectors.json.
std::vector<kvstash::ChunkKey> CheckKeyVectors() {
  kvstash::Namespace ns;
  ns.model_fingerprint = Unhex("80d8645cdd0e1d2ebac6ca2806670abb7de01e06688f3b074e0412c4c8b5db2b");
  ns.layout = {.n_layers = 30, .n_kv_heads = 3, .head_dim = 64, .dtype = kvstash::DType::kBF16};
  ns.chunk_tokens = 4;
  auto digest = kvstash::NamespaceDigest(ns);
  Check(digest.ok() && kvstash::ToHex(digest.value()) ==
                           "08f2385b901505b25d2826e707d274ddfb15b607261285c5dce465f48aec2f7f",
        "namespace digest of key vector 'base'");
  if (!digest.ok()) return {};
  const std::vector<uint32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  auto keys = kvstash::ComputeChunkKeys(digest.value(), tokens, 4, /*include_partial=*/true);
  Check(keys.ok() && keys.value().size() == 3 &&
            kvstash::ToHex(keys.value()[0].stored()) == "498478d4a22611209533cfba73f6b18c" &&
            kvstash::ToHex(keys.value()[1].stored()) == "4487eda461552b368414d1de5df3e9c8" &&
            kvstash::ToHex(keys.value()[2].stored()) == "da1f45a8f5ee83c64141e9cb2005c500" &&
            keys.value()[2].partial && keys.value()[2].tokens == 2,
        "chunk keys of key vector 'base'");
  return keys.ok() ? keys.value() : std::vector<kvstash::ChunkKey>{};
}

void CheckRoundTrip(const char* server, const char* tenant, const char* credential,
                    const std::vector<uint8_t>& file, const std::vector<kvstash::ChunkKey>& keys) {
  auto header = kvstash::ParsePayloadHeader(file);
  Check(header.ok(), "payload header parses");
  if (!header.ok() || keys.size() < 2) return;
  kvstash::ClientOptions opts;
  opts.servers = {server};
  opts.tenant = tenant;
  opts.credential = credential;
  auto client = kvstash::Client::Create(opts);
  Check(client.ok(), "Client::Create");
  if (!client.ok()) return;
  auto& c = *client.value();
  const kvstash::StoredKey route = keys[0].stored(), key = keys[1].stored();
  const uint32_t tokens = header.value().tokens;
  const std::vector<kvstash::ChunkRef> chain = {{route, tokens}, {key, tokens}};
  const kvstash::Status put0 = c.Put({.route = route, .key = route, .payload = file});
  const kvstash::Status put1 = c.Put({.route = route, .key = key, .parent = route, .payload = file});
  Check(put0.ok() && put1.ok(), "PUT of chunks 0 and 1: " + put0.ToString() + ", " + put1.ToString());
  auto hit = c.Lookup(chain);
  Check(hit.ok() && hit.value().matched_chunks == 2 && hit.value().matched_tokens == 2ull * tokens,
        "LOOKUP matches both chunks");
  auto got = c.Get(route, key);
  auto bound = kvstash::BindPayloadToKey(file, key);
  Check(got.ok() && bound.ok() && got.value().payload == bound.value(),
        "GET returns the payload bound to its key");
  auto deleted = c.Delete(route, key);
  Check(deleted.ok() && deleted.value(), "DELETE of chunk 1");
  auto gone = c.Get(route, key);
  Check(!gone.ok() && gone.status().IsNotFound(), "GET after DELETE is NotFound");
  hit = c.Lookup(chain);
  Check(hit.ok() && hit.value().matched_chunks == 1, "LOOKUP after DELETE matches chunk 0 only");
  // PrefixCodec (in the same library) turns chain keys into the same lookup chain.
  const auto lookup_chain = kvstash::PrefixCodec::LookupChain(keys);
  Check(lookup_chain.size() == 3 && lookup_chain[1].key == key && lookup_chain[2].tokens == 2,
        "PrefixCodec::LookupChain of the key vector");
}

// Rates: prefill 1 s / 1,000 tokens = 1e-3 s/token; a load of 1,000 tokens, 2e6 bytes,
// 0.02 s transfer (1e-8 s/byte, 2,000 bytes/token) and 0.1 s decode (1e-4 s/token).
// For 500 tokens: restore = 500 * 2000 * 1e-8 + 500 * 1e-4 = 0.01 + 0.05 = 0.06 s,
// recompute = 500 * 1e-3 = 0.5 s, so the hit is taken.
void CheckCostModel() {
  kvstash::RestoreCostModel model;
  model.ObservePrefill(1000, 1.0);
  model.ObserveRestore(1000, 2'000'000, 0.02, 0.1);
  const auto e = model.Estimate(500);
  auto near = [](double a, double b) { return a > b - 1e-9 && a < b + 1e-9; };
  Check(e.informed && e.take && near(e.transfer_s, 0.01) && near(e.decode_s, 0.05) &&
            near(e.restore_s, 0.06) && near(e.recompute_s, 0.5),
        "restore cost estimate for 500 tokens");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s HOST:PORT TENANT CREDENTIAL PAYLOAD_FILE\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[4], std::ios::binary);
  const std::vector<uint8_t> file((std::istreambuf_iterator<char>(in)), {});
  Check(!file.empty(), std::string("read ") + argv[4]);
  // EXPECTED_VERSION: the package's version as the build system found it (CMake's
  // kvstash_VERSION or pkg-config --modversion).
  Check(std::string(KVSTASH_VERSION_STRING) == EXPECTED_VERSION,
        std::string("kvstash/version.h says ") + KVSTASH_VERSION_STRING);
  const auto keys = CheckKeyVectors();
  CheckRoundTrip(argv[1], argv[2], argv[3], file, keys);
  CheckCostModel();
  return failures == 0 ? 0 : 1;
}
