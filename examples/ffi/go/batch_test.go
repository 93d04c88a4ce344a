package kvcache_test

import (
	"reflect"
	"strings"
	"testing"

	kvcache "github.com/kvcache/kvcache/examples/ffi/go"
)

func TestTheBatchBuilderFillsTheSlices(t *testing.T) {
	var b kvcache.Batch
	b.AddRun(3, 10, 4).Add(5, 7).EndPrompt().Add(9, 2, 3)
	want := kvcache.Batch{
		SeqIDs:    []int32{3, 5, 9},
		NTokens:   []int32{4, 1, 2},
		Positions: []int32{10, 11, 12, 13, 7, 2, 3},
		PromptEnd: []bool{false, true, false},
	}
	if !reflect.DeepEqual(b, want) {
		t.Fatalf("built %+v; want %+v", b, want)
	}
	if b.Tokens() != 7 {
		t.Fatalf("Tokens() = %d; want 7", b.Tokens())
	}

	b.Reset()
	b.Add(1, 0)
	want = kvcache.Batch{SeqIDs: []int32{1}, NTokens: []int32{1}, Positions: []int32{0}}
	if !reflect.DeepEqual(b, want) {
		t.Fatalf("after Reset and Add: %+v; want %+v", b, want)
	}
}

func TestABuiltBatchIsCheckedLikeAHandWrittenOne(t *testing.T) {
	_, cache := open(t, "", gqaCache)
	must(t, cache.CreateSeq(0))
	var b kvcache.Batch
	b.Add(0) // no positions: a sequence without tokens
	k := kvcache.F32Tensor(nil)
	mustFail(t, cache.Append(0, b, k, k), kvcache.ErrInvalidArgument, "NTokens[0] must be >= 1")
}

func TestEndPromptOnAnEmptyBatchPanics(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "without sequences") {
			t.Fatalf("recovered %v; want a panic naming the empty batch", r)
		}
	}()
	var b kvcache.Batch
	b.EndPrompt()
}
