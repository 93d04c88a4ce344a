namespace Kvcache.Tests
{
    static class UsageTests
    {
        // Quoted in docs/ffi.md (section "C#", "Use"): keep the two alike.
        [Test]
        public static void OneTokenThroughTheCache()
        {
            string error = null;
            using (var context = new Context("threads: 2"))
            using (Cache cache = context.CreateCacheFromYaml(
                       "cache: { layers: 1, kv_heads: 2, q_heads: 4, head_dim: 64, dtype: f16, memory_limit: 64MiB }")) {
                cache.CreateSequence(0);
                var q = new float[4 * 64]; // [tokens, q_heads, head_dim], filled by the engine
                var k = new float[2 * 64]; // [tokens, kv_heads, head_dim]
                var v = new float[2 * 64];
                var output = new float[q.Length];
                cache.AppendAttend(0, Batch.Run(0, 0, 1), q, k, v, output);

                try {
                    cache.CreateSequence(0);
                } catch (KvcacheException e) when (e.Code == StatusCode.AlreadyExists) {
                    error = e.CodeName + ": " + e.Message;
                }
            }
            Assert.Equal("ALREADY_EXISTS: sequence 0 already exists", error, "the error");
        }
    }
}
