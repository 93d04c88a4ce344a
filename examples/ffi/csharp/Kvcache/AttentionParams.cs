using System.Runtime.InteropServices;

namespace Kvcache
{
    /// <summary>
    /// kvc_attention_params: attention options (a blittable mirror). The zero value is the
    /// default: scale 1/sqrt(head_dim), no sliding window, no soft-cap.
    /// </summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct AttentionParams
    {
        uint structSize;
        float scale;
        int slidingWindow;
        float softcap;

        /// <summary>This value with struct_size set, as the library reads it.</summary>
        internal AttentionParams Versioned()
        {
            AttentionParams p = this;
            p.structSize = (uint)Marshal.SizeOf(typeof(AttentionParams));
            return p;
        }

        /// <summary>Logit scale; 0 means 1/sqrt(head_dim).</summary>
        public float Scale { get { return scale; } set { scale = value; } }
        /// <summary>&gt; 0: a query at p sees keys at positions (p - window, p].</summary>
        public int SlidingWindow { get { return slidingWindow; } set { slidingWindow = value; } }
        /// <summary>&gt; 0: logits become softcap * tanh(logit / softcap).</summary>
        public float Softcap { get { return softcap; } set { softcap = value; } }
    }
}
