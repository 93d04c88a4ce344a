using System.Linq;
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
    }
}
