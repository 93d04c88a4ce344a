using System;
using System.Collections.Generic;

namespace Kvcache.Tests
{
    /// <summary>
    /// What the cache computes, written out plainly: it keeps every appended token of one layer
    /// and attends causally by position with grouped-query heads and scale 1/sqrt(head_dim).
    /// </summary>
    sealed class NaiveAttention
    {
        sealed class Token
        {
            public int Position;
            public float[] K, V; // [kv_heads * head_dim]
        }

        readonly int kvHeads, qHeads, headDim;
        readonly Dictionary<int, List<Token>> sequences = new Dictionary<int, List<Token>>();

        public NaiveAttention(int kvHeads, int qHeads, int headDim)
        {
            this.kvHeads = kvHeads;
            this.qHeads = qHeads;
            this.headDim = headDim;
        }

        public void Append(Batch batch, float[] k, float[] v)
        {
            int[] seqIds = batch.SeqIds, nTokens = batch.NTokens, positions = batch.Positions;
            int row = 0, kvRow = kvHeads * headDim;
            for (int i = 0; i < seqIds.Length; i++) {
                List<Token> tokens;
                if (!sequences.TryGetValue(seqIds[i], out tokens)) sequences[seqIds[i]] = tokens = new List<Token>();
                for (int t = 0; t < nTokens[i]; t++, row++) {
                    var token = new Token { Position = positions[row], K = new float[kvRow], V = new float[kvRow] };
                    Array.Copy(k, row * kvRow, token.K, 0, kvRow);
                    Array.Copy(v, row * kvRow, token.V, 0, kvRow);
                    tokens.Add(token);
                }
            }
        }

        public float[] Attend(Batch batch, float[] q)
        {
            int[] seqIds = batch.SeqIds, nTokens = batch.NTokens, positions = batch.Positions;
            int group = qHeads / kvHeads, qRow = qHeads * headDim;
            double scale = 1 / Math.Sqrt(headDim);
            var output = new float[q.Length];
            int row = 0;
            for (int i = 0; i < seqIds.Length; i++) {
                List<Token> tokens = sequences[seqIds[i]];
                for (int t = 0; t < nTokens[i]; t++, row++) {
                    for (int h = 0; h < qHeads; h++) {
                        int qAt = row * qRow + h * headDim, kvAt = (h / group) * headDim;
                        var visible = tokens.FindAll(token => token.Position <= positions[row]);
                        var logits = new double[visible.Count];
                        double max = double.NegativeInfinity;
                        for (int j = 0; j < visible.Count; j++) {
                            double dot = 0;
                            for (int d = 0; d < headDim; d++) dot += q[qAt + d] * visible[j].K[kvAt + d];
                            logits[j] = dot * scale;
                            max = Math.Max(max, logits[j]);
                        }
                        double sum = 0;
                        for (int j = 0; j < visible.Count; j++) sum += logits[j] = Math.Exp(logits[j] - max);
                        for (int d = 0; d < headDim; d++) {
                            double acc = 0;
                            for (int j = 0; j < visible.Count; j++) acc += logits[j] * visible[j].V[kvAt + d];
                            output[qAt + d] = visible.Count == 0 ? 0 : (float)(acc / sum);
                        }
                    }
                }
            }
            return output;
        }
    }
}
