using System;

namespace Kvcache
{
    /// <summary>
    /// The new tokens of several sequences on one layer (kvc_batch): sequence SeqIds[i]
    /// contributes NTokens[i] rows, at the absolute positions that follow in Positions. Tensors
    /// passed with it concatenate the rows in this order. promptEnd, null or one entry per
    /// sequence, marks with true the sequences whose tokens are their prompt's last chunk: with
    /// PrefillCompression.Once the attention over them compresses that layer of the sequence at
    /// once instead of at its first decode token.
    /// </summary>
    public sealed class Batch
    {
        public Batch(int[] seqIds, int[] nTokens, int[] positions, bool[] promptEnd = null)
        {
            if (seqIds == null) throw new ArgumentNullException(nameof(seqIds));
            if (nTokens == null) throw new ArgumentNullException(nameof(nTokens));
            if (positions == null) throw new ArgumentNullException(nameof(positions));
            if (nTokens.Length != seqIds.Length)
                throw new ArgumentException("nTokens has " + nTokens.Length + " entries for " + seqIds.Length + " sequences");
            long total = 0;
            foreach (int n in nTokens) {
                if (n < 1) throw new ArgumentOutOfRangeException(nameof(nTokens), n, "every sequence needs at least one token");
                total += n;
            }
            if (positions.Length != total)
                throw new ArgumentException("positions has " + positions.Length + " entries for " + total + " tokens");
            if (promptEnd != null) {
                if (promptEnd.Length != seqIds.Length)
                    throw new ArgumentException("promptEnd has " + promptEnd.Length + " entries for " + seqIds.Length + " sequences",
                                                nameof(promptEnd));
                PromptEnd = Array.ConvertAll(promptEnd, end => end ? 1 : 0);
            }
            SeqIds = (int[])seqIds.Clone();
            NTokens = (int[])nTokens.Clone();
            Positions = (int[])positions.Clone();
            Total = (int)total;
        }

        /// <summary>One sequence's tokens at positions first, first + 1, ..., its prompt's last chunk if <paramref name="promptEnd"/>.</summary>
        public static Batch Run(int seqId, int first, int count, bool promptEnd = false)
        {
            return Runs(new[] { seqId }, new[] { first }, new[] { count }, promptEnd ? new[] { true } : null);
        }

        /// <summary>Sequence seqIds[i]'s counts[i] tokens at positions firsts[i], firsts[i] + 1, ...</summary>
        public static Batch Runs(int[] seqIds, int[] firsts, int[] counts, bool[] promptEnd = null)
        {
            if (firsts == null || counts == null || firsts.Length != counts.Length)
                throw new ArgumentException("firsts and counts must have one entry per sequence");
            long total = 0;
            foreach (int n in counts) total += Math.Max(n, 0);
            var positions = new int[total];
            int row = 0;
            for (int i = 0; i < counts.Length; i++)
                for (int t = 0; t < counts[i]; t++) positions[row++] = firsts[i] + t;
            return new Batch(seqIds, counts, positions, promptEnd);
        }

        internal int[] SeqIds { get; }
        internal int[] NTokens { get; }
        internal int[] Positions { get; }
        /// <summary>kvc_batch::prompt_end: 0/1 flags, or null (none marked).</summary>
        internal int[] PromptEnd { get; }
        /// <summary>Rows in the batch: the sum of the token counts.</summary>
        public int Total { get; }
    }
}
