# The spec KV codec: the artifact parser and the payload body decoder (fuzz/spec_kv_fuzz.cc).
kvstash_add_fuzzer(spec_kv_fuzz kvstash_codec)
