// `kvstash bench state`: how large the recurrent state of a real trained RWKV-7 is, and
// how far model-free lossless coders shrink it, on real text.
//
// Runs the RWKV-7 reference runtime (model/rwkv7) over the bytes of a text file, one
// byte per token from the zero state, and at each requested boundary exports the state
// (model/rwkv7/rwkv7_state.h), checks that it round-trips exactly through a stored
// state record and back into the runtime, and measures each part (att_shift,
// ffn_shift, wkv_state, all) with model/rwkv7/state_size.h: raw bytes, zstd, zstd
// after byte-plane shuffle, and the order-0 byte-plane entropy (ideal byte-plane
// coder). Also reports the model's bits per byte on the text, so that a broken model
// shows. Exit codes: 0 ok, 1 a round trip failed, 2 bad arguments or input.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "client/cli/command_registry.h"
#include "common/payload_format.h"
#include "model/rwkv7/rwkv7_model.h"
#include "model/rwkv7/rwkv_file.h"
#include "model/rwkv7/state_size.h"

namespace kvstash::cli {
namespace {

using rwkv7::Rwkv7Model;
using rwkv7::Rwkv7State;
using rwkv7::StatePartSize;

std::string DefaultModelPath() {
  const char* env = std::getenv("KVSTASH_SHARED_MODELS_DIR");
  const std::string dir = (env != nullptr && *env != '\0') ? env : "../shared/models";
  return dir + "/tiny-rwkv-7v0-834K-FP32.bin";
}

struct BenchStateOptions {
  std::string model = DefaultModelPath();
  std::string text = "/usr/share/common-licenses/GPL-3";
  std::string boundaries = "16,64,256,1024,4096,16384,end";
  int zstd_level = 19;
  std::string json;
};

// "16,64,end" -> sorted unique token counts; "end" is the text length.
Result<std::vector<uint32_t>> ParseBoundaries(const std::string& list, size_t text_bytes) {
  std::vector<uint32_t> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item == "end") {
      out.push_back(static_cast<uint32_t>(text_bytes));
      continue;
    }
    char* end = nullptr;
    const unsigned long v = std::strtoul(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v == 0 || v > text_bytes) {
      return Status::InvalidArgument("boundary '" + item + "' is not in 1.." +
                                     std::to_string(text_bytes) + " (the text's bytes) or 'end'");
    }
    out.push_back(static_cast<uint32_t>(v));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (out.empty()) return Status::InvalidArgument("no boundaries given");
  return out;
}

// -log2 softmax(logits)[next].
double SurprisalBits(const std::vector<float>& logits, uint32_t next) {
  const float mx = *std::max_element(logits.begin(), logits.end());
  double z = 0.0;
  for (float l : logits) z += std::exp(static_cast<double>(l - mx));
  return -((static_cast<double>(logits[next] - mx) - std::log(z)) / std::log(2.0));
}

// Exports `state`, checks record and runtime round trips, measures the parts.
Result<std::vector<StatePartSize>> MeasureBoundary(const Rwkv7Model& model,
                                                   const Rwkv7State& state, int zstd_level) {
  KVSTASH_ASSIGN_OR_RETURN(RecurrentState exported, rwkv7::ExportState(model.config(), state));
  KVSTASH_ASSIGN_OR_RETURN(std::vector<uint8_t> record,
                           EncodeStateRecord(exported, model.fingerprint()));
  KVSTASH_ASSIGN_OR_RETURN(DecodedStateRecord decoded, DecodeStateRecord(record));
  KVSTASH_ASSIGN_OR_RETURN(Rwkv7State back, rwkv7::ImportState(model.config(), decoded.state));
  if (!(decoded.state == exported) || !back.BitEqual(state)) {
    return Status::Internal("state round trip differs at boundary " + std::to_string(state.tokens));
  }
  return rwkv7::MeasureStateParts(exported, zstd_level);
}

int Run(const BenchStateOptions& o) {
  auto model = Rwkv7Model::Load(o.model);
  if (!model.ok()) {
    std::cerr << "kvstash bench state: " << o.model << ": " << model.status().ToString() << "\n";
    return 2;
  }
  auto text = rwkv7::ReadFileBytes(o.text);
  if (!text.ok() || text->empty()) {
    std::cerr << "kvstash bench state: cannot read text " << o.text << "\n";
    return 2;
  }
  auto boundaries = ParseBoundaries(o.boundaries, text->size());
  if (!boundaries.ok()) {
    std::cerr << "kvstash bench state: " << boundaries.status().ToString() << "\n";
    return 2;
  }
  const rwkv7::Rwkv7Config& cfg = model->config();
  if (cfg.n_vocab != 256) {
    std::cerr << "kvstash bench state: the text is fed as bytes; the model's vocab is "
              << cfg.n_vocab << ", not 256\n";
    return 2;
  }

  nlohmann::json rows = nlohmann::json::array();
  std::printf("%9s  %-9s %8s %9s %9s %6s %9s %6s %10s %6s\n", "boundary", "part", "scalars",
              "raw_B", "zstd_B", "ratio", "zshuf_B", "ratio", "bplane_B", "ratio");
  Rwkv7State state = Rwkv7State::Zeros(cfg);
  std::vector<float> logits(cfg.n_vocab);
  double bits = 0.0;
  double eval_seconds = 0.0;
  size_t next_boundary = 0;
  const uint32_t last = boundaries->back();
  for (uint32_t i = 0; i < last; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    if (Status s = model->Eval((*text)[i], &state, logits); !s.ok()) {
      std::cerr << "kvstash bench state: " << s.ToString() << "\n";
      return 2;
    }
    eval_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i + 1 < text->size()) bits += SurprisalBits(logits, (*text)[i + 1]);
    if (state.tokens != (*boundaries)[next_boundary]) continue;
    ++next_boundary;
    auto parts = MeasureBoundary(*model, state, o.zstd_level);
    if (!parts.ok()) {
      std::cerr << "kvstash bench state: " << parts.status().ToString() << "\n";
      return 1;
    }
    for (const StatePartSize& p : *parts) {
      const double raw = static_cast<double>(p.raw_bytes);
      std::printf("%9u  %-9s %8llu %9llu %9llu %6.3f %9llu %6.3f %10.1f %6.3f\n", state.tokens,
                  p.part.c_str(), static_cast<unsigned long long>(p.scalars),
                  static_cast<unsigned long long>(p.raw_bytes),
                  static_cast<unsigned long long>(p.zstd_bytes), p.zstd_bytes / raw,
                  static_cast<unsigned long long>(p.zstd_shuffled_bytes),
                  p.zstd_shuffled_bytes / raw, p.byteplane_bytes, p.byteplane_bytes / raw);
      rows.push_back({{"boundary_tokens", state.tokens},
                      {"part", p.part},
                      {"tensors", p.tensors},
                      {"scalars", p.scalars},
                      {"raw_bytes", p.raw_bytes},
                      {"zstd_bytes", p.zstd_bytes},
                      {"zstd_shuffled_bytes", p.zstd_shuffled_bytes},
                      {"byteplane_entropy_bytes", p.byteplane_bytes},
                      {"zstd_ratio_vs_raw", p.zstd_bytes / raw},
                      {"zstd_shuffled_ratio_vs_raw", p.zstd_shuffled_bytes / raw},
                      {"byteplane_ratio_vs_raw", p.byteplane_bytes / raw},
                      {"zstd_bits_per_scalar", 8.0 * p.zstd_bytes / p.scalars},
                      {"zstd_shuffled_bits_per_scalar", 8.0 * p.zstd_shuffled_bytes / p.scalars},
                      {"byteplane_bits_per_scalar", 8.0 * p.byteplane_bytes / p.scalars}});
    }
  }
  const size_t predicted = std::min<size_t>(last, text->size() - 1);
  const double bpb = predicted > 0 ? bits / static_cast<double>(predicted) : 0.0;
  const double tps = eval_seconds > 0 ? last / eval_seconds : 0.0;
  std::printf("model %s: %.3f bits/byte over %zu predicted bytes; %.0f tokens/s "
              "(1 thread); state round trips ok\n",
              o.model.c_str(), bpb, predicted, tps);

  if (!o.json.empty()) {
    nlohmann::json j;
    j["bench"] = "state";
    j["model"] = o.model;
    j["model_fingerprint"] = ToHex(model->fingerprint());
    j["text"] = o.text;
    j["text_bytes"] = text->size();
    j["zstd_level"] = o.zstd_level;
    j["bits_per_byte"] = bpb;
    j["tokens_per_second"] = tps;
    j["rows"] = rows;
    std::ofstream f(o.json);
    f << j.dump(1) << "\n";
    if (!f) {
      std::cerr << "kvstash bench state: cannot write " << o.json << "\n";
      return 2;
    }
  }
  return 0;
}

const bool kRegistered = RegisterCommand(
    "bench state",
    "Recurrent-state size of the real RWKV-7 on real text: raw, zstd, byte-plane entropy",
    [](CLI::App* cmd) {
      auto o = std::make_shared<BenchStateOptions>();
      cmd->add_option("--model", o->model, "rwkv.cpp RWKV-7 model file (FP32/FP16)")
          ->capture_default_str();
      cmd->add_option("--text", o->text, "Text file, fed to the model byte by byte")
          ->capture_default_str();
      cmd->add_option("--boundaries", o->boundaries,
                      "Comma-separated token counts at which to measure the state ('end' = "
                      "the whole text)")
          ->capture_default_str();
      cmd->add_option("--zstd-level", o->zstd_level, "zstd compression level")
          ->capture_default_str();
      cmd->add_option("--json", o->json, "Write the rows to FILE as JSON");
      return [o] { return Run(*o); };
    });

}  // namespace
}  // namespace kvstash::cli
