// The client program of check-install: a user's program outside the repository, in its own
// module, that requires the binding by its module path and runs against an installed kvcache.
// It stores a prompt through a built Batch, streams the sequence through ExportTo/ImportFrom,
// and checks that the backend plugin came from the installed prefix given as its argument.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"

	kvcache "github.com/kvcache/kvcache/examples/ffi/go"
)

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: client <install prefix>")
	}
	prefix := os.Args[1]
	ctx, err := kvcache.NewContext("")
	if err != nil {
		log.Fatal(err)
	}
	plugins, err := ctx.Plugins()
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range plugins {
		if p.Kind == kvcache.PluginBackend && !strings.HasPrefix(p.Path, prefix+"/") {
			log.Fatalf("the backend plugin %s came from %s, outside the install %s", p.Name, p.Path, prefix)
		}
	}
	cache, err := ctx.NewCacheFromYAML(`cache: { layers: 1, kv_heads: 1, q_heads: 1, head_dim: 4, memory_limit: 1MiB }`)
	if err != nil {
		log.Fatal(err)
	}
	if err := cache.CreateSeq(0); err != nil {
		log.Fatal(err)
	}
	var b kvcache.Batch
	b.AddRun(0, 0, 3).EndPrompt()
	rows := make([]float32, b.Tokens()*4)
	if err := cache.Append(0, b, kvcache.F32Tensor(rows), kvcache.F32Tensor(rows)); err != nil {
		log.Fatal(err)
	}

	var image bytes.Buffer
	if _, err := cache.ExportTo(context.Background(), 0, &image); err != nil {
		log.Fatal(err)
	}
	if err := cache.ImportFrom(context.Background(), 1, &image); err != nil {
		log.Fatal(err)
	}
	n, err := cache.Len(1, 0, 0)
	if err != nil || n != 3 {
		log.Fatalf("the imported sequence holds %d tokens (%v); want 3", n, err)
	}

	var e *kvcache.Error
	if err := ctx.Close(); !errors.As(err, &e) {
		log.Fatalf("Context.Close with a cache open: %v; want a *kvcache.Error", err)
	}
	if err := cache.Close(); err != nil {
		log.Fatal(err)
	}
	if err := ctx.Close(); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("kvcache %s (compiled against %d): ok\n", kvcache.VersionString(), kvcache.HeaderVersion)
}
