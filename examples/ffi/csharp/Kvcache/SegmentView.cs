using System;
using System.Runtime.InteropServices;

#pragma warning disable 0649 // the fields are written by kvc_seq_view

namespace Kvcache
{
    /// <summary>
    /// A copy of one run of stored tokens (kvc_segment_view), taken by Cache.View: K and V as
    /// rows of their storage formats (Count rows each, laid out as kvcache_format.h describes)
    /// and their absolute positions. Managed memory: it stays what it was when the view was
    /// taken, whatever the cache does afterwards.
    /// </summary>
    public sealed class SegmentView
    {
        internal SegmentView(byte[] k, byte[] v, int[] positions)
        {
            K = k;
            V = v;
            Positions = positions;
        }

        /// <summary>[Count] rows of the K storage format.</summary>
        public byte[] K { get; }
        /// <summary>[Count] rows of the V storage format.</summary>
        public byte[] V { get; }
        /// <summary>[Count] absolute positions.</summary>
        public int[] Positions { get; }
        /// <summary>Tokens in this segment.</summary>
        public int Count { get { return Positions.Length; } }
    }

    /// <summary>kvc_segment_view as the library writes it: pointers into its storage.</summary>
    [StructLayout(LayoutKind.Sequential)]
    struct NativeSegmentView
    {
        internal IntPtr K;
        internal IntPtr V;
        internal IntPtr Pos;
        internal int Count;
    }
}
