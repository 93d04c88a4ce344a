using System;
using System.IO;
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
        public static void DemotionIsOffByDefaultAndItsBadValuesAreRefused()
        {
            using (var context = new Context())
            using (Cache cache = context.CreateCache(new CacheParams())) {
                CacheParams p = cache.Params;
                Assert.Equal(null, p.DemoteKDType, "demote_k_dtype read back");
                Assert.Equal(null, p.DemoteVDType, "demote_v_dtype read back");
                Assert.Equal(0.25, p.DemoteKeep, "demote_keep read back");
                Assert.Equal(0UL, cache.GetStats().TokensDemoted, "tokens demoted by a new cache");
                KvcacheException e = Assert.Fails(StatusCode.InvalidArgument,
                    () => context.CreateCache(new CacheParams { DemoteKDType = DType.Q4_0 }), "demotion without a policy");
                Assert.Contains("need a policy", e.Message, "the refusal names the missing policy");
                e = Assert.Fails(StatusCode.InvalidArgument, () => context.CreateCache(new CacheParams {
                        Policy = "window", Budget = 8, DemoteVDType = DType.Q4_0, DemoteKeep = 2 }), "demote_keep 2");
                Assert.Contains("demote_keep must be in [0, 1]", e.Message, "the refusal names demote_keep");
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
            NativeCacheParams library = FromInit<NativeCacheParams>((b, n) => NativeMethods.kvc_cache_params_init_sized(b, n));
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
                Assert.Equal(library.KRotation, mirror.KRotation, "k_rotation");
                Assert.Equal(library.PrefixCache, mirror.PrefixCache, "prefix_cache");
                Assert.Equal(library.PrefixStore, mirror.PrefixStore, "prefix_store");
                Assert.Equal(library.PrefixWriteThrough, mirror.PrefixWriteThrough, "prefix_write_through");
                Assert.Equal(library.DemoteKeep, mirror.DemoteKeep, "demote_keep");
                Assert.Equal(library.DemoteKDType, mirror.DemoteKDType, "demote_k_dtype");
                Assert.Equal(library.DemoteVDType, mirror.DemoteVDType, "demote_v_dtype");
            }
            FromInit<CacheStats>((b, n) => NativeMethods.kvc_cache_stats_init_sized(b, n));
            FromInit<NativePolicyInfo>((b, n) => NativeMethods.kvc_policy_info_init_sized(b, n));
            FromInit<AttentionParams>((b, n) => NativeMethods.kvc_attention_params_init_sized(b, n));
            NativeBatch batch = FromInit<NativeBatch>(
                (b, n) => NativeMethods.kvc_batch_init_sized(b, n, 0, IntPtr.Zero, IntPtr.Zero, IntPtr.Zero));
            Assert.Equal(IntPtr.Zero, batch.PromptEnd, "prompt_end");
            EstimateRequest request = FromInit<EstimateRequest>(
                (b, n) => NativeMethods.kvc_estimate_request_init_sized(b, n, 7, 3, 5));
            EstimateRequest constructed = new EstimateRequest(7, 3, 5);
            Assert.Equal(request.PromptTokens, constructed.PromptTokens, "prompt_tokens");
            Assert.Equal(request.ChunkTokens, constructed.ChunkTokens, "chunk_tokens");
            Assert.Equal(request.NewTokens, constructed.NewTokens, "new_tokens");
            Assert.Equal(request.MarksPromptEnd, constructed.MarksPromptEnd, "marks_prompt_end");
            NativePrefix prefix = FromInit<NativePrefix>(
                (b, n) => NativeMethods.kvc_prefix_init_sized(b, n, IntPtr.Zero, IntPtr.Zero, 0));
            Assert.Equal(prefix.ChunkTokens, new Prefix("model", new int[0]).ChunkTokens, "chunk_tokens");
        }

        static uint SizeOf<T>()
        {
            return (uint)Marshal.SizeOf(typeof(T));
        }

        const byte Canary = 0xA5;
        const int CanaryBytes = 64;

        /// <summary>
        /// What an init_sized function writes given the mirror's size, into a buffer where canary
        /// bytes follow the mirror: it must set struct_size to that size and leave them alone.
        /// </summary>
        static T FromInit<T>(Action<IntPtr, UIntPtr> init) where T : struct
        {
            int size = Marshal.SizeOf(typeof(T));
            IntPtr buffer = Marshal.AllocHGlobal(size + CanaryBytes);
            try {
                for (int i = 0; i < size + CanaryBytes; ++i) Marshal.WriteByte(buffer, i, Canary);
                init(buffer, (UIntPtr)size);
                for (int i = size; i < size + CanaryBytes; ++i) {
                    Assert.Equal(Canary, Marshal.ReadByte(buffer, i), typeof(T).Name + ": a byte past the mirror");
                }
                Assert.Equal(size, Marshal.ReadInt32(buffer), typeof(T).Name + ": struct_size");
                return (T)Marshal.PtrToStructure(buffer, typeof(T));
            } finally {
                Marshal.FreeHGlobal(buffer);
            }
        }

        [Test]
        public static void MirrorSizesMatchTheCommittedLayout()
        {
            // run-tests names the list on x86-64, the only architecture it is committed for.
            string path = Environment.GetEnvironmentVariable("KVC_ABI_LAYOUT");
            if (string.IsNullOrEmpty(path)) {
                Console.WriteLine("  (no KVC_ABI_LAYOUT: the layout list is committed for x86-64 only)");
                return;
            }
            string[] lines = File.ReadAllLines(path);
            Func<string, uint> sizeOfC = name => {
                string prefix = name + " size ";
                foreach (string line in lines) {
                    if (line.StartsWith(prefix, StringComparison.Ordinal)) {
                        return uint.Parse(line.Substring(prefix.Length).Split(' ')[0]);
                    }
                }
                throw new InvalidOperationException(name + " is not in " + path);
            };
            Assert.Equal(sizeOfC("kvc_cache_params"), SizeOf<NativeCacheParams>(), "kvc_cache_params");
            Assert.Equal(sizeOfC("kvc_cache_stats"), SizeOf<CacheStats>(), "kvc_cache_stats");
            Assert.Equal(sizeOfC("kvc_policy_info"), SizeOf<NativePolicyInfo>(), "kvc_policy_info");
            Assert.Equal(sizeOfC("kvc_attention_params"), SizeOf<AttentionParams>(), "kvc_attention_params");
            Assert.Equal(sizeOfC("kvc_batch"), SizeOf<NativeBatch>(), "kvc_batch");
            Assert.Equal(sizeOfC("kvc_estimate_request"), SizeOf<EstimateRequest>(), "kvc_estimate_request");
            Assert.Equal(sizeOfC("kvc_prefix"), SizeOf<NativePrefix>(), "kvc_prefix");
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
