#include "common/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <string>

namespace kvstash {

spdlog::logger& Logger() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::stderr_color_mt("kvstash");
    l->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [%t] %v");
    l->set_level(spdlog::level::info);
    if (const char* env = std::getenv("KVSTASH_LOG_LEVEL")) {
      const auto lvl = spdlog::level::from_str(env);
      if (lvl != spdlog::level::off || std::string(env) == "off") l->set_level(lvl);
    }
    return l;
  }();
  return *logger;
}

bool SetLogLevel(std::string_view level) {
  const auto lvl = spdlog::level::from_str(std::string(level));
  if (lvl == spdlog::level::off && level != "off") return false;
  Logger().set_level(lvl);
  return true;
}

}  // namespace kvstash
