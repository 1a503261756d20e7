// The start and the end that both SmolLM2 demos share (the reference runtime,
// demo_reference.h, and llama.cpp, demo_llama.h): the codecs to run, the server and
// client, the model with its tokenizer and fingerprint, the codec of a pass, the
// artifact and workload lines of the report, and the JSON report with the run's facts.
// Thread-safety: one demo at a time per process.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "demo/demo.h"
#include "demo/demo_artifacts.h"
#include "demo/demo_report.h"
#include "demo/demo_server.h"
#include "demo/demo_workload.h"
#include "kvstash/client.h"
#include "kvstash/prefix_codec.h"
#include "kvstash/sha256.h"
#include "model/forward/model.h"
#include "model/predictor/spec_predictor.h"

namespace kvstash::demo {

// What OpenDemo loads.
struct DemoSetup {
  DemoCodecs codecs;  // options.codecs, in order
  std::shared_ptr<Client> client;
  std::unique_ptr<model::Model> model;  // with a tokenizer
  Digest256 fingerprint{};              // SHA-256 of the model file
  double load_s = 0;                    // seconds loading and fingerprinting the model
};

// Parses the codecs, starts the server when asked (into *server) and connects with
// *client_options, loads the model and fingerprints its file. Returns 0, or the exit
// code after printing why on stderr: 2 for codecs it does not know, 1 otherwise.
int OpenDemo(const DemoOptions& options, ClientOptions* client_options, DemoServer* server, DemoSetup* out);

// Prints the artifact lines (spec with `spec_note` inside its parentheses, dckv, the
// calibration when one ran) on stdout.
void PrintArtifacts(const DemoArtifacts& artifacts, const std::string& spec_note);

// Prints the workload line on stdout and returns the workload's prompt tokens.
uint64_t PrintWorkload(const DemoWorkload& workload, const DemoWorkloadOptions& options);

// The codec of `kind` for a run's pass: MakeDemoCodec over setup's model and
// fingerprint, with `tenant`, `cache_salt` and `kv_dtype`. Errors: MakeDemoCodec's.
Result<std::unique_ptr<PrefixCodec>> MakeRunCodec(PrefixCodecKind kind, const DemoSetup& setup,
                                                  std::shared_ptr<const model::SpecPredictor> predictor,
                                                  const DemoArtifacts& artifacts, const std::string& tenant,
                                                  const std::string& cache_salt, DType kv_dtype);

// The run's facts for CloseDemo (seconds; `predictor` null without spec).
DemoRunFacts RunFacts(uint64_t prompt_tokens, double calibration_s, double reference_s, double wall_s,
                      const std::string& run_id, const model::SpecPredictor* predictor);

// Writes the JSON report when options.json is set (WriteDemoJson with `facts`, whose
// model_sha256, requests and sources it fills from `setup` and `workload`), then
// finishes the server. Returns the exit code: 0 when the acceptance passed, 1 when it
// did not or the report could not be written.
int CloseDemo(const DemoOptions& options, const DemoSetup& setup, const DemoWorkload& workload,
              const std::vector<DemoCodecRow>& rows, const nlohmann::json& acceptance, DemoRunFacts facts,
              const nlohmann::json& engine_setup, const nlohmann::json& extra, DemoServer* server);

}  // namespace kvstash::demo
