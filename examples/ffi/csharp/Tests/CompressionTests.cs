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
                cache.Compress(-1, 0, 1);
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

        [Test]
        public static void WithoutAPolicyNothingIsCompressed()
        {
            using (var context = new Context(Fixture.CacheYaml))
            using (Cache cache = context.CreateCacheFromYaml()) {
                Fixture.Fill(cache, new[] { 0 }, 10, 1);
                cache.Compress(-1, 0);
                Assert.Equal(10, cache.Length(0, 1, 1), "length");
                Assert.Fails(StatusCode.NotFound, () => cache.GetPolicyInfo(), "policy info without a policy");
            }
        }
    }
}
