#include "benchmarks/drivers/entropy_bench.h"

#include <zstd.h>
#if defined(KVSTASH_HAVE_HTSCODECS)
#include <htscodecs/rANS_static4x16.h>
#endif

#include <algorithm>
#include <ctime>
#include <cmath>
#include <fstream>
#include <functional>
#include <queue>
#include <random>

#include "codec/entropy/pmf.h"
#include "codec/entropy/rans.h"
#include "codec/entropy/table_builder.h"

namespace kvstash::bench {

// The bench exercises the rANS coder of codec/entropy/ throughout.
using namespace entropy;  // NOLINT(build/namespaces)
namespace {

// One benchmark stream: symbols, per-symbol model index, and the model pmfs.
struct Stream {
  std::string name;
  int symbol_bits = 8;
  std::vector<uint16_t> symbols;
  std::vector<uint16_t> model_index;       // empty: model 0 everywhere
  std::vector<std::vector<double>> models;  // pmfs over the alphabet
};

double Uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1p-53; }

std::vector<uint16_t> Sample(const std::vector<double>& pmf, size_t n, uint64_t seed) {
  std::vector<double> cdf(pmf.size());
  double acc = 0.0;
  for (size_t v = 0; v < pmf.size(); ++v) cdf[v] = acc = acc + pmf[v];
  std::mt19937_64 rng(seed);
  std::vector<uint16_t> out(n);
  for (auto& s : out) {
    const size_t v = std::upper_bound(cdf.begin(), cdf.end(), Uniform(rng) * acc) - cdf.begin();
    s = static_cast<uint16_t>(std::min(v, pmf.size() - 1));
  }
  return out;
}

std::vector<double> Histogram(const std::vector<uint16_t>& s, size_t alphabet, size_t phase,
                              size_t stride) {
  std::vector<uint64_t> counts(alphabet, 0);
  for (size_t i = phase; i < s.size(); i += stride) counts[s[i]]++;
  return HistogramPmf(counts).value();
}

Result<std::vector<Stream>> MakeStreams(const EntropyBenchOptions& o) {
  std::vector<Stream> out;
  uint64_t seed = 1;
  for (double b : {1.0, 4.0, 16.0}) {
    Stream s{"laplace_b" + std::to_string(static_cast<int>(b)), 8, {}, {}, {}};
    s.models.push_back(LaplacePmf(8, SymbolMapping::kTwosComplement, 0.0, b).value());
    s.symbols = Sample(s.models[0], o.symbols, seed++);
    out.push_back(std::move(s));
  }
  for (double sigma : {1.0, 4.0, 16.0}) {
    Stream s{"gaussian_s" + std::to_string(static_cast<int>(sigma)), 8, {}, {}, {}};
    s.models.push_back(GaussianPmf(8, SymbolMapping::kTwosComplement, 0.0, sigma).value());
    s.symbols = Sample(s.models[0], o.symbols, seed++);
    out.push_back(std::move(s));
  }
  {
    Stream s{"gaussian16_s300", 16, {}, {}, {}};
    s.models.push_back(GaussianPmf(16, SymbolMapping::kTwosComplement, 0.0, 300.0).value());
    s.symbols = Sample(s.models[0], o.symbols, seed++);
    out.push_back(std::move(s));
  }
  if (!o.bf16_sample_path.empty()) {
    std::ifstream f(o.bf16_sample_path, std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (!f.good() && !f.eof()) return Status::IOError("cannot read " + o.bf16_sample_path);
    if (bytes.size() < 4 || bytes.size() % 2 != 0) {
      return Status::IOError("bf16 sample missing or odd-sized: " + o.bf16_sample_path);
    }
    Stream whole{"smollm2_bf16_bytes", 8, {}, {}, {}};
    whole.symbols.assign(bytes.begin(), bytes.end());
    whole.models.push_back(Histogram(whole.symbols, 256, 0, 1));
    Stream split{"smollm2_bf16_bytes_split", 8, whole.symbols, {}, {}};
    split.models.push_back(Histogram(split.symbols, 256, 0, 2));
    split.models.push_back(Histogram(split.symbols, 256, 1, 2));
    split.model_index.resize(split.symbols.size());
    for (size_t i = 0; i < split.model_index.size(); ++i) split.model_index[i] = i % 2;
    Stream values{"smollm2_bf16_values", 16, {}, {}, {}};
    for (size_t i = 0; i < bytes.size(); i += 2) {
      values.symbols.push_back(static_cast<uint16_t>(bytes[i] | bytes[i + 1] << 8));
    }
    values.models.push_back(Histogram(values.symbols, 65536, 0, 1));
    out.push_back(std::move(whole));
    out.push_back(std::move(split));
    out.push_back(std::move(values));
  }
  std::erase_if(out, [&](const Stream& s) { return s.name.find(o.filter) == std::string::npos; });
  return out;
}

double IdealBits(const Stream& s) {
  double bits = 0.0;
  for (size_t i = 0; i < s.symbols.size(); ++i) {
    const auto& q = s.models[s.model_index.empty() ? 0 : s.model_index[i]];
    bits -= std::log2(q[s.symbols[i]]);
  }
  return s.symbols.empty() ? 0.0 : bits / static_cast<double>(s.symbols.size());
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Median CPU time of this thread over `repeats` runs of fn, in seconds.
double MedianSeconds(int repeats, const std::function<void()>& fn) {
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const double start = ThreadCpuSeconds();
    fn();
    t.push_back(ThreadCpuSeconds() - start);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

EntropyBenchRow MakeRow(const Stream& s, const std::string& coder, double ideal, double bytes) {
  EntropyBenchRow row;
  row.name = s.name + "/" + coder;
  row.symbols = s.symbols.size();
  row.ideal_bits_per_symbol = ideal;
  row.actual_bits_per_symbol = bytes * 8.0 / static_cast<double>(s.symbols.size());
  row.overhead_pct = 100.0 * (row.actual_bits_per_symbol / ideal - 1.0);
  return row;
}

Status BenchRans(const Stream& s, int precision, int repeats, double ideal,
                 std::vector<EntropyBenchRow>* rows) {
  std::vector<FrequencyTable> tables;
  for (const auto& pmf : s.models) {
    KVSTASH_ASSIGN_OR_RETURN(auto t, BuildTable(pmf, {.precision = precision}));
    tables.push_back(std::move(t));
  }
  KVSTASH_ASSIGN_OR_RETURN(TableSet set, TableSet::Create(std::move(tables)));
  const double mb = static_cast<double>(s.symbols.size()) * (s.symbol_bits <= 8 ? 1 : 2) / 1e6;
  std::vector<uint8_t> bytes8(s.symbols.begin(), s.symbols.end());
  std::vector<uint8_t> stream;
  Status st;
  const double enc_s = MedianSeconds(repeats, [&] {
    stream.clear();
    st = s.symbol_bits <= 8 ? RansEncodeAppend(bytes8, s.model_index, set, &stream)
                            : RansEncodeAppend(s.symbols, s.model_index, set, &stream);
  });
  KVSTASH_RETURN_IF_ERROR(st);
  for (RansDecoder d : {RansDecoder::kScalar, RansDecoder::kAvx2, RansDecoder::kAvx512}) {
    if (!RansDecoderAvailable(d)) continue;
    bool same = false;
    double dec_s = 0;
    if (s.symbol_bits <= 8) {
      std::vector<uint8_t> out(s.symbols.size());
      dec_s = MedianSeconds(repeats, [&] { st = RansDecode(stream, s.model_index, set, out, d); });
      same = out == bytes8;
    } else {
      std::vector<uint16_t> out(s.symbols.size());
      dec_s = MedianSeconds(repeats, [&] { st = RansDecode(stream, s.model_index, set, out, d); });
      same = out == s.symbols;
    }
    KVSTASH_RETURN_IF_ERROR(st);
    if (!same) return Status::Internal("rANS round trip failed on " + s.name);
    EntropyBenchRow row = MakeRow(
        s, "rans_p" + std::to_string(precision) +
               (d == RansDecoder::kAvx512 ? "_avx512" : d == RansDecoder::kAvx2 ? "_avx2" : "_scalar"),
        ideal, static_cast<double>(stream.size()));
    row.encode_mb_s = mb / enc_s;
    row.decode_mb_s = mb / dec_s;
    rows->push_back(row);
  }
  return Status::Ok();
}

Status BenchZstd(const Stream& s, int repeats, double ideal, std::vector<EntropyBenchRow>* rows) {
  std::vector<uint8_t> raw;
  if (s.symbol_bits <= 8) {
    raw.assign(s.symbols.begin(), s.symbols.end());
  } else {
    for (uint16_t v : s.symbols) {
      raw.push_back(static_cast<uint8_t>(v));
      raw.push_back(static_cast<uint8_t>(v >> 8));
    }
  }
  std::vector<uint8_t> packed(ZSTD_compressBound(raw.size()));
  size_t size = 0;
  const int zstd_repeats = std::max(1, repeats / 3);  // level 19 is slow
  const double enc_s = MedianSeconds(zstd_repeats, [&] {
    size = ZSTD_compress(packed.data(), packed.size(), raw.data(), raw.size(), 19);
  });
  if (ZSTD_isError(size)) return Status::Internal(ZSTD_getErrorName(size));
  std::vector<uint8_t> back(raw.size());
  size_t got = 0;
  const double dec_s = MedianSeconds(repeats, [&] {
    got = ZSTD_decompress(back.data(), back.size(), packed.data(), size);
  });
  if (ZSTD_isError(got) || got != raw.size() || back != raw) {
    return Status::Internal("zstd round trip failed on " + s.name);
  }
  EntropyBenchRow row = MakeRow(s, "zstd19", ideal, static_cast<double>(size));
  const double mb = static_cast<double>(raw.size()) / 1e6;
  row.encode_mb_s = mb / enc_s;
  row.decode_mb_s = mb / dec_s;
  rows->push_back(row);
  return Status::Ok();
}

#if defined(KVSTASH_HAVE_HTSCODECS)
// htscodecs' order-0 rANS (CRAM 3.1's rANS-Nx16, Bonfield, "The Scalable rANS Codecs
// for CRAM", 2021) on the same 8-bit stream: the 4-way coder and the 32-way one with
// its SIMD decoders (AVX-512 / AVX2 / SSE4 picked at run time by the library). Each
// builds its own frequency table from the data (12-bit), like our p12 rows with the
// stream's own histogram; a stream with several models is coded as one order-0 stream.
Status BenchHtscodecs(const Stream& s, int repeats, double ideal, std::vector<EntropyBenchRow>* rows) {
  if (s.symbol_bits > 8) return Status::Ok();  // byte coders
  std::vector<uint8_t> in(s.symbols.begin(), s.symbols.end());
  const auto n = static_cast<unsigned int>(in.size());
  const double mb = static_cast<double>(in.size()) / 1e6;
  for (const auto& [name, order] : {std::pair{"htscodecs_r4x16_o0", 0},
                                    std::pair{"htscodecs_r32x16_o0", RANS_ORDER_X32 | RANS_ORDER_SIMD_AUTO}}) {
    std::vector<uint8_t> packed(rans_compress_bound_4x16(n, order));
    unsigned int size = 0;
    const double enc_s = MedianSeconds(repeats, [&] {
      size = static_cast<unsigned int>(packed.size());
      if (rans_compress_to_4x16(in.data(), n, packed.data(), &size, order) == nullptr) size = 0;
    });
    if (size == 0) return Status::Internal(std::string(name) + " failed to encode " + s.name);
    std::vector<uint8_t> back(in.size());
    unsigned int got = 0;
    const double dec_s = MedianSeconds(repeats, [&] {
      got = n;
      if (rans_uncompress_to_4x16(packed.data(), size, back.data(), &got) == nullptr) got = 0;
    });
    if (got != n || back != in) return Status::Internal(std::string(name) + " round trip failed on " + s.name);
    EntropyBenchRow row = MakeRow(s, name, ideal, static_cast<double>(size));
    row.encode_mb_s = mb / enc_s;
    row.decode_mb_s = mb / dec_s;
    rows->push_back(row);
  }
  return Status::Ok();
}
#endif

}  // namespace

bool HtscodecsBuiltIn() {
#if defined(KVSTASH_HAVE_HTSCODECS)
  return true;
#else
  return false;
#endif
}

uint64_t HuffmanCodeBits(const std::vector<uint64_t>& counts) {
  // Min-heap of (weight, smallest symbol in the subtree, node id); code length of a
  // symbol = depth of its leaf; total bits = sum of internal node weights.
  using Node = std::tuple<uint64_t, uint32_t, uint32_t>;
  std::priority_queue<Node, std::vector<Node>, std::greater<Node>> heap;
  uint32_t id = 0;
  for (uint32_t v = 0; v < counts.size(); ++v) {
    if (counts[v] > 0) heap.push({counts[v], v, id++});
  }
  if (heap.size() < 2) return heap.empty() ? 0 : std::get<0>(heap.top());
  uint64_t bits = 0;
  while (heap.size() > 1) {
    const Node a = heap.top();
    heap.pop();
    const Node b = heap.top();
    heap.pop();
    const uint64_t w = std::get<0>(a) + std::get<0>(b);
    bits += w;
    heap.push({w, std::min(std::get<1>(a), std::get<1>(b)), id++});
  }
  return bits;
}

Result<std::vector<EntropyBenchRow>> RunEntropyBench(const EntropyBenchOptions& o) {
  KVSTASH_ASSIGN_OR_RETURN(std::vector<Stream> streams, MakeStreams(o));
  std::vector<EntropyBenchRow> rows;
  for (const Stream& s : streams) {
    const double ideal = IdealBits(s);
    for (int p : o.precisions) KVSTASH_RETURN_IF_ERROR(BenchRans(s, p, o.repeats, ideal, &rows));
    KVSTASH_RETURN_IF_ERROR(BenchZstd(s, o.repeats, ideal, &rows));
#if defined(KVSTASH_HAVE_HTSCODECS)
    KVSTASH_RETURN_IF_ERROR(BenchHtscodecs(s, o.repeats, ideal, &rows));
#endif
    // Static Huffman, one code per model (as the split stream selects two).
    uint64_t bits = 0;
    for (size_t m = 0; m < s.models.size(); ++m) {
      std::vector<uint64_t> counts(size_t{1} << s.symbol_bits, 0);
      for (size_t i = 0; i < s.symbols.size(); ++i) {
        if ((s.model_index.empty() ? 0 : s.model_index[i]) == m) counts[s.symbols[i]]++;
      }
      bits += HuffmanCodeBits(counts);
    }
    rows.push_back(MakeRow(s, "huffman_static", ideal, static_cast<double>(bits) / 8.0));
  }
  return rows;
}

}  // namespace kvstash::bench
