#include "store/rocks_logger.h"

#include <rocksdb/env.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <string_view>

#include "common/logging.h"

namespace kvstash::store {
namespace {

class SpdlogRocksLogger final : public rocksdb::Logger {
 public:
  SpdlogRocksLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::DEBUG_LEVEL) {}

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override { Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap); }

  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    spdlog::level::level_enum to = spdlog::level::debug;  // DEBUG, INFO, HEADER (option dumps)
    if (level == rocksdb::InfoLogLevel::WARN_LEVEL) to = spdlog::level::warn;
    if (level == rocksdb::InfoLogLevel::ERROR_LEVEL || level == rocksdb::InfoLogLevel::FATAL_LEVEL) {
      to = spdlog::level::err;
    }
    if (!::kvstash::Logger().should_log(to)) return;  // no formatting for lines nobody sees
    char buf[1024];
    va_list copy;
    va_copy(copy, ap);
    const int n = std::vsnprintf(buf, sizeof(buf), format, copy);
    va_end(copy);
    if (n < 0) return;
    ::kvstash::Logger().log(to, "rocksdb: {}", std::string_view(buf, std::min<size_t>(static_cast<size_t>(n), sizeof(buf) - 1)));
  }
};

}  // namespace

std::shared_ptr<rocksdb::Logger> MakeRocksLogger() { return std::make_shared<SpdlogRocksLogger>(); }

}  // namespace kvstash::store
