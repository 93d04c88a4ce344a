module kvcache.example/kvcache

go 1.19
