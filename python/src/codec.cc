// Bindings of the client-side codec layer (client/include/kvstash/prefix_codec.h):
// PrefixCodecOptions and PrefixCodec (raw, spec, dckv) in their engine form
// (EncodeKvChunks / RestoreKvChunks on canonical chunks).
//
// Input chunks: any C-contiguous CPU array of shape [n_layers, 2, T, n_kv_heads,
// head_dim] via DLPack or the buffer protocol (NumPy, torch), read in place; its element type must be
// the stored dtype's (bf16: uint16/int16/bfloat16, f16: float16/uint16). A
// non-contiguous one is first copied by its framework (torch .contiguous(),
// numpy.ascontiguousarray). The bytes are then copied once into the KvChunk that
// EncodeKvChunks takes (it owns its chunks). Payloads to restore are read in place
// (BufferViews). Outputs of restore_chunks own the decoded chunk's memory (no copy);
// those of restore_chunk_views for a raw codec are read-only views of the payloads.
//
// Heavy state: spec() and dckv() share the model, predictor, spec artifact and dckv
// codec of the same files across codecs (SharedState below; PrefixCodec.shared_state()).
//
// Thread-safety: a PrefixCodec is immutable; every method releases the GIL while it
// codes, so threads may share one codec. The shared-state cache has its own mutex.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <sys/stat.h>

#include <algorithm>
#include <compare>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <utility>

#include "common/file_bytes.h"
#include "common/thread_annotations.h"
#include "kvstash/prefix_codec.h"
#include "model/forward/model.h"
#include "model/formats/model_loader.h"
#include "native.h"
#include "py_codec.h"

namespace kvstash::py {
namespace {

// Options plus whether kind was given (the factories fill it in when it was not).
struct PyCodecOptions {
  PrefixCodecOptions o;
  bool kind_set = false;
};

PrefixCodecOptions OptionsFor(const PyCodecOptions& po, PrefixCodecKind kind) {
  PrefixCodecOptions o = po.o;
  if (!po.kind_set) o.kind = kind;
  return o;
}

using ChunkArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;

// A KvChunk sized for array `a` (data not yet copied) after checking its shape and
// element type against the stored layout.
KvChunk CheckedChunk(const ChunkArray& a, const KvLayout& L, uint32_t expect_tokens, size_t index) {
  const std::string where = "chunks[" + std::to_string(index) + "]";
  if (a.ndim() != 5 || a.shape(0) != L.n_layers || a.shape(1) != 2 || a.shape(3) != L.n_kv_heads ||
      a.shape(4) != L.head_dim) {
    std::string got = "[";
    for (size_t i = 0; i < a.ndim(); ++i) got += (i ? ", " : "") + std::to_string(a.shape(i));
    ThrowInvalid(where + ": expected shape [" + std::to_string(L.n_layers) + ", 2, T, " +
                 std::to_string(L.n_kv_heads) + ", " + std::to_string(L.head_dim) + "], got " + got + "]");
  }
  if (a.shape(2) != expect_tokens) {
    ThrowInvalid(where + ": has " + std::to_string(a.shape(2)) + " tokens, its chain chunk " +
                 std::to_string(expect_tokens));
  }
  const nb::dlpack::dtype dt = a.dtype();
  const bool is16 = dt.bits == 16 && dt.lanes == 1;
  const auto code = static_cast<nb::dlpack::dtype_code>(dt.code);
  bool ok = false;
  if (L.dtype == DType::kBF16) {
    ok = is16 && (code == nb::dlpack::dtype_code::UInt || code == nb::dlpack::dtype_code::Int ||
                  code == nb::dlpack::dtype_code::Bfloat);
  } else if (L.dtype == DType::kF16) {
    ok = is16 && (code == nb::dlpack::dtype_code::Float || code == nb::dlpack::dtype_code::UInt);
  }
  if (!ok) {
    ThrowInvalid(where + ": element type does not match the stored dtype " +
                 std::string(DTypeName(L.dtype)) +
                 " (bf16: uint16 bit patterns or torch.bfloat16; f16: float16)");
  }
  KvChunk c;
  c.layout = L;
  c.tokens = expect_tokens;
  c.data.resize(L.DataBytes(expect_tokens));
  return c;
}

// Imports chunks[index] in place when it is a C-contiguous CPU array; otherwise asks
// its framework for a contiguous copy (torch .contiguous(), numpy.ascontiguousarray).
ChunkArray ImportChunk(nb::handle h, size_t index) {
  const std::string where = "chunks[" + std::to_string(index) + "]";
  ChunkArray a;
  if (nb::try_cast(h, a)) return a;
  if (nb::hasattr(h, "device") && nb::hasattr(h, "is_cuda") && nb::cast<bool>(h.attr("is_cuda"))) {
    ThrowInvalid(where + ": a CUDA tensor; pass CPU memory (tensor.cpu())");
  }
  nb::object contiguous;
  try {
    contiguous = nb::hasattr(h, "contiguous") ? h.attr("contiguous")()
                                              : nb::module_::import_("numpy").attr("ascontiguousarray")(h);
  } catch (nb::python_error&) {
    ThrowInvalid(where + ": not an array (expected NumPy or a DLPack tensor)");
  }
  if (nb::try_cast(contiguous, a)) return a;
  ThrowInvalid(where + ": expected a CPU array (NumPy, torch or any DLPack tensor), got " +
               std::string(nb::type_name(h.type()).c_str()));
}

// restore_chunks: decoded arrays that own their memory, payloads read in place.
nb::list RestoreArrays(const PyCodec& c, nb::handle tokens, const std::vector<ChunkKey>& keys,
                       nb::handle payloads) {
  const std::vector<uint32_t> t = ToTokens(tokens);
  const BufferViews p(payloads, "payloads");
  Result<std::vector<KvChunk>> r = Status::Internal("unset");
  {
    nb::gil_scoped_release release;
    r = c.codec->RestoreKvChunks(t, keys, p.spans());
  }
  std::vector<KvChunk> chunks = ValueOrThrow(std::move(r));
  nb::list out;
  for (KvChunk& k : chunks) out.append(KvChunkToArray(std::move(k)));
  return out;
}

ChainInputs Inputs(nb::handle extra_keys) {
  if (extra_keys.is_none()) return ChainInputs::TokensOnly();
  return ChainInputs::WithExtraKeys(ToExtraKeys(extra_keys));
}

// ---------------------------------------------------------------- shared heavy state
// What identifies a file's content for the cache: its canonical path and a signature
// of (size, mtime_ns) of every file the loader reads (a model folder: each regular
// file in it; a *.safetensors file: it and its folder's files). A file rewritten in
// place gets a new entry; codecs made from the old content keep theirs.
struct FileId {
  std::string path;
  std::string signature;
  auto operator<=>(const FileId&) const = default;
};

std::string StatSignature(const std::filesystem::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return "?";
  const int64_t ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return std::to_string(static_cast<uint64_t>(st.st_size)) + ":" + std::to_string(ns);
}

// A model path: IOError if it does not exist (LoadModel's error).
Result<FileId> ModelFileId(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) return Status::IOError("model file " + path + " does not exist");
  const fs::path canon = fs::canonical(path, ec);
  if (ec) return Status::IOError("cannot resolve " + path + ": " + ec.message());
  FileId id{canon.string(), StatSignature(canon)};
  const bool dir = fs::is_directory(canon, ec);
  if (dir || canon.extension() == ".safetensors") {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir ? canon : canon.parent_path(), ec)) {
      if (e.is_regular_file(ec)) names.push_back(e.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    for (const std::string& n : names) {
      id.signature += "|" + n + "=" + StatSignature((dir ? canon : canon.parent_path()) / n);
    }
  }
  return id;
}

// An artifact path: NotFound unless it is a regular file (common's reader says IOError).
Result<FileId> ArtifactFileId(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return Status::NotFound("no such file: " + path);
  const fs::path canon = fs::canonical(path, ec);
  if (ec) return Status::IOError("cannot resolve " + path + ": " + ec.message());
  return FileId{canon.string(), StatSignature(canon)};
}

// The process-wide cache of the heavy state of spec and dckv codecs: one model per
// model file, one predictor per (model file, threads), one parsed spec artifact and one
// built dckv codec per artifact file, shared by every PyCodec made from those files (a
// namespace -- cache salt, adapter, tenant -- then costs only its options and digest).
// Entries are weak: the state is freed when the last codec using it is.
// Thread-safety: one mutex, held while loading (so two threads asking for the same file
// load it once). Call with the GIL released, and never take the GIL while holding it.
class SharedState {
 public:
  static SharedState& Instance() {
    static SharedState* s = new SharedState();  // never destroyed: codecs may outlive exit order
    return *s;
  }

  Result<std::shared_ptr<const model::Model>> GetModel(const std::string& path) KVSTASH_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return ModelLocked(path);
  }

  // The predictor (threads) of the model at `path`; *model_out: that model.
  Result<std::shared_ptr<const model::SpecPredictor>> GetPredictor(
      const std::string& path, int threads, std::shared_ptr<const model::Model>* model_out)
      KVSTASH_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    KVSTASH_ASSIGN_OR_RETURN(std::shared_ptr<const model::Model> m, ModelLocked(path));
    KVSTASH_ASSIGN_OR_RETURN(FileId id, ModelFileId(path));
    *model_out = m;
    Prune(predictors_);
    const auto key = std::make_pair(id, threads);
    if (auto hit = predictors_[key].lock()) return hit;
    model::SpecPredictorOptions po;
    po.threads = threads;
    KVSTASH_ASSIGN_OR_RETURN(std::unique_ptr<model::SpecPredictor> p, model::SpecPredictor::Create(*m, po));
    // The predictor is built from the model: its shared_ptr keeps the model alive too.
    struct Holder {
      std::shared_ptr<const model::Model> model;
      std::unique_ptr<model::SpecPredictor> predictor;
    };
    auto holder = std::make_shared<Holder>(Holder{m, std::move(p)});
    std::shared_ptr<const model::SpecPredictor> out(holder, holder->predictor.get());
    predictors_[key] = out;
    ++predictor_builds_;
    return out;
  }

  Result<std::shared_ptr<const spec::SpecArtifact>> GetSpecArtifact(const std::string& path)
      KVSTASH_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return ArtifactLocked(path, spec_artifacts_, &spec_artifact_loads_,
                          [](std::vector<uint8_t> bytes) { return spec::SpecArtifact::Parse(bytes); });
  }

  Result<std::shared_ptr<const dckv::DckvCodec>> GetDckvCodec(const std::string& path)
      KVSTASH_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return ArtifactLocked(path, dckv_codecs_, &dckv_codec_builds_,
                          [](std::vector<uint8_t> bytes) -> Result<dckv::DckvCodec> {
                            auto art = dckv::DckvArtifact::Parse(bytes);
                            bytes = {};  // the file's bytes go before the codec is built
                            if (!art.ok()) return art.status();
                            return dckv::DckvCodec::Create(std::move(art).value());
                          });
  }

  // Live entries and how often each kind was loaded since start.
  std::map<std::string, uint64_t> Info() KVSTASH_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    Prune(models_);
    Prune(predictors_);
    Prune(spec_artifacts_);
    Prune(dckv_codecs_);
    return {{"models", models_.size()},
            {"predictors", predictors_.size()},
            {"spec_artifacts", spec_artifacts_.size()},
            {"dckv_codecs", dckv_codecs_.size()},
            {"model_loads", model_loads_},
            {"predictor_builds", predictor_builds_},
            {"spec_artifact_loads", spec_artifact_loads_},
            {"dckv_codec_builds", dckv_codec_builds_}};
  }

 private:
  // The artifact at `path` from `cache`, or `build` of the file's bytes, then cached
  // (weakly) and counted in *loads. Errors: the file's, and build's with the path.
  template <typename T, typename Build>
  Result<std::shared_ptr<const T>> ArtifactLocked(const std::string& path,
                                                  std::map<FileId, std::weak_ptr<const T>>& cache,
                                                  uint64_t* loads, Build build) KVSTASH_REQUIRES(mu_) {
    KVSTASH_ASSIGN_OR_RETURN(FileId id, ArtifactFileId(path));
    Prune(cache);
    if (auto hit = cache[id].lock()) return hit;
    KVSTASH_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, kvstash::ReadFileBytes(path));
    Result<T> built = build(std::move(bytes));
    if (!built.ok()) return built.status().WithContext(path);
    auto out = std::make_shared<const T>(std::move(built).value());
    cache[id] = out;
    ++*loads;
    return std::shared_ptr<const T>(out);
  }

  template <typename M>
  static void Prune(M& m) {
    std::erase_if(m, [](const auto& kv) { return kv.second.expired(); });
  }

  Result<std::shared_ptr<const model::Model>> ModelLocked(const std::string& path) KVSTASH_REQUIRES(mu_) {
    KVSTASH_ASSIGN_OR_RETURN(FileId id, ModelFileId(path));
    Prune(models_);
    if (auto hit = models_[id].lock()) return hit;
    KVSTASH_ASSIGN_OR_RETURN(std::unique_ptr<model::Model> m, model::LoadModel(path));
    std::shared_ptr<const model::Model> out(std::move(m));
    models_[id] = out;
    ++model_loads_;
    return out;
  }

  Mutex mu_;
  std::map<FileId, std::weak_ptr<const model::Model>> models_ KVSTASH_GUARDED_BY(mu_);
  std::map<std::pair<FileId, int>, std::weak_ptr<const model::SpecPredictor>> predictors_
      KVSTASH_GUARDED_BY(mu_);
  std::map<FileId, std::weak_ptr<const spec::SpecArtifact>> spec_artifacts_ KVSTASH_GUARDED_BY(mu_);
  std::map<FileId, std::weak_ptr<const dckv::DckvCodec>> dckv_codecs_ KVSTASH_GUARDED_BY(mu_);
  uint64_t model_loads_ KVSTASH_GUARDED_BY(mu_) = 0;
  uint64_t predictor_builds_ KVSTASH_GUARDED_BY(mu_) = 0;
  uint64_t spec_artifact_loads_ KVSTASH_GUARDED_BY(mu_) = 0;
  uint64_t dckv_codec_builds_ KVSTASH_GUARDED_BY(mu_) = 0;
};

}  // namespace

void BindCodec(nb::module_& m) {
  nb::class_<PyCodecOptions>(m, "PrefixCodecOptions",
                             "Options of a PrefixCodec (prefix_codec.h); every field enters the "
                             "namespace digest.")
      .def("__init__",
           [](PyCodecOptions* self, nb::handle model_fingerprint, uint32_t chunk_tokens,
              const std::string& tenant, const std::string& cache_salt, const std::string& kv_dtype,
              uint32_t tp_rank, uint32_t tp_size, const std::string& adapter_name,
              const std::string& adapter_id, nb::handle adapter_digest, nb::handle kind) {
             PyCodecOptions p;
             p.o.model_fingerprint = ToDigest(model_fingerprint, "model_fingerprint");
             p.o.chunk_tokens = chunk_tokens;
             p.o.tenant = tenant;
             p.o.cache_salt = cache_salt;
             p.o.kv_dtype = ValueOrThrow(ParseDType(kv_dtype));
             p.o.tp_rank = tp_rank;
             p.o.tp_size = tp_size;
             p.o.adapter_name = adapter_name;
             p.o.adapter_id = adapter_id;
             if (PyUnicode_Check(adapter_digest.ptr())) {
               p.o.adapter_digest = nb::cast<std::string>(adapter_digest);
             } else {
               auto b = BufferBytes(adapter_digest, "adapter_digest");
               p.o.adapter_digest.assign(b.begin(), b.end());
             }
             if (!kind.is_none()) {
               p.o.kind = ValueOrThrow(ParsePrefixCodecKind(nb::cast<std::string>(kind)));
               p.kind_set = true;
             }
             new (self) PyCodecOptions(std::move(p));
           },
           nb::arg("model_fingerprint"), nb::arg("chunk_tokens") = 256, nb::arg("tenant") = "",
           nb::arg("cache_salt") = "", nb::arg("kv_dtype") = "bf16", nb::arg("tp_rank") = 0,
           nb::arg("tp_size") = 1, nb::arg("adapter_name") = "", nb::arg("adapter_id") = "",
           nb::arg("adapter_digest") = nb::bytes(""), nb::arg("kind").none() = nb::none(),
           "model_fingerprint: 32 bytes (SHA-256 of the weights). kind: 'raw', 'spec', 'dckv' or "
           "None (the factory's). Raises InvalidArgumentError for a fingerprint that is not 32 "
           "bytes, an unknown dtype or kind.")
      .def_prop_ro("kind", [](const PyCodecOptions& p) -> nb::object {
        if (!p.kind_set) return nb::none();
        return nb::str(PrefixCodecName(p.o.kind));
      })
      .def_prop_ro("model_fingerprint", [](const PyCodecOptions& p) { return ToBytes(p.o.model_fingerprint); })
      .def_prop_ro("chunk_tokens", [](const PyCodecOptions& p) { return p.o.chunk_tokens; })
      .def_prop_ro("tenant", [](const PyCodecOptions& p) { return p.o.tenant; })
      .def_prop_ro("cache_salt", [](const PyCodecOptions& p) { return p.o.cache_salt; })
      .def_prop_ro("kv_dtype", [](const PyCodecOptions& p) { return std::string(DTypeName(p.o.kv_dtype)); })
      .def_prop_ro("tp_rank", [](const PyCodecOptions& p) { return p.o.tp_rank; })
      .def_prop_ro("tp_size", [](const PyCodecOptions& p) { return p.o.tp_size; })
      .def_prop_ro("adapter_name", [](const PyCodecOptions& p) { return p.o.adapter_name; })
      .def_prop_ro("adapter_id", [](const PyCodecOptions& p) { return p.o.adapter_id; })
      .def_prop_ro("adapter_digest", [](const PyCodecOptions& p) {
        return nb::bytes(p.o.adapter_digest.data(), p.o.adapter_digest.size());
      });

  nb::class_<PyCodec>(m, "PrefixCodec",
                      "Client-side coding of one namespace's prefix chains (raw, spec, dckv). "
                      "Immutable and thread-safe; methods release the GIL.")
      .def_static(
          "raw",
          [](const KvLayout& layout, const PyCodecOptions& options) {
            auto c = std::make_unique<PyCodec>();
            c->codec = ValueOrThrow(PrefixCodec::CreateRaw(layout, OptionsFor(options, PrefixCodecKind::kRaw)));
            return c;
          },
          nb::arg("layout"), nb::arg("options"),
          "Raw (uncompressed) coding of KV of `layout` (its dtype is replaced by "
          "options.kv_dtype: bf16 or f16). No model needed.")
      .def_static(
          "spec",
          [](const std::string& model_path, const std::string& artifact_path, const PyCodecOptions& options,
             int threads) {
            auto c = std::make_unique<PyCodec>();
            const PrefixCodecOptions o = OptionsFor(options, PrefixCodecKind::kSpec);
            Status s;
            {
              nb::gil_scoped_release release;
              SharedState& shared = SharedState::Instance();
              auto p = shared.GetPredictor(model_path, threads, &c->model);
              auto art = p.ok() ? shared.GetSpecArtifact(artifact_path)
                                : Result<std::shared_ptr<const spec::SpecArtifact>>(p.status());
              if (!art.ok()) {
                s = art.status();
              } else {
                c->predictor = std::move(p).value();
                c->spec_artifact = std::move(art).value();
                auto codec = PrefixCodec::CreateSpec(*c->model, c->predictor, c->spec_artifact, o);
                if (codec.ok()) c->codec = std::move(codec).value();
                s = codec.status();
              }
            }
            ThrowIfError(s);
            return c;
          },
          nb::arg("model_path"), nb::arg("artifact_path"), nb::arg("options"), nb::arg("threads") = 1,
          "Lossless spec coding: loads the reference model from model_path (GGUF, safetensors, "
          "llama2.c), builds its deterministic predictor (threads: its thread count; results do "
          "not depend on it) and the spec artifact (.kvsa). The model, predictor and artifact are "
          "shared by every codec made from the same files (same path, size and mtime; see "
          "shared_state()), so a codec per namespace costs only its options. Raises "
          "StorageIOError for a missing model file, NotFoundError for a missing artifact, "
          "CorruptionError/InvalidArgumentError for a bad file, "
          "MismatchError for an artifact calibrated with another predictor.")
      .def_static(
          "dckv",
          [](const std::string& model_path, const std::string& artifact_path, const PyCodecOptions& options) {
            auto c = std::make_unique<PyCodec>();
            const PrefixCodecOptions o = OptionsFor(options, PrefixCodecKind::kDckv);
            Status s;
            {
              nb::gil_scoped_release release;
              SharedState& shared = SharedState::Instance();
              auto m = shared.GetModel(model_path);
              auto dk = m.ok() ? shared.GetDckvCodec(artifact_path)
                               : Result<std::shared_ptr<const dckv::DckvCodec>>(m.status());
              if (!dk.ok()) {
                s = dk.status();
              } else {
                c->model = std::move(m).value();
                c->dckv = std::move(dk).value();
                auto codec = PrefixCodec::CreateDckv(*c->model, c->dckv, o);
                if (codec.ok()) c->codec = std::move(codec).value();
                s = codec.status();
              }
            }
            ThrowIfError(s);
            return c;
          },
          nb::arg("model_path"), nb::arg("artifact_path"), nb::arg("options"),
          "Lossy dckv coding with the artifact (.kvda) of the model at model_path. The model and "
          "the codec built from the artifact are shared like spec()'s. Raises as spec().")
      .def_static(
          "shared_state",
          []() {
            std::map<std::string, uint64_t> info;
            {
              nb::gil_scoped_release release;
              info = SharedState::Instance().Info();
            }
            nb::dict d;
            for (const auto& [k, v] : info) d[nb::str(k.c_str())] = v;
            return d;
          },
          "The process-wide cache of the codecs' heavy state: live entries ('models', "
          "'predictors', 'spec_artifacts', 'dckv_codecs': held by at least one codec) and loads "
          "since start ('model_loads', 'predictor_builds', 'spec_artifact_loads', "
          "'dckv_codec_builds'). Keyed by each file's canonical path, size and mtime (the "
          "predictor also by its thread count); an entry is freed with its last codec.")
      .def_prop_ro("kind", [](const PyCodec& c) { return std::string(PrefixCodecName(c.codec->kind())); })
      .def_prop_ro(
          "layout", [](const PyCodec& c) { return c.codec->layout(); },
          "Stored layout (n_layers, n_kv_heads, head_dim, dtype = options.kv_dtype).")
      .def_prop_ro("chunk_tokens", [](const PyCodec& c) { return c.codec->options().chunk_tokens; })
      .def_prop_ro(
          "namespace_digest", [](const PyCodec& c) { return ToBytes(c.codec->namespace_digest()); },
          "Namespace digest (32 bytes) of this codec's chains.")
      .def_prop_ro(
          "artifact_digest", [](const PyCodec& c) { return ToBytes(c.codec->artifact_digest()); },
          "SHA-256 of the artifact (32 zero bytes for raw).")
      .def(
          "chain_keys",
          [](const PyCodec& c, nb::handle tokens, nb::handle extra_keys) {
            const std::vector<uint32_t> t = ToTokens(tokens);
            const ChainInputs in = Inputs(extra_keys);
            Result<std::vector<ChunkKey>> r = Status::Internal("unset");
            {
              nb::gil_scoped_release release;
              r = c.codec->ChainKeys(t, in);
            }
            return ValueOrThrow(std::move(r));
          },
          nb::arg("tokens"), nb::arg("extra_keys").none() = nb::none(),
          "Keys of the chain of `tokens` (full chunks, then a partial one for a remainder). "
          "extra_keys None: token ids alone determine the KV; else one list of bytes per chunk "
          "(multimodal inputs). Raises InvalidArgumentError for an empty prefix or a wrong "
          "extra_keys count.")
      .def(
          "encode_chunks",
          [](const PyCodec& c, nb::handle tokens, const std::vector<ChunkKey>& keys,
             nb::sequence chunk_objects, uint32_t first_chunk) {
            const std::vector<uint32_t> t = ToTokens(tokens);
            std::vector<ChunkArray> chunks;
            for (nb::handle h : chunk_objects) chunks.push_back(ImportChunk(h, chunks.size()));
            const KvLayout& L = c.codec->layout();
            if (first_chunk > keys.size() || chunks.size() != keys.size() - first_chunk) {
              ThrowInvalid("encode_chunks: " + std::to_string(chunks.size()) + " chunks for chain chunks [" +
                           std::to_string(first_chunk) + ", " + std::to_string(keys.size()) + ")");
            }
            std::vector<KvChunk> kv(chunks.size());
            for (size_t j = 0; j < chunks.size(); ++j) {
              kv[j] = CheckedChunk(chunks[j], L, keys[first_chunk + j].tokens, j);
            }
            Result<std::vector<PutChunk>> r = Status::Internal("unset");
            {
              nb::gil_scoped_release release;
              // The one copy: the arrays' bytes into the KvChunks EncodeKvChunks takes.
              for (size_t j = 0; j < chunks.size(); ++j) {
                std::memcpy(kv[j].data.data(), chunks[j].data(), kv[j].data.size());
              }
              r = c.codec->EncodeKvChunks(t, keys, kv, first_chunk);
            }
            return ValueOrThrow(std::move(r));
          },
          nb::arg("tokens"), nb::arg("keys"), nb::arg("chunks"), nb::arg("first_chunk") = 0,
          "Encodes chain chunks [first_chunk, len(keys)) of `tokens` (keys = chain_keys(tokens, "
          "...)). chunks[j]: the KV of chain chunk first_chunk + j, shape [n_layers, 2, T, "
          "n_kv_heads, head_dim] (K then V per layer, K after RoPE), T = keys[first_chunk + "
          "j].tokens; bf16 as uint16 bit patterns (NumPy) or torch.bfloat16, f16 as float16; a "
          "CPU array. Returns one PutChunk per chunk (chunk i > 0 names chunk i-1 as parent; "
          "all route by chunk 0). Raises InvalidArgumentError for a wrong shape, dtype, count "
          "or chain; codec errors.")
      .def(
          "restore_chunks",
          [](const PyCodec& c, nb::handle tokens, const std::vector<ChunkKey>& keys, nb::handle payloads) {
            return RestoreArrays(c, tokens, keys, payloads);
          },
          nb::arg("tokens"), nb::arg("keys"), nb::arg("payloads"),
          "Decodes and verifies the payloads of chain chunks [0, len(payloads)) of `tokens`. "
          "Returns NumPy arrays [n_layers, 2, T, n_kv_heads, head_dim] (uint16 bit patterns "
          "for bf16, float16 for f16), one per payload, in chain order. Never returns KV that "
          "failed a check: raises MismatchError for a payload of another codec, artifact, "
          "model, layout or position; CorruptionError for a damaged payload or one bound to another "
          "chunk's key; InvalidArgumentError for no payloads, more payloads than chunks or keys whose "
          "count or token counts are not those of the chain of `tokens`. The keys are trusted (each "
          "payload is checked against the key it is given; a key's digest is not recomputed, since it "
          "may include extra keys): pass chain_keys of these very tokens, or another prefix's KV is "
          "what comes back. payloads: bytes-like objects, read in place (not copied).")
      .def(
          "restore_chunk_views",
          [](const PyCodec& c, nb::handle tokens, const std::vector<ChunkKey>& keys, nb::handle payloads,
             uint32_t first_chunk) {
            if (c.codec->kind() != PrefixCodecKind::kRaw) {
              if (first_chunk != 0) ThrowInvalid("restore_chunk_views: first_chunk > 0 needs a raw codec");
              return RestoreArrays(c, tokens, keys, payloads);
            }
            const std::vector<uint32_t> t = ToTokens(tokens);
            const BufferViews p(payloads, "payloads");
            Result<std::vector<KvChunkView>> r = Status::Internal("unset");
            {
              nb::gil_scoped_release release;
              r = c.codec->ViewRawKvChunks(t, keys, p.spans(), first_chunk);
            }
            const std::vector<KvChunkView> views = ValueOrThrow(std::move(r));
            nb::list out;
            for (size_t i = 0; i < views.size(); ++i) out.append(KvChunkViewToArray(views[i], p.Pin(i)));
            return out;
          },
          nb::arg("tokens"), nb::arg("keys"), nb::arg("payloads"), nb::arg("first_chunk") = 0,
          "As restore_chunks, with the same checks and errors, but a raw codec copies nothing: "
          "array i is a READ-ONLY view of payload i's body (a raw body is the canonical chunk), "
          "verified (header, key binding, position, content checksum) before it is returned. The "
          "array holds payload i's buffer (a bytearray cannot be resized while it lives); the "
          "caller must not modify a payload while it uses the views (a received payload from "
          "Client.get_array is read-only). spec and dckv codecs decode as restore_chunks. Use it "
          "to scatter raw KV into an engine's cache straight from the received payloads. first_chunk "
          "(raw only; InvalidArgumentError otherwise): payloads[j] is chain chunk first_chunk + j, so "
          "each chunk can be verified as its GET completes.")
      .def(
          "tokens_of_chunks",
          [](const PyCodec& c, uint64_t prefix_tokens, uint32_t chunks) {
            return c.codec->TokensOfChunks(prefix_tokens, chunks);
          },
          nb::arg("prefix_tokens"), nb::arg("chunks"),
          "Tokens covered by the first `chunks` chunks of a prefix_tokens-token prefix's chain.");
}

}  // namespace kvstash::py
