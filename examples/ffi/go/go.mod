module github.com/kvcache/kvcache/examples/ffi/go

go 1.19
