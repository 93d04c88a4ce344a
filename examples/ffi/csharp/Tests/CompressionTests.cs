using System;
using System.Collections.Generic;

namespace Kvcache.Tests
{
    static class CompressionTests
    {
        [Test]
        public static void StreamingKeepsSinksAndTheMostRecent()
        {
            using (var context = new Context(Fixture.StreamingYaml))
            using (Cache cache = context.CreateCacheFromYaml()) {
                Fixture.Fill(cache, new[] { 0, 1 }, 10, 1);
                cache.Compress(Cache.AllLayers, 0, 1);
                foreach (int seq in new[] { 0, 1 })
                    for (int layer = 0; layer < Fixture.Layers; layer++)
                        for (int head = 0; head < Fixture.KvHeads; head++)
                            Assert.Sequence(new[] { 0, 1, 6, 7, 8, 9 }, Fixture.Positions(cache, seq, layer, head),
                                            "kept positions of sequence " + seq + " layer " + layer + " head " + head);
                PolicyInfo policy = cache.GetPolicyInfo();
                Assert.Equal("streaming", policy.Name, "policy name");
                Assert.Equal(2, policy.Sinks, "sinks");
                Assert.Equal(0, policy.Recent, "recent (the policy's default)");
                Assert.Equal(6, policy.BudgetTokens, "budget");
                Assert.Equal(0u, policy.Stats, "streaming reads no statistics");
            }
        }

        // h2o with recent_ratio 0 keeps the tokens with the most accumulated attention, here
        // reported by the engine as if it had computed attention itself.
        [Test]
        public static void H2oKeepsTheReportedHeavyHitters()
        {
            var parameters = new CacheParams {
                HeadDim = 8, DType = DType.F32, MemoryLimit = 1 << 20, Policy = "h2o", Budget = 4, Sinks = 0, Recent = 0,
            };
            parameters.PolicyParams.Add(new KeyValuePair<string, string>("recent_ratio", "0"));
            using (var context = new Context())
            using (Cache cache = context.CreateCache(parameters)) {
                cache.CreateSequence(0);
                cache.Append(0, Batch.Run(0, 0, 10), Fixture.Random(80, 1), Fixture.Random(80, 2));
                var mass = new float[10];
                foreach (int heavy in new[] { 1, 4, 5, 8 }) mass[heavy] = 1 + heavy;
                cache.ReportStats(0, 0, 0, StatKind.AttnSum, mass);
                cache.Compress(0, 0);
                Assert.Sequence(new[] { 1, 4, 5, 8 }, Fixture.Positions(cache, 0, 0, 0), "kept positions");
                PolicyInfo policy = cache.GetPolicyInfo();
                Assert.Equal("h2o", policy.Name, "policy name");
                Assert.Equal((uint)StatKind.AttnSum, policy.Stats & (uint)StatKind.AttnSum, "h2o reads the attention sum");
                Assert.Fails(StatusCode.InvalidArgument, () => cache.ReportStats(0, 0, 0, StatKind.AttnLast, new float[4]),
                             "a statistic h2o does not read");
            }
        }

        [Test]
        public static void EstimatedPeakFollowsThePrompt()
        {
            using (var context = new Context(Fixture.CacheYaml))
            using (Cache cache = context.CreateCacheFromYaml()) {
                ulong small = cache.EstimatePeakBytes(8, 8, 0), large = cache.EstimatePeakBytes(64, 16, 8);
                Assert.True(small > 0, "a peak for 8 tokens");
                Assert.True(large > small, "a longer prompt needs more");
            }
        }

        static CacheParams TovaOnce()
        {
            return new CacheParams {
                Layers = Fixture.Layers, KvHeads = Fixture.KvHeads, QHeads = Fixture.QHeads, HeadDim = Fixture.HeadDim,
                DType = DType.F32, MemoryLimit = 1 << 20, Policy = "tova", Budget = 12, Prefill = PrefillCompression.Once,
            };
        }

        [Test]
        public static void OnceWithAMarkedLastPromptChunkCompressesEachLayerRightAfterIt()
        {
            const int QRow = Fixture.QHeads * Fixture.HeadDim, KvRow = Fixture.KvHeads * Fixture.HeadDim;
            using (var context = new Context())
            using (Cache marked = context.CreateCache(TovaOnce()))
            using (Cache unmarked = context.CreateCache(TovaOnce())) {
                marked.CreateSequence(0);
                unmarked.CreateSequence(0);
                // Both caches get the same q, k and v for the same call.
                Action<int, int, int, bool, int> attend = (layer, first, count, end, seed) => {
                    float[] q = Fixture.Random(count * QRow, seed), k = Fixture.Random(count * KvRow, seed + 1),
                            v = Fixture.Random(count * KvRow, seed + 2), output = new float[count * QRow];
                    marked.AppendAttend(layer, Batch.Run(0, first, count, end), q, k, v, output);
                    unmarked.AppendAttend(layer, Batch.Run(0, first, count), q, k, v, output);
                };
                for (int layer = 0; layer < Fixture.Layers; layer++) attend(layer, 0, 20, false, 10 * layer);
                for (int layer = 0; layer < Fixture.Layers; layer++) {
                    attend(layer, 20, 20, true, 100 + 10 * layer);
                    for (int head = 0; head < Fixture.KvHeads; head++) {
                        string where = "layer " + layer + " head " + head;
                        Assert.Equal(12, marked.Length(0, layer, head), where + ", marked: compressed at once");
                        Assert.Equal(40, unmarked.Length(0, layer, head), where + ", unmarked");
                        if (layer + 1 < Fixture.Layers)
                            Assert.Equal(20, marked.Length(0, layer + 1, head), "the next layer before its last chunk");
                    }
                }
                // The unmarked cache compresses the same statistics at the first decode token, so
                // both keep the same tokens; the marked one does not compress again.
                for (int layer = 0; layer < Fixture.Layers; layer++) attend(layer, 40, 1, false, 200 + 10 * layer);
                for (int layer = 0; layer < Fixture.Layers; layer++)
                    for (int head = 0; head < Fixture.KvHeads; head++) {
                        int[] kept = Fixture.Positions(marked, 0, layer, head);
                        Assert.Equal(13, kept.Length, "tokens after one decode token");
                        Assert.Sequence(Fixture.Positions(unmarked, 0, layer, head), kept, "kept positions of layer " + layer + " head " + head);
                    }
                Assert.Throws<ArgumentException>(() => new Batch(new[] { 0 }, new[] { 1 }, new[] { 0 }, new[] { true, false }),
                                                 "a promptEnd entry per sequence");
            }
        }

        [Test]
        public static void TheEstimateFollowsAMarkedWholePromptPrefill()
        {
            const int Prompt = 2048, Budget = 512;
            var parameters = new CacheParams {
                Layers = Fixture.Layers, KvHeads = Fixture.KvHeads, HeadDim = Fixture.HeadDim, DType = DType.F16,
                Layout = Layout.Paged, BlockTokens = 16, Policy = "knorm", Budget = Budget, Prefill = PrefillCompression.Once,
            };
            using (var context = new Context())
            using (Cache cache = context.CreateCache(parameters)) {
                var request = new EstimateRequest(Prompt, Prompt, 4);
                ulong unmarked = cache.Estimate(request);
                request.MarksPromptEnd = true;
                ulong marked = cache.Estimate(request);
                Assert.Equal(cache.EstimatePeakBytes(Prompt, Prompt, 4), unmarked, "unmarked: EstimatePeakBytes");
                // f16 K and V and an int32 position per token; marked, one layer holds the whole
                // prompt while the others hold their budget.
                const ulong TokenBytes = 2 * Fixture.HeadDim * 2 + 4;
                Assert.Equal((Prompt + (Fixture.Layers - 1) * Budget) * TokenBytes * Fixture.KvHeads, marked, "marked");
                Assert.Equal(Fixture.Layers * Prompt * TokenBytes * Fixture.KvHeads, unmarked, "unmarked");
                request.ChunkTokens = 0;
                KvcacheException e = Assert.Fails(StatusCode.InvalidArgument, () => cache.Estimate(request), "chunk_tokens 0");
                Assert.Contains("chunk_tokens", e.Message, "the message names the field");
            }
        }

        [Test]
        public static void WithoutAPolicyNothingIsCompressed()
        {
            using (var context = new Context(Fixture.CacheYaml))
            using (Cache cache = context.CreateCacheFromYaml()) {
                Fixture.Fill(cache, new[] { 0 }, 10, 1);
                cache.Compress(Cache.AllLayers, 0);
                Assert.Equal(10, cache.Length(0, 1, 1), "length");
                Assert.Fails(StatusCode.NotFound, () => cache.GetPolicyInfo(), "policy info without a policy");
            }
        }
    }
}
