using System;
using System.IO;
using System.Runtime.InteropServices;

namespace Kvcache.Tests
{
    /// <summary>The shape most tests use, and helpers to fill and inspect a cache.</summary>
    static class Fixture
    {
        public const int Layers = 2, KvHeads = 2, QHeads = 4, HeadDim = 8;

        /// <summary>A GQA cache (2 query heads per KV head) storing f32, so attention compares tightly.</summary>
        public const string CacheYaml =
            "cache:\n" +
            "  layers: 2\n" +
            "  kv_heads: 2\n" +
            "  q_heads: 4\n" +
            "  head_dim: 8\n" +
            "  dtype: f32\n" +
            "  block_tokens: 4\n" +
            "  memory_limit: 1MiB\n";

        /// <summary>CacheYaml with a streaming policy: 2 sinks, budget 6.</summary>
        public const string StreamingYaml = CacheYaml +
            "policy:\n" +
            "  name: streaming\n" +
            "  budget: 6\n" +
            "  sinks: 2\n";

        /// <summary>Uniform values in [-1, 1), the same for the same seed.</summary>
        public static float[] Random(int count, int seed)
        {
            var random = new Random(seed);
            var values = new float[count];
            for (int i = 0; i < count; i++) values[i] = (float)(random.NextDouble() * 2 - 1);
            return values;
        }

        /// <summary>Creates the sequences and appends <paramref name="count"/> tokens to each, on every layer.</summary>
        public static void Fill(Cache cache, int[] seqIds, int count, int seed)
        {
            int kvRow = cache.Params.KvHeads * cache.Params.HeadDim;
            foreach (int seq in seqIds) cache.CreateSequence(seq);
            Batch batch = Batch.Runs(seqIds, new int[seqIds.Length], Repeat(count, seqIds.Length));
            for (int layer = 0; layer < cache.Params.Layers; layer++)
                cache.Append(layer, batch, Random(batch.Total * kvRow, seed + 2 * layer),
                             Random(batch.Total * kvRow, seed + 2 * layer + 1));
        }

        public static int[] Repeat(int value, int count)
        {
            var values = new int[count];
            for (int i = 0; i < count; i++) values[i] = value;
            return values;
        }

        /// <summary>The stored positions of (sequence, layer, KV head), read through its segment views (cpu backend: host memory).</summary>
        public static int[] Positions(Cache cache, int seqId, int layer, int kvHead)
        {
            SegmentView[] views = cache.View(seqId, layer, kvHead);
            int total = 0;
            foreach (SegmentView view in views) total += view.Count;
            var positions = new int[total];
            int next = 0;
            foreach (SegmentView view in views) {
                Array.Copy(view.Positions, 0, positions, next, view.Count);
                next += view.Count;
            }
            return positions;
        }

        public static int[] Range(int first, int end)
        {
            var values = new int[end - first];
            for (int i = 0; i < values.Length; i++) values[i] = first + i;
            return values;
        }

        /// <summary>A fresh path in the temporary folder; the file is deleted by Dispose.</summary>
        public sealed class TempFile : IDisposable
        {
            public readonly string Path = System.IO.Path.Combine(System.IO.Path.GetTempPath(),
                                                                 "kvcache-cs-" + Guid.NewGuid().ToString("N"));

            public void Dispose()
            {
                if (File.Exists(Path)) File.Delete(Path);
            }
        }
    }
}
