package kvcache_test

import "math"

// history is what one sequence has appended on one layer: rows of [kvHeads*headDim].
type history struct {
	pos  []int32
	k, v [][]float32
}

func (h *history) add(pos int32, k, v []float32) {
	h.pos = append(h.pos, pos)
	h.k = append(h.k, k)
	h.v = append(h.v, v)
}

// attend is naive causal grouped-query attention of one query row q ([qHeads*headDim]) at
// position p over h, with scale 1/sqrt(headDim).
func (h *history) attend(q []float32, p int32, qHeads, kvHeads, headDim int) []float32 {
	out := make([]float32, qHeads*headDim)
	scale := 1 / math.Sqrt(float64(headDim))
	for qh := 0; qh < qHeads; qh++ {
		g := qh / (qHeads / kvHeads)
		query := q[qh*headDim : (qh+1)*headDim]
		var logits []float64
		var rows []int
		maxLogit := math.Inf(-1)
		for t, kp := range h.pos {
			if kp > p {
				continue
			}
			key := h.k[t][g*headDim : (g+1)*headDim]
			dot := 0.0
			for i := range key {
				dot += float64(query[i]) * float64(key[i])
			}
			logits = append(logits, dot*scale)
			rows = append(rows, t)
			maxLogit = math.Max(maxLogit, dot*scale)
		}
		sum := 0.0
		for i := range logits {
			logits[i] = math.Exp(logits[i] - maxLogit)
			sum += logits[i]
		}
		for i, t := range rows {
			value := h.v[t][g*headDim : (g+1)*headDim]
			for d := range value {
				out[qh*headDim+d] += float32(logits[i] / sum * float64(value[d]))
			}
		}
	}
	return out
}
