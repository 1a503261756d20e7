#include "model/formats/gguf_reader.h"

#include <cstring>
#include <limits>

#include "common/byte_io.h"
#include "kvstash/dtype_bits.h"

namespace kvstash::model {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint32_t kMaxDims = 4;             // GGML_MAX_DIMS
constexpr uint64_t kMaxKeyBytes = 1 << 16;

Status Bad(const std::string& what) { return Status::Corruption("GGUF: " + what); }

class Parser {
 public:
  explicit Parser(std::span<const uint8_t> b) : r_(b) {}
  ByteReader& r() { return r_; }

  Status String(std::string* out, uint64_t max_len, const char* what) {
    uint64_t n = 0;
    if (!r_.U64(&n)) return Bad(std::string("truncated length of ") + what);
    if (n > max_len || n > r_.remaining()) {
      return Bad(std::string(what) + " length " + std::to_string(n) + " exceeds the file");
    }
    std::span<const uint8_t> s;
    (void)r_.Take(n, &s);
    out->assign(reinterpret_cast<const char*>(s.data()), s.size());
    return Status::Ok();
  }

  // Reads a scalar of type t into v (integers in v->i, floats in v->f).
  Status Scalar(GgufValueType t, GgufValue* v) {
    bool ok = true;
    switch (t) {
      case GgufValueType::kU8: { uint8_t x = 0; ok = r_.U8(&x); v->i = x; break; }
      case GgufValueType::kI8: { uint8_t x = 0; ok = r_.U8(&x); v->i = static_cast<int8_t>(x); break; }
      case GgufValueType::kU16: { uint16_t x = 0; ok = r_.U16(&x); v->i = x; break; }
      case GgufValueType::kI16: { uint16_t x = 0; ok = r_.U16(&x); v->i = static_cast<int16_t>(x); break; }
      case GgufValueType::kU32: { uint32_t x = 0; ok = r_.U32(&x); v->i = x; break; }
      case GgufValueType::kI32: { uint32_t x = 0; ok = r_.U32(&x); v->i = static_cast<int32_t>(x); break; }
      case GgufValueType::kU64: {
        uint64_t x = 0;
        ok = r_.U64(&x);
        if (ok && x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          return Bad("u64 metadata value too large");
        }
        v->i = static_cast<int64_t>(x);
        break;
      }
      case GgufValueType::kI64: { uint64_t x = 0; ok = r_.U64(&x); v->i = static_cast<int64_t>(x); break; }
      case GgufValueType::kF32: { uint32_t x = 0; ok = r_.U32(&x); v->f = FromBits(x); break; }
      case GgufValueType::kF64: {
        uint64_t x = 0;
        ok = r_.U64(&x);
        double d;
        std::memcpy(&d, &x, sizeof d);
        v->f = d;
        break;
      }
      case GgufValueType::kBool: {
        uint8_t x = 0;
        ok = r_.U8(&x);
        if (ok && x > 1) return Bad("bool metadata value " + std::to_string(x));
        v->i = x;
        break;
      }
      case GgufValueType::kString: return String(&v->s, r_.remaining(), "string value");
      default: return Bad("bad scalar value type " + std::to_string(static_cast<uint32_t>(t)));
    }
    return ok ? Status::Ok() : Bad("truncated metadata value");
  }

  Status Value(GgufValue* v) {
    uint32_t raw = 0;
    if (!r_.U32(&raw)) return Bad("truncated value type");
    if (raw > 12) return Bad("unknown metadata value type " + std::to_string(raw));
    v->type = static_cast<GgufValueType>(raw);
    if (v->type != GgufValueType::kArray) return Scalar(v->type, v);
    uint32_t et = 0;
    uint64_t n = 0;
    if (!r_.U32(&et) || !r_.U64(&n)) return Bad("truncated array header");
    if (et > 12 || et == static_cast<uint32_t>(GgufValueType::kArray)) {
      return Bad("bad array element type " + std::to_string(et));
    }
    v->elem_type = static_cast<GgufValueType>(et);
    // Every element takes at least one byte: a count above the rest of the file is bad.
    if (n > r_.remaining()) return Bad("array of " + std::to_string(n) + " elements exceeds the file");
    GgufValue e;
    for (uint64_t k = 0; k < n; ++k) {
      KVSTASH_RETURN_IF_ERROR(Scalar(v->elem_type, &e));
      switch (v->elem_type) {
        case GgufValueType::kString: v->strings.push_back(std::move(e.s)); break;
        case GgufValueType::kF32:
        case GgufValueType::kF64: v->floats.push_back(e.f); break;
        default: v->ints.push_back(e.i); break;
      }
    }
    return Status::Ok();
  }

 private:
  ByteReader r_;
};

bool IsIntType(GgufValueType t) {
  return t != GgufValueType::kF32 && t != GgufValueType::kF64 && t != GgufValueType::kString &&
         t != GgufValueType::kArray;
}

}  // namespace

Result<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  KVSTASH_ASSIGN_OR_RETURN(auto mapped, MappedFile::Open(path));
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->bytes_ = mapped->bytes();
  f->file_ = std::move(mapped);
  Status s = f->ParseAll();
  if (!s.ok()) return s.WithContext(path);
  return f;
}

Result<std::unique_ptr<GgufFile>> GgufFile::Parse(std::span<const uint8_t> bytes) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->bytes_ = bytes;
  KVSTASH_RETURN_IF_ERROR(f->ParseAll());
  return f;
}

Status GgufFile::ParseAll() {
  Parser p(bytes_);
  uint32_t magic = 0;
  uint64_t n_tensors = 0, n_kv = 0;
  if (!p.r().U32(&magic) || magic != kGgufMagic) return Bad("not a GGUF file (bad magic)");
  if (!p.r().U32(&version_)) return Bad("truncated header");
  if (version_ != 2 && version_ != 3) return Bad("unsupported version " + std::to_string(version_));
  if (!p.r().U64(&n_tensors) || !p.r().U64(&n_kv)) return Bad("truncated header");
  // A kv needs >= 12 bytes and a tensor entry >= 24: cheap sanity bounds.
  if (n_kv > p.r().remaining() / 12) return Bad("kv_count " + std::to_string(n_kv) + " exceeds the file");
  if (n_tensors > p.r().remaining() / 24) {
    return Bad("tensor_count " + std::to_string(n_tensors) + " exceeds the file");
  }
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key;
    KVSTASH_RETURN_IF_ERROR(p.String(&key, kMaxKeyBytes, "key"));
    GgufValue v;
    Status s = p.Value(&v);
    if (!s.ok()) return s.WithContext("key " + key);
    if (kv_.count(key) != 0) return Bad("duplicate key " + key);
    kv_.emplace(std::move(key), std::move(v));
  }
  if (Has("general.alignment")) {
    Result<uint32_t> a = GetU32("general.alignment");
    if (!a.ok() || *a == 0 || (*a & (*a - 1)) != 0) return Bad("general.alignment is not a power of two");
    alignment_ = *a;
  }
  tensors_.reserve(n_tensors);
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensorInfo t;
    KVSTASH_RETURN_IF_ERROR(p.String(&t.name, kMaxKeyBytes, "tensor name"));
    uint32_t n_dims = 0;
    if (!p.r().U32(&n_dims)) return Bad("truncated tensor info " + t.name);
    if (n_dims == 0 || n_dims > kMaxDims) {
      return Bad("tensor " + t.name + " has " + std::to_string(n_dims) + " dims");
    }
    t.elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim = 0;
      if (!p.r().U64(&dim)) return Bad("truncated dims of " + t.name);
      if (dim == 0 || dim > (uint64_t{1} << 40) || t.elements > (uint64_t{1} << 40) / dim) {
        return Bad("tensor " + t.name + " has a bad dimension " + std::to_string(dim));
      }
      t.elements *= dim;
      t.dims.push_back(dim);
    }
    if (!p.r().U32(&t.raw_type) || !p.r().U64(&t.offset)) return Bad("truncated tensor info " + t.name);
    if (IsSupportedGgmlType(t.raw_type)) {
      Result<uint64_t> rb = RowBytes(static_cast<GgmlType>(t.raw_type), t.dims[0]);
      if (!rb.ok()) return Bad("tensor " + t.name + ": " + rb.status().message());
      t.bytes = *rb * (t.elements / t.dims[0]);
    }
    if (t.offset % alignment_ != 0) return Bad("tensor " + t.name + " offset is not aligned");
    if (tensor_index_.count(t.name) != 0) return Bad("duplicate tensor " + t.name);
    tensor_index_[t.name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }
  const uint64_t pos = p.r().pos();
  data_start_ = (pos + alignment_ - 1) / alignment_ * alignment_;
  if (data_start_ > bytes_.size() && !tensors_.empty()) return Bad("data section starts past the end");
  for (const GgufTensorInfo& t : tensors_) {
    const uint64_t avail = bytes_.size() > data_start_ ? bytes_.size() - data_start_ : 0;
    if (t.offset > avail || t.bytes > avail - t.offset) {
      return Bad("tensor " + t.name + " data [" + std::to_string(t.offset) + ", +" +
                 std::to_string(t.bytes) + ") lies past the end of the file");
    }
  }
  return Status::Ok();
}

Result<uint32_t> GgufFile::GetU32(const std::string& key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return Status::NotFound("GGUF key " + key + " absent");
  if (!IsIntType(it->second.type) || it->second.i < 0 ||
      it->second.i > std::numeric_limits<uint32_t>::max()) {
    return Status::InvalidArgument("GGUF key " + key + " is not a u32-sized integer");
  }
  return static_cast<uint32_t>(it->second.i);
}

Result<float> GgufFile::GetF32(const std::string& key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return Status::NotFound("GGUF key " + key + " absent");
  const GgufValue& v = it->second;
  if (v.type == GgufValueType::kF32 || v.type == GgufValueType::kF64) return static_cast<float>(v.f);
  if (IsIntType(v.type)) return static_cast<float>(v.i);
  return Status::InvalidArgument("GGUF key " + key + " is not a number");
}

Result<bool> GgufFile::GetBool(const std::string& key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return Status::NotFound("GGUF key " + key + " absent");
  if (it->second.type != GgufValueType::kBool) return Status::InvalidArgument("GGUF key " + key + " is not a bool");
  return it->second.i != 0;
}

Result<std::string> GgufFile::GetString(const std::string& key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return Status::NotFound("GGUF key " + key + " absent");
  if (it->second.type != GgufValueType::kString) {
    return Status::InvalidArgument("GGUF key " + key + " is not a string");
  }
  return it->second.s;
}

Result<const GgufValue*> GgufFile::GetArray(const std::string& key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return Status::NotFound("GGUF key " + key + " absent");
  if (it->second.type != GgufValueType::kArray) {
    return Status::InvalidArgument("GGUF key " + key + " is not an array");
  }
  return &it->second;
}

Result<const GgufTensorInfo*> GgufFile::FindTensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  if (it == tensor_index_.end()) return Status::NotFound("GGUF tensor " + name + " absent");
  return &tensors_[it->second];
}

Result<std::span<const uint8_t>> GgufFile::TensorBytes(const GgufTensorInfo& t) const {
  if (!IsSupportedGgmlType(t.raw_type)) {
    return Status::NotSupported("GGUF tensor " + t.name + " has ggml type " +
                                std::to_string(t.raw_type) + ", which this build cannot dequantise");
  }
  return bytes_.subspan(data_start_ + t.offset, t.bytes);
}

Result<std::vector<float>> GgufFile::ReadF32(const std::string& name) const {
  KVSTASH_ASSIGN_OR_RETURN(const GgufTensorInfo* t, FindTensor(name));
  KVSTASH_ASSIGN_OR_RETURN(std::span<const uint8_t> b, TensorBytes(*t));
  std::vector<float> out(t->elements);
  KVSTASH_RETURN_IF_ERROR(Dequantize(static_cast<GgmlType>(t->raw_type), b, out));
  return out;
}

}  // namespace kvstash::model
