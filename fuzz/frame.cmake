# Protocol frame parser and message decoders (protocol/).
kvstash_add_fuzzer(frame_fuzz kvstash_protocol)
