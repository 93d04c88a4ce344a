using System;

namespace Kvcache.Tests
{
    // The Span overloads: slices of larger buffers in, a slice out, the same results as arrays;
    // a span of the wrong length is refused before the library reads or writes it.
    static class SpanTests
    {
        const int QRow = Fixture.QHeads * Fixture.HeadDim, KvRow = Fixture.KvHeads * Fixture.HeadDim;

        [Test]
        public static void SlicesGiveTheResultsOfArrays()
        {
            using (var context = new Context(Fixture.CacheYaml))
            using (Cache cache = context.CreateCacheFromYaml()) {
                cache.CreateSequence(0);
                Batch batch = Batch.Run(0, 0, 5);
                float[] q = Fixture.Random(batch.Total * QRow, 1);
                float[] k = Fixture.Random(batch.Total * KvRow, 2);
                float[] v = Fixture.Random(batch.Total * KvRow, 3);
                var expected = new float[q.Length];
                cache.AppendAttend(0, batch, q, k, v, expected);

                // K and V as two halves of one buffer, the output into the middle of a larger one.
                var kv = new float[k.Length + v.Length];
                k.CopyTo(kv, 0);
                v.CopyTo(kv, k.Length);
                cache.Append(1, batch, kv.AsSpan(0, k.Length), kv.AsSpan(k.Length));
                var padded = new float[q.Length + 2];
                cache.Attend(1, batch, q.AsSpan(), padded.AsSpan(1, q.Length));
                Assert.Near(expected, padded.AsSpan(1, q.Length).ToArray(), 1e-6f, "Append + Attend from slices");
                Assert.Equal(0f, padded[0], "the float before the output slice is untouched");
                Assert.Equal(0f, padded[padded.Length - 1], "the float after the output slice is untouched");

                cache.CreateSequence(1);
                Batch other = Batch.Run(1, 0, 5);
                var fused = new float[q.Length];
                cache.AppendAttend(0, other, new ReadOnlySpan<float>(q), k, v, fused.AsSpan());
                Assert.Near(expected, fused, 1e-6f, "AppendAttend from spans");
            }
        }

        [Test]
        public static void WrongLengthsAreRefused()
        {
            using (var context = new Context(Fixture.CacheYaml))
            using (Cache cache = context.CreateCacheFromYaml()) {
                cache.CreateSequence(0);
                Batch batch = Batch.Run(0, 0, 2);
                var k = new float[batch.Total * KvRow + 1];
                ArgumentException e = Assert.Throws<ArgumentException>(
                    () => cache.Append(0, batch, k.AsSpan(1), k.AsSpan(0, k.Length - 2)), "a V slice one float short");
                Assert.Equal("v", e.ParamName, "the parameter named");
                var q = new float[batch.Total * QRow];
                Assert.Throws<ArgumentException>(() => cache.Attend(0, batch, q, q.AsSpan(1)), "an output slice one float short");
                Assert.Equal(0, cache.Length(0, 0, 0), "nothing was stored");
            }
        }

        [Test]
        public static void ExportIntoAndImportFromSpans()
        {
            using (var context = new Context(Fixture.CacheYaml))
            using (Cache cache = context.CreateCacheFromYaml()) {
                Fixture.Fill(cache, new[] { 0 }, 7, 1);
                byte[] image = cache.Export(0);
                Assert.Equal((long)image.Length, cache.ExportSize(0), "ExportSize is the image's size");

                var buffer = new byte[image.Length + 8];
                int written = cache.Export(0, buffer.AsSpan(4));
                Assert.Equal(image.Length, written, "bytes written");
                Assert.Sequence(image, buffer.AsSpan(4, written).ToArray(), "the image written into a slice");
                Assert.Fails(StatusCode.InvalidArgument, () => cache.Export(0, buffer.AsSpan(0, image.Length - 1)),
                             "a destination one byte short");

                cache.Import(1, new ReadOnlySpan<byte>(buffer, 4, written));
                Assert.Sequence(Fixture.Positions(cache, 0, 1, 1), Fixture.Positions(cache, 1, 1, 1), "the imported positions");
                Assert.Sequence(image, cache.Export(1), "the imported sequence exports the same image");
            }
        }
    }
}
