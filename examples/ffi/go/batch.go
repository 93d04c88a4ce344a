package kvcache

// #include <stdint.h>
import "C"

import "fmt"

// Batch names the sequences of one call and their new tokens: sequence SeqIDs[i]
// contributes NTokens[i] rows, concatenated in order, whose absolute positions are
// Positions (sum of NTokens entries). PromptEnd is nil or one entry per sequence: true
// marks sequence i's tokens as its prompt's last chunk, so that with PrefillOnce the
// attention over them compresses that layer of the sequence at once instead of at its first
// decode token.
type Batch struct {
	SeqIDs    []int32
	NTokens   []int32
	Positions []int32
	PromptEnd []bool
}

// Add appends sequence seqID with one new token at each of positions, in order, and returns b,
// so that calls chain:
//
//	var b kvcache.Batch
//	b.AddRun(0, 0, 16).EndPrompt() // sequence 0: a 16-token prompt at positions 0..15
//	b.Add(1, 41)                   // sequence 1: one decode token at position 41
func (b *Batch) Add(seqID int32, positions ...int32) *Batch {
	b.SeqIDs = append(b.SeqIDs, seqID)
	b.NTokens = append(b.NTokens, int32(len(positions)))
	b.Positions = append(b.Positions, positions...)
	if b.PromptEnd != nil {
		b.PromptEnd = append(b.PromptEnd, false)
	}
	return b
}

// AddRun appends sequence seqID with n new tokens at positions from, from+1, ..., from+n-1.
func (b *Batch) AddRun(seqID, from, n int32) *Batch {
	b.SeqIDs = append(b.SeqIDs, seqID)
	b.NTokens = append(b.NTokens, n)
	for p := from; p < from+n; p++ {
		b.Positions = append(b.Positions, p)
	}
	if b.PromptEnd != nil {
		b.PromptEnd = append(b.PromptEnd, false)
	}
	return b
}

// EndPrompt marks the tokens of the sequence added last as its prompt's last chunk
// (PromptEnd). It panics on a batch without sequences.
func (b *Batch) EndPrompt() *Batch {
	if len(b.SeqIDs) == 0 {
		panic("kvcache: Batch.EndPrompt on a batch without sequences: Add one first")
	}
	if b.PromptEnd == nil {
		b.PromptEnd = make([]bool, len(b.SeqIDs))
	}
	b.PromptEnd[len(b.PromptEnd)-1] = true
	return b
}

// Tokens is the batch's total token count, the rows its tensors need.
func (b *Batch) Tokens() int { return len(b.Positions) }

// Reset empties the batch, keeping its memory for the next step's Adds.
func (b *Batch) Reset() {
	b.SeqIDs, b.NTokens, b.Positions = b.SeqIDs[:0], b.NTokens[:0], b.Positions[:0]
	b.PromptEnd = nil
}

// check returns the batch's total token count after checking what C cannot: that the
// slices are as long as the counts say.
func (b Batch) check(op string) (int, error) {
	if len(b.SeqIDs) == 0 || len(b.NTokens) != len(b.SeqIDs) {
		return 0, invalid(op, fmt.Sprintf("batch has %d SeqIDs and %d NTokens; it needs one or more of each, as many of both",
			len(b.SeqIDs), len(b.NTokens)))
	}
	if b.PromptEnd != nil && len(b.PromptEnd) != len(b.SeqIDs) {
		return 0, invalid(op, fmt.Sprintf("batch has %d PromptEnd entries for %d SeqIDs", len(b.PromptEnd), len(b.SeqIDs)))
	}
	total := 0
	for i, n := range b.NTokens {
		if n < 1 {
			return 0, invalid(op, fmt.Sprintf("batch.NTokens[%d] must be >= 1, got %d", i, n))
		}
		total += int(n)
	}
	if len(b.Positions) != total {
		return 0, invalid(op, fmt.Sprintf("batch has %d Positions for %d tokens", len(b.Positions), total))
	}
	return total, nil
}

// promptEnd is PromptEnd as the 0/1 flags C reads, in Go memory for the call; NULL when nil.
func (b Batch) promptEnd() *C.int32_t {
	if b.PromptEnd == nil {
		return nil
	}
	flags := make([]int32, len(b.PromptEnd))
	for i, end := range b.PromptEnd {
		if end {
			flags[i] = 1
		}
	}
	return int32s(flags)
}
