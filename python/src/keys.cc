// Bindings of the prefix keys (kvstash/prefix_key.h, docs/format/keys.md): KvLayout,
// Namespace, ChunkKey and chain_keys.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "native.h"

namespace kvstash::py {
namespace {

DType ParseDTypeOrThrow(const std::string& name) { return ValueOrThrow(ParseDType(name)); }

KvLayout MakeLayout(uint32_t n_layers, uint32_t n_kv_heads, uint32_t head_dim,
                    const std::string& dtype) {
  KvLayout l{n_layers, n_kv_heads, head_dim, ParseDTypeOrThrow(dtype)};
  ThrowIfError(l.Validate());
  return l;
}

}  // namespace

void BindKeys(nb::module_& m) {
  nb::class_<KvLayout>(m, "KvLayout",
                       "Shape and element type of a model's KV cache per token "
                       "(kvstash/kv_chunk.h). A chunk of T tokens is the array "
                       "[n_layers, 2, T, n_kv_heads, head_dim] (K then V per layer).")
      .def(
          "__init__",
          [](KvLayout* self, uint32_t n_layers, uint32_t n_kv_heads, uint32_t head_dim,
             const std::string& dtype) {
            new (self) KvLayout(MakeLayout(n_layers, n_kv_heads, head_dim, dtype));
          },
          nb::arg("n_layers"), nb::arg("n_kv_heads"), nb::arg("head_dim"), nb::arg("dtype") = "bf16",
          "Raises InvalidArgumentError for a zero or oversized dimension or an unknown dtype "
          "(bf16, f16, f32, fp8_e4m3).")
      .def_ro("n_layers", &KvLayout::n_layers)
      .def_ro("n_kv_heads", &KvLayout::n_kv_heads)
      .def_ro("head_dim", &KvLayout::head_dim)
      .def_prop_ro("dtype", [](const KvLayout& l) { return std::string(DTypeName(l.dtype)); })
      .def("data_bytes", &KvLayout::DataBytes, nb::arg("tokens"),
           "Bytes of the data of a chunk of `tokens` tokens.")
      .def("__eq__", [](const KvLayout& a, const KvLayout& b) { return a == b; })
      .def("__repr__", [](const KvLayout& l) {
        return "KvLayout(n_layers=" + std::to_string(l.n_layers) + ", n_kv_heads=" +
               std::to_string(l.n_kv_heads) + ", head_dim=" + std::to_string(l.head_dim) +
               ", dtype='" + std::string(DTypeName(l.dtype)) + "')";
      });

  nb::class_<ChunkKey>(m, "ChunkKey", "Key of one chunk of a prefix chain.")
      .def("__init__",
           [](ChunkKey* self, nb::handle digest, uint32_t tokens, bool partial) {
             new (self) ChunkKey{ToDigest(digest, "digest"), tokens, partial};
           },
           nb::arg("digest"), nb::arg("tokens"), nb::arg("partial") = false)
      .def_prop_ro("digest", [](const ChunkKey& k) { return ToBytes(k.digest); },
                   "Full SHA-256 (32 bytes); the next chunk chains on it.")
      .def_prop_ro("stored", [](const ChunkKey& k) { return ToBytes(k.stored()); },
                   "Stored key: the first 16 bytes of digest (what the server indexes).")
      .def_ro("tokens", &ChunkKey::tokens, "Tokens in this chunk.")
      .def_ro("partial", &ChunkKey::partial, "Final chunk shorter than chunk_tokens.")
      .def("__eq__", [](const ChunkKey& a, const ChunkKey& b) {
        return a.digest == b.digest && a.tokens == b.tokens && a.partial == b.partial;
      })
      .def("__hash__", [](const ChunkKey& k) {
        size_t h = 0;
        for (int i = 0; i < 8; ++i) h = (h << 8) | k.digest[i];
        return h;
      })
      .def("__repr__", [](const ChunkKey& k) {
        return "ChunkKey(" + ToHex(k.stored()) + ", tokens=" + std::to_string(k.tokens) +
               (k.partial ? ", partial=True)" : ")");
      });

  nb::class_<Namespace>(m, "Namespace",
                        "Everything that makes two KV caches of the same tokens differ "
                        "(docs/format/keys.md). Strings are opaque bytes; empty means none.")
      .def(
          "__init__",
          [](Namespace* self, nb::handle model_fingerprint, uint32_t n_layers, uint32_t n_kv_heads,
             uint32_t head_dim, const std::string& dtype, uint32_t chunk_tokens, uint32_t tp_rank,
             uint32_t tp_size, nb::handle adapter_name, nb::handle adapter_id, nb::handle adapter_digest,
             nb::handle cache_salt, nb::handle tenant, nb::handle codec_id,
             nb::handle codec_artifact_digest) {
            Namespace s;
            auto fp = BufferBytes(model_fingerprint, "model_fingerprint");
            s.model_fingerprint.assign(fp.begin(), fp.end());
            s.layout = KvLayout{n_layers, n_kv_heads, head_dim, ParseDTypeOrThrow(dtype)};
            s.chunk_tokens = chunk_tokens;
            s.tp_rank = tp_rank;
            s.tp_size = tp_size;
            // Every string field is opaque bytes: str (UTF-8) or bytes-like.
            auto bytes_or_str = [](nb::handle h, const char* what) {
              if (PyUnicode_Check(h.ptr())) return nb::cast<std::string>(h);
              auto b = BufferBytes(h, what);
              return std::string(b.begin(), b.end());
            };
            s.adapter_name = bytes_or_str(adapter_name, "adapter_name");
            s.adapter_id = bytes_or_str(adapter_id, "adapter_id");
            s.adapter_digest = bytes_or_str(adapter_digest, "adapter_digest");
            s.cache_salt = bytes_or_str(cache_salt, "cache_salt");
            s.tenant = bytes_or_str(tenant, "tenant");
            s.codec_id = bytes_or_str(codec_id, "codec_id");
            s.codec_artifact_digest = bytes_or_str(codec_artifact_digest, "codec_artifact_digest");
            ThrowIfError(s.Validate());
            new (self) Namespace(std::move(s));
          },
          nb::arg("model_fingerprint"), nb::arg("n_layers"), nb::arg("n_kv_heads"), nb::arg("head_dim"),
          nb::arg("dtype") = "bf16", nb::arg("chunk_tokens") = 256, nb::arg("tp_rank") = 0,
          nb::arg("tp_size") = 1, nb::arg("adapter_name") = "", nb::arg("adapter_id") = "",
          nb::arg("adapter_digest") = nb::bytes(""), nb::arg("cache_salt") = "", nb::arg("tenant") = "",
          nb::arg("codec_id") = "raw", nb::arg("codec_artifact_digest") = nb::bytes(""),
          "Raises InvalidArgumentError for an invalid layout or dtype, chunk_tokens 0 or above "
          "2^20, tp_size 0 or tp_rank >= tp_size.")
      .def_prop_ro("model_fingerprint",
                   [](const Namespace& s) {
                     return nb::bytes(s.model_fingerprint.data(), s.model_fingerprint.size());
                   })
      .def_prop_ro("layout", [](const Namespace& s) { return s.layout; })
      .def_ro("chunk_tokens", &Namespace::chunk_tokens)
      .def_ro("tp_rank", &Namespace::tp_rank)
      .def_ro("tp_size", &Namespace::tp_size)
      .def_prop_ro("adapter_name",
                   [](const Namespace& s) { return nb::bytes(s.adapter_name.data(), s.adapter_name.size()); })
      .def_prop_ro("adapter_id",
                   [](const Namespace& s) { return nb::bytes(s.adapter_id.data(), s.adapter_id.size()); })
      .def_prop_ro(
          "adapter_digest",
          [](const Namespace& s) { return nb::bytes(s.adapter_digest.data(), s.adapter_digest.size()); })
      .def_prop_ro("cache_salt",
                   [](const Namespace& s) { return nb::bytes(s.cache_salt.data(), s.cache_salt.size()); })
      .def_prop_ro("tenant", [](const Namespace& s) { return nb::bytes(s.tenant.data(), s.tenant.size()); })
      .def_prop_ro("codec_id",
                   [](const Namespace& s) { return nb::bytes(s.codec_id.data(), s.codec_id.size()); })
      .def_prop_ro("codec_artifact_digest",
                   [](const Namespace& s) {
                     return nb::bytes(s.codec_artifact_digest.data(), s.codec_artifact_digest.size());
                   })
      .def(
          "digest", [](const Namespace& s) { return ToBytes(ValueOrThrow(NamespaceDigest(s))); },
          "SHA-256 of encode() (32 bytes): key_{-1} of every chain of this namespace.")
      .def(
          "encode", [](const Namespace& s) { return ToBytes(EncodeNamespace(s)); },
          "The exact tagged, length-prefixed bytes that digest() hashes.");

  m.def(
      "chain_keys",
      [](nb::handle namespace_digest, nb::handle tokens, uint32_t chunk_tokens, bool include_partial,
         nb::handle extra_keys) {
        const Digest256 ns = ToDigest(namespace_digest, "namespace_digest");
        const std::vector<uint32_t> t = ToTokens(tokens);
        const auto extra = ToExtraKeys(extra_keys);
        Result<std::vector<ChunkKey>> r = Status::Internal("unset");
        {
          nb::gil_scoped_release release;
          r = ComputeChunkKeys(ns, t, chunk_tokens, include_partial, extra);
        }
        return ValueOrThrow(std::move(r));
      },
      nb::arg("namespace_digest"), nb::arg("tokens"), nb::arg("chunk_tokens"),
      nb::arg("include_partial") = true, nb::arg("extra_keys") = nb::none(),
      "Chained chunk keys of `tokens` under a namespace digest (32 bytes): one per full "
      "chunk of chunk_tokens, then a partial-chunk key for a non-empty remainder when "
      "include_partial. extra_keys: None, or one list of bytes per returned chunk "
      "(multimodal/embedding digests). Raises InvalidArgumentError for chunk_tokens 0, a "
      "wrong extra_keys count or a token id outside [0, 2^32).");
}

}  // namespace kvstash::py
