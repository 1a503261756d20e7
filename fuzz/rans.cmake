# rANS decoders on arbitrary bytes with valid tables (fuzz/rans_fuzz.cc).
kvstash_add_fuzzer(rans_fuzz kvstash_codec)
# add_compile_options() in fuzz/CMakeLists.txt does not reach targets defined in other
# directories, so instrument the library under test explicitly (coverage + ASan/UBSan).
target_compile_options(kvstash_codec PRIVATE -fsanitize=fuzzer-no-link,address,undefined)
