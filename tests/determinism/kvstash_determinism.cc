// kvstash_determinism: computes every item of the determinism manifest on this build
// and CPU (tests/determinism/determinism.h) and compares it with the committed manifest,
// naming each item that differs (docs/determinism.md).
//
//   kvstash_determinism [--manifest FILE] [--fixtures DIR] [--model GGUF] [--rwkv7 BIN]
//                       [--threads N] [--splits A,B,...] [--json FILE] [--emit DIR]
//                       [--prompts N] [--cuda] [--write]
//
// Exit status: 0 all items equal the manifest; 1 some differ (their names are printed
// as "DIFFERS <name>"); 2 usage or an unusable input. The SIMD path is chosen with
// KVSTASH_CPU_PATH (common/cpu_path.h). --write regenerates the fixtures and the
// manifest from this build (legitimate only when a format version changes or an item
// is added); --json writes this run's digests for the variants table; --emit writes
// the payloads and states this build re-encoded, for another platform to decode;
// --prompts N computes and compares only the first N evaluation prompts' items (the
// others are reported as skipped: emulated runs, scripts/determinism_aarch64.sh);
// --cuda also computes the items of the CUDA predictor and decoders, named "cuda:" +
// the manifest item each must equal (tests/determinism/determinism_cuda.h; builds
// with KVSTASH_CUDA only; exit 2 without a device).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/cpu_path.h"
#include "common/file_bytes.h"
#include "model/formats/model_loader.h"
#include "tests/determinism/determinism.h"
#ifdef KVSTASH_HAVE_CUDA
#include "gpu_kernels/cuda_check.h"
#include "tests/determinism/determinism_cuda.h"
#endif

namespace {

int Usage(const char* why, FILE* to = stderr) {
  std::fprintf(to,
               "kvstash_determinism: %s\nusage: kvstash_determinism [--manifest FILE] [--fixtures DIR] "
               "[--model GGUF] [--rwkv7 BIN] [--threads N] [--splits A,B,...] [--json FILE] [--emit DIR] "
               "[--prompts N] [--cuda] [--write]\n",
               why);
  return 2;
}

// A positive decimal integer <= max, or nullopt.
std::optional<uint32_t> ParsePositive(const std::string& s, uint32_t max) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  const unsigned long v = std::stoul(s);
  if (v < 1 || v > max) return std::nullopt;
  return static_cast<uint32_t>(v);
}

// "A,B,...": positive token positions (< 2^20); nullopt for anything else.
std::optional<std::vector<uint32_t>> ParseSplits(const std::string& s) {
  std::vector<uint32_t> out;
  size_t at = 0;
  while (at <= s.size()) {
    size_t comma = s.find(',', at);
    if (comma == std::string::npos) comma = s.size();
    auto v = ParsePositive(s.substr(at, comma - at), 1u << 20);
    if (!v) return std::nullopt;
    out.push_back(*v);
    at = comma + 1;
  }
  return out;
}

std::string Joined(const std::vector<uint32_t>& v) {
  std::string s;
  for (uint32_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s.empty() ? "-" : s;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kvstash;
  const std::string src = KVSTASH_SOURCE_DIR;
  std::string manifest = src + "/tests/determinism/manifest.json";
  std::string fixtures = src + "/tests/determinism/fixtures";
  std::string model_path = src + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (const char* d = std::getenv("KVSTASH_MODELS_DIR"); d != nullptr && *d != '\0') {
    model_path = std::string(d) + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  }
  std::string rwkv7_path = src + "/../shared/models/tiny-rwkv-7v0-834K-FP32.bin";
  if (const char* d = std::getenv("KVSTASH_SHARED_MODELS_DIR"); d != nullptr && *d != '\0') {
    rwkv7_path = std::string(d) + "/tiny-rwkv-7v0-834K-FP32.bin";
  }
  std::string json_out;
  bool write = false;
  bool cuda = false;
  determinism::Inputs in;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::optional<std::string> {
      if (i + 1 >= argc) return std::nullopt;
      return std::string(argv[++i]);
    };
    std::optional<std::string> v;
    if (a == "--help" || a == "-h") {
      Usage("the determinism manifest's items on this build (docs/determinism.md)", stdout);
      return 0;
    }
    if (a.rfind("--", 0) != 0) return Usage(("unexpected argument " + a).c_str());
    if (a == "--write" || a == "--cuda") {
      (a == "--write" ? write : cuda) = true;
      continue;
    }
    if (!(v = value())) return Usage(("missing value of " + a).c_str());
    try {
      if (a == "--manifest") manifest = *v;
      else if (a == "--fixtures") fixtures = *v;
      else if (a == "--model") model_path = *v;
      else if (a == "--rwkv7") rwkv7_path = *v;
      else if (a == "--json") json_out = *v;
      else if (a == "--emit") in.emit_dir = *v;
      else if (a == "--threads") {
        auto n = ParsePositive(*v, 256);
        if (!n) return Usage("--threads takes 1 .. 256");
        in.threads = static_cast<int>(*n);
      }
      else if (a == "--splits") {
        auto sp = ParseSplits(*v);
        if (!sp) return Usage("--splits takes positive token positions, e.g. 1,33");
        in.splits = *sp;
      }
      else if (a == "--prompts") {
        auto n = ParsePositive(*v, 2);
        if (!n) return Usage("--prompts takes 1 or 2");
        in.prompts = *n;
      }
      else return Usage(("unknown option " + a).c_str());
    } catch (const std::exception&) {
      return Usage(("bad value of " + a).c_str());
    }
  }
  if (write && in.prompts != SIZE_MAX) return Usage("--write computes every item: drop --prompts");
  if (write && cuda) return Usage("--write writes the CPU reference: drop --cuda");
#ifndef KVSTASH_HAVE_CUDA
  if (cuda) return Usage("--cuda: this build has no CUDA (configure with KVSTASH_CUDA=ON)");
#else
  if (std::string why; cuda && !gpu::CudaDeviceAvailable(&why)) {  // before minutes of CPU items
    std::fprintf(stderr, "kvstash_determinism --cuda: no CUDA device: %s\n", why.c_str());
    return 2;
  }
#endif
  in.fixtures_dir = fixtures;
  if (!in.emit_dir.empty()) std::filesystem::create_directories(in.emit_dir);

  auto smollm = model::LoadModel(model_path);
  if (!smollm.ok()) {
    std::fprintf(stderr, "kvstash_determinism: %s: %s (run scripts/setup.sh)\n", model_path.c_str(),
                 smollm.status().ToString().c_str());
    return 2;
  }
  in.smollm = smollm->get();
  std::optional<rwkv7::Rwkv7Model> rwkv;
  if (std::filesystem::exists(rwkv7_path)) {
    auto r = rwkv7::Rwkv7Model::Load(rwkv7_path);
    if (!r.ok()) {
      std::fprintf(stderr, "kvstash_determinism: %s: %s\n", rwkv7_path.c_str(), r.status().ToString().c_str());
      return 2;
    }
    rwkv.emplace(std::move(r).value());
    in.rwkv7 = &*rwkv;
  }
  std::printf("kvstash_determinism: KVSTASH_CPU_PATH=%s threads=%d splits=%s\n", CpuPathName(), in.threads,
              Joined(in.splits).c_str());

  if (write) {
    if (Status s = determinism::WriteFixtures(in); !s.ok()) {
      std::fprintf(stderr, "kvstash_determinism --write: %s\n", s.ToString().c_str());
      return 2;
    }
  }
  auto got = determinism::ComputeDigests(in);
  if (!got.ok()) {
    std::fprintf(stderr, "kvstash_determinism: %s\n", got.status().ToString().c_str());
    return 2;
  }
#ifdef KVSTASH_HAVE_CUDA
  if (cuda) {
    auto on_gpu = determinism::ComputeCudaDigests(in);
    if (!on_gpu.ok()) {
      std::fprintf(stderr, "kvstash_determinism: %s\n", on_gpu.status().ToString().c_str());
      return 2;
    }
    got->insert(on_gpu->begin(), on_gpu->end());
  }
#endif
  if (!json_out.empty()) {
    if (Status s = determinism::WriteManifest(json_out, *got); !s.ok()) {
      std::fprintf(stderr, "kvstash_determinism: %s\n", s.ToString().c_str());
      return 2;
    }
  }
  if (write) {
    for (const auto& [name, value] : *got) {
      if (value.rfind("error", 0) == 0) {
        std::fprintf(stderr, "kvstash_determinism --write: %s = %s\n", name.c_str(), value.c_str());
        return 2;
      }
    }
    if (Status s = determinism::WriteManifest(manifest, *got); !s.ok()) {
      std::fprintf(stderr, "kvstash_determinism: %s\n", s.ToString().c_str());
      return 2;
    }
    std::printf("wrote %s (%zu items) and the fixtures in %s\n", manifest.c_str(), got->size(), fixtures.c_str());
    return 0;
  }

  auto want = determinism::ReadManifest(manifest);
  if (!want.ok()) {
    std::fprintf(stderr, "kvstash_determinism: %s\n", want.status().ToString().c_str());
    return 2;
  }
  if (in.rwkv7 == nullptr) {  // visible skip: the shared RWKV-7 file is not in the repository
    std::printf("SKIPPED rwkv7.* items: %s not found (set KVSTASH_SHARED_MODELS_DIR)\n", rwkv7_path.c_str());
    std::erase_if(*want, [](const auto& kv) { return kv.first.rfind("rwkv7.", 0) == 0; });
  }
  if (in.prompts != SIZE_MAX) {  // visible skip: a subset run (--prompts)
    const size_t before = want->size();
    std::erase_if(*want, [&](const auto& kv) { return determinism::OutsidePrompts(kv.first, in.prompts); });
    std::printf("SKIPPED %zu items of evaluation prompts >= %zu (--prompts)\n", before - want->size(), in.prompts);
  }
  // Each cuda:<item> must equal the manifest's <item> (the GPU computes a subset).
  const std::string prefix = determinism::kCudaPrefix;
  for (const auto& [name, value] : *got) {
    if (name.rfind(prefix, 0) != 0) continue;
    if (auto it = want->find(name.substr(prefix.size())); it != want->end()) (*want)[name] = it->second;
  }
  const std::vector<std::string> differ = determinism::CompareDigests(*want, *got);
  for (const auto& [name, value] : *got) {
    auto it = want->find(name);
    const bool same = it != want->end() && it->second == value;
    std::printf("%-8s %-44s %s%s\n", same ? "ok" : "DIFFERS", name.c_str(), value.c_str(),
                same ? "" : (it == want->end() ? "  (not in manifest)" : ("  (manifest " + it->second + ")").c_str()));
  }
  for (const auto& [name, value] : *want) {
    if (!got->contains(name)) std::printf("DIFFERS  %-44s (not computed; manifest %s)\n", name.c_str(), value.c_str());
  }
  if (!differ.empty()) {
    std::printf("kvstash_determinism: %zu of %zu items differ from %s\n", differ.size(), want->size(),
                manifest.c_str());
    return 1;
  }
  std::printf("kvstash_determinism: all %zu items equal the manifest\n", want->size());
  return 0;
}
