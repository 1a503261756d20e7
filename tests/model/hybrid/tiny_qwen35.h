// The committed tiny random-weight Qwen3.5 fixture (tests/model/hybrid/data/tiny_qwen35/,
// made by tools/hybrid_goldens.py from transformers) and helpers shared by the hybrid
// runtime tests.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "model/hybrid/hybrid_model.h"
#include "tests/support/test_util.h"

namespace kvstash::testing {

inline std::string TinyQwen35Dir() { return SourceDir() + "/tests/model/hybrid/data/tiny_qwen35"; }

// The fixture model, loaded once per test fixture. Errors: HybridModel::Load's.
inline Result<std::unique_ptr<hybrid::HybridModel>> LoadTinyQwen35() {
  KVSTASH_ASSIGN_OR_RETURN(hybrid::HybridModel m, hybrid::HybridModel::Load(TinyQwen35Dir()));
  return std::make_unique<hybrid::HybridModel>(std::move(m));
}

inline std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// goldens.json: the token sequences and transformers' greedy decode.
struct TinyQwen35Tokens {
  std::vector<uint32_t> prefix, continuation, greedy_after_prefix;
};

inline TinyQwen35Tokens LoadTinyQwen35Tokens() {
  const auto j = nlohmann::json::parse(ReadText(TinyQwen35Dir() + "/goldens.json"));
  return {j["prefix_tokens"].get<std::vector<uint32_t>>(),
          j["continuation_tokens"].get<std::vector<uint32_t>>(),
          j["greedy_after_prefix"].get<std::vector<uint32_t>>()};
}

inline uint32_t Argmax(std::span<const float> v) {
  uint32_t best = 0;
  for (uint32_t i = 1; i < v.size(); ++i) {
    if (v[i] > v[best]) best = i;
  }
  return best;
}

// Greedy decode of n tokens from `state`, starting with the argmax of `last_logits`.
inline std::vector<uint32_t> Greedy(const hybrid::HybridModel& m, hybrid::HybridState state,
                                    std::vector<float> last_logits, int n) {
  std::vector<uint32_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(Argmax(last_logits));
    if (!m.Eval(out.back(), &state, last_logits).ok()) return {};
  }
  return out;
}

}  // namespace kvstash::testing
