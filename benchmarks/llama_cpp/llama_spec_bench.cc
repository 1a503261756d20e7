// kvstash_llama_spec_bench: spec's bits per scalar on llama.cpp's KV cache beside those
// on our runtime's KV, for the same real text (model/corpus/text_corpus.h), f16 and bf16.
//
// For every document of the calibration and the evaluation split (disjoint texts):
//   - our runtime (model/forward/prefill.h) prefills it: fp32 KV, rounded to f16 / bf16;
//   - llama.cpp (libllama of llama-cpp-python 0.3.36, flash attention off, type_k =
//     type_v = f16 or bf16, 1 thread) prefills the same token ids; its sequence state
//     is exported and parsed (engines/llama_cpp/llama_state.h);
//   - the deterministic spec predictor (model/predictor/spec_predictor.h) runs once,
//     or once per KV dtype for the ggml variant (it attends over a cache rounded to
//     the dtype, as llama.cpp does).
// Per dtype, two artifacts are calibrated on the calibration split, one on our
// runtime's KV and one on llama.cpp's, and the evaluation split's 256-token chunks are
// coded three ways: our KV with our artifact, llama.cpp's KV with our artifact,
// llama.cpp's KV with llama.cpp's artifact. Every payload is decoded and compared
// bit for bit. bits/scalar = 8 * payload bytes (headers included) / scalars; ratio =
// 16 / bits/scalar. Also reported: how far llama.cpp's KV is from ours (RMS and max
// of the difference, in units of the KV's own RMS).
// and how far the predictor is from each KV (prediction_error: RMS error and the
// fraction of values it predicts exactly, overall, per layer and for layer 0's K).
//
// Any GGUF both llama.cpp and our runtime load (e.g. Qwen2.5-Coder-0.5B with --predictor
// int: the ggml arithmetic refuses its q/k/v biases and K-quant blocks).
// Usage: kvstash_llama_spec_bench [--model GGUF] [--cal-tokens N] [--eval-tokens N]
//                                 [--doc-tokens N] [--predictor int|ggml]
//                                 [--predictor-group G] [--predictor-activation-bits B]
//                                 [--threads N] [--json FILE]
// --predictor int: our int8 predictor with group G and B-bit activations (W8A16-g128
// by default); ggml: the ggml-q4_1-<dtype> variant (SpecPredictorOptions::kGgml).
// --threads: predictor threads (results do not depend on it).
// Defaults: models/SmolLM2-135M-Instruct.Q4_1.gguf under the source tree, 4096, 4096,
// 512, int, 128, 16, 1. Prints the JSON document to stdout (and writes FILE when given).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "codec/spec/spec_calibration.h"
#include "codec/spec/spec_codec.h"
#include "common/kv_chunk_slice.h"
#include "engines/llama_cpp/llama_engine.h"
#include "engines/llama_cpp/llama_state.h"
#include "model/corpus/text_corpus.h"
#include "model/formats/model_loader.h"
#include "model/forward/kv_export.h"
#include "model/forward/prefill.h"
#include "model/predictor/spec_predictor.h"

namespace kvstash {
namespace {

constexpr uint32_t kChunk = 256;

struct Doc {
  std::vector<uint32_t> tokens;
  model::KvCache ours;            // fp32
  model::PredictorCache pred_f16, pred_bf16;  // the predictor for each KV dtype
  KvChunk llama_f16, llama_bf16;  // whole document, canonical layout
};

spec::PredictedChunk Slice(const model::PredictorCache& c, const KvLayout& L, uint32_t b, uint32_t e) {
  spec::PredictedChunk p;
  p.tokens = e - b;
  const size_t off = static_cast<size_t>(b) * L.n_kv_heads * L.head_dim;
  for (uint32_t l = 0; l < L.n_layers; ++l) {
    p.k.push_back(c.k[l].data() + off);
    p.v.push_back(c.v[l].data() + off);
  }
  return p;
}

float Value16(const uint8_t* p, DType dt) {
  const uint16_t b = static_cast<uint16_t>(p[0] | (p[1] << 8));
  return dt == DType::kF16 ? F16ToF32(b) : Bf16ToF32(b);
}

// The predictor of each KV dtype (the same object twice unless it is the ggml variant).
struct Predictors {
  const model::SpecPredictor* f16;
  const model::SpecPredictor* bf16;
  const model::SpecPredictor& Of(DType dt) const { return dt == DType::kF16 ? *f16 : *bf16; }
};

Result<std::vector<Doc>> RunDocs(const model::Model& m, const Predictors& predictors,
                                 llama_model* lm, const model::Corpus& corpus, uint32_t n_ctx) {
  std::vector<Doc> docs;
  for (const auto& cd : corpus.documents) {
    if (cd.tokens.size() < kChunk) continue;
    Doc d;
    d.tokens = cd.tokens;
    d.ours = model::KvCache::ForModel(m.config);
    model::PrefillOptions po;
    po.logits = model::PrefillOptions::Logits::kNone;
    KVSTASH_RETURN_IF_ERROR(model::Prefill(m, d.tokens, &d.ours, po).status());
    KVSTASH_RETURN_IF_ERROR(predictors.f16->Run(d.tokens, &d.pred_f16));
    if (predictors.bf16 == predictors.f16) {
      d.pred_bf16 = d.pred_f16;
    } else {
      KVSTASH_RETURN_IF_ERROR(predictors.bf16->Run(d.tokens, &d.pred_bf16));
    }
    const std::vector<llama_token> ids(d.tokens.begin(), d.tokens.end());
    for (DType dt : {DType::kF16, DType::kBF16}) {
      KVSTASH_ASSIGN_OR_RETURN(auto params, llama_cpp::ContextParams(n_ctx, 1, false, dt));
      KVSTASH_ASSIGN_OR_RETURN(auto layout, llama_cpp::StateLayoutOf(lm, params));
      KVSTASH_ASSIGN_OR_RETURN(auto ctx, llama_cpp::NewContext(lm, params));
      KVSTASH_RETURN_IF_ERROR(llama_cpp::Evaluate(ctx.get(), ids, 0).status());
      KVSTASH_ASSIGN_OR_RETURN(auto bytes, llama_cpp::ExportSeqState(ctx.get()));
      KVSTASH_ASSIGN_OR_RETURN(auto state, llama_cpp::ParseSeqState(bytes, layout));
      (dt == DType::kF16 ? d.llama_f16 : d.llama_bf16) = std::move(state.kv);
    }
    docs.push_back(std::move(d));
  }
  return docs;
}

struct ChunkSet {
  std::vector<KvChunk> kv;
  std::vector<spec::PredictedChunk> pred;
};

Result<ChunkSet> Chunks(const std::vector<Doc>& docs, const KvLayout& L, bool llama) {
  ChunkSet s;
  for (const Doc& d : docs) {
    for (uint32_t b = 0; b + kChunk <= d.tokens.size(); b += kChunk) {
      if (llama) {
        const KvChunk& whole = L.dtype == DType::kF16 ? d.llama_f16 : d.llama_bf16;
        KVSTASH_ASSIGN_OR_RETURN(KvChunk c, SliceTokens(whole, b, kChunk));
        s.kv.push_back(std::move(c));
      } else {
        KVSTASH_ASSIGN_OR_RETURN(KvChunk c, model::ToKvChunk(d.ours, b, b + kChunk, L.dtype));
        s.kv.push_back(std::move(c));
      }
      s.pred.push_back(Slice(L.dtype == DType::kF16 ? d.pred_f16 : d.pred_bf16, L, b, b + kChunk));
    }
  }
  return s;
}

Result<spec::SpecArtifact> Calibrate(const KvLayout& L, const ChunkSet& cal,
                                     const model::SpecPredictor& predictor) {
  spec::CalibrationOptions co;
  co.contexts.dtype = L.dtype;
  co.predictor_digest = predictor.Digest();
  co.predictor_variant = predictor.options().VariantName();
  co.threads = 1;
  KVSTASH_ASSIGN_OR_RETURN(auto cb, spec::SpecCalibrator::Create(L, co));
  for (size_t i = 0; i < cal.kv.size(); ++i) KVSTASH_RETURN_IF_ERROR(cb.AddVariance(cal.kv[i].view(), cal.pred[i]));
  KVSTASH_RETURN_IF_ERROR(cb.FreezeSigma());
  for (size_t i = 0; i < cal.kv.size(); ++i) KVSTASH_RETURN_IF_ERROR(cb.AddHistogram(cal.kv[i].view(), cal.pred[i]));
  return cb.Build();
}

// Codes every chunk, verifies the round trip, returns the row.
Result<nlohmann::json> Code(const std::string& name, const spec::SpecArtifact& art, const ChunkSet& eval) {
  uint64_t bytes = 0, scalars = 0, raw = 0;
  const Digest256 fp{};
  const Digest256 art_digest = art.Digest();  // once, as PrefixCodec holds it
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < eval.kv.size(); ++i) {
    KVSTASH_ASSIGN_OR_RETURN(auto payload, spec::EncodeSpecPayload(art, art_digest, eval.kv[i].view(), eval.pred[i], fp, 0));
    KVSTASH_ASSIGN_OR_RETURN(KvChunk back, spec::DecodeSpecPayload(art, art_digest, payload, eval.pred[i], fp));
    if (back.data != eval.kv[i].data) return Status::Internal(name + ": chunk " + std::to_string(i) + " not lossless");
    bytes += payload.size();
    scalars += eval.kv[i].layout.ScalarsPerToken() * eval.kv[i].tokens;
    raw += eval.kv[i].data.size();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double bps = 8.0 * static_cast<double>(bytes) / static_cast<double>(scalars);
  return nlohmann::json{{"row", name}, {"dtype", DTypeName(art.layout.dtype)}, {"chunks", eval.kv.size()},
                        {"raw_bytes", raw}, {"stored_bytes", bytes}, {"bits_per_scalar", bps},
                        {"ratio", 16.0 / bps}, {"lossless", true}, {"encode_decode_s", s}};
}

// RMS and max |llama - ours| over the evaluation chunks, in units of RMS(ours).
nlohmann::json Distance(const ChunkSet& ours, const ChunkSet& llama) {
  double diff2 = 0, ref2 = 0, maxd = 0;
  uint64_t n = 0, equal = 0;
  for (size_t c = 0; c < ours.kv.size(); ++c) {
    const KvChunk& a = ours.kv[c];
    const KvChunk& b = llama.kv[c];
    for (size_t i = 0; i + 1 < a.data.size(); i += 2) {
      const double x = Value16(&a.data[i], a.layout.dtype), y = Value16(&b.data[i], b.layout.dtype);
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      diff2 += (x - y) * (x - y);
      ref2 += x * x;
      maxd = std::max(maxd, std::fabs(x - y));
      equal += a.data[i] == b.data[i] && a.data[i + 1] == b.data[i + 1];
      ++n;
    }
  }
  const double rms = std::sqrt(ref2 / std::max<uint64_t>(n, 1));
  return {{"rel_rms_diff", std::sqrt(diff2 / std::max<uint64_t>(n, 1)) / rms},
          {"max_abs_diff_over_rms", maxd / rms}, {"identical_fraction", double(equal) / std::max<uint64_t>(n, 1)}};
}

// How far the predictor's K/V are from a KV: RMS of (kv - prediction) in units of
// RMS(kv) overall and per layer for K and V, and the fraction of values whose prediction
// rounded to the dtype is exact, overall and for layer 0's K (where only the projection
// arithmetic matters).
nlohmann::json PredictionError(const ChunkSet& set) {
  double err2 = 0, ref2 = 0;
  uint64_t n = 0, equal = 0, n0 = 0, equal0 = 0;
  const uint32_t layers = set.kv.empty() ? 0 : set.kv[0].layout.n_layers;
  std::vector<double> lerr2(2 * layers, 0.0), lref2(2 * layers, 0.0);
  for (size_t c = 0; c < set.kv.size(); ++c) {
    const KvChunkView kv = set.kv[c].view();
    const DType dt = kv.layout.dtype;
    for (uint32_t l = 0; l < kv.layout.n_layers; ++l) {
      for (int which = 0; which < 2; ++which) {
        const std::span<const uint8_t> bytes = which == 0 ? kv.K(l) : kv.V(l);
        const float* pred = which == 0 ? set.pred[c].k[l] : set.pred[c].v[l];
        for (size_t i = 0; i * 2 < bytes.size(); ++i) {
          const double x = Value16(&bytes[2 * i], dt);
          if (!std::isfinite(x)) continue;
          const float rounded = dt == DType::kF16 ? F16ToF32(F32ToF16(pred[i])) : Bf16ToF32(F32ToBf16(pred[i]));
          err2 += (x - pred[i]) * (x - pred[i]);
          ref2 += x * x;
          lerr2[2 * l + which] += (x - pred[i]) * (x - pred[i]);
          lref2[2 * l + which] += x * x;
          const bool same = rounded == static_cast<float>(x);
          equal += same;
          ++n;
          if (l == 0 && which == 0) {
            equal0 += same;
            ++n0;
          }
        }
      }
    }
  }
  nlohmann::json k_err = nlohmann::json::array(), v_err = nlohmann::json::array();
  for (uint32_t l = 0; l < layers; ++l) {
    k_err.push_back(std::round(1e4 * std::sqrt(lerr2[2 * l] / std::max(lref2[2 * l], 1e-30))) / 1e4);
    v_err.push_back(std::round(1e4 * std::sqrt(lerr2[2 * l + 1] / std::max(lref2[2 * l + 1], 1e-30))) / 1e4);
  }
  return {{"rel_rms_err", std::sqrt(err2 / std::max(ref2, 1e-30))},
          {"k_rel_rms_err_per_layer", k_err}, {"v_rel_rms_err_per_layer", v_err},
          {"identical_fraction", double(equal) / std::max<uint64_t>(n, 1)},
          {"layer0_k_identical_fraction", double(equal0) / std::max<uint64_t>(n0, 1)}};
}

int Main(int argc, char** argv) {
  std::string model_path = std::string(KVSTASH_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  uint64_t cal_tokens = 4096, eval_tokens = 4096;
  uint32_t doc_tokens = 512;
  std::string json_path, variant = "int";
  model::SpecPredictorOptions po;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--model") model_path = v;
    else if (a == "--cal-tokens") cal_tokens = std::stoull(v);
    else if (a == "--eval-tokens") eval_tokens = std::stoull(v);
    else if (a == "--doc-tokens") doc_tokens = static_cast<uint32_t>(std::stoul(v));
    else if (a == "--json") json_path = v;
    else if (a == "--predictor") variant = v;
    else if (a == "--predictor-group") po.group = std::stoi(v);
    else if (a == "--predictor-activation-bits") po.activation_bits = std::stoi(v);
    else if (a == "--threads") po.threads = std::stoi(v);
    else {
      std::cerr << "unknown flag " << a << "\n";
      return 2;
    }
  }
  if (argc % 2 == 0 || (variant != "int" && variant != "ggml")) {
    std::cerr << "usage: kvstash_llama_spec_bench [--model GGUF] [--cal-tokens N] [--eval-tokens N] "
                 "[--doc-tokens N] [--predictor int|ggml] [--predictor-group G] "
                 "[--predictor-activation-bits B] [--threads N] [--json FILE]\n";
    return 2;
  }
  auto fail = [](const Status& s) {
    std::cerr << "kvstash_llama_spec_bench: " << s.ToString() << "\n";
    return 1;
  };
  llama_cpp::InitLlamaBackend();
  auto m = model::LoadModel(model_path);
  if (!m.ok()) return fail(m.status());
  if (!(*m)->tokenizer) return fail(Status::InvalidArgument("model has no tokenizer"));
  if (variant == "ggml") po.arithmetic = model::SpecPredictorOptions::Arithmetic::kGgml;
  auto predictor = model::SpecPredictor::Create(**m, po);
  if (!predictor.ok()) return fail(predictor.status());
  Predictors predictors{predictor->get(), predictor->get()};
  model::SpecPredictorOptions po_bf16 = po;
  po_bf16.kv_dtype = DType::kBF16;
  Result<std::unique_ptr<model::SpecPredictor>> predictor_bf16 = std::unique_ptr<model::SpecPredictor>();
  if (variant == "ggml") {
    predictor_bf16 = model::SpecPredictor::Create(**m, po_bf16);
    if (!predictor_bf16.ok()) return fail(predictor_bf16.status());
    predictors.bf16 = predictor_bf16->get();
  }
  auto lm = llama_cpp::LoadModel(model_path);
  if (!lm.ok()) return fail(lm.status());
  auto cal_corpus = model::LoadCorpus(*(*m)->tokenizer, model::CorpusSplit::kCalibration, doc_tokens, cal_tokens);
  auto eval_corpus = model::LoadCorpus(*(*m)->tokenizer, model::CorpusSplit::kEvaluation, doc_tokens, eval_tokens);
  if (!cal_corpus.ok()) return fail(cal_corpus.status());
  if (!eval_corpus.ok()) return fail(eval_corpus.status());
  double load_start[3] = {0, 0, 0};
  getloadavg(load_start, 3);  // other work on the machine changes the times, not the sizes
  const auto t0 = std::chrono::steady_clock::now();
  auto cal_docs = RunDocs(**m, predictors, lm->get(), *cal_corpus, doc_tokens);
  if (!cal_docs.ok()) return fail(cal_docs.status());
  auto eval_docs = RunDocs(**m, predictors, lm->get(), *eval_corpus, doc_tokens);
  if (!eval_docs.ok()) return fail(eval_docs.status());
  const double run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  const auto& mc = (*m)->config;
  nlohmann::json out;
  out["setup"] = {
      {"model", model_path},
      {"predictor", variant == "ggml" ? po.VariantName() + ", " + po_bf16.VariantName() : po.VariantName()},
      {"chunk_tokens", kChunk},
      {"doc_tokens", doc_tokens},
      {"llama_cpp", "llama-cpp-python 0.3.36, flash attention off, 1 thread"},
      {"calibration_files", model::CorpusFiles(model::CorpusSplit::kCalibration)},
      {"evaluation_files", model::CorpusFiles(model::CorpusSplit::kEvaluation)},
      {"prefill_and_predictor_s", run_s},
      {"loadavg_start", {load_start[0], load_start[1], load_start[2]}}};
  out["rows"] = nlohmann::json::array();
  for (DType dt : {DType::kF16, DType::kBF16}) {
    const KvLayout L{mc.n_layers, mc.n_kv_heads, mc.head_dim, dt};
    auto cal_ours = Chunks(*cal_docs, L, false), cal_llama = Chunks(*cal_docs, L, true);
    auto ev_ours = Chunks(*eval_docs, L, false), ev_llama = Chunks(*eval_docs, L, true);
    if (!cal_ours.ok() || !cal_llama.ok() || !ev_ours.ok() || !ev_llama.ok()) {
      return fail(Status::Internal("chunking failed"));
    }
    auto art_ours = Calibrate(L, *cal_ours, predictors.Of(dt));
    if (!art_ours.ok()) return fail(art_ours.status());
    auto art_llama = Calibrate(L, *cal_llama, predictors.Of(dt));
    if (!art_llama.ok()) return fail(art_llama.status());
    for (auto [name, art, set] : {std::tuple{"our runtime's KV, artifact from our KV", &*art_ours, &*ev_ours},
                                  std::tuple{"llama.cpp's KV, artifact from our KV", &*art_ours, &*ev_llama},
                                  std::tuple{"llama.cpp's KV, artifact from llama.cpp's KV", &*art_llama, &*ev_llama}}) {
      auto row = Code(name, *art, *set);
      if (!row.ok()) return fail(row.status());
      (*row)["evaluation_tokens"] = set->kv.size() * kChunk;
      (*row)["calibration_tokens"] = cal_ours->kv.size() * kChunk;
      out["rows"].push_back(*row);
      std::fprintf(stderr, "%-5s %-46s %.3f bits/scalar (%.2fx)\n", std::string(DTypeName(dt)).c_str(), name,
                   (*row)["bits_per_scalar"].get<double>(), (*row)["ratio"].get<double>());
    }
    out["kv_distance"][std::string(DTypeName(dt))] = Distance(*ev_ours, *ev_llama);
    out["prediction_error"][std::string(DTypeName(dt))] = {{"our runtime's KV", PredictionError(*ev_ours)},
                                                           {"llama.cpp's KV", PredictionError(*ev_llama)}};
    std::fprintf(stderr, "%-5s prediction error %s\n", std::string(DTypeName(dt)).c_str(),
                 out["prediction_error"][std::string(DTypeName(dt))].dump().c_str());
  }
  double load_end[3] = {0, 0, 0};
  getloadavg(load_end, 3);
  out["setup"]["loadavg_end"] = {load_end[0], load_end[1], load_end[2]};
  const std::string text = out.dump(2);
  std::cout << text << "\n";
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << text << "\n";
    if (!f) return fail(Status::IOError("cannot write " + json_path));
  }
  return 0;
}

}  // namespace
}  // namespace kvstash

int main(int argc, char** argv) { return kvstash::Main(argc, argv); }
