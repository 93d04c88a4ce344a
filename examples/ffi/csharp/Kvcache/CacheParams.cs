using System;
using System.Collections.Generic;
using System.Runtime.InteropServices;

namespace Kvcache
{
    /// <summary>
    /// Shape, storage and compression of a cache (kvc_cache_params). The initial values are the
    /// defaults kvcache.h documents, set here; the tests compare them with what
    /// kvc_cache_params_init_sized() writes into a struct of this mirror's size.
    /// </summary>
    public sealed class CacheParams
    {
        /// <summary>Sinks or Recent: the policy's own default (any value &lt; 0 means it).</summary>
        public const int PolicyDefault = -1;
        // kvc_cache_params::k_dtype and v_dtype: the format of dtype (KDType, VDType null).
        const int SameAsDType = -1;
        // kvc_cache_params::demote_k_dtype and demote_v_dtype: not demoted (DemoteKDType, DemoteVDType null).
        const int NotDemoted = -1;

        public int Layers { get; set; } = 1;
        public int KvHeads { get; set; } = 1;
        /// <summary>A multiple of KvHeads (GQA); 0: as many as KvHeads.</summary>
        public int QHeads { get; set; }
        public int HeadDim { get; set; } = 64;
        /// <summary>The storage dtype; inputs are f32.</summary>
        public DType DType { get; set; } = DType.F16;
        public Layout Layout { get; set; } = Layout.Paged;
        public int BlockTokens { get; set; } = 16;
        public double GrowthFactor { get; set; } = 2.0;
        /// <summary>Bytes of K, V and per-token metadata.</summary>
        public ulong MemoryLimit { get; set; } = 1UL << 30;
        /// <summary>Backend plugin name; null means "cpu".</summary>
        public string Backend { get; set; }
        /// <summary>Eviction policy plugin name; null: the cache never compresses.</summary>
        public string Policy { get; set; }
        /// <summary>Tokens kept per (sequence, layer, KV head); 0: use BudgetRatio.</summary>
        public int Budget { get; set; }
        /// <summary>In (0, 1]: the budget as a share of the tokens a head has received.</summary>
        public double BudgetRatio { get; set; }
        /// <summary>First tokens always kept; PolicyDefault (&lt; 0): the policy's default.</summary>
        public int Sinks { get; set; } = PolicyDefault;
        /// <summary>Newest tokens always kept; PolicyDefault (&lt; 0): the policy's default.</summary>
        public int Recent { get; set; } = PolicyDefault;
        /// <summary>Policy-specific parameters as written in YAML, in order.</summary>
        public IList<KeyValuePair<string, string>> PolicyParams { get; } = new List<KeyValuePair<string, string>>();
        public PrefillCompression Prefill { get; set; }
        /// <summary>&gt; 0: compress every this many single-token steps.</summary>
        public int DecodeEvery { get; set; }
        /// <summary>&gt; 0: compress when a head holds more than budget + slack.</summary>
        public int DecodeSlack { get; set; }
        /// <summary>The storage format of K alone; null: DType.</summary>
        public DType? KDType { get; set; }
        /// <summary>The storage format of V alone; null: DType.</summary>
        public DType? VDType { get; set; }
        /// <summary>The rotation of K.</summary>
        public Rotation KRotation { get; set; } = Rotation.None;
        /// <summary>Prefix caching (Cache.PublishPrefix, AttachPrefix, LookupPrefix); paged layout only.</summary>
        public bool PrefixCache { get; set; }
        /// <summary>With PrefixCache: a store of the context that AttachPrefix continues in where the cache has no more blocks; null: none.</summary>
        public string PrefixStore { get; set; }
        /// <summary>With PrefixStore: PublishPrefix also writes the blocks it makes findable to it.</summary>
        public bool PrefixWriteThrough { get; set; }
        /// <summary>With a policy, "demote before evict" (paged layout only): compression stores the tokens the budget cannot keep in the cache's formats with K in this smaller format before it evicts any; null: K is not demoted.</summary>
        public DType? DemoteKDType { get; set; }
        /// <summary>Likewise for V; null for both: no demotion.</summary>
        public DType? DemoteVDType { get; set; }
        /// <summary>With demotion: the share of each head's byte budget that tokens in the cache's formats may take, in [0, 1].</summary>
        public double DemoteKeep { get; set; } = 0.25;

        internal static CacheParams FromNative(NativeCacheParams p)
        {
            return new CacheParams {
                Layers = p.Layers, KvHeads = p.KvHeads, QHeads = p.QHeads, HeadDim = p.HeadDim,
                DType = p.DType, Layout = p.Layout, BlockTokens = p.BlockTokens,
                GrowthFactor = p.GrowthFactor, MemoryLimit = p.MemoryLimit.ToUInt64(),
                Backend = NativeMethods.String(p.Backend), Policy = NativeMethods.String(p.Policy),
                Budget = p.Budget, BudgetRatio = p.BudgetRatio, Sinks = p.Sinks, Recent = p.Recent,
                Prefill = p.Prefill, DecodeEvery = p.DecodeEvery, DecodeSlack = p.DecodeSlack,
                KDType = p.KDType < 0 ? (DType?)null : (DType)p.KDType,
                VDType = p.VDType < 0 ? (DType?)null : (DType)p.VDType,
                KRotation = p.KRotation,
                PrefixCache = p.PrefixCache != 0, PrefixStore = NativeMethods.String(p.PrefixStore),
                PrefixWriteThrough = p.PrefixWriteThrough != 0,
                DemoteKDType = p.DemoteKDType < 0 ? (DType?)null : (DType)p.DemoteKDType,
                DemoteVDType = p.DemoteVDType < 0 ? (DType?)null : (DType)p.DemoteVDType,
                DemoteKeep = p.DemoteKeep,
            };
        }

        /// <summary>
        /// The native struct, its strings and key/value array allocated in <paramref name="memory"/>,
        /// which must outlive the call it is passed to.
        /// </summary>
        internal NativeCacheParams ToNative(NativeMemory memory)
        {
            var p = new NativeCacheParams {
                StructSize = (uint)Marshal.SizeOf(typeof(NativeCacheParams)),
                Layers = Layers, KvHeads = KvHeads, QHeads = QHeads, HeadDim = HeadDim,
                DType = DType, Layout = Layout, BlockTokens = BlockTokens, GrowthFactor = GrowthFactor,
                MemoryLimit = new UIntPtr(MemoryLimit),
                Backend = memory.Utf8(Backend), Policy = memory.Utf8(Policy),
                Budget = Budget, BudgetRatio = BudgetRatio, Sinks = Sinks, Recent = Recent,
                NPolicyParams = new UIntPtr((uint)PolicyParams.Count),
                Prefill = Prefill, DecodeEvery = DecodeEvery, DecodeSlack = DecodeSlack,
                KDType = KDType.HasValue ? (int)KDType.Value : SameAsDType,
                VDType = VDType.HasValue ? (int)VDType.Value : SameAsDType,
                KRotation = KRotation,
                PrefixCache = PrefixCache ? 1 : 0, PrefixStore = memory.Utf8(PrefixStore),
                PrefixWriteThrough = PrefixWriteThrough ? 1 : 0,
                DemoteKeep = DemoteKeep,
                DemoteKDType = DemoteKDType.HasValue ? (int)DemoteKDType.Value : NotDemoted,
                DemoteVDType = DemoteVDType.HasValue ? (int)DemoteVDType.Value : NotDemoted,
            };
            if (PolicyParams.Count > 0) {
                var entries = new NativeKeyValue[PolicyParams.Count];
                for (int i = 0; i < entries.Length; i++) {
                    if (PolicyParams[i].Key == null || PolicyParams[i].Value == null)
                        throw new ArgumentException("PolicyParams[" + i + "] has a null key or value");
                    entries[i] = new NativeKeyValue { Key = memory.Utf8(PolicyParams[i].Key),
                                                      Value = memory.Utf8(PolicyParams[i].Value) };
                }
                p.PolicyParams = memory.Array(entries);
            }
            return p;
        }
    }
}
