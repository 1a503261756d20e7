# The dckv artifact parser on arbitrary bytes (fuzz/dckv_artifact_fuzz.cc).
kvstash_add_fuzzer(dckv_artifact_fuzz kvstash_codec)
