// Tiny committed models against Hugging Face transformers (goldens from
// tools/gen_runtime_goldens.py): a random-weight Qwen3 (safetensors + config.json) and
// a tiny Llama trained on the GPL-3 text, stored in the llama2.c format with its
// tokenizer.bin. Also malformed-file handling of both loaders.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "model/forward/generate.h"
#include "model/formats/model_loader.h"
#include "model/forward/prefill.h"
#include "tests/model/test_data.h"

namespace kvstash::model {
namespace {

// fp32 reference vs ours on a model this small: differences come only from the
// order of fp32 sums (BLAS vs torch), ~1e-6 relative; 1e-4 leaves margin.
constexpr double kTinyRelTol = 1e-4;

void ExpectMatchesGoldens(const Model& m, const nlohmann::json& g, const char* name) {
  const auto ids = testing::Ids(g["prompt_ids"]);
  KvCache cache = KvCache::ForModel(m.config);
  PrefillOptions o;
  o.logits = PrefillOptions::Logits::kAll;
  o.keep_pre_rope_k = true;
  ASSERT_OK_AND_ASSIGN(PrefillResult r, Prefill(m, ids, &cache, o));
  ASSERT_EQ(cache.tokens, ids.size());
  const auto logits = testing::Floats(g["logits"]);
  ASSERT_EQ(r.logits.size(), logits.size());
  const auto ls = testing::Compare(r.logits.data(), logits);
  EXPECT_LE(ls.rel(), kTinyRelTol) << name << " logits max abs err " << ls.max_abs;
  for (uint32_t l = 0; l < m.config.n_layers; ++l) {
    const auto& gl = g["layers"][l];
    const auto k = testing::Compare(cache.k[l].data(), testing::Floats(gl["k"]));
    const auto kp = testing::Compare(r.k_pre_rope[l].data(), testing::Floats(gl["k_pre_rope"]));
    const auto v = testing::Compare(cache.v[l].data(), testing::Floats(gl["v"]));
    EXPECT_LE(k.rel(), kTinyRelTol) << name << " layer " << l << " K";
    EXPECT_LE(kp.rel(), kTinyRelTol) << name << " layer " << l << " K before RoPE";
    EXPECT_LE(v.rel(), kTinyRelTol) << name << " layer " << l << " V";
    std::printf("%s layer %u: max abs err K %.2e  K(pre-RoPE) %.2e  V %.2e\n", name, l, k.max_abs, kp.max_abs,
                v.max_abs);
  }
}

TEST(TinyQwen3, SafetensorsMatchesTransformers) {
  ASSERT_OK_AND_ASSIGN(auto m, LoadModel(testing::DataPath("tiny_qwen3")));
  EXPECT_EQ(m->config.arch, Architecture::kQwen3);
  EXPECT_EQ(m->config.head_dim, 32u);
  EXPECT_FALSE(m->config.tied_embeddings);
  ExpectMatchesGoldens(*m, testing::LoadJson("tiny_qwen3/goldens.json"), "qwen3");
}

TEST(TinyQwen3, ContinuationFromRestoredCacheEqualsFullPrefill) {
  ASSERT_OK_AND_ASSIGN(auto m, LoadModel(testing::DataPath("tiny_qwen3")));
  const auto ids = testing::Ids(testing::LoadJson("tiny_qwen3/goldens.json")["prompt_ids"]);
  KvCache full = KvCache::ForModel(m->config);
  ASSERT_OK_AND_ASSIGN(auto want, GenerateGreedy(*m, ids, &full, {.max_new_tokens = 16, .stop_at_eos = false}));
  for (uint32_t p : {1u, 17u, static_cast<uint32_t>(ids.size() - 1)}) {
    KvCache pre = KvCache::ForModel(m->config);
    PrefillOptions none;
    none.logits = PrefillOptions::Logits::kNone;
    ASSERT_OK(Prefill(*m, std::span(ids).first(p), &pre, none).status());
    ASSERT_OK_AND_ASSIGN(auto got, GenerateGreedy(*m, ids, &pre, {.max_new_tokens = 16, .stop_at_eos = false}));
    EXPECT_EQ(got, want) << "restored " << p << " tokens";
  }
  KvCache all = KvCache::ForModel(m->config);
  ASSERT_OK(Prefill(*m, ids, &all).status());
  EXPECT_STATUS(GenerateGreedy(*m, ids, &all), kInvalidArgument);  // nothing left to prefill
}

TEST(TinyLlama2c, CheckpointMatchesTransformersAndGenerates) {
  LoadOptions lo;
  lo.tokenizer_path = testing::DataPath("tiny_llama2c/tokenizer.bin");
  ASSERT_OK_AND_ASSIGN(auto m, LoadModel(testing::DataPath("tiny_llama2c/model.bin"), lo));
  EXPECT_EQ(m->source, "llama2c");
  EXPECT_TRUE(m->config.tied_embeddings);
  const auto g = testing::LoadJson("tiny_llama2c/goldens.json");
  ExpectMatchesGoldens(*m, g, "llama2c");
  ASSERT_OK_AND_ASSIGN(auto prompt, m->tokenizer->Encode(g["prompt"].get<std::string>()));
  EXPECT_EQ(prompt, testing::Ids(g["prompt_ids"]));
  KvCache cache = KvCache::ForModel(m->config);
  const auto want = testing::Ids(g["greedy_ids"]);
  ASSERT_OK_AND_ASSIGN(auto gen, GenerateGreedy(*m, prompt, &cache, {.max_new_tokens = 24}));
  EXPECT_EQ(gen, want);
  ASSERT_OK_AND_ASSIGN(auto text, m->tokenizer->Decode(gen));
  EXPECT_EQ(text, g["greedy_text"].get<std::string>());
  std::printf("llama2.c greedy: \"%s\"\n", text.c_str());
}

std::string WriteTemp(const std::string& name, const std::string& bytes) {
  const auto p = std::filesystem::temp_directory_path() / ("kvstash_model_test_" + name);
  std::ofstream(p, std::ios::binary) << bytes;
  return p.string();
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(ModelLoader, MalformedFilesAreErrorsNotCrashes) {
  const std::string bin = ReadAll(testing::DataPath("tiny_llama2c/model.bin"));
  for (size_t n : {size_t{0}, size_t{5}, size_t{28}, size_t{1000}, bin.size() - 4}) {
    const auto p = WriteTemp("trunc.bin", bin.substr(0, n));
    EXPECT_STATUS(LoadModel(p), kCorruption) << n << " bytes";
  }
  std::string bad = bin;
  bad[12] = 0;  // n_heads = 0
  bad[13] = bad[14] = bad[15] = 0;
  EXPECT_STATUS(LoadModel(WriteTemp("heads0.bin", bad)), kCorruption);
  EXPECT_STATUS(LoadModel("/nonexistent/model.gguf"), kIOError);
  // A GGUF magic followed by garbage.
  EXPECT_STATUS(LoadModel(WriteTemp("junk.gguf", std::string("GGUF\x03\0\0\0", 8) + std::string(64, '\xff'))),
                kCorruption);
  // safetensors: header length beyond the file.
  const auto dir = std::filesystem::temp_directory_path() / "kvstash_model_test_st";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(testing::DataPath("tiny_qwen3/config.json"), dir / "config.json",
                             std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir / "model.safetensors", std::ios::binary) << std::string("\xff\xff\0\0\0\0\0\0{}", 10);
  EXPECT_STATUS(LoadModel(dir.string()), kCorruption);
  std::ofstream(dir / "config.json") << R"({"model_type": "mamba"})";
  EXPECT_STATUS(LoadModel(dir.string()), kNotSupported);
}

}  // namespace
}  // namespace kvstash::model
