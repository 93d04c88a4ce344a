namespace Kvcache.Tests
{
    static class StatsTests
    {
        const ulong TokenBytes = 2 * Fixture.HeadDim * 4 + 4; // K and V in f32, and the position
        const ulong BlockBytes = 4 * TokenBytes;                // block_tokens: 4

        [Test]
        public static void CountersFollowAppendAndRemove()
        {
            using (var context = new Context(Fixture.CacheYaml))
            using (Cache cache = context.CreateCacheFromYaml()) {
                CacheStats empty = cache.GetStats();
                Assert.Equal(0UL, empty.BytesUsed, "bytes used when empty");
                Assert.Equal(1UL << 20, empty.BytesLimit, "the limit");
                Assert.Equal(0, empty.Sequences, "no sequences");

                Fixture.Fill(cache, new[] { 0, 1 }, 5, 1);
                CacheStats full = cache.GetStats();
                const int heads = 2 * Fixture.Layers * Fixture.KvHeads;
                Assert.Equal(2, full.Sequences, "sequences");
                Assert.Equal((ulong)(heads * 5), full.TokensStored, "tokens stored");
                Assert.Equal((ulong)(heads * 2), full.BlocksUsed, "two blocks per head for 5 tokens");
                Assert.Equal(heads * 2 * BlockBytes, full.BytesUsed, "bytes used");
                Assert.True(full.BytesReserved >= full.BytesUsed, "reserved covers used");
                Assert.Equal(0UL, full.BytesShared, "nothing shared");

                cache.RemoveSequence(1);
                CacheStats after = cache.GetStats();
                Assert.Equal(1, after.Sequences, "sequences after the removal");
                Assert.Equal(full.BytesUsed / 2, after.BytesUsed, "bytes used after the removal");
                Assert.Equal(full.BytesPeak, after.BytesPeak, "the peak stays");
            }
        }

        [Test]
        public static void CompressionCountsEvictedTokens()
        {
            using (var context = new Context(Fixture.StreamingYaml))
            using (Cache cache = context.CreateCacheFromYaml()) {
                Fixture.Fill(cache, new[] { 0 }, 10, 1);
                ulong before = cache.GetStats().BytesUsed;
                cache.Compress(Cache.AllLayers, 0);
                CacheStats stats = cache.GetStats();
                Assert.Equal((ulong)(Fixture.Layers * Fixture.KvHeads * 4), stats.TokensEvicted, "4 of 10 tokens evicted per head");
                Assert.True(stats.BytesUsed < before, "blocks returned to the pool");
            }
        }
    }
}
