# llama.cpp sequence-state parser (engines/llama_cpp/llama_state.h; fuzz/llama_state_fuzz.cc).
kvstash_add_fuzzer(llama_state_fuzz kvstash_llama_state)
