# Spec state coding: the state artifact parser and the body decoder (fuzz/spec_state_fuzz.cc).
kvstash_add_fuzzer(spec_state_fuzz kvstash_codec)
