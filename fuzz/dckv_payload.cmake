# The dckv payload body decoder on three artifacts (fuzz/dckv_payload_fuzz.cc).
kvstash_add_fuzzer(dckv_payload_fuzz kvstash_codec)
