namespace Kvcache.Tests
{
    static class DataPathTests
    {
        const int QRow = Fixture.QHeads * Fixture.HeadDim, KvRow = Fixture.KvHeads * Fixture.HeadDim;

        // Two sequences of different lengths in one batch: a prefill chunk of each, then two
        // decode steps, on layer 1 (layer 0 stays empty).
        [Test]
        public static void AppendAttendMatchesNaiveAttention()
        {
            using (var context = new Context(Fixture.CacheYaml))
            using (Cache cache = context.CreateCacheFromYaml()) {
                int[] seqs = { 3, 7 };
                foreach (int seq in seqs) cache.CreateSequence(seq);
                var naive = new NaiveAttention(Fixture.KvHeads, Fixture.QHeads, Fixture.HeadDim);
                Batch[] steps = {
                    Batch.Runs(seqs, new[] { 0, 0 }, new[] { 5, 3 }),
                    Batch.Runs(seqs, new[] { 5, 3 }, new[] { 1, 1 }),
                    Batch.Runs(seqs, new[] { 6, 4 }, new[] { 1, 1 }),
                };
                for (int step = 0; step < steps.Length; step++) {
                    Batch batch = steps[step];
                    float[] q = Fixture.Random(batch.Total * QRow, 10 * step);
                    float[] k = Fixture.Random(batch.Total * KvRow, 10 * step + 1);
                    float[] v = Fixture.Random(batch.Total * KvRow, 10 * step + 2);
                    var output = new float[q.Length];
                    cache.AppendAttend(1, batch, q, k, v, output);
                    naive.Append(batch, k, v);
                    Assert.Near(naive.Attend(batch, q), output, 1e-5f, "attention of step " + step);
                }
                Assert.Equal(7, cache.Length(3, 1, 0), "sequence 3 on layer 1");
                Assert.Equal(5, cache.Length(7, 1, 1), "sequence 7 on layer 1");
                Assert.Equal(0, cache.Length(3, 0, 0), "layer 0 is untouched");
            }
        }

        [Test]
        public static void AppendThenAttendEqualsAppendAttend()
        {
            using (var context = new Context(Fixture.CacheYaml))
            using (Cache cache = context.CreateCacheFromYaml()) {
                cache.CreateSequence(0);
                Batch batch = Batch.Run(0, 0, 6);
                float[] q = Fixture.Random(batch.Total * QRow, 1);
                float[] k = Fixture.Random(batch.Total * KvRow, 2);
                float[] v = Fixture.Random(batch.Total * KvRow, 3);
                var fused = new float[q.Length];
                var separate = new float[q.Length];
                cache.AppendAttend(0, batch, q, k, v, fused);
                cache.Append(1, batch, k, v);
                cache.Attend(1, batch, q, separate);
                Assert.Near(fused, separate, 1e-6f, "fused and separate calls");
            }
        }

        // A query at position p with window w sees keys at (p - w, p]: with w = 1, only its own.
        [Test]
        public static void SlidingWindowOfOneReturnsTheOwnValue()
        {
            using (var context = new Context(Fixture.CacheYaml))
            using (Cache cache = context.CreateCacheFromYaml()) {
                cache.CreateSequence(0);
                Batch batch = Batch.Run(0, 0, 4);
                float[] v = Fixture.Random(batch.Total * KvRow, 2);
                var output = new float[batch.Total * QRow];
                cache.AppendAttend(0, batch, Fixture.Random(output.Length, 1), Fixture.Random(v.Length, 3), v, output,
                                   new AttentionParams { SlidingWindow = 1 });
                var expected = new float[output.Length];
                for (int t = 0; t < batch.Total; t++)
                    for (int h = 0; h < Fixture.QHeads; h++)
                        for (int d = 0; d < Fixture.HeadDim; d++)
                            expected[t * QRow + h * Fixture.HeadDim + d] =
                                v[t * KvRow + h / (Fixture.QHeads / Fixture.KvHeads) * Fixture.HeadDim + d];
                Assert.Near(expected, output, 1e-6f, "windowed attention");
            }
        }
    }
}
