# The store's meta record parser (store/meta_record.h; fuzz/meta_record_fuzz.cc).
kvstash_add_fuzzer(meta_record_fuzz kvstash_store)
