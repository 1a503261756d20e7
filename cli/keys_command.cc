// `kvstash keys`: prints the namespace digest and chained chunk keys of a token list
// (docs/format/keys.md), for checking another implementation against ours.
#include <algorithm>
#include <charconv>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <cctype>
#include <sstream>
#include <vector>

#include "cli/command_registry.h"
#include "common/prefix_key.h"
#include "common/sha256.h"

namespace kvstash::cli {
namespace {

struct KeysOptions {
  std::string model_fingerprint_hex;
  std::string model_file;  // --model-file: the fingerprint as kvstash's producers write it
  std::string vllm_model;    // --vllm-model: the fingerprint as the vLLM connector writes it
  std::string vllm_adapter;  // --vllm-adapter: the adapter digest as the vLLM connector writes it
  std::string dtype = "bf16";
  uint32_t layers = 30, kv_heads = 3, head_dim = 64, chunk_tokens = 256;
  uint32_t tp_rank = 0, tp_size = 1;
  std::string adapter_name, adapter_id, adapter_digest, cache_salt, tenant, codec = "raw";
  std::string codec_artifact_digest;
  std::string tokens;  // comma/space separated
  std::vector<std::string> extra_keys;  // "CHUNK:KEY", repeatable
  bool partial = false;
};

Result<std::string> Unhex(const std::string& h) {
  if (h.size() % 2 != 0) return Status::InvalidArgument("hex string has odd length");
  std::string out;
  for (size_t i = 0; i < h.size(); i += 2) {
    unsigned v = 0;
    if (!std::isxdigit(static_cast<unsigned char>(h[i])) ||
        !std::isxdigit(static_cast<unsigned char>(h[i + 1])) ||
        std::sscanf(h.c_str() + i, "%2x", &v) != 1) {
      return Status::InvalidArgument("model fingerprint is not hex");
    }
    out.push_back(static_cast<char>(v));
  }
  return out;
}

// The vLLM connector's weights fingerprint (engines/vllm/kvstash_vllm/namespace.py,
// weights_fingerprint): SHA-256 over each weights file's base name, a NUL and its bytes,
// in name order. A file path is that one file; a folder's weights files are its
// *.safetensors, else its *.bin / *.pt / *.pth, else its *.gguf.
// Errors: NotFound (no such path, no weights files in the folder), IOError (a read).
Result<Digest256> VllmWeightsFingerprint(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::string> files;
  if (fs::is_regular_file(path, ec)) {
    files.push_back(path);
  } else if (fs::is_directory(path, ec)) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path, ec)) names.push_back(e.path().filename().string());
    if (ec) return Status::IOError("cannot list " + path + ": " + ec.message());
    std::sort(names.begin(), names.end());  // byte order of UTF-8 = Python's code-point order
    const std::vector<std::vector<std::string>> groups = {
        {".safetensors"}, {".bin", ".pt", ".pth"}, {".gguf"}};
    for (const auto& suffixes : groups) {
      for (const std::string& n : names) {
        for (const std::string& suffix : suffixes) {
          if (n.size() >= suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0) {
            files.push_back((fs::path(path) / n).string());
            break;
          }
        }
      }
      if (!files.empty()) break;
    }
    if (files.empty()) return Status::NotFound("no weights files (*.safetensors, else *.bin / *.pt / *.pth, else *.gguf) in " + path);
  } else {
    return Status::NotFound(path + " is neither a file nor a folder");
  }
  Sha256Stream h;
  for (const std::string& f : files) {
    const std::string name = fs::path(f).filename().string();
    h.Update({reinterpret_cast<const uint8_t*>(name.c_str()), name.size() + 1});  // with its NUL
    KVSTASH_RETURN_IF_ERROR(h.UpdateFromFile(f));
  }
  return h.Finish();
}

int Run(const KeysOptions& o) {
  NamespaceSpec spec;
  auto fp = Unhex(o.model_fingerprint_hex);
  auto dt = ParseDType(o.dtype);
  if (!fp.ok() || !dt.ok()) {
    std::cerr << "kvstash keys: " << (!fp.ok() ? fp.status() : dt.status()).ToString() << "\n";
    return 2;
  }
  spec.model_fingerprint = *fp;
  if (!o.model_file.empty() || !o.vllm_model.empty()) {
    // PrefixCodec (the engines, the Python package) stores the lowercase hex of the
    // weights digest as the field's text (docs/format/keys.md): the file's SHA-256 for
    // its single-file callers, the folder fingerprint for the vLLM connector (which
    // passes bytes.fromhex(fingerprint) to PrefixCodecOptions).
    const bool vllm = !o.vllm_model.empty();
    auto digest = vllm ? VllmWeightsFingerprint(o.vllm_model) : Sha256File(o.model_file);
    if (!digest.ok()) {
      std::cerr << "kvstash keys: " << (vllm ? "--vllm-model: " : "--model-file: ")
                << digest.status().ToString() << "\n";
      return 1;
    }
    spec.model_fingerprint = ToHex(*digest);
  }
  spec.layout = {o.layers, o.kv_heads, o.head_dim, *dt};
  spec.chunk_tokens = o.chunk_tokens;
  spec.tp_rank = o.tp_rank;
  spec.tp_size = o.tp_size;
  spec.adapter_name = o.adapter_name;
  spec.adapter_id = o.adapter_id;
  spec.adapter_digest = o.adapter_digest;
  if (!o.vllm_adapter.empty()) {
    // The connector passes the adapter digest's 32 raw bytes (bytes.fromhex).
    auto digest = VllmWeightsFingerprint(o.vllm_adapter);
    if (!digest.ok()) {
      std::cerr << "kvstash keys: --vllm-adapter: " << digest.status().ToString() << "\n";
      return 1;
    }
    spec.adapter_digest.assign(digest->begin(), digest->end());
  }
  spec.codec_artifact_digest = o.codec_artifact_digest;
  spec.cache_salt = o.cache_salt;
  spec.tenant = o.tenant;
  spec.codec_id = o.codec;
  auto ns = NamespaceDigest(spec);
  if (!ns.ok()) {
    std::cerr << "kvstash keys: " << ns.status().ToString() << "\n";
    return 2;
  }
  std::vector<uint32_t> tokens;
  std::string t = o.tokens;
  for (char& c : t) c = (c == ',') ? ' ' : c;
  std::istringstream in(t);
  for (std::string word; in >> word;) {
    uint64_t v = 0;
    const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), v);
    if (ec != std::errc() || end != word.data() + word.size() || v > 0xFFFFFFFFull) {
      std::cerr << "kvstash keys: token '" << word << "' is not a decimal u32\n";
      return 2;
    }
    tokens.push_back(static_cast<uint32_t>(v));
  }
  if (o.tokens.find_first_not_of(" ,") != std::string::npos && o.tokens.find(",,") != std::string::npos) {
    std::cerr << "kvstash keys: empty token in --tokens\n";
    return 2;
  }
  // Extra keys (multimodal / prompt-embedding digests) per chunk: "CHUNK:KEY".
  std::vector<std::vector<std::string>> extra;
  if (!o.extra_keys.empty() && spec.chunk_tokens > 0) {
    const size_t chunks = o.partial ? (tokens.size() + spec.chunk_tokens - 1) / spec.chunk_tokens
                                    : tokens.size() / spec.chunk_tokens;
    extra.resize(chunks);
    for (const std::string& e : o.extra_keys) {
      const size_t colon = e.find(':');
      uint64_t chunk = 0;
      const auto [end, ec] = std::from_chars(e.data(), e.data() + (colon == std::string::npos ? 0 : colon), chunk);
      if (colon == std::string::npos || ec != std::errc() || end != e.data() + colon || chunk >= chunks) {
        std::cerr << "kvstash keys: --extra-key '" << e << "' is not CHUNK:KEY with CHUNK below "
                  << chunks << " (the chain's chunk count)\n";
        return 2;
      }
      extra[chunk].push_back(e.substr(colon + 1));
    }
  }
  auto keys = ComputeChunkKeys(*ns, tokens, spec.chunk_tokens, o.partial, extra);
  if (!keys.ok()) {
    std::cerr << "kvstash keys: " << keys.status().ToString() << "\n";
    return 2;
  }
  nlohmann::json j;
  j["namespace_digest"] = ToHex(*ns);
  j["chunks"] = nlohmann::json::array();
  for (const ChunkKey& k : *keys) {
    j["chunks"].push_back({{"digest", ToHex(k.digest)}, {"stored", ToHex(k.stored())},
                           {"tokens", k.tokens}, {"partial", k.partial}});
  }
  std::cout << j.dump(1) << "\n";
  return 0;
}

const bool kRegistered = RegisterCommand(
    "keys", "Print the namespace digest and chunk keys of a token list (docs/format/keys.md)",
    [](CLI::App* cmd) {
      auto o = std::make_shared<KeysOptions>();
      cmd->add_option("--tokens", o->tokens, "Token ids, comma or space separated")->required();
      auto* file = cmd->add_option("--model-file", o->model_file,
                                   "Weights file: the fingerprint PrefixCodec's callers that hash one weights "
                                   "file use (llama.cpp integration, demo), the lowercase hex SHA-256 of the "
                                   "file as text (the vLLM connector hashes its model folder's files with "
                                   "their names: engines/vllm/kvstash_vllm/namespace.py)")
                       ->check(CLI::ExistingFile);
      auto* vllm_model = cmd->add_option("--vllm-model", o->vllm_model,
                                         "Model folder or weights file as given to vLLM: the fingerprint the "
                                         "vLLM connector computes (SHA-256 over each weights file's name, a NUL "
                                         "and its bytes, in name order: *.safetensors, else *.bin/*.pt/*.pth, "
                                         "else *.gguf)")
                             ->check(CLI::ExistingPath)
                             ->excludes(file);
      cmd->add_option("--model-fingerprint", o->model_fingerprint_hex,
                      "The field's raw bytes, hex-encoded (for another implementation's value; the "
                      "keys kvstash's own producers write need --model-file or --vllm-model, or the "
                      "hex of the 64-character digest text)")
          ->excludes(file)
          ->excludes(vllm_model);
      cmd->add_option("--dtype", o->dtype, "KV dtype: bf16, f16, f32, fp8_e4m3")->capture_default_str();
      cmd->add_option("--layers", o->layers, "Attention layers")->capture_default_str();
      cmd->add_option("--kv-heads", o->kv_heads, "KV heads per layer")->capture_default_str();
      cmd->add_option("--head-dim", o->head_dim, "Channels per head")->capture_default_str();
      cmd->add_option("--chunk-tokens", o->chunk_tokens, "Tokens per chunk")->capture_default_str();
      cmd->add_option("--tp-rank", o->tp_rank, "Tensor-parallel rank")->capture_default_str();
      cmd->add_option("--tp-size", o->tp_size, "Tensor-parallel size")->capture_default_str();
      cmd->add_option("--adapter-name", o->adapter_name, "LoRA adapter name");
      cmd->add_option("--adapter-id", o->adapter_id, "LoRA adapter id");
      auto* adapter_digest = cmd->add_option("--adapter-digest", o->adapter_digest,
                                             "Digest of the LoRA adapter weights: the field's bytes, as text");
      cmd->add_option("--vllm-adapter", o->vllm_adapter,
                      "LoRA adapter folder as given to vLLM (lora_path): the adapter digest the vLLM "
                      "connector writes (its weights fingerprint's 32 raw bytes)")
          ->check(CLI::ExistingPath)
          ->excludes(adapter_digest);
      cmd->add_option("--cache-salt", o->cache_salt, "Cache salt");
      cmd->add_option("--tenant", o->tenant, "Tenant");
      cmd->add_option("--codec", o->codec, "Codec id")->capture_default_str();
      cmd->add_option("--codec-artifact-digest", o->codec_artifact_digest, "Digest of the codec artifact");
      cmd->add_option("--extra-key", o->extra_keys,
                      "Extra key of one chunk, CHUNK:KEY (multimodal or prompt-embedding digest; "
                      "repeatable)");
      cmd->add_flag("--partial", o->partial, "Also key a final partial chunk");
      return [o] { return Run(*o); };
    });

}  // namespace
}  // namespace kvstash::cli
