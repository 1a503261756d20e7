// kvstash.ReferenceModel: the project's fp32 reference runtime (model/) from Python, to
// produce exact KV caches for tests and benchmarks, and to calibrate spec artifacts on
// them (codec/spec/spec_calibration.h, the two passes `kvstash calibrate spec` runs).
//
// Thread-safety: immutable after construction; methods release the GIL and may run
// concurrently (each prefill uses its own cache).
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <fstream>
#include <memory>

#include "codec/spec/spec_calibration.h"
#include "common/thread_annotations.h"
#include "model/forward/kv_export.h"
#include "model/formats/model_loader.h"
#include "model/forward/prefill.h"
#include "model/predictor/spec_predictor.h"
#include "native.h"

namespace kvstash::py {
namespace {

class ReferenceModel {
 public:
  static std::unique_ptr<ReferenceModel> Load(const std::string& path, int threads) {
    auto r = std::make_unique<ReferenceModel>();
    r->threads_ = threads;
    Result<std::unique_ptr<model::Model>> m = Status::Internal("unset");
    {
      nb::gil_scoped_release release;
      m = model::LoadModel(path);
    }
    r->model_ = ValueOrThrow(std::move(m));
    return r;
  }

  KvLayout layout(DType dtype) const {
    const auto& c = model_->config;
    return KvLayout{c.n_layers, c.n_kv_heads, c.head_dim, dtype};
  }

  std::vector<uint32_t> Tokenize(const std::string& text) const {
    if (!model_->tokenizer) ThrowStatus(Status::NotSupported("the model file has no tokenizer"));
    return ValueOrThrow(model_->tokenizer->Encode(text));
  }

  // Exact KV of `tokens` (from position 0) as one canonical chunk of `dtype`.
  Result<KvChunk> PrefillKv(const std::vector<uint32_t>& tokens, DType dtype) const {
    if (tokens.empty()) return Status::InvalidArgument("prefill_kv: no tokens");
    model::KvCache cache = model::KvCache::ForModel(model_->config);
    model::PrefillOptions po;
    po.logits = model::PrefillOptions::Logits::kNone;
    KVSTASH_RETURN_IF_ERROR(model::Prefill(*model_, tokens, &cache, po).status());
    return model::ToKvChunk(cache, 0, static_cast<uint32_t>(tokens.size()), dtype);
  }

  // Calibrates a spec artifact for this model's predictor on the full chunk_tokens
  // chunks of `docs`; returns its serialized bytes.
  Result<std::vector<uint8_t>> CalibrateSpec(const std::vector<std::vector<uint32_t>>& docs,
                                             uint32_t chunk_tokens, DType dtype, int build_threads) const {
    if (chunk_tokens == 0) return Status::InvalidArgument("calibrate_spec: chunk_tokens 0");
    KVSTASH_ASSIGN_OR_RETURN(const model::SpecPredictor* predictor, Predictor());
    const KvLayout L = layout(dtype);
    spec::CalibrationOptions co;
    co.contexts.dtype = dtype;
    co.predictor_digest = predictor->Digest();
    co.predictor_variant = predictor->options().VariantName();
    co.threads = build_threads;  // the artifact does not depend on it
    KVSTASH_ASSIGN_OR_RETURN(auto cal, spec::SpecCalibrator::Create(L, co));
    struct Doc {
      model::KvCache exact;
      model::PredictorCache pred;
      uint32_t tokens;
    };
    std::vector<Doc> ds;
    for (const auto& t : docs) {
      if (t.size() < chunk_tokens) continue;
      Doc d{model::KvCache::ForModel(model_->config), {}, static_cast<uint32_t>(t.size())};
      model::PrefillOptions po;
      po.logits = model::PrefillOptions::Logits::kNone;
      KVSTASH_RETURN_IF_ERROR(model::Prefill(*model_, t, &d.exact, po).status());
      KVSTASH_RETURN_IF_ERROR(predictor->Run(t, &d.pred));
      ds.push_back(std::move(d));
    }
    if (ds.empty()) {
      return Status::InvalidArgument("calibrate_spec: no document has a full chunk of " +
                                     std::to_string(chunk_tokens) + " tokens");
    }
    for (int pass = 0; pass < 2; ++pass) {
      for (const Doc& d : ds) {
        for (uint32_t b = 0; b + chunk_tokens <= d.tokens; b += chunk_tokens) {
          KVSTASH_ASSIGN_OR_RETURN(KvChunk chunk, model::ToKvChunk(d.exact, b, b + chunk_tokens, dtype));
          spec::PredictedChunk p;
          p.tokens = chunk_tokens;
          const size_t off = static_cast<size_t>(b) * L.n_kv_heads * L.head_dim;
          for (uint32_t l = 0; l < L.n_layers; ++l) {
            p.k.push_back(d.pred.k[l].data() + off);
            p.v.push_back(d.pred.v[l].data() + off);
          }
          KVSTASH_RETURN_IF_ERROR(pass == 0 ? cal.AddVariance(chunk.view(), p)
                                            : cal.AddHistogram(chunk.view(), p));
        }
      }
      if (pass == 0) KVSTASH_RETURN_IF_ERROR(cal.FreezeSigma());
    }
    KVSTASH_ASSIGN_OR_RETURN(auto artifact, cal.Build());
    return artifact.Serialize();
  }

  const model::Model& model() const { return *model_; }

 private:
  // The spec predictor of the model (default options, threads_), built once.
  Result<const model::SpecPredictor*> Predictor() const {
    MutexLock lock(mu_);
    if (!predictor_) {
      model::SpecPredictorOptions popt;
      popt.threads = threads_;
      KVSTASH_ASSIGN_OR_RETURN(predictor_, model::SpecPredictor::Create(*model_, popt));
    }
    return predictor_.get();
  }

  std::unique_ptr<model::Model> model_;
  int threads_ = 1;
  mutable Mutex mu_;
  mutable std::unique_ptr<model::SpecPredictor> predictor_ KVSTASH_GUARDED_BY(mu_);
};

}  // namespace

void BindReferenceModel(nb::module_& m) {
  nb::class_<ReferenceModel>(m, "ReferenceModel",
                             "The project's fp32 reference runtime (model/): exact KV caches of "
                             "token prefixes, and spec calibration on them.")
      .def_static("load", &ReferenceModel::Load, nb::arg("path"), nb::arg("threads") = 1,
                  "Loads a GGUF, safetensors or llama2.c model. Raises StorageIOError for a missing "
                  "or unreadable file, CorruptionError or InvalidArgumentError for a bad one.")
      .def(
          "layout",
          [](const ReferenceModel& r, const std::string& dtype) {
            return r.layout(ValueOrThrow(ParseDType(dtype)));
          },
          nb::arg("dtype") = "bf16", "The KV layout per token in `dtype`.")
      .def_prop_ro("vocab_size", [](const ReferenceModel& r) { return r.model().config.vocab_size; })
      .def("tokenize", &ReferenceModel::Tokenize, nb::arg("text"),
           "Token ids of `text` with the model file's tokenizer (no BOS added unless the "
           "tokenizer's own settings say so).")
      .def(
          "prefill_kv",
          [](const ReferenceModel& r, nb::handle tokens, const std::string& dtype) {
            const std::vector<uint32_t> t = ToTokens(tokens);
            const DType dt = ValueOrThrow(ParseDType(dtype));
            Result<KvChunk> c = Status::Internal("unset");
            {
              nb::gil_scoped_release release;
              c = r.PrefillKv(t, dt);
            }
            return KvChunkToArray(ValueOrThrow(std::move(c)));
          },
          nb::arg("tokens"), nb::arg("dtype") = "bf16",
          "Exact KV cache of `tokens` (prefill from position 0, fp32, rounded to nearest even "
          "into `dtype`) as a NumPy array [n_layers, 2, len(tokens), n_kv_heads, head_dim] "
          "(uint16 bit patterns for bf16, float16 for f16; also f32, and fp8_e4m3 as uint8). "
          "Deterministic for given tokens (any thread count), but the KV of a prefix computed "
          "inside a longer prompt may differ in the lowest bits (the GEMMs' shapes differ; "
          "model/forward/prefill.h). Raises InvalidArgumentError for no tokens or an "
          "out-of-vocabulary id.")
      .def(
          "calibrate_spec",
          [](const ReferenceModel& r, nb::handle docs, const std::string& out_path, uint32_t chunk_tokens,
             const std::string& dtype, int build_threads) {
            std::vector<std::vector<uint32_t>> d;
            for (nb::handle doc : nb::borrow<nb::sequence>(docs)) d.push_back(ToTokens(doc));
            const DType dt = ValueOrThrow(ParseDType(dtype));
            Result<std::vector<uint8_t>> bytes = Status::Internal("unset");
            Status written;
            {
              nb::gil_scoped_release release;
              bytes = r.CalibrateSpec(d, chunk_tokens, dt, build_threads);
              if (bytes.ok()) {
                std::ofstream out(out_path, std::ios::binary | std::ios::trunc);
                out.write(reinterpret_cast<const char*>(bytes->data()),
                          static_cast<std::streamsize>(bytes->size()));
                if (!out) written = Status::IOError("cannot write " + out_path);
              }
            }
            ThrowIfError(bytes.status());
            ThrowIfError(written);
            return bytes->size();
          },
          nb::arg("docs"), nb::arg("out_path"), nb::arg("chunk_tokens") = 256, nb::arg("dtype") = "bf16",
          nb::arg("build_threads") = 0,
          "Calibrates a spec artifact for this model's predictor (W8A16-g128) on the full "
          "chunk_tokens-token chunks of each token list in `docs` and writes it to out_path "
          "(.kvsa; PrefixCodec.spec loads it). build_threads: threads fitting the tables (0: all "
          "cores; the artifact does not depend on it). Returns its size in bytes.");
}

}  // namespace kvstash::py
