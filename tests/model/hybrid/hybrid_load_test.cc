// Loading hybrid checkpoints: config.json parsing and safetensors validation give
// clear errors for bad input; the fixture's config parses to the documented shape.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "model/formats/safetensors_reader.h"
#include "model/hybrid/hybrid_config.h"
#include "model/hybrid/hybrid_model.h"
#include "tests/model/hybrid/tiny_qwen35.h"

namespace kvstash::hybrid {
namespace {

using kvstash::testing::ReadText;
using kvstash::testing::TinyQwen35Dir;
using nlohmann::json;

json FixtureConfig() { return json::parse(ReadText(TinyQwen35Dir() + "/config.json")); }

struct Tensor {
  std::vector<uint64_t> shape;
  std::vector<float> data;
};

std::map<std::string, Tensor> FixtureTensors() {
  std::map<std::string, Tensor> out;
  auto f = model::SafetensorsFile::Open(TinyQwen35Dir() + "/model.safetensors");
  EXPECT_TRUE(f.ok());
  for (const auto& [name, info] : (*f)->tensors()) {
    out[name] = {info.shape, (*f)->ReadF32(name, info.shape).value()};
  }
  return out;
}

// Writes an F32 safetensors file (header JSON, then the data in name order).
void WriteSafetensors(const std::string& path, const std::map<std::string, Tensor>& tensors) {
  json h = json::object();
  uint64_t off = 0;
  for (const auto& [name, t] : tensors) {
    const uint64_t n = t.data.size() * 4;
    h[name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {off, off + n}}};
    off += n;
  }
  const std::string hs = h.dump();
  std::ofstream out(path, std::ios::binary);
  const uint64_t len = hs.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out.write(hs.data(), hs.size());
  for (const auto& [name, t] : tensors) {
    out.write(reinterpret_cast<const char*>(t.data.data()), t.data.size() * 4);
  }
}

class HybridLoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("kvstash-hybrid-load-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  Status LoadWith(const json& config, const std::map<std::string, Tensor>& tensors) {
    std::ofstream(dir_ / "config.json") << config.dump();
    WriteSafetensors((dir_ / "model.safetensors").string(), tensors);
    return HybridModel::Load(dir_.string()).status();
  }

  std::filesystem::path dir_;
};

TEST(HybridConfigTest, ParsesTheFixtureAndDefaults) {
  ASSERT_OK_AND_ASSIGN(HybridConfig c, ParseHybridConfig(FixtureConfig().dump()));
  EXPECT_EQ(c.num_layers(), 4u);
  EXPECT_EQ(c.num_attention_layers(), 1u);
  EXPECT_EQ(c.head_dim, 16u);
  EXPECT_EQ(c.rotary_dim, 8u);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.key_dim(), 32u);
  EXPECT_EQ(c.value_dim(), 32u);
  EXPECT_EQ(c.conv_dim(), 96u);

  // Without layer_types: full_attention_interval (default 4) decides; without
  // partial_rotary_factor: 0.25.
  json j = FixtureConfig();
  j.erase("layer_types");
  j["num_hidden_layers"] = 8;
  j["rope_parameters"].erase("partial_rotary_factor");
  ASSERT_OK_AND_ASSIGN(HybridConfig d, ParseHybridConfig(j.dump()));
  ASSERT_EQ(d.num_layers(), 8u);
  EXPECT_EQ(d.layer_types[3], LayerKind::kFullAttention);
  EXPECT_EQ(d.layer_types[7], LayerKind::kFullAttention);
  EXPECT_EQ(d.num_attention_layers(), 2u);
  EXPECT_EQ(d.rotary_dim, 4u);

  // A full Qwen3.5 config nests the text model.
  json nested = {{"model_type", "qwen3_5"}, {"text_config", FixtureConfig()}};
  ASSERT_OK_AND_ASSIGN(HybridConfig e, ParseHybridConfig(nested.dump()));
  EXPECT_EQ(e, c);
}

TEST(HybridConfigTest, BadConfigsGiveClearErrors) {
  EXPECT_STATUS(ParseHybridConfig("{not json"), kInvalidArgument);
  EXPECT_STATUS(ParseHybridConfig("[]"), kInvalidArgument);
  auto with = [](const char* key, json v) {
    json j = FixtureConfig();
    if (v.is_null()) {
      j.erase(key);
    } else {
      j[key] = v;
    }
    return ParseHybridConfig(j.dump()).status();
  };
  EXPECT_STATUS(with("hidden_size", nullptr), kInvalidArgument);
  EXPECT_STATUS(with("hidden_size", 0), kInvalidArgument);
  EXPECT_STATUS(with("hidden_size", "64"), kInvalidArgument);
  EXPECT_STATUS(with("layer_types", json::array({"linear_attention"})), kInvalidArgument);
  EXPECT_STATUS(with("layer_types", json::array({"linear_attention", "linear_attention", "sliding_attention",
                                                 "full_attention"})),
                kInvalidArgument);
  EXPECT_STATUS(with("num_key_value_heads", 3), kInvalidArgument);
  EXPECT_STATUS(with("linear_num_value_heads", 3), kInvalidArgument);
  EXPECT_STATUS(with("linear_conv_kernel_dim", 1), kInvalidArgument);
  EXPECT_STATUS(with("rms_norm_eps", -1.0), kInvalidArgument);
  EXPECT_STATUS(with("model_type", "qwen3_next"), kNotSupported);
  EXPECT_STATUS(with("model_type", "qwen3_5_moe_text"), kNotSupported);
  EXPECT_STATUS(with("hidden_act", "gelu"), kNotSupported);
  EXPECT_STATUS(with("attention_bias", true), kNotSupported);
  json j = FixtureConfig();
  j["rope_parameters"]["rope_type"] = "yarn";
  EXPECT_STATUS(ParseHybridConfig(j.dump()), kNotSupported);
  j = FixtureConfig();
  j["rope_parameters"]["partial_rotary_factor"] = 0.03;  // 16 * 0.03 -> 0 channels
  EXPECT_STATUS(ParseHybridConfig(j.dump()), kInvalidArgument);
}

TEST_F(HybridLoadTest, ARewrittenCheckpointLoadsAndBadOnesAreRefused) {
  const json cfg = FixtureConfig();
  const auto tensors = FixtureTensors();
  ASSERT_OK(LoadWith(cfg, tensors));  // the writer itself is sound

  auto t = tensors;
  t.erase("model.layers.1.linear_attn.A_log");
  Status s = LoadWith(cfg, t);
  EXPECT_TRUE(s.code() == Status::Code::kCorruption) << s.ToString();
  EXPECT_NE(s.ToString().find("model.layers.1.linear_attn.A_log"), std::string::npos);

  t = tensors;
  t["model.layers.0.linear_attn.conv1d.weight"].shape = {96, 4, 1};
  EXPECT_STATUS(LoadWith(cfg, t), kCorruption);

  t = tensors;
  t["model.layers.2.self_attn.q_proj.weight"].shape = {64, 128};
  EXPECT_STATUS(LoadWith(cfg, t), kCorruption);

  t = tensors;
  t["model.layers.0.linear_attn.in_proj_qkvz.weight"] = {{4}, {1, 2, 3, 4}};  // Qwen3-Next
  EXPECT_STATUS(LoadWith(cfg, t), kCorruption);

  t = tensors;
  t["mtp.fc.weight"] = {{4}, {1, 2, 3, 4}};  // Qwen3.5's MTP head is ignored
  EXPECT_OK(LoadWith(cfg, t));

  json other = cfg;
  other["layer_types"][0] = "full_attention";  // weights are for a linear layer
  EXPECT_STATUS(LoadWith(other, tensors), kCorruption);

  // Tied embeddings: no lm_head tensor needed.
  t = tensors;
  t.erase("lm_head.weight");
  EXPECT_STATUS(LoadWith(cfg, t), kCorruption);
  json tied = cfg;
  tied["tie_word_embeddings"] = true;
  EXPECT_OK(LoadWith(tied, t));

  // Truncated file, missing files.
  WriteSafetensors((dir_ / "model.safetensors").string(), tensors);
  std::filesystem::resize_file(dir_ / "model.safetensors",
                               std::filesystem::file_size(dir_ / "model.safetensors") - 10);
  EXPECT_FALSE(HybridModel::Load(dir_.string()).ok());
  std::filesystem::remove(dir_ / "model.safetensors");
  EXPECT_FALSE(HybridModel::Load(dir_.string()).ok());
  EXPECT_FALSE(HybridModel::Load((dir_ / "nowhere").string()).ok());
}

TEST_F(HybridLoadTest, FingerprintCoversConfigAndWeights) {
  const auto tensors = FixtureTensors();
  ASSERT_OK_AND_ASSIGN(HybridModel a, HybridModel::Load(TinyQwen35Dir()));
  std::ofstream(dir_ / "config.json") << ReadText(TinyQwen35Dir() + "/config.json");
  WriteSafetensors((dir_ / "model.safetensors").string(), tensors);
  ASSERT_OK_AND_ASSIGN(HybridModel b, HybridModel::Load(dir_.string()));
  EXPECT_NE(a.fingerprint(), b.fingerprint());  // same weights, other file bytes
  ASSERT_OK_AND_ASSIGN(HybridModel a2, HybridModel::Load(TinyQwen35Dir()));
  EXPECT_EQ(a.fingerprint(), a2.fingerprint());
}

}  // namespace
}  // namespace kvstash::hybrid
