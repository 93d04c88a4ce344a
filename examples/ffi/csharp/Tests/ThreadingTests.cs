using System;
using System.Collections.Concurrent;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;

namespace Kvcache.Tests
{
    static class ThreadingTests
    {
        const int QRow = Fixture.QHeads * Fixture.HeadDim, KvRow = Fixture.KvHeads * Fixture.HeadDim;
        const int Sequences = 4, Steps = 24;

        /// <summary>Decodes <see cref="Steps"/> tokens into one sequence; returns every step's attention.</summary>
        static float[][] Decode(Cache cache, int seq)
        {
            var outputs = new float[Steps][];
            for (int step = 0; step < Steps; step++) {
                outputs[step] = new float[QRow];
                int seed = 1000 * seq + 3 * step;
                cache.AppendAttend(step % Fixture.Layers, Batch.Run(seq, step, 1), Fixture.Random(QRow, seed),
                                   Fixture.Random(KvRow, seed + 1), Fixture.Random(KvRow, seed + 2), outputs[step]);
            }
            return outputs;
        }

        // A cache allows concurrent calls on disjoint sequences; creating and removing others
        // meanwhile waits for them (Cache's lock), so results equal a serial run.
        [Test]
        public static void DisjointSequencesInParallelMatchASerialRun()
        {
            using (var context = new Context(Fixture.CacheYaml))
            using (Cache serial = context.CreateCacheFromYaml())
            using (Cache parallel = context.CreateCacheFromYaml()) {
                for (int seq = 0; seq < Sequences; seq++) {
                    serial.CreateSequence(seq);
                    parallel.CreateSequence(seq);
                }
                float[][][] expected = Enumerable.Range(0, Sequences).Select(seq => Decode(serial, seq)).ToArray();
                Task churn = Task.Run(() => {
                    for (int i = 0; i < 50; i++) {
                        parallel.CreateSequence(100 + i);
                        parallel.RemoveSequence(100 + i);
                    }
                });
                Task<float[][]>[] decoders = Enumerable.Range(0, Sequences).Select(seq => Task.Run(() => Decode(parallel, seq))).ToArray();
                Task.WaitAll(decoders);
                churn.Wait();
                for (int seq = 0; seq < Sequences; seq++)
                    for (int step = 0; step < Steps; step++)
                        Assert.Sequence(expected[seq][step], decoders[seq].Result[step], "sequence " + seq + " step " + step);
                Assert.Equal(Sequences, parallel.GetStats().Sequences, "sequences left");
            }
        }

        [Test]
        public static void AContextServesCachesOnManyThreads()
        {
            using (var context = new Context(Fixture.CacheYaml)) {
                Task[] users = Enumerable.Range(0, 8).Select(i => Task.Run(() => {
                    using (Cache cache = context.CreateCacheFromYaml()) {
                        Fixture.Fill(cache, new[] { i }, 3 + i, i);
                        Assert.Equal(3 + i, cache.Length(i, 1, 1), "length in cache " + i);
                    }
                })).ToArray();
                Task.WaitAll(users);
            }
        }

        // Issue 32's probe: one thread decodes on sequence 0 while others remove older ranges
        // of it, compress it, export it and import the export, fork it and view it. The
        // library serialises calls on one sequence: every call succeeds, nothing crashes, and
        // what is stored stays in position order.
        [Test]
        public static void CallsOnTheSameSequenceFromManyThreads()
        {
            const int steps = 120;
            using (var context = new Context(Fixture.CacheYaml + "policy: { name: h2o, budget: 12 }\n"))
            using (Cache cache = context.CreateCacheFromYaml()) {
                cache.CreateSequence(0);
                int newest = -1;
                var done = new ManualResetEventSlim(false);
                var failures = new ConcurrentQueue<Exception>();
                Action<Action> guard = body => {
                    try { body(); } catch (Exception e) { failures.Enqueue(e); }
                };
                Task engine = Task.Run(() => guard(() => {
                    try {
                        var output = new float[QRow];
                        for (int pos = 0; pos < steps; pos++) {
                            for (int layer = 0; layer < Fixture.Layers; layer++) {
                                cache.AppendAttend(layer, Batch.Run(0, pos, 1), Fixture.Random(QRow, 3 * pos),
                                                   Fixture.Random(KvRow, 3 * pos + 1), Fixture.Random(KvRow, 3 * pos + 2), output);
                            }
                            Volatile.Write(ref newest, pos);
                        }
                    } finally {
                        done.Set();
                    }
                }));
                Task remover = Task.Run(() => guard(() => {
                    for (int i = 0; !done.IsSet; i++) {
                        int end = Volatile.Read(ref newest) - 6;
                        if (end > 4) cache.RemoveRange(0, end - 2 - i % 3, end);
                        Thread.Yield();
                    }
                }));
                Task compressor = Task.Run(() => guard(() => {
                    for (int i = 0; !done.IsSet; i++) {
                        cache.Compress(Cache.AllLayers, 0);
                        byte[] image = cache.Export(0);
                        cache.Import(1000000 + i, image);
                        cache.RemoveSequence(1000000 + i);
                    }
                }));
                Task forker = Task.Run(() => guard(() => {
                    for (int i = 0; !done.IsSet; i++) {
                        cache.Fork(0, 2000000 + i);
                        int[] positions = Fixture.Positions(cache, 0, 1, 1);
                        for (int t = 1; t < positions.Length; t++)
                            Assert.True(positions[t] > positions[t - 1], "a view in position order");
                        cache.RemoveSequence(2000000 + i);
                    }
                }));
                Task.WaitAll(engine, remover, compressor, forker);
                Assert.True(failures.IsEmpty, "every call succeeded, got [" + string.Join(" | ", failures) + "]");
                for (int layer = 0; layer < Fixture.Layers; layer++) {
                    int[] positions = Fixture.Positions(cache, 0, layer, 0);
                    Assert.True(positions.Length > 0, "layer " + layer + " holds tokens");
                    for (int t = 0; t < positions.Length; t++)
                        Assert.True(positions[t] < steps && (t == 0 || positions[t] > positions[t - 1]),
                                    "layer " + layer + ": positions increase");
                }
            }
        }

        // Issue 32's stale-view probe: views taken before a compression, a removal and a new
        // append keep what they showed, and stay readable after the cache is disposed, since
        // they are copies in managed memory.
        [Test]
        public static void ViewsAreCopiesThatOutliveChangesAndDispose()
        {
            SegmentView[] views;
            int[] before;
            using (var context = new Context(Fixture.StreamingYaml))
            using (Cache cache = context.CreateCacheFromYaml()) {
                Fixture.Fill(cache, new[] { 0, 1 }, 12, 5);
                views = cache.View(0, 0, 0);
                before = views.SelectMany(v => v.Positions).ToArray();
                Assert.Sequence(Fixture.Range(0, 12), before, "positions viewed");
                cache.Compress(Cache.AllLayers, 0);
                cache.RemoveRange(0, 8, 10);
                cache.RemoveSequence(1);
                cache.Append(0, Batch.Run(0, 12, 1), Fixture.Random(KvRow, 7), Fixture.Random(KvRow, 8));
                Assert.True(!Fixture.Positions(cache, 0, 0, 0).SequenceEqual(before), "the sequence changed");
            }
            Assert.Sequence(before, views.SelectMany(v => v.Positions).ToArray(), "views after the changes and Dispose");
            foreach (SegmentView view in views) {
                Assert.Equal(view.Count * 8 * 4, view.K.Length, "K bytes of a copied segment");
                Assert.Equal(view.Count * 8 * 4, view.V.Length, "V bytes of a copied segment");
            }
        }

        // Issue 32's throwing-logger probe: an exception thrown by the logger does not unwind
        // through the library's frames (the library logs at debug level when a truncated
        // contiguous segment cannot move into a smaller one, as in
        // ContextTests.LoggerReceivesTheLibrarysMessages); the call still succeeds.
        [Test]
        public static void AThrowingLoggerDoesNotReachTheLibrary()
        {
            int calls = 0;
            using (var context = new Context()) {
                context.SetLogger((level, message) => {
                    Interlocked.Increment(ref calls);
                    throw new InvalidOperationException("logger failure");
                }, LogLevel.Debug);
                int tokenBytes = 2 * 8 * 4 + 4;
                var parameters = new CacheParams {
                    HeadDim = 8, DType = DType.F32, Layout = Layout.Contiguous, MemoryLimit = (ulong)(100 * tokenBytes + 16),
                };
                using (Cache cache = context.CreateCache(parameters)) {
                    cache.CreateSequence(0);
                    cache.Reserve(0, 100);
                    cache.Append(0, Batch.Run(0, 0, 100), Fixture.Random(800, 1), Fixture.Random(800, 2));
                    cache.Truncate(0, 2);
                    Assert.Equal(2, cache.Length(0, 0, 0), "length after truncation");
                }
                context.SetLogger(null);
            }
            Assert.True(calls > 0, "the logger was called");
        }
    }
}
