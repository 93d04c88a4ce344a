using System;
using System.Runtime.InteropServices;

namespace Kvcache.Tests
{
    static class CacheTests
    {
        [Test]
        public static void CreateFromParamsReadsBackTheShape()
        {
            using (var context = new Context())
            using (Cache cache = context.CreateCache(new CacheParams {
                       Layers = 3, KvHeads = 2, QHeads = 6, HeadDim = 16, DType = DType.BF16,
                       Layout = Layout.Contiguous, GrowthFactor = 1.5, MemoryLimit = 1 << 20 })) {
                CacheParams p = cache.Params;
                Assert.Equal(3, p.Layers, "layers");
                Assert.Equal(6, p.QHeads, "q_heads");
                Assert.Equal(16, p.HeadDim, "head_dim");
                Assert.Equal(DType.BF16, p.DType, "dtype");
                Assert.Equal(Layout.Contiguous, p.Layout, "layout");
                Assert.Equal(1.5, p.GrowthFactor, "growth factor");
                Assert.Equal(1UL << 20, p.MemoryLimit, "memory limit");
                Assert.Equal("cpu", p.Backend, "backend");
                Assert.Equal(null, p.Policy, "no policy");
            }
        }

        [Test]
        public static void CreateFromYamlOverridesTheContextsConfiguration()
        {
            using (var context = new Context(Fixture.CacheYaml))
            using (Cache own = context.CreateCacheFromYaml())
            using (Cache other = context.CreateCacheFromYaml("cache:\n  head_dim: 32\n")) {
                Assert.Equal(Fixture.HeadDim, own.Params.HeadDim, "the context's head_dim");
                Assert.Equal(32, other.Params.HeadDim, "the YAML's head_dim");
                Assert.Equal(1, other.Params.Layers, "the default layers");
            }
        }

        [Test]
        public static void DefaultsAndSizesMirrorTheLibrary()
        {
            var expected = new CacheParams();
            NativeCacheParams library = FromInit<NativeCacheParams>(b => NativeMethods.kvc_cache_params_init(b));
            using (var memory = new NativeMemory()) {
                NativeCacheParams mirror = expected.ToNative(memory);
                Assert.Equal(library.StructSize, mirror.StructSize, "sizeof(kvc_cache_params)");
                Assert.Equal(library.Layers, mirror.Layers, "layers");
                Assert.Equal(library.KvHeads, mirror.KvHeads, "kv_heads");
                Assert.Equal(library.QHeads, mirror.QHeads, "q_heads");
                Assert.Equal(library.HeadDim, mirror.HeadDim, "head_dim");
                Assert.Equal(library.DType, mirror.DType, "dtype");
                Assert.Equal(library.Layout, mirror.Layout, "layout");
                Assert.Equal(library.BlockTokens, mirror.BlockTokens, "block_tokens");
                Assert.Equal(library.GrowthFactor, mirror.GrowthFactor, "growth_factor");
                Assert.Equal(library.MemoryLimit, mirror.MemoryLimit, "memory_limit");
                Assert.Equal(library.Backend, mirror.Backend, "backend");
                Assert.Equal(library.Policy, mirror.Policy, "policy");
                Assert.Equal(library.Budget, mirror.Budget, "budget");
                Assert.Equal(library.BudgetRatio, mirror.BudgetRatio, "budget_ratio");
                Assert.Equal(library.Sinks, mirror.Sinks, "sinks");
                Assert.Equal(library.Recent, mirror.Recent, "recent");
                Assert.Equal(library.NPolicyParams, mirror.NPolicyParams, "n_policy_params");
                Assert.Equal(library.Prefill, mirror.Prefill, "prefill");
                Assert.Equal(library.DecodeEvery, mirror.DecodeEvery, "decode_every");
                Assert.Equal(library.DecodeSlack, mirror.DecodeSlack, "decode_slack");
                Assert.Equal(library.KDType, mirror.KDType, "k_dtype");
                Assert.Equal(library.VDType, mirror.VDType, "v_dtype");
            }
            Assert.Equal(SizeOf<CacheStats>(), StructSize(b => NativeMethods.kvc_cache_stats_init(b)), "sizeof(kvc_cache_stats)");
            Assert.Equal(SizeOf<NativePolicyInfo>(), StructSize(b => NativeMethods.kvc_policy_info_init(b)), "sizeof(kvc_policy_info)");
            Assert.Equal(SizeOf<AttentionParams>(), StructSize(b => NativeMethods.kvc_attention_params_init(b)), "sizeof(kvc_attention_params)");
            NativeBatch batch = FromInit<NativeBatch>(b => NativeMethods.kvc_batch_init(b, 0, IntPtr.Zero, IntPtr.Zero, IntPtr.Zero));
            Assert.Equal(SizeOf<NativeBatch>(), batch.StructSize, "sizeof(kvc_batch)");
            Assert.Equal(IntPtr.Zero, batch.PromptEnd, "prompt_end");
            EstimateRequest request = FromInit<EstimateRequest>(b => NativeMethods.kvc_estimate_request_init(b, 7, 3, 5));
            Assert.Equal(SizeOf<EstimateRequest>(), StructSize(b => NativeMethods.kvc_estimate_request_init(b, 7, 3, 5)),
                         "sizeof(kvc_estimate_request)");
            EstimateRequest constructed = new EstimateRequest(7, 3, 5);
            Assert.Equal(request.PromptTokens, constructed.PromptTokens, "prompt_tokens");
            Assert.Equal(request.ChunkTokens, constructed.ChunkTokens, "chunk_tokens");
            Assert.Equal(request.NewTokens, constructed.NewTokens, "new_tokens");
            Assert.Equal(request.MarksPromptEnd, constructed.MarksPromptEnd, "marks_prompt_end");
            NativePrefix prefix = FromInit<NativePrefix>(b => NativeMethods.kvc_prefix_init(b, IntPtr.Zero, IntPtr.Zero, 0));
            Assert.Equal(SizeOf<NativePrefix>(), prefix.StructSize, "sizeof(kvc_prefix)");
            Assert.Equal(prefix.ChunkTokens, new Prefix("model", new int[0]).ChunkTokens, "chunk_tokens");
        }

        static uint SizeOf<T>()
        {
            return (uint)Marshal.SizeOf(typeof(T));
        }

        /// <summary>The struct_size an init function writes.</summary>
        static uint StructSize(Action<IntPtr> init)
        {
            return (uint)WithBuffer(b => { init(b); return Marshal.ReadInt32(b); });
        }

        /// <summary>What an init function writes.</summary>
        static T FromInit<T>(Action<IntPtr> init) where T : struct
        {
            return WithBuffer(b => { init(b); return (T)Marshal.PtrToStructure(b, typeof(T)); });
        }

        /// <summary>Runs <paramref name="read"/> on a 4 KiB buffer, larger than any mirror.</summary>
        static T WithBuffer<T>(Func<IntPtr, T> read)
        {
            IntPtr buffer = Marshal.AllocHGlobal(4096);
            try {
                return read(buffer);
            } finally {
                Marshal.FreeHGlobal(buffer);
            }
        }

        [Test]
        public static void DisposeReleasesAndLaterCallsThrow()
        {
            using (var context = new Context(Fixture.CacheYaml)) {
                Cache cache = context.CreateCacheFromYaml();
                cache.Dispose();
                cache.Dispose();
                Assert.Throws<ObjectDisposedException>(() => cache.GetStats(), "stats of a disposed cache");
                Assert.Throws<ObjectDisposedException>(() => cache.CreateSequence(0), "a sequence in a disposed cache");
            }
        }
    }
}
