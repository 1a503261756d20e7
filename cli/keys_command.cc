// `kvstash keys`: prints the namespace digest and chained chunk keys of a token list
// (docs/format/keys.md), for checking another implementation against ours.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <cctype>
#include <sstream>
#include <vector>

#include "cli/command_registry.h"
#include "kvstash/prefix_key.h"
#include "kvstash/sha256.h"

namespace kvstash::cli {
namespace {

struct KeysOptions {
  std::string model_fingerprint_hex;
  std::string model_file;  // --model-file: the fingerprint as kvstash's producers write it
  std::string vllm_model;    // --vllm-model: the fingerprint as the vLLM connector writes it
  std::string vllm_adapter;  // --vllm-adapter: the adapter digest as the vLLM connector writes it
  std::string vllm_hf_overrides;  // --vllm-hf-overrides: JSON object of the engine's hf_overrides
  bool vllm_hf_overrides_given = false;
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

// Python's repr() of a finite double, which json.dumps writes: the shortest digits that
// round-trip (std::to_chars, like Python's dtoa mode 0), fixed notation with at least one
// decimal ("10000.0", "0.0001") when the decimal point position decpt (value =
// 0.DIGITS x 10^decpt) is in (-4, 16], else "D[.DDD]e[+-]XX" with at least 2 exponent
// digits ("1e-05", "1.5e+16").
std::string PythonFloatRepr(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string s(buf, r.ptr);  // e.g. "-1.2345e+17", "1e-05", "0e+00"
  std::string out;
  if (s[0] == '-') {
    out = "-";
    s.erase(0, 1);
  }
  const size_t e = s.find('e');
  std::string digits = s.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp10 = std::stoi(s.substr(e + 1));
  if (digits == "0") return out + "0.0";
  const int decpt = exp10 + 1;
  const int n = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) return out + "0." + std::string(-decpt, '0') + digits;
    if (decpt >= n) return out + digits + std::string(decpt - n, '0') + ".0";
    return out + digits.substr(0, decpt) + "." + digits.substr(decpt);
  }
  out += digits.substr(0, 1);
  if (n > 1) out += "." + digits.substr(1);
  const int x = decpt - 1;
  out += x < 0 ? "e-" : "e+";
  const std::string xd = std::to_string(x < 0 ? -x : x);
  return out + (xd.size() < 2 ? "0" : "") + xd;
}

// Rejects number literals nlohmann would turn into a double although Python reads them
// as integers (integer literals outside [-2^63, 2^64 - 1]), and nesting deeper than
// kMaxDepth (Python's json.loads gives up near 1,000 levels; the canonical form is
// built recursively).
struct IntegerRangeCheck : nlohmann::json_sax<nlohmann::json> {
  static constexpr size_t kMaxDepth = 512;
  std::string error;
  size_t depth = 0;
  bool Enter() {
    if (++depth <= kMaxDepth) return true;
    error = "JSON nested deeper than " + std::to_string(kMaxDepth) + " levels";
    return false;
  }
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t& s) override {
    if (s.find_first_of(".eE") == std::string::npos) {
      error = "integer " + s + " outside [-2^63, 2^64 - 1]";
      return false;
    }
    return true;
  }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return Enter(); }
  bool key(string_t&) override { return true; }
  bool end_object() override {
    --depth;
    return true;
  }
  bool start_array(std::size_t) override { return Enter(); }
  bool end_array() override {
    --depth;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) override {
    error = ex.what();
    return false;
  }
};

Status AppendCanonical(const nlohmann::json& j, std::string* out) {
  using T = nlohmann::json::value_t;
  switch (j.type()) {
    case T::object: {
      *out += '{';
      bool first = true;
      for (const auto& [k, v] : j.items()) {  // std::map: UTF-8 byte order = code point order
        if (!first) *out += ',';
        first = false;
        *out += nlohmann::json(k).dump(-1, ' ', /*ensure_ascii=*/true);
        *out += ':';
        KVSTASH_RETURN_IF_ERROR(AppendCanonical(v, out));
      }
      *out += '}';
      return Status::Ok();
    }
    case T::array: {
      *out += '[';
      for (size_t i = 0; i < j.size(); ++i) {
        if (i) *out += ',';
        KVSTASH_RETURN_IF_ERROR(AppendCanonical(j[i], out));
      }
      *out += ']';
      return Status::Ok();
    }
    case T::number_float: {
      const double v = j.get<double>();
      if (!std::isfinite(v)) return Status::InvalidArgument("a number out of the double range");
      *out += PythonFloatRepr(v);
      return Status::Ok();
    }
    case T::null:
    case T::boolean:
    case T::number_integer:
    case T::number_unsigned:
    case T::string:
      *out += j.dump(-1, ' ', /*ensure_ascii=*/true);
      return Status::Ok();
    default:
      return Status::InvalidArgument("not a JSON value");
  }
}

// The canonical form of a JSON object (the vLLM connector's canonical_json,
// engines/vllm/kvstash_vllm/namespace.py): Python's json.dumps(json.loads(text),
// sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False). Keys in
// code point order, strings with every non-ASCII character as a lowercase \uXXXX escape
// (surrogate pairs above U+FFFF), integers as decimals, floats as Python's repr.
// Errors: InvalidArgument for text that is not JSON, not an object, nested deeper than
// 512 levels, an integer literal outside [-2^63, 2^64 - 1] or a number beyond the
// double range (Python reads both differently or refuses them).
Result<std::string> CanonicalJsonObject(const std::string& text) {
  IntegerRangeCheck check;
  if (!nlohmann::json::sax_parse(text, &check)) {
    return Status::InvalidArgument(check.error.empty() ? "not JSON" : check.error);
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(e.what());
  }
  if (!j.is_object()) return Status::InvalidArgument("expected a JSON object");
  std::string out;
  KVSTASH_RETURN_IF_ERROR(AppendCanonical(j, &out));
  return out;
}

// The vLLM connector's model fingerprint (engines/vllm/kvstash_vllm/namespace.py,
// model_fingerprint / adapter_fingerprint; docs/format/keys.md): SHA-256 over
//   1. each weights file, in name order: its base name, a NUL, its bytes (a file path is
//      that one file; a folder's weights files are its *.safetensors, else its *.bin /
//      *.pt / *.pth, else its *.gguf);
//   2. when `path` is a folder holding a file `config_name` (config.json for a model,
//      adapter_config.json for a LoRA adapter): that name, a NUL, its bytes;
//   3. when `overrides` (canonical hf_overrides JSON) is not empty: "hf_overrides", a
//      NUL, overrides.
// Errors: NotFound (no such path, no weights files in the folder), IOError (a read).
Result<Digest256> VllmFingerprint(const std::string& path, const std::string& config_name,
                                  const std::string& overrides) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::string> files;
  std::string config;
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
    const fs::path c = fs::path(path) / config_name;
    if (!config_name.empty() && fs::is_regular_file(c, ec)) config = c.string();
  } else {
    return Status::NotFound(path + " is neither a file nor a folder");
  }
  Sha256Stream h;
  auto feed_name = [&h](const std::string& name) {
    h.Update({reinterpret_cast<const uint8_t*>(name.c_str()), name.size() + 1});  // with its NUL
  };
  for (const std::string& f : files) {
    feed_name(fs::path(f).filename().string());
    KVSTASH_RETURN_IF_ERROR(h.UpdateFromFile(f));
  }
  if (!config.empty()) {
    feed_name(config_name);
    KVSTASH_RETURN_IF_ERROR(h.UpdateFromFile(config));
  }
  if (!overrides.empty()) {
    feed_name("hf_overrides");
    h.Update({reinterpret_cast<const uint8_t*>(overrides.data()), overrides.size()});
  }
  return h.Finish();
}

int Run(const KeysOptions& o) {
  Namespace spec;
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
    std::string overrides;
    if (o.vllm_hf_overrides_given) {
      auto canon = CanonicalJsonObject(o.vllm_hf_overrides);
      if (!canon.ok()) {
        std::cerr << "kvstash keys: --vllm-hf-overrides: " << canon.status().ToString() << "\n";
        return 2;
      }
      if (*canon != "{}") overrides = *canon;  // empty overrides do not enter the digest
    }
    auto digest = vllm ? VllmFingerprint(o.vllm_model, "config.json", overrides) : Sha256File(o.model_file);
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
    auto digest = VllmFingerprint(o.vllm_adapter, "adapter_config.json", "");
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
  // An empty chain is correct but easy to misread: say why on stderr.
  if (keys->empty() && !o.partial && !tokens.empty()) {
    std::cerr << "kvstash keys: " << tokens.size() << " tokens are fewer than one chunk of "
              << spec.chunk_tokens << ", so no chunk is keyed (--partial keys a final partial chunk)\n";
  }
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
                                         "else *.gguf; then \"config.json\", a NUL and its bytes when the folder "
                                         "has one; then --vllm-hf-overrides; docs/format/keys.md)")
                             ->check(CLI::ExistingPath)
                             ->excludes(file);
      auto* hf_overrides = cmd->add_option("--vllm-hf-overrides", o->vllm_hf_overrides,
                      "The engine's hf_overrides as a JSON object (e.g. '{\"rope_theta\": 10000}'): "
                      "entered into --vllm-model's fingerprint in the connector's canonical form "
                      "(Python json.dumps(sort_keys=True, separators=(\",\", \":\")), floats as "
                      "Python's repr); '{}' is no overrides")
          ->needs(vllm_model);
      cmd->add_option("--model-fingerprint", o->model_fingerprint_hex,
                      "The field's raw bytes, hex-encoded (for another implementation's value; the "
                      "keys kvstash's own producers write need --model-file or --vllm-model, or the "
                      "hex of the 64-character digest text)")
          ->excludes(file)
          ->excludes(vllm_model);
      cmd->add_option("--dtype", o->dtype, "KV dtype: bf16, f16, f32, fp8_e4m3")
          ->check(CLI::IsMember({"bf16", "f16", "f32", "fp8_e4m3"}))
          ->capture_default_str();
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
                      "connector writes (the 32 raw bytes of the SHA-256 over its weights files as "
                      "for --vllm-model, then \"adapter_config.json\", a NUL and its bytes when present)")
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
      return [o, hf_overrides] {
        o->vllm_hf_overrides_given = hf_overrides->count() > 0;
        return Run(*o);
      };
    });

}  // namespace
}  // namespace kvstash::cli
