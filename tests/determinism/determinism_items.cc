#include "tests/determinism/determinism_items.h"

#include <cinttypes>
#include <cstdio>

#include "model/corpus/text_corpus.h"

namespace kvstash::determinism {

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016" PRIx64, v);
  return buf;
}

std::string Error(const Status& s) { return "error: " + s.ToString(); }

KvLayout Layout(const model::ModelConfig& c) { return KvLayout{c.n_layers, c.n_kv_heads, c.head_dim, DType::kBF16}; }

Result<std::vector<std::vector<uint32_t>>> Prompts(const model::Model& m) {
  KVSTASH_ASSIGN_OR_RETURN(model::Corpus c, model::LoadCorpus(*m.tokenizer, model::CorpusSplit::kEvaluation,
                                                            kPromptTokens, kPrompts * kPromptTokens));
  std::vector<std::vector<uint32_t>> out;
  for (const auto& d : c.documents) {
    if (d.tokens.size() == kPromptTokens) out.push_back(d.tokens);
    if (out.size() == kPrompts) break;
  }
  if (out.size() != kPrompts) return Status::NotFound("determinism: fewer than 2 evaluation documents of 64 tokens");
  return out;
}

std::string PromptName(size_t i) { return "eval" + std::to_string(i); }

std::string Fixture(const Inputs& in, const std::string& name) { return in.fixtures_dir + "/" + name; }

}  // namespace kvstash::determinism
