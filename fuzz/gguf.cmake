# GGUF header/tensor-directory parser fuzzer (model/formats/gguf_reader.h).
kvstash_add_fuzzer(gguf_fuzz kvstash_model)
