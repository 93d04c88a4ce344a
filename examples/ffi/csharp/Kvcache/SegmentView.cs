using System;
using System.Runtime.InteropServices;

#pragma warning disable 0649 // the fields are written by kvc_seq_view

namespace Kvcache
{
    /// <summary>
    /// kvc_segment_view: a run of stored tokens in the backend's memory (host memory for the
    /// cpu backend), for engines with their own kernels. The pointers stay valid until the next
    /// call that appends to, compresses or removes the sequence.
    /// </summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct SegmentView
    {
        IntPtr k;
        IntPtr v;
        IntPtr pos;
        int count;

        /// <summary>[Count, head_dim] keys of the storage dtype.</summary>
        public IntPtr K { get { return k; } }
        /// <summary>[Count, head_dim] values of the storage dtype.</summary>
        public IntPtr V { get { return v; } }
        /// <summary>[Count] absolute positions (int32).</summary>
        public IntPtr Positions { get { return pos; } }
        /// <summary>Tokens in this segment.</summary>
        public int Count { get { return count; } }
    }
}
