using System.IO;

namespace Kvcache.Tests
{
    static class SequenceTests
    {
        const int QRow = Fixture.QHeads * Fixture.HeadDim, KvRow = Fixture.KvHeads * Fixture.HeadDim;

        /// <summary>Attention of one query at <paramref name="position"/> over the sequence on layer 0, without storing it.</summary>
        static float[] Probe(Cache cache, int seqId, int position)
        {
            var output = new float[QRow];
            cache.Attend(0, Batch.Run(seqId, position, 1), Fixture.Random(QRow, 99), output);
            return output;
        }

        [Test]
        public static void ForkSharesBlocksAndBranchesDiverge()
        {
            using (var context = new Context(Fixture.CacheYaml))
            using (Cache cache = context.CreateCacheFromYaml()) {
                Fixture.Fill(cache, new[] { 0 }, 6, 1);
                cache.Fork(0, 1);
                CacheStats stats = cache.GetStats();
                Assert.Equal(2, stats.Sequences, "sequences after the fork");
                Assert.True(stats.BytesShared > 0, "the fork shares blocks");
                Assert.Sequence(Probe(cache, 0, 6), Probe(cache, 1, 6), "both branches attend alike");

                cache.Append(0, Batch.Run(1, 6, 2), Fixture.Random(2 * KvRow, 7), Fixture.Random(2 * KvRow, 8));
                Assert.Equal(6, cache.Length(0, 0, 0), "the source keeps its length");
                Assert.Equal(8, cache.Length(1, 0, 0), "the fork grew");
                Assert.Fails(StatusCode.AlreadyExists, () => cache.Fork(0, 1), "a fork onto an existing id");
            }
        }

        [Test]
        public static void AStreamReachesTheBackendWhichTheCpuOneIgnores()
        {
            using (var context = new Context(Fixture.CacheYaml))
            using (Cache withStream = context.CreateCacheFromYaml())
            using (Cache without = context.CreateCacheFromYaml()) {
                withStream.SetStream(new System.IntPtr(0x1000)); // stands for an engine's stream
                foreach (Cache cache in new[] { withStream, without }) {
                    Fixture.Fill(cache, new[] { 0 }, 9, 1);
                    cache.Fork(0, 1);
                    cache.Truncate(1, 5);
                }
                Assert.Sequence(Probe(without, 1, 9), Probe(withStream, 1, 9), "a cache with a stream attends alike");
                withStream.SetStream(System.IntPtr.Zero);
                Assert.Sequence(Probe(without, 0, 9), Probe(withStream, 0, 9), "the default stream again");
                withStream.Dispose();
                Assert.Throws<System.ObjectDisposedException>(() => withStream.SetStream(System.IntPtr.Zero),
                                                              "a disposed cache's stream");
            }
        }

        [Test]
        public static void TruncateAndRemoveRangeDropPositions()
        {
            using (var context = new Context(Fixture.CacheYaml))
            using (Cache cache = context.CreateCacheFromYaml()) {
                Fixture.Fill(cache, new[] { 0 }, 10, 1);
                cache.Truncate(0, 7);
                cache.RemoveRange(0, 2, 4);
                for (int layer = 0; layer < Fixture.Layers; layer++)
                    for (int head = 0; head < Fixture.KvHeads; head++)
                        Assert.Sequence(new[] { 0, 1, 4, 5, 6 }, Fixture.Positions(cache, 0, layer, head),
                                        "positions of layer " + layer + " head " + head);
                Assert.Equal(5, cache.Length(0, 1, 1), "length");
            }
        }

        [Test]
        public static void ExportImportBytesAcrossCaches()
        {
            using (var context = new Context(Fixture.CacheYaml))
            using (Cache source = context.CreateCacheFromYaml())
            using (Cache target = context.CreateCacheFromYaml()) {
                Fixture.Fill(source, new[] { 0 }, 9, 1);
                source.RemoveRange(0, 3, 5);
                byte[] image = source.Export(0);
                Assert.True(image.Length > 0, "an image");
                target.Import(5, image);
                Assert.Sequence(Fixture.Positions(source, 0, 1, 1), Fixture.Positions(target, 5, 1, 1), "positions");
                Assert.Sequence(Probe(source, 0, 9), Probe(target, 5, 9), "attention over the import");
                Assert.Fails(StatusCode.AlreadyExists, () => target.Import(5, image), "an import onto an existing id");
            }
        }

        [Test]
        public static void ExportImportThroughAFile()
        {
            using (var context = new Context(Fixture.CacheYaml))
            using (Cache cache = context.CreateCacheFromYaml())
            using (var file = new Fixture.TempFile()) {
                Fixture.Fill(cache, new[] { 0 }, 5, 1);
                cache.ExportFile(0, file.Path);
                Assert.True(File.Exists(file.Path), "the file is written");
                cache.ImportFile(2, file.Path);
                Assert.Sequence(Probe(cache, 0, 5), Probe(cache, 2, 5), "attention over the imported file");
                KvcacheException e = Assert.Fails(StatusCode.NotFound, () => cache.ImportFile(3, file.Path + ".missing"), "a missing file");
                Assert.Contains(file.Path + ".missing", e.Message, "the message names the file");
            }
        }

        [Test]
        public static void SequenceIdsAreChecked()
        {
            using (var context = new Context(Fixture.CacheYaml))
            using (Cache cache = context.CreateCacheFromYaml()) {
                cache.CreateSequence(0);
                Assert.Fails(StatusCode.AlreadyExists, () => cache.CreateSequence(0), "a duplicate id");
                Assert.Fails(StatusCode.NotFound, () => cache.Truncate(42, 0), "an unknown id");
                Assert.Fails(StatusCode.InvalidArgument, () => cache.CreateSequence(-1), "a negative id");
                cache.RemoveSequence(0);
                Assert.Fails(StatusCode.NotFound, () => cache.Length(0, 0, 0), "a removed id");
            }
        }
    }
}
