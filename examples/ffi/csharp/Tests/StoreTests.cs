using System;
using System.IO;
using System.Linq;

namespace Kvcache.Tests
{
    /// <summary>Offload, restore, drop and prefix sharing through a host store ("mem") and a disk store ("files").</summary>
    static class StoreTests
    {
        const int QRow = Fixture.QHeads * Fixture.HeadDim, Tokens = 20;
        static readonly string[] Stores = { "mem", "files" };

        /// <summary>A context with both stores, the disk store in a fresh folder deleted by Dispose.</summary>
        sealed class StoresContext : IDisposable
        {
            readonly string folder = Path.Combine(Path.GetTempPath(), "kvcache-cs-stores-" + Guid.NewGuid().ToString("N"));
            public readonly Context Context;

            public StoresContext()
            {
                Directory.CreateDirectory(folder);
                Context = new Context(Fixture.CacheYaml +
                                      "stores:\n" +
                                      "  mem: { plugin: host, params: { capacity: 64MiB } }\n" +
                                      "  files: { plugin: disk, params: { path: '" + folder + "' } }\n");
            }

            public void Dispose()
            {
                Context.Dispose();
                Directory.Delete(folder, true);
            }
        }

        /// <summary>The bits of the attention of one fixed query at position 100 over the sequence, on every layer.</summary>
        static int[] Probe(Cache cache, int seqId)
        {
            var bits = new int[Fixture.Layers * QRow];
            for (int layer = 0; layer < Fixture.Layers; layer++) {
                var output = new float[QRow];
                cache.Attend(layer, Batch.Run(seqId, 100, 1), Fixture.Random(QRow, 99), output);
                Buffer.BlockCopy(output, 0, bits, layer * QRow * sizeof(float), QRow * sizeof(float));
            }
            return bits;
        }

        /// <summary>Token ids of the filled positions 0..Tokens-1.</summary>
        static int[] Prompt()
        {
            return Fixture.Range(1000, 1000 + Tokens);
        }

        [Test]
        public static void TheStorePluginsAreListedAsStores()
        {
            using (var stores = new StoresContext()) {
                PluginInfo[] plugins = stores.Context.Plugins;
                foreach (string name in new[] { "host", "disk" })
                    Assert.True(plugins.Any(p => p.Kind == PluginKind.Store && p.Name == name), name + " is a store plugin");
            }
        }

        [Test]
        public static void OffloadThenRestoreAttendsBitForBit()
        {
            using (var stores = new StoresContext())
            using (Cache cache = stores.Context.CreateCacheFromYaml()) {
                foreach (string store in Stores) {
                    Fixture.Fill(cache, new[] { 0 }, Tokens, 1);
                    int[] before = Probe(cache, 0);
                    cache.Offload(0, store, "seq-0");
                    Assert.Fails(StatusCode.NotFound, () => cache.Length(0, 0, 0), store + ": the offloaded sequence");
                    CacheStats stats = cache.GetStats();
                    Assert.Equal(0, stats.Sequences, store + ": sequences after the offload");
                    Assert.Equal(0UL, (ulong)stats.BytesUsed, store + ": bytes after the offload");

                    cache.Restore(5, store, "seq-0");
                    Assert.Sequence(before, Probe(cache, 5), store + ": attention over the restored sequence");
                    // The value stays in the store: it restores again, under another id only.
                    Assert.Fails(StatusCode.AlreadyExists, () => cache.Restore(5, store, "seq-0"), store + ": a restore onto an existing id");
                    cache.Restore(6, store, "seq-0");
                    Assert.Sequence(before, Probe(cache, 6), store + ": attention over the second restore");
                    cache.RemoveSequence(5);
                    cache.RemoveSequence(6);
                }
            }
        }

        [Test]
        public static void MissingKeysAndUnknownStoresAreNotFound()
        {
            using (var stores = new StoresContext())
            using (Cache cache = stores.Context.CreateCacheFromYaml()) {
                foreach (string store in Stores) {
                    KvcacheException e = Assert.Fails(StatusCode.NotFound, () => cache.Restore(0, store, "never-written"), store + ": a missing key");
                    Assert.Contains(store, e.Message, "the message names the store");
                    Assert.Equal("NOT_FOUND", e.CodeName, "the code's name");
                    Assert.Equal(0, cache.GetStats().Sequences, store + ": a failed restore creates nothing");
                }
                Fixture.Fill(cache, new[] { 0 }, Tokens, 1);
                KvcacheException unknown = Assert.Fails(StatusCode.NotFound, () => cache.Offload(0, "nowhere", "seq-0"), "an unknown store");
                Assert.Contains("nowhere", unknown.Message, "the message names the store");
                Assert.Equal(Tokens, cache.Length(0, 1, 1), "a failed offload keeps the sequence");
                Assert.Fails(StatusCode.NotFound, () => cache.Restore(1, "nowhere", "seq-0"), "a restore from an unknown store");
                Assert.Fails(StatusCode.NotFound, () => stores.Context.StoreDrop("nowhere", "seq-0"), "a drop from an unknown store");
                var prefix = new Prefix("test-model", Prompt());
                Assert.Fails(StatusCode.NotFound, () => cache.SavePrefix(0, "nowhere", prefix), "a prefix saved to an unknown store");
                Assert.Fails(StatusCode.NotFound, () => cache.LoadPrefix(1, "nowhere", prefix), "a prefix loaded from an unknown store");
                Assert.Throws<ArgumentNullException>(() => cache.Offload(0, null, "seq-0"), "a null store");
            }
        }

        [Test]
        public static void ADroppedValueIsGone()
        {
            using (var stores = new StoresContext())
            using (Cache cache = stores.Context.CreateCacheFromYaml()) {
                foreach (string store in Stores) {
                    Fixture.Fill(cache, new[] { 0 }, Tokens, 1);
                    cache.Offload(0, store, "seq-0");
                    stores.Context.StoreDrop(store, "seq-0");
                    Assert.Fails(StatusCode.NotFound, () => stores.Context.StoreDrop(store, "seq-0"), store + ": a second drop");
                    Assert.Fails(StatusCode.NotFound, () => cache.Restore(0, store, "seq-0"), store + ": a restore after the drop");
                }
            }
        }

        [Test]
        public static void APrefixSavedByOneCacheLoadsIntoAnother()
        {
            using (var stores = new StoresContext())
            using (Cache saver = stores.Context.CreateCacheFromYaml())
            using (Cache loader = stores.Context.CreateCacheFromYaml()) {
                Fixture.Fill(saver, new[] { 0 }, Tokens, 1);
                // The reference: the saver's sequence cut to its two whole chunks of 8 tokens.
                saver.Fork(0, 1);
                saver.Truncate(1, 16);
                int[] expected = Probe(saver, 1);
                var prefix = new Prefix("test-model", Prompt()) { ChunkTokens = 8 };
                for (int i = 0; i < Stores.Length; i++) {
                    string store = Stores[i];
                    Assert.Equal(16, saver.SavePrefix(0, store, prefix), store + ": tokens saved");
                    Assert.Equal(16, saver.SavePrefix(0, store, prefix), store + ": tokens saved again");

                    int seqId = 10 * i;
                    Assert.Equal(16, loader.LoadPrefix(seqId, store, prefix), store + ": tokens restored");
                    Assert.Equal(16, loader.Length(seqId, 1, 1), store + ": tokens held");
                    Assert.Sequence(expected, Probe(loader, seqId), store + ": attention over the loaded prefix");
                    Assert.Fails(StatusCode.AlreadyExists, () => loader.LoadPrefix(seqId, store, prefix), store + ": a load onto an existing id");

                    // A prompt that differs from token 10 on shares the first chunk only.
                    int[] diverging = Prompt();
                    diverging[10] = 7;
                    Assert.Equal(8, loader.LoadPrefix(seqId + 1, store, new Prefix("test-model", diverging) { ChunkTokens = 8 }),
                                 store + ": tokens restored of a diverging prompt");
                    // Another model's K/V is never restored: the new sequence is empty.
                    Assert.Equal(0, loader.LoadPrefix(seqId + 2, store, new Prefix("other-model", Prompt()) { ChunkTokens = 8 }),
                                 store + ": tokens restored of another model");
                    Assert.Equal(0, loader.Length(seqId + 2, 0, 0), store + ": the other model's sequence is empty");
                }
            }
        }
    }
}
