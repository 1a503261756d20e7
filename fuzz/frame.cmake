# Protocol frame parser and message decoders (server/protocol/).
kvstash_add_fuzzer(frame_fuzz kvstash_protocol)
