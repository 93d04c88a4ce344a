using System.Runtime.InteropServices;

#pragma warning disable 0649 // the fields are written by kvc_cache_get_stats

namespace Kvcache
{
    /// <summary>kvc_cache_stats: memory and token counters of a cache (a blittable mirror).</summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct CacheStats
    {
        uint structSize;
        System.UIntPtr bytesUsed;
        System.UIntPtr bytesPeak;
        System.UIntPtr bytesLimit;
        System.UIntPtr bytesReserved;
        ulong tokensStored;
        ulong tokensEvicted;
        ulong bytesCopied;
        System.UIntPtr blocksUsed;
        System.UIntPtr blocksFree;
        int sequences;
        System.UIntPtr bytesShared;
        System.UIntPtr bytesCached;
        ulong bytesReclaimed;
        ulong prefixHits;
        ulong prefixTokensReused;
        ulong tokensDemoted;

        internal static CacheStats Empty()
        {
            return new CacheStats { structSize = (uint)Marshal.SizeOf(typeof(CacheStats)) };
        }

        /// <summary>Bytes held by stored tokens (blocks or segment capacity).</summary>
        public ulong BytesUsed { get { return bytesUsed.ToUInt64(); } }
        /// <summary>Highest BytesUsed since creation.</summary>
        public ulong BytesPeak { get { return bytesPeak.ToUInt64(); } }
        /// <summary>The memory limit.</summary>
        public ulong BytesLimit { get { return bytesLimit.ToUInt64(); } }
        /// <summary>Bytes taken from the backend, including pooled free blocks.</summary>
        public ulong BytesReserved { get { return bytesReserved.ToUInt64(); } }
        /// <summary>Tokens stored, summed over (sequence, layer, KV head).</summary>
        public ulong TokensStored { get { return tokensStored; } }
        /// <summary>Tokens removed by compression, summed likewise.</summary>
        public ulong TokensEvicted { get { return tokensEvicted; } }
        /// <summary>Bytes moved by growth of contiguous segments.</summary>
        public ulong BytesCopied { get { return bytesCopied; } }
        /// <summary>Paged: blocks holding tokens.</summary>
        public ulong BlocksUsed { get { return blocksUsed.ToUInt64(); } }
        /// <summary>Paged: blocks that still fit under the limit.</summary>
        public ulong BlocksFree { get { return blocksFree.ToUInt64(); } }
        /// <summary>Live sequences.</summary>
        public int Sequences { get { return sequences; } }
        /// <summary>Of BytesUsed, what more than one sequence holds (blocks shared by a fork or by AttachPrefix).</summary>
        public ulong BytesShared { get { return bytesShared.ToUInt64(); } }
        /// <summary>
        /// Of BytesUsed, blocks that only the prefix cache holds (no live sequence), given back,
        /// least recently used first, as soon as a call needs the memory.
        /// </summary>
        public ulong BytesCached { get { return bytesCached.ToUInt64(); } }
        /// <summary>Bytes of cached blocks given back so far to make room.</summary>
        public ulong BytesReclaimed { get { return bytesReclaimed; } }
        /// <summary>AttachPrefix calls that attached at least one block.</summary>
        public ulong PrefixHits { get { return prefixHits; } }
        /// <summary>Tokens those calls attached, summed.</summary>
        public ulong PrefixTokensReused { get { return prefixTokensReused; } }
        /// <summary>Tokens compression moved into a head's demoted tier (CacheParams.DemoteKDType, DemoteVDType), summed over (sequence, layer, KV head).</summary>
        public ulong TokensDemoted { get { return tokensDemoted; } }
    }
}
