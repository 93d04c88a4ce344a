using System.Runtime.InteropServices;

namespace Kvcache
{
    /// <summary>
    /// kvc_estimate_request: the prompt and decode lengths Cache.Estimate models (a blittable
    /// mirror); the constructor is kvc_estimate_request_init_sized()'s, no prompt end marked.
    /// </summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct EstimateRequest
    {
        uint structSize;
        int promptTokens;
        int chunkTokens;
        int newTokens;
        int marksPromptEnd;

        public EstimateRequest(int promptTokens, int chunkTokens, int newTokens)
        {
            structSize = 0;
            this.promptTokens = promptTokens;
            this.chunkTokens = chunkTokens;
            this.newTokens = newTokens;
            marksPromptEnd = 0;
        }

        /// <summary>This value with struct_size set, as the library reads it.</summary>
        internal EstimateRequest Versioned()
        {
            EstimateRequest r = this;
            r.structSize = (uint)Marshal.SizeOf(typeof(EstimateRequest));
            return r;
        }

        /// <summary>&gt;= 0.</summary>
        public int PromptTokens { get { return promptTokens; } set { promptTokens = value; } }
        /// <summary>&gt;= 1: prompt tokens per prefill batch (the last chunk may be shorter).</summary>
        public int ChunkTokens { get { return chunkTokens; } set { chunkTokens = value; } }
        /// <summary>&gt;= 0: tokens decoded one at a time after the prompt.</summary>
        public int NewTokens { get { return newTokens; } set { newTokens = value; } }
        /// <summary>The engine marks the prompt's last chunk (a Batch's promptEnd).</summary>
        public bool MarksPromptEnd { get { return marksPromptEnd != 0; } set { marksPromptEnd = value ? 1 : 0; } }
    }
}
