using System;

namespace Kvcache.Tests
{
    // Bad calls raise KvcacheException with the library's message and change nothing.
    static class ErrorTests
    {
        const int KvRow = Fixture.KvHeads * Fixture.HeadDim;

        [Test]
        public static void UnknownPolicy()
        {
            using (var context = new Context(Fixture.CacheYaml)) {
                KvcacheException e = Assert.Fails(StatusCode.NotFound, () => context.CreateCache(new CacheParams { Policy = "nope" }),
                                                  "an unknown policy");
                Assert.Contains("policy 'nope' is not loaded", e.Message, "message");
                Assert.Fails(StatusCode.NotFound, () => context.CreateCacheFromYaml(Fixture.CacheYaml + "policy:\n  name: nope\n"),
                             "an unknown policy in YAML");
                using (Cache cache = context.CreateCacheFromYaml()) Fixture.Fill(cache, new[] { 0 }, 2, 1);
            }
        }

        [Test]
        public static void OverTheMemoryLimit()
        {
            using (var context = new Context(Fixture.CacheYaml.Replace("1MiB", "4KiB")))
            using (Cache cache = context.CreateCacheFromYaml()) {
                Fixture.Fill(cache, new[] { 0 }, 4, 1);
                CacheStats before = cache.GetStats();
                KvcacheException e = Assert.Fails(StatusCode.OutOfMemory,
                    () => cache.Append(0, Batch.Run(0, 4, 40), Fixture.Random(40 * KvRow, 2), Fixture.Random(40 * KvRow, 3)),
                    "40 more tokens");
                Assert.Contains("limit", e.Message, "the message names the limit");
                CacheStats after = cache.GetStats();
                Assert.Equal(before.BytesUsed, after.BytesUsed, "bytes used are unchanged");
                Assert.Equal(before.TokensStored, after.TokensStored, "tokens stored are unchanged");
                Assert.Equal(4, cache.Length(0, 0, 0), "length is unchanged");
                cache.Append(0, Batch.Run(0, 4, 1), Fixture.Random(KvRow, 4), Fixture.Random(KvRow, 5));
                Assert.Equal(5, cache.Length(0, 0, 0), "the cache is still usable");
            }
        }

        [Test]
        public static void WrongShapes()
        {
            using (var context = new Context(Fixture.CacheYaml))
            using (Cache cache = context.CreateCacheFromYaml())
            using (Cache wide = context.CreateCacheFromYaml(Fixture.CacheYaml.Replace("head_dim: 8", "head_dim: 16"))) {
                KvcacheException e = Assert.Fails(StatusCode.InvalidArgument,
                    () => context.CreateCache(new CacheParams { KvHeads = 2, QHeads = 3 }), "3 query heads on 2 KV heads");
                Assert.Contains("q_heads", e.Message, "the message names q_heads");

                Fixture.Fill(wide, new[] { 0 }, 3, 1);
                e = Assert.Throws<KvcacheException>(() => cache.Import(0, wide.Export(0)), "an image of another shape");
                Assert.Contains("head_dim", e.Message, "the message names head_dim");
                Assert.Equal(0, cache.GetStats().Sequences, "no sequence was created");

                Fixture.Fill(cache, new[] { 0 }, 3, 1);
                Assert.Fails(StatusCode.InvalidArgument,
                    () => cache.Append(Fixture.Layers, Batch.Run(0, 3, 1), new float[KvRow], new float[KvRow]), "a layer out of range");
                Assert.Fails(StatusCode.InvalidArgument,
                    () => cache.Append(0, Batch.Run(0, -2, 1), new float[KvRow], new float[KvRow]), "a negative position");
                Assert.Equal(3, cache.Length(0, 0, 0), "the cache is unchanged and usable");
            }
        }

        // Array lengths are the binding's to check: the library would read past a short array.
        [Test]
        public static void WrongArrayLengthsAreRejectedBeforeTheCall()
        {
            using (var context = new Context(Fixture.CacheYaml))
            using (Cache cache = context.CreateCacheFromYaml()) {
                cache.CreateSequence(0);
                Batch batch = Batch.Run(0, 0, 2);
                ArgumentException e = Assert.Throws<ArgumentException>(
                    () => cache.Append(0, batch, new float[2 * KvRow - 1], new float[2 * KvRow]), "a short K");
                Assert.Equal("k", e.ParamName, "the parameter");
                Assert.Throws<ArgumentException>(() => cache.Attend(0, batch, new float[2 * KvRow], new float[1]), "a short output");
                Assert.Throws<ArgumentException>(() => new Batch(new[] { 0 }, new[] { 2 }, new[] { 0 }), "too few positions");
                Assert.Equal(0UL, cache.GetStats().TokensStored, "nothing stored");
                cache.Append(0, batch, new float[2 * KvRow], new float[2 * KvRow]);
                Assert.Equal(2, cache.Length(0, 0, 0), "the cache is usable");
            }
        }

        // ToString() is what a log shows of an unhandled exception: it keeps the code's name,
        // the stack where the call failed and the exception that caused it.
        [Test]
        public static void ToStringKeepsTheCodeTheStackAndTheCause()
        {
            using (var context = new Context(Fixture.CacheYaml))
            using (Cache cache = context.CreateCacheFromYaml()) {
                KvcacheException e = Assert.Fails(StatusCode.NotFound, () => cache.RemoveSequence(42), "an unknown sequence");
                string text = e.ToString();
                Assert.Contains("Kvcache.KvcacheException (NOT_FOUND): " + e.Message, text, "type, code and message");
                Assert.Contains("Kvcache.Cache.RemoveSequence", text, "the stack trace's binding frame");
                Assert.Contains("ToStringKeepsTheCodeTheStackAndTheCause", text, "the stack trace's caller frame");

                var cause = new InvalidOperationException("the cause");
                var wrapped = new KvcacheException(StatusCode.Io, "wrapped", cause);
                Assert.True(ReferenceEquals(cause, wrapped.InnerException), "the inner exception is kept");
                Assert.Contains("(IO): wrapped ---> System.InvalidOperationException: the cause", wrapped.ToString(),
                                "ToString() includes the inner exception");
            }
        }
    }
}
