// `kvstash-demo --engine reference`: the demo's workload on SmolLM2 with our reference
// runtime as the engine (demo_runner.h has its checks), as the driver's DemoEngine
// (demo_driver.h). Set-up: the model (demo_setup.h), the spec predictor in our
// runtime's arithmetic, the codec artifacts (demo_artifacts.h), the workload; bf16 KV
// across the engine interface.
// Thread-safety: one demo at a time per process.
#pragma once

#include <memory>

#include "demo/demo.h"
#include "demo/demo_driver.h"

namespace kvstash::demo {

// The reference runtime's demo of `options` (options.engine "reference", hybrid off).
std::unique_ptr<DemoEngine> MakeReferenceDemo(DemoOptions options);

}  // namespace kvstash::demo
