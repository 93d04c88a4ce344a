using System;
using System.Collections.Generic;

namespace Kvcache.Tests
{
    /// <summary>The prefix cache: PublishPrefix, LookupPrefix, AttachPrefix, its params and stats.</summary>
    static class PrefixCacheTests
    {
        const int Tokens = 10;  // two whole blocks of 4, and 2 more

        /// <summary>Fixture's shape, paged in blocks of 4, with prefix caching on.</summary>
        static CacheParams Parameters()
        {
            return new CacheParams {
                Layers = Fixture.Layers, KvHeads = Fixture.KvHeads, QHeads = Fixture.QHeads, HeadDim = Fixture.HeadDim,
                DType = DType.F32, Layout = Layout.Paged, BlockTokens = 4, MemoryLimit = 1 << 20, PrefixCache = true,
            };
        }

        /// <summary>Creates <paramref name="seqId"/> holding positions 0..Tokens-1, the same K/V for every id.</summary>
        static void Fill(Cache cache, int seqId)
        {
            Fixture.Fill(cache, new[] { seqId }, Tokens, 3);
        }

        static Prefix Prompt()
        {
            return new Prefix("test-model", Fixture.Range(2000, 2000 + Tokens));
        }

        /// <summary>The K bytes, then the V bytes, of (sequence, layer, KV head), in storage order.</summary>
        static byte[] Rows(Cache cache, int seqId, int layer, int kvHead)
        {
            var k = new List<byte>();
            var v = new List<byte>();
            foreach (SegmentView view in cache.View(seqId, layer, kvHead)) {
                k.AddRange(view.K);
                v.AddRange(view.V);
            }
            k.AddRange(v);
            return k.ToArray();
        }

        /// <summary>Checks that <paramref name="seqId"/> holds the first 8 rows of <paramref name="source"/>'s sequence <paramref name="sourceId"/> everywhere.</summary>
        static void CheckAttached(Cache cache, int seqId, Cache source, int sourceId)
        {
            const int row = Fixture.HeadDim * sizeof(float);
            for (int layer = 0; layer < Fixture.Layers; layer++) {
                for (int head = 0; head < Fixture.KvHeads; head++) {
                    string where = "layer " + layer + " head " + head;
                    Assert.Equal(8, cache.Length(seqId, layer, head), where + ": tokens attached");
                    Assert.Sequence(Fixture.Range(0, 8), Fixture.Positions(cache, seqId, layer, head), where + ": positions");
                    byte[] all = Rows(source, sourceId, layer, head);
                    var expected = new byte[2 * 8 * row];
                    Array.Copy(all, 0, expected, 0, 8 * row);
                    Array.Copy(all, Tokens * row, expected, 8 * row, 8 * row);
                    Assert.Sequence(expected, Rows(cache, seqId, layer, head), where + ": K and V");
                }
            }
        }

        [Test]
        public static void APublishedPromptIsFoundAndAttachedByWholeBlocks()
        {
            using (var context = new Context())
            using (Cache cache = context.CreateCache(Parameters())) {
                Assert.True(cache.Params.PrefixCache, "prefix_cache read back");
                Fill(cache, 0);
                Prefix prompt = Prompt();
                Assert.Equal(8, cache.PublishPrefix(0, prompt), "tokens published");
                Assert.Equal(8, cache.LookupPrefix(prompt), "tokens found");
                int[] diverging = Fixture.Range(2000, 2000 + Tokens);
                diverging[5] = 7;
                Assert.Equal(4, cache.LookupPrefix(new Prefix("test-model", diverging)), "tokens found of a prompt differing at 5");

                Assert.Equal(8, cache.AttachPrefix(1, prompt), "tokens attached");
                CheckAttached(cache, 1, cache, 0);
                Assert.True(cache.GetStats().BytesShared > 0, "the attached blocks are shared");

                // The published blocks outlive the sequences that held them.
                cache.RemoveSequence(0);
                cache.RemoveSequence(1);
                CacheStats stats = cache.GetStats();
                Assert.True(stats.BytesCached > 0, "bytes cached");
                Assert.Equal(stats.BytesUsed, stats.BytesCached, "every used byte is cached");
                Assert.Equal(1UL, stats.PrefixHits, "prefix hits");
                Assert.Equal(8UL, stats.PrefixTokensReused, "prefix tokens reused");
                Assert.Equal(8, cache.LookupPrefix(prompt), "tokens found after the removals");
            }
        }

        [Test]
        public static void AWriteThroughStoreCarriesTheBlocksToAnotherCache()
        {
            using (var context = new Context("stores:\n  mem: { plugin: host, params: { capacity: 64MiB } }\n")) {
                CacheParams parameters = Parameters();
                parameters.PrefixStore = "mem";
                using (Cache reader = context.CreateCache(parameters)) {
                    parameters.PrefixWriteThrough = true;
                    using (Cache writer = context.CreateCache(parameters)) {
                        CacheParams read = writer.Params;
                        Assert.Equal("mem", read.PrefixStore, "prefix_store read back");
                        Assert.True(read.PrefixWriteThrough, "prefix_write_through read back");
                        Fill(writer, 0);
                        Assert.Equal(8, writer.PublishPrefix(0, Prompt()), "tokens published");
                        // The reader's own cache holds nothing; its attach continues in the store.
                        Assert.Equal(0, reader.LookupPrefix(Prompt()), "tokens the reader's cache holds");
                        Assert.Equal(8, reader.AttachPrefix(0, Prompt()), "tokens attached from the store");
                        CheckAttached(reader, 0, writer, 0);
                        Assert.Equal(8, reader.LookupPrefix(Prompt()), "tokens the reader's cache holds after the attach (it publishes what it loads)");
                    }
                }
            }
        }

        [Test]
        public static void AttachNeedsAPrefixCacheAndANewSequenceId()
        {
            using (var context = new Context()) {
                CacheParams parameters = Parameters();
                parameters.PrefixCache = false;
                using (Cache plain = context.CreateCache(parameters)) {
                    Fill(plain, 0);
                    Assert.Fails(StatusCode.Unsupported, () => plain.AttachPrefix(1, Prompt()), "an attach without a prefix cache");
                    Assert.Fails(StatusCode.NotFound, () => plain.Length(1, 0, 0), "the refused attach's sequence");
                    Assert.Fails(StatusCode.Unsupported, () => plain.PublishPrefix(0, Prompt()), "a publish without a prefix cache");
                }
                using (Cache cache = context.CreateCache(Parameters())) {
                    Fill(cache, 0);
                    Assert.Equal(8, cache.PublishPrefix(0, Prompt()), "tokens published");
                    Assert.Fails(StatusCode.AlreadyExists, () => cache.AttachPrefix(0, Prompt()), "an attach onto an existing id");
                    Assert.Equal(Tokens, cache.Length(0, 1, 1), "the existing sequence is unchanged");
                    Assert.Equal(0UL, cache.GetStats().PrefixHits, "a refused attach is no hit");
                }
            }
        }
    }
}
