#include "demo/demo.h"

#include <iostream>
#include <memory>

#include "demo/demo_driver.h"
#include "demo/demo_hybrid.h"
#include "demo/demo_llama.h"
#include "demo/demo_reference.h"

namespace kvstash::demo {

int RunDemo(DemoOptions o) {
  if (o.engine != "llama.cpp" && o.engine != "reference") {
    std::cerr << "kvstash-demo: --engine must be llama.cpp or reference\n";
    return 2;
  }
  if (o.hybrid.enabled() && o.engine == "llama.cpp") {
    std::cerr << "kvstash-demo: --model-kind hybrid runs on the reference runtime: pass --engine reference\n";
    return 2;
  }
  std::unique_ptr<DemoEngine> engine;
  if (o.engine == "llama.cpp") {
    engine = MakeLlamaDemo(o);
  } else if (o.hybrid.enabled()) {
    engine = MakeHybridDemo(
        o.hybrid, {o.codecs, o.model_path, o.client, o.start_server, o.data_dir, o.port, o.http_port,
                   o.keep_server, o.workload, o.gen_tokens, o.json, o.quiet, o.restore_policy});
  } else {
    engine = MakeReferenceDemo(std::move(o));
  }
  return RunDemoDriver(engine.get());
}

}  // namespace kvstash::demo
