#include "demo/demo_driver.h"

namespace kvstash::demo {

int RunDemoDriver(DemoEngine* e) {
  if (const int code = e->Open(); code != 0) return code;
  for (size_t k = 0; k < e->codec_count(); ++k) {
    if (const int code = e->RunCodec(k); code != 0) return code;
  }
  return e->Close();
}

}  // namespace kvstash::demo
