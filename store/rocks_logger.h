// RocksDB's info log sent to the process's spdlog logger ("kvstash", common/logging.h)
// instead of the LOG file RocksDB writes beside its data by default.
//
// Why: the LOG file lives on the data disk. When that disk fills, a failed LOG write
// leaves RocksDB's file writer in an error state, and Debian's librocksdb 7.8 (built
// with assertions) aborts the process on the next log line, which its own error
// handler writes while reporting the full disk (found by tests/campaign/fault_campaign
// full_disk: kvstash-server died with "Assertion `sync_without_flush_called_' failed"
// in WritableFileWriter::Append under EnvLogger::Logv). With this logger a full disk
// is an IOError of the write that hit it, and the server keeps serving reads.
//
// Levels: RocksDB DEBUG/INFO -> spdlog debug, WARN -> warn, ERROR/FATAL/HEADER ->
// error (HEADER lines are option dumps: debug). Lines are prefixed "rocksdb: ".
// Thread-safety: Logv may be called from any RocksDB thread (spdlog is thread-safe).
#pragma once

#include <memory>

namespace rocksdb {
class Logger;
}

namespace kvstash::store {

// A new logger; set it as DBOptions::info_log.
std::shared_ptr<rocksdb::Logger> MakeRocksLogger();

}  // namespace kvstash::store
