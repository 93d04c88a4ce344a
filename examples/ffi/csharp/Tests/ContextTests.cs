using System;
using System.IO;
using System.Linq;

namespace Kvcache.Tests
{
    static class ContextTests
    {
        [Test]
        public static void FromYamlLoadsTheDefaultPlugins()
        {
            using (var context = new Context(Fixture.CacheYaml)) {
                PluginInfo[] plugins = context.Plugins;
                Assert.True(plugins.Any(p => p.Kind == PluginKind.Backend && p.Name == "cpu"), "the cpu backend is loaded");
                Assert.True(plugins.Any(p => p.Kind == PluginKind.Policy && p.Name == "streaming"), "the streaming policy is loaded");
                Assert.True(plugins.All(p => File.Exists(p.Path)), "every plugin names its file");
            }
        }

        [Test]
        public static void FromFileConfiguresItsCaches()
        {
            using (var file = new Fixture.TempFile()) {
                File.WriteAllText(file.Path, Fixture.CacheYaml);
                using (var context = Context.FromFile(file.Path))
                using (Cache cache = context.CreateCacheFromYaml()) {
                    Assert.Equal(Fixture.Layers, cache.Params.Layers, "layers from the file");
                    Assert.Equal(Fixture.QHeads, cache.Params.QHeads, "q_heads from the file");
                }
            }
            KvcacheException e = Assert.Throws<KvcacheException>(() => Context.FromFile("/nonexistent/kvcache.yaml"), "missing file");
            Assert.Contains("/nonexistent/kvcache.yaml", e.Message, "the message names the file");
        }

        [Test]
        public static void BadYamlIsAConfigErrorWithTheLibrarysMessage()
        {
            KvcacheException e = Assert.Fails(StatusCode.Config, () => new Context("cache:\n  head_dim: abc\n"), "bad YAML");
            Assert.Equal("<yaml>:2: cache.head_dim: expected an integer, got 'abc'", e.Message, "message");
            Assert.Equal("CONFIG", e.CodeName, "code name");
        }

        [Test]
        public static void LoadPluginErrorsNameTheFile()
        {
            using (var context = new Context()) {
                KvcacheException e = Assert.Throws<KvcacheException>(() => context.LoadPlugin("/nonexistent/libkvc_x.so"), "missing plugin");
                Assert.Contains("/nonexistent/libkvc_x.so", e.Message, "the message names the file");
                string cpu = context.Plugins.First(p => p.Name == "cpu").Path;
                Assert.Fails(StatusCode.AlreadyExists, () => context.LoadPlugin(cpu), "loading a plugin twice");
                using (context.CreateCacheFromYaml(Fixture.CacheYaml)) { }
            }
        }

        [Test]
        public static void VersionNumberMatchesTheString()
        {
            int[] parts = Library.VersionString.Split('.').Select(int.Parse).ToArray();
            Assert.Equal(3, parts.Length, "MAJOR.MINOR.PATCH");
            Assert.Equal((uint)(parts[0] * 10000 + parts[1] * 100 + parts[2]), Library.Version, "version number");
            Assert.Equal(2, Library.DTypeSize(DType.F16), "f16 size");
            Assert.Equal("bf16", Library.DTypeName(DType.BF16), "bf16 name");
        }

        [Test]
        public static void FormatsComeFromTheLibraryTable()
        {
            FormatInfo f16 = Library.DescribeFormat(DType.F16);
            Assert.Equal(DType.F16, f16.Format, "format");
            Assert.Equal("f16", f16.Name, "name");
            Assert.Equal(1u, f16.GroupSize, "group size");
            Assert.Equal(2u, f16.GroupBytes, "group bytes");
            Assert.Equal(256L, f16.RowBytes(128), "row bytes");
            Assert.Equal(12L, Library.DescribeFormat(DType.F32).RowBytes(3), "f32 row bytes");
            Assert.Fails(StatusCode.InvalidArgument, () => Library.DescribeFormat((DType)7), "format 7");
        }

        [Test]
        public static void QuantizedFormatsStoreTheirTableSizes()
        {
            FormatInfo q8 = Library.DescribeFormat(DType.Q8_0);
            FormatInfo q4 = Library.DescribeFormat(DType.Q4_0);
            Assert.Equal("q8_0", q8.Name, "q8_0 name");
            Assert.Equal(32u, q8.GroupSize, "q8_0 group size");
            Assert.Equal(34u, q8.GroupBytes, "q8_0 group bytes");
            Assert.Equal("q4_0", q4.Name, "q4_0 name");
            Assert.Equal(18u, q4.GroupBytes, "q4_0 group bytes");
            using (var context = new Context()) {
                var parameters = new CacheParams {
                    HeadDim = 64, KDType = DType.Q8_0, VDType = DType.Q4_0, Layout = Layout.Contiguous,
                };
                using (Cache cache = context.CreateCache(parameters)) {
                    Assert.Equal(DType.Q8_0, cache.Params.KDType, "K's format read back");
                    Assert.Equal(DType.Q4_0, cache.Params.VDType, "V's format read back");
                    cache.CreateSequence(0);
                    cache.Reserve(0, 100);
                    long rows = 100 * (q8.RowBytes(64) + q4.RowBytes(64));
                    Assert.True((long)cache.GetStats().BytesUsed >= rows, "100 reserved tokens hold their rows");
                }
                parameters.HeadDim = 40;
                KvcacheException e = Assert.Fails(StatusCode.InvalidArgument, () => context.CreateCache(parameters), "head_dim 40");
                Assert.Contains("q8_0", e.Message, "the refusal names the format");
            }
        }

        [Test]
        public static void RotatedKeysExportOnlyToRotatedCaches()
        {
            using (var context = new Context()) {
                var parameters = new CacheParams {
                    HeadDim = 64, KDType = DType.Q4_0, KRotation = Rotation.Hadamard,
                };
                byte[] image;
                using (Cache cache = context.CreateCache(parameters)) {
                    Assert.Equal(Rotation.Hadamard, cache.Params.KRotation, "the rotation read back");
                    cache.CreateSequence(0);
                    cache.Append(0, Batch.Run(0, 0, 3), Fixture.Random(3 * 64, 1), Fixture.Random(3 * 64, 2));
                    image = cache.Export(0);
                    Assert.Equal(4u, BitConverter.ToUInt32(image, 8), "a rotated sequence's image version");
                }
                parameters.KRotation = Rotation.None;
                using (Cache plain = context.CreateCache(parameters)) {
                    KvcacheException e = Assert.Fails(StatusCode.InvalidArgument, () => plain.Import(0, image),
                                                      "import across rotations");
                    Assert.Contains("k_rotation hadamard", e.Message, "the refusal names the rotation");
                }
                parameters.KRotation = (Rotation)7;
                Assert.Fails(StatusCode.InvalidArgument, () => context.CreateCache(parameters), "rotation 7");
            }
        }

        // A contiguous segment reserved up to the limit and then truncated cannot move into a
        // smaller one, which the library logs at debug level.
        [Test]
        public static void LoggerReceivesTheLibrarysMessages()
        {
            var messages = new System.Collections.Concurrent.ConcurrentQueue<string>();
            using (var context = new Context()) {
                context.SetLogger((level, message) => messages.Enqueue(level + ": " + message), LogLevel.Debug);
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
            Assert.True(messages.Any(m => m.StartsWith("Debug: keeping unused capacity")),
                        "debug message received, got [" + string.Join(" | ", messages) + "]");
        }

        [Test]
        public static void ACacheKeepsItsContextAlive()
        {
            var context = new Context(Fixture.CacheYaml);
            Cache cache = context.CreateCacheFromYaml();
            context.Dispose();
            Fixture.Fill(cache, new[] { 0 }, 3, 5);
            Assert.Equal(3, cache.Length(0, 1, 1), "the cache works after its context was disposed");
            cache.Dispose();
            Assert.Throws<ObjectDisposedException>(() => context.CreateCacheFromYaml(), "a disposed context");
        }
    }
}
