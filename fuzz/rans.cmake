# rANS decoders on arbitrary bytes with valid tables (fuzz/rans_fuzz.cc).
kvstash_add_fuzzer(rans_fuzz kvstash_codec)
