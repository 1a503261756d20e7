// The one driver of `kvstash-demo`: opens one engine's demo, runs one codec pass per
// codec (each an engine-session pass, demo_session_pass.h), and closes it with the
// report. What differs per engine is a DemoEngine: the reference runtime
// (demo_reference.h), llama.cpp (demo_llama.h) and the hybrid runtime
// (demo_hybrid.h); each holds its set-up (model, artifacts, codecs), the construction
// of its session engine and checks (its runner), and its report.
// Thread-safety: one demo at a time per process.
#pragma once

#include <cstddef>

namespace kvstash::demo {

// One engine's demo. Every method prints why it failed on stderr and returns the
// exit code (0: go on; 1: a step failed; 2: bad options).
class DemoEngine {
 public:
  virtual ~DemoEngine() = default;
  // Starts the server, loads the model, the artifacts and the workload and prints the
  // set-up lines.
  virtual int Open() = 0;
  // The codecs to run (valid after Open).
  virtual size_t codec_count() const = 0;
  // The pass of the k-th codec (its row kept for Close).
  virtual int RunCodec(size_t k) = 0;
  // Prints the report, writes the JSON and finishes the server; 0 when the acceptance
  // passed.
  virtual int Close() = 0;
};

// Open, RunCodec for every codec, Close. Returns the exit code.
int RunDemoDriver(DemoEngine* engine);

}  // namespace kvstash::demo
