// Qwen2.5-Coder-0.5B-Instruct Q4_K_M (models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf,
// scripts/fetch_qwen2.sh) against llama.cpp (goldens from tools/gen_qwen2_goldens.py):
// the config and KV geometry read from the file, the qwen2 tokenizer on code, English,
// digits, whitespace runs, unicode and special tokens, and greedy continuations of a
// code prompt and a chat-templated prompt. Labelled "model"; every test skips with a
// message when the model file is absent (CI has none).
//
// Greedy equality: llama.cpp multiplies quantised weights by activations quantised to
// Q8 (ggml's vec_dot kernels) while this runtime dequantises the weights to fp32, so
// the logits differ by a few hundredths (printed below). The generated tokens must be
// equal anyway; the goldens hold llama.cpp's top-1 margin at every step, so a
// divergence reports whether it fell on a near-tie or not.
//
// Qwen2Runtime (label "unit", no model file): the q/k/v biases on a tiny random model.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>

#include <unistd.h>

#include "kvstash/dtype.h"
#include "model/formats/model_loader.h"
#include "model/forward/generate.h"
#include "model/forward/prefill.h"
#include "tests/model/test_data.h"
#include "tests/support/tiny_model.h"

namespace kvstash::model {
namespace {

constexpr char kFile[] = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";

Model TinyQwen2(uint32_t seed) { return ::kvstash::testing::TinyQwen2(16, seed); }

TEST(Qwen2Runtime, ValidateWantsBiasesOfTheRightSize) {
  Model m = TinyQwen2(7);
  ASSERT_OK(m.Validate());
  m.layers[1].bk.pop_back();
  EXPECT_STATUS(m.Validate(), kInvalidArgument);
  m.layers[1].bk.clear();
  EXPECT_STATUS(m.Validate(), kInvalidArgument);
  Model llama = ::kvstash::testing::TinyModel(Architecture::kLlama, 16, 7);
  llama.layers[0].bq.assign(llama.config.q_dim(), 0.0f);  // biases on a model without them
  EXPECT_STATUS(llama.Validate(), kInvalidArgument);
}

// The int predictor adds the biases: its K and V track the fp32 reference's closely
// (quantisation noise), and would be off by the biases (N(0, 0.5)) without them. The
// ggml arithmetic (llama.cpp's Llama graph) refuses them.
TEST(Qwen2Runtime, SpecPredictorAddsTheBiases) {
  const Model q = TinyQwen2(3);
  const std::vector<uint32_t> tokens = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8};
  KvCache ref = KvCache::ForModel(q.config);
  ASSERT_OK(Prefill(q, tokens, &ref, PrefillOptions{}).status());
  SpecPredictorOptions o;
  o.threads = 1;
  ASSERT_OK_AND_ASSIGN(auto p, SpecPredictor::Create(q, o));
  PredictorCache pc;
  ASSERT_OK(p->Run(tokens, &pc));
  const size_t kvd = q.config.kv_dim();
  for (uint32_t l = 0; l < q.config.n_layers; ++l) {
    double err = 0, err_unbiased = 0, norm = 0;
    for (size_t t = 0; t < tokens.size(); ++t) {
      for (size_t i = 0; i < kvd; ++i) {
        const double want = ref.v[l][t * kvd + i], got = pc.v[l][t * kvd + i];
        err += (got - want) * (got - want);
        err_unbiased += (got - q.layers[l].bv[i] - want) * (got - q.layers[l].bv[i] - want);
        norm += want * want;
      }
    }
    EXPECT_LT(std::sqrt(err / norm), 0.05) << "layer " << l;
    EXPECT_GT(std::sqrt(err_unbiased / norm), 0.2) << "layer " << l;
  }
  o.arithmetic = SpecPredictorOptions::Arithmetic::kGgml;
  EXPECT_STATUS(SpecPredictor::Create(q, o), kNotSupported);
  EXPECT_EQ(GgmlArithmeticSupport(q).code(),
            Status::Code::kNotSupported);  // the biases, before any GGUF check
}

TEST(Qwen2Runtime, BiasesAreAddedAfterTheProjection) {
  // Layer 0 sees the same input in both models, so its K before RoPE and its V are the
  // Llama model's plus the bias, exactly (one fp32 addition); later layers differ.
  const Model q = TinyQwen2(11);
  const Model l = ::kvstash::testing::TinyModel(Architecture::kLlama, 16, 11);
  const std::vector<uint32_t> tokens = {3, 1, 4, 1, 5, 9, 2, 6};
  PrefillOptions o;
  o.keep_pre_rope_k = true;
  KvCache cq = KvCache::ForModel(q.config), cl = KvCache::ForModel(l.config);
  ASSERT_OK_AND_ASSIGN(PrefillResult rq, Prefill(q, tokens, &cq, o));
  ASSERT_OK_AND_ASSIGN(PrefillResult rl, Prefill(l, tokens, &cl, o));
  const uint32_t kvd = q.config.kv_dim();
  for (size_t t = 0; t < tokens.size(); ++t) {
    for (uint32_t i = 0; i < kvd; ++i) {
      ASSERT_EQ(rq.k_pre_rope[0][t * kvd + i], rl.k_pre_rope[0][t * kvd + i] + q.layers[0].bk[i]);
      ASSERT_EQ(cq.v[0][t * kvd + i], cl.v[0][t * kvd + i] + q.layers[0].bv[i]);
    }
  }
  EXPECT_NE(rq.logits, rl.logits);
}

class Qwen2Coder : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = ::kvstash::testing::ModelsDir() + "/" + kFile;
    if (!std::filesystem::exists(path)) return;
    const auto t0 = std::chrono::steady_clock::now();
    auto m = LoadModel(path);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value().release();
    std::printf("loaded %s in %.1f s: %s\n", kFile,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                model_->config.ToString().c_str());
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  void SetUp() override {
    if (model_ == nullptr) {
      GTEST_SKIP() << "models/" << kFile << " is absent: run scripts/fetch_qwen2.sh "
                   << "(or KVSTASH_MODEL_QWEN2=1 scripts/setup.sh)";
    }
  }
  static Model* model_;
};
Model* Qwen2Coder::model_ = nullptr;

TEST_F(Qwen2Coder, ConfigAndKvGeometryFromGguf) {
  const ModelConfig& c = model_->config;
  EXPECT_EQ(c.arch, Architecture::kQwen2);
  // layers, hidden, heads, KV heads, head_dim, ffn, vocabulary; RoPE theta, RMS epsilon
  EXPECT_EQ(std::tuple(c.n_layers, c.hidden, c.n_heads, c.n_kv_heads, c.head_dim, c.ffn_hidden, c.vocab_size),
            std::tuple(24u, 896u, 14u, 2u, 64u, 4864u, 151936u));
  EXPECT_EQ(std::pair(c.rope_theta, c.rms_eps), std::pair(1e6f, 1e-6f));
  EXPECT_FALSE(c.tied_embeddings);  // this file stores output.weight (Q8_0)
  EXPECT_TRUE(c.qkv_bias());
  EXPECT_FALSE(c.qk_norm());
  ASSERT_EQ(model_->layers.size(), 24u);
  EXPECT_EQ(model_->layers[0].bq.size(), 896u);
  EXPECT_EQ(model_->layers[0].bk.size(), 128u);
  EXPECT_EQ(model_->layers[0].bv.size(), 128u);
  // K and V of every layer, 2 KV heads x 64 channels each, in bf16.
  const KvCache cache = KvCache::ForModel(c);
  const uint64_t kv_bytes_per_token = 2 * uint64_t{c.n_layers} * cache.RowFloats() * DTypeSize(DType::kBF16);
  EXPECT_EQ(kv_bytes_per_token, 12288u);
  ASSERT_NE(model_->tokenizer, nullptr);
  EXPECT_EQ(model_->tokenizer->vocab_size(), 151936u);
  EXPECT_EQ(model_->tokenizer->eos_id(), std::optional<uint32_t>(151645));  // <|im_end|>
}

TEST_F(Qwen2Coder, TokenizerMatchesLlamaCpp) {
  const auto j = testing::LoadJson("qwen2_coder_goldens.json");
  ASSERT_GE(j["tokenizer_cases"].size(), 8u);
  for (const auto& c : j["tokenizer_cases"]) {
    const std::string text = c["text"].get<std::string>();
    ASSERT_OK_AND_ASSIGN(auto ids, model_->tokenizer->Encode(text));
    EXPECT_EQ(ids, testing::Ids(c["ids"])) << "text: " << text.substr(0, 80);
    ASSERT_OK_AND_ASSIGN(auto back, model_->tokenizer->Decode(ids));
    EXPECT_EQ(back, text);
  }
  for (const auto& g : j["greedy"]) {
    ASSERT_OK_AND_ASSIGN(auto ids, model_->tokenizer->Encode(g["text"].get<std::string>()));
    EXPECT_EQ(ids, testing::Ids(g["prompt_ids"])) << g["name"];
  }
}

TEST_F(Qwen2Coder, GreedyContinuationEqualsLlamaCpp) {
  const auto j = testing::LoadJson("qwen2_coder_goldens.json");
  for (const auto& g : j["greedy"]) {
    const std::string name = g["name"].get<std::string>();
    const auto prompt = testing::Ids(g["prompt_ids"]);
    const auto want = testing::Ids(g["greedy_ids"]);
    const auto margins = testing::Floats(g["top1_margins"]);

    // The prompt's last logits next to llama.cpp's top 8 (how far the fp32 runtime is
    // from llama.cpp's quantised arithmetic).
    KvCache probe = KvCache::ForModel(model_->config);
    ASSERT_OK_AND_ASSIGN(PrefillResult r, Prefill(*model_, prompt, &probe));
    const auto top_ids = testing::Ids(g["last_prompt_top8"]["ids"]);
    const auto top_vals = testing::Floats(g["last_prompt_top8"]["values"]);
    std::vector<float> got;
    for (uint32_t id : top_ids) got.push_back(r.logits[id]);
    const auto e = testing::Compare(got.data(), top_vals);
    std::printf(
        "%s: last prompt logits, llama.cpp's top 8: max |ours - llama.cpp| = %.4f (max |logit| %.2f)\n",
        name.c_str(), e.max_abs, e.max_ref);
    // Observed 0.057 (code) and 0.09 (chat prompts tried) on logits of magnitude ~20.
    EXPECT_LE(e.max_abs, 0.25) << name;
    EXPECT_EQ(Argmax(r.logits), top_ids[0]) << name;

    KvCache cache = KvCache::ForModel(model_->config);
    const auto t0 = std::chrono::steady_clock::now();
    GenerateOptions go;
    go.max_new_tokens = static_cast<uint32_t>(want.size());
    go.stop_at_eos = false;  // llama.cpp's goldens run past <|im_end|>
    ASSERT_OK_AND_ASSIGN(auto gen, GenerateGreedy(*model_, prompt, &cache, go));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf(
        "%s: %zu prompt + %zu generated tokens in %.2f s (%.1f tokens/s generated, BLAS threads %d)\n",
        name.c_str(), prompt.size(), gen.size(), s, gen.size() / s, BlasThreads());
    size_t agree = 0;
    while (agree < gen.size() && agree < want.size() && gen[agree] == want[agree]) ++agree;
    EXPECT_EQ(gen, want) << name << ": first difference at step " << agree
                         << ", where llama.cpp's top-1 margin is "
                         << (agree < margins.size() ? margins[agree] : -1.0f);
    ASSERT_OK_AND_ASSIGN(auto text, model_->tokenizer->Decode(gen));
    if (agree == want.size()) {
      EXPECT_EQ(text, g["greedy_text"].get<std::string>());
    }
    std::printf("%s: %zu of %zu greedy tokens equal llama.cpp's: %s\n", name.c_str(), agree, want.size(),
                text.c_str());
  }
}

// Writes `m` as a Hugging Face Qwen2ForCausalLM folder (config.json + F32
// model.safetensors with the tensor names transformers uses).
void WriteQwen2Safetensors(const Model& m, const std::filesystem::path& dir) {
  const ModelConfig& c = m.config;
  std::map<std::string, std::pair<std::vector<uint64_t>, const std::vector<float>*>> tensors;
  auto dense = [](const std::unique_ptr<Linear>& l) {
    return &dynamic_cast<const DenseLinear&>(*l).weights();
  };
  tensors["model.embed_tokens.weight"] = {{c.vocab_size, c.hidden}, m.embed.get()};
  tensors["model.norm.weight"] = {{c.hidden}, &m.final_norm};
  tensors["lm_head.weight"] = {{c.vocab_size, c.hidden}, dense(m.lm_head)};
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = m.layers[l];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    tensors[p + "input_layernorm.weight"] = {{c.hidden}, &w.attn_norm};
    tensors[p + "post_attention_layernorm.weight"] = {{c.hidden}, &w.ffn_norm};
    tensors[p + "self_attn.q_proj.weight"] = {{c.q_dim(), c.hidden}, dense(w.wq)};
    tensors[p + "self_attn.k_proj.weight"] = {{c.kv_dim(), c.hidden}, dense(w.wk)};
    tensors[p + "self_attn.v_proj.weight"] = {{c.kv_dim(), c.hidden}, dense(w.wv)};
    tensors[p + "self_attn.o_proj.weight"] = {{c.hidden, c.q_dim()}, dense(w.wo)};
    tensors[p + "self_attn.q_proj.bias"] = {{c.q_dim()}, &w.bq};
    tensors[p + "self_attn.k_proj.bias"] = {{c.kv_dim()}, &w.bk};
    tensors[p + "self_attn.v_proj.bias"] = {{c.kv_dim()}, &w.bv};
    tensors[p + "mlp.gate_proj.weight"] = {{c.ffn_hidden, c.hidden}, dense(w.w_gate)};
    tensors[p + "mlp.up_proj.weight"] = {{c.ffn_hidden, c.hidden}, dense(w.w_up)};
    tensors[p + "mlp.down_proj.weight"] = {{c.hidden, c.ffn_hidden}, dense(w.w_down)};
  }
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const auto& [name, t] : tensors) {
    const uint64_t begin = data.size();
    data.append(reinterpret_cast<const char*>(t.second->data()), t.second->size() * sizeof(float));
    header[name] = {{"dtype", "F32"}, {"shape", t.first}, {"data_offsets", {begin, data.size()}}};
  }
  const std::string h = header.dump();
  const uint64_t hlen = h.size();
  std::filesystem::create_directories(dir);
  std::ofstream st(dir / "model.safetensors", std::ios::binary);
  st.write(reinterpret_cast<const char*>(&hlen), 8);
  st << h << data;
  const nlohmann::json config = {{"architectures", {"Qwen2ForCausalLM"}},
                                 {"model_type", "qwen2"},
                                 {"hidden_size", c.hidden},
                                 {"intermediate_size", c.ffn_hidden},
                                 {"num_hidden_layers", c.n_layers},
                                 {"num_attention_heads", c.n_heads},
                                 {"num_key_value_heads", c.n_kv_heads},
                                 {"vocab_size", c.vocab_size},
                                 {"rms_norm_eps", c.rms_eps},
                                 {"rope_theta", c.rope_theta},
                                 {"tie_word_embeddings", false},
                                 {"use_sliding_window", false},
                                 {"hidden_act", "silu"}};
  std::ofstream(dir / "config.json") << config.dump(1);
}

TEST(Qwen2Runtime, SafetensorsQwen2ForCausalLMLoadsTheSameModel) {
  Model m = TinyQwen2(5);
  m.config.rope_theta = 1e6f;
  m.config.rms_eps = 1e-6f;
  ASSERT_OK(m.Validate());
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kvstash_tiny_qwen2_" + std::to_string(::getpid()));
  WriteQwen2Safetensors(m, dir);
  auto loaded = LoadModel(dir.string());
  std::filesystem::remove_all(dir);
  ASSERT_OK(loaded.status());
  const Model& got = **loaded;
  EXPECT_EQ(got.config.arch, Architecture::kQwen2);
  EXPECT_EQ(got.config.rope_theta, 1e6f);
  EXPECT_FALSE(got.config.tied_embeddings);
  EXPECT_EQ(got.layers[2].bv, m.layers[2].bv);
  const std::vector<uint32_t> tokens = {1, 2, 3, 5, 8, 13, 21, 34};
  KvCache a = KvCache::ForModel(m.config), b = KvCache::ForModel(got.config);
  ASSERT_OK_AND_ASSIGN(PrefillResult ra, Prefill(m, tokens, &a));
  ASSERT_OK_AND_ASSIGN(PrefillResult rb, Prefill(got, tokens, &b));
  EXPECT_EQ(ra.logits, rb.logits);
  EXPECT_EQ(a.k, b.k);
  EXPECT_EQ(a.v, b.v);
}

}  // namespace
}  // namespace kvstash::model
