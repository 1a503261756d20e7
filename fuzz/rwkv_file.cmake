# The rwkv.cpp model-file loader of model/rwkv7 on arbitrary bytes (fuzz/rwkv_file_fuzz.cc).
if(TARGET kvstash_rwkv7)
  kvstash_add_fuzzer(rwkv_file_fuzz kvstash_rwkv7)
endif()
