// Logging: spdlog with one process-wide logger named "kvstash".
//
// Use KVSTASH_LOG_INFO("opened {} with {} entries", path, n) etc. (fmt syntax). The
// level comes from KVSTASH_LOG_LEVEL (trace, debug, info, warn, error, off; default
// info) the first time the logger is used; SetLogLevel overrides it.
// Thread-safety: spdlog loggers are thread-safe.
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

namespace kvstash {

// The shared logger (created on first use, writes to stderr).
spdlog::logger& Logger();
// Sets the level by name; unknown names leave it unchanged and return false.
bool SetLogLevel(std::string_view level);

}  // namespace kvstash

#define KVSTASH_LOG_DEBUG(...) ::kvstash::Logger().debug(__VA_ARGS__)
#define KVSTASH_LOG_INFO(...) ::kvstash::Logger().info(__VA_ARGS__)
#define KVSTASH_LOG_WARN(...) ::kvstash::Logger().warn(__VA_ARGS__)
#define KVSTASH_LOG_ERROR(...) ::kvstash::Logger().error(__VA_ARGS__)
