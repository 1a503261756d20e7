// Checks the C++ prefix keys against vectors produced by the independent Python
// implementation (tools/kvstash_tools/keys.py -> tests/common/data/key_vectors.json)
// and the non-collision cases of docs/format/keys.md.
#include "kvstash/prefix_key.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "tests/support/test_util.h"

namespace kvstash {
namespace {

using nlohmann::json;

std::string Unhex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  }
  return out;
}

json LoadVectors() {
  std::ifstream f(testing::SourceDir() + "/tests/common/data/key_vectors.json");
  EXPECT_TRUE(f.good());
  return json::parse(f);
}

Namespace SpecFromJson(const json& j) {
  Namespace s;
  s.model_fingerprint = Unhex(j["model_fingerprint"]);
  s.layout.dtype = ParseDType(j["kv_dtype"].get<std::string>()).value();
  s.layout.n_layers = j["n_layers"];
  s.layout.n_kv_heads = j["n_kv_heads"];
  s.layout.head_dim = j["head_dim"];
  s.chunk_tokens = j["chunk_tokens"];
  s.tp_rank = j["tp_rank"];
  s.tp_size = j["tp_size"];
  s.adapter_name = Unhex(j["adapter_name"]);
  s.adapter_id = Unhex(j["adapter_id"]);
  s.adapter_digest = Unhex(j["adapter_digest"]);
  s.cache_salt = Unhex(j["cache_salt"]);
  s.tenant = Unhex(j["tenant"]);
  s.codec_id = Unhex(j["codec_id"]);
  s.codec_artifact_digest = Unhex(j["codec_artifact_digest"]);
  return s;
}

std::map<std::string, Namespace> Specs(const json& doc) {
  std::map<std::string, Namespace> m;
  for (const json& c : doc["cases"]) m[c["name"]] = SpecFromJson(c["namespace"]);
  return m;
}

TEST(PrefixKeyTest, MatchesPythonVectors) {
  const json doc = LoadVectors();
  ASSERT_GE(doc["cases"].size(), 8u);
  for (const json& c : doc["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const Namespace spec = SpecFromJson(c["namespace"]);
    EXPECT_EQ(ToHex(EncodeNamespace(spec)), c["encoding_hex"]);
    ASSERT_OK_AND_ASSIGN(Digest256 ns, NamespaceDigest(spec));
    EXPECT_EQ(ToHex(ns), c["namespace_digest"]);
    const std::vector<uint32_t> tokens = c["tokens"].get<std::vector<uint32_t>>();
    ASSERT_OK_AND_ASSIGN(auto full, ComputeChunkKeys(ns, tokens, spec.chunk_tokens, false));
    ASSERT_EQ(full.size(), c["chunks_full_only"].size());
    for (size_t i = 0; i < full.size(); ++i) EXPECT_EQ(ToHex(full[i].digest), c["chunks_full_only"][i]);
    ASSERT_OK_AND_ASSIGN(auto all, ComputeChunkKeys(ns, tokens, spec.chunk_tokens, true));
    ASSERT_EQ(all.size(), c["chunks_with_partial"].size());
    for (size_t i = 0; i < all.size(); ++i) {
      const json& e = c["chunks_with_partial"][i];
      EXPECT_EQ(ToHex(all[i].digest), e["digest"]);
      EXPECT_EQ(ToHex(all[i].stored()), e["stored"]);
      EXPECT_EQ(all[i].tokens, e["tokens"].get<uint32_t>());
      EXPECT_EQ(all[i].partial, e["partial"].get<bool>());
    }
  }
}

TEST(PrefixKeyTest, ExtraKeysAndLargeTokenIdsMatchPython) {
  const json doc = LoadVectors();
  const auto specs = Specs(doc);
  ASSERT_OK_AND_ASSIGN(Digest256 ns, NamespaceDigest(specs.at("base")));
  const json& e = doc["extra_keys_case"];
  std::vector<std::vector<std::string>> extra;
  for (const json& list : e["extra_keys_hex"]) {
    extra.emplace_back();
    for (const json& k : list) extra.back().push_back(Unhex(k));
  }
  const auto tokens = e["tokens"].get<std::vector<uint32_t>>();
  ASSERT_OK_AND_ASSIGN(auto keys, ComputeChunkKeys(ns, tokens, 4, false, extra));
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(ToHex(keys[0].digest), e["chunks"][0]);
  EXPECT_EQ(ToHex(keys[1].digest), e["chunks"][1]);
  // The same tokens without the image digest key differently.
  ASSERT_OK_AND_ASSIGN(auto plain, ComputeChunkKeys(ns, tokens, 4, false));
  EXPECT_NE(plain[0].digest, keys[0].digest);

  const json& l = doc["large_tokens_case"];
  ASSERT_OK_AND_ASSIGN(auto big, ComputeChunkKeys(ns, l["tokens"].get<std::vector<uint32_t>>(), 4, false));
  EXPECT_EQ(ToHex(big[0].digest), l["chunks"][0]);
}

TEST(PrefixKeyTest, NonCollisionCases) {
  const auto specs = Specs(LoadVectors());
  std::set<Digest256> seen;
  for (const auto& [name, spec] : specs) {
    ASSERT_OK_AND_ASSIGN(Digest256 d, NamespaceDigest(spec));
    EXPECT_TRUE(seen.insert(d).second) << name;
  }
  auto digest = [&](const char* n) { return NamespaceDigest(specs.at(n)).value(); };
  EXPECT_NE(digest("adapter_name_x"), digest("cache_salt_x"));
  EXPECT_NE(digest("adapter_a_id1"), digest("adapter_a_id2"));

  const std::vector<uint32_t> toks = {0, 1, 2, 3, 4, 5, 6, 7};
  auto a = ComputeChunkKeys(digest("base"), toks, 4, false).value();
  auto b = ComputeChunkKeys(digest("other_model"), toks, 4, false).value();
  EXPECT_NE(a[0].digest, b[0].digest);
  EXPECT_NE(a[1].digest, b[1].digest);

  // Full chunk of 4 tokens vs the same 4 tokens as a partial chunk of an 8-token namespace.
  Namespace s8 = specs.at("base");
  s8.chunk_tokens = 8;
  const Digest256 d8 = NamespaceDigest(s8).value();
  auto partial = ComputeChunkKeys(d8, std::span(toks).first(4), 8, true).value();
  ASSERT_EQ(partial.size(), 1u);
  EXPECT_TRUE(partial[0].partial);
  auto full = ComputeChunkKeys(d8, std::span(toks).first(4), 4, false).value();
  EXPECT_NE(partial[0].digest, full[0].digest);
}

TEST(PrefixKeyTest, ChainingAndArguments) {
  Namespace s;
  s.layout = {30, 3, 64, DType::kBF16};
  const Digest256 ns = NamespaceDigest(s).value();
  std::vector<uint32_t> t1(512), t2(512);
  for (uint32_t i = 0; i < 512; ++i) t1[i] = t2[i] = i;
  t2[3] = 99;  // differs only in chunk 0
  auto k1 = ComputeChunkKeys(ns, t1, 256, false).value();
  auto k2 = ComputeChunkKeys(ns, t2, 256, false).value();
  EXPECT_NE(k1[1].digest, k2[1].digest) << "chunk 1 must chain on chunk 0";
  EXPECT_EQ(ComputeChunkKeys(ns, std::span(t1).first(255), 256, false).value().size(), 0u);
  EXPECT_EQ(ComputeChunkKeys(ns, {}, 256, true).value().size(), 0u);
  EXPECT_STATUS(ComputeChunkKeys(ns, t1, 0, false), kInvalidArgument);
  std::vector<std::vector<std::string>> wrong(1);
  EXPECT_STATUS(ComputeChunkKeys(ns, t1, 256, false, wrong), kInvalidArgument);
  s.tp_rank = 1;
  EXPECT_STATUS(NamespaceDigest(s), kInvalidArgument);
  s.tp_rank = 0;
  s.chunk_tokens = 0;
  EXPECT_STATUS(NamespaceDigest(s), kInvalidArgument);
}

}  // namespace
}  // namespace kvstash
