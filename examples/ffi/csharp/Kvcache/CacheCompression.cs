using System;
using System.Runtime.InteropServices;

namespace Kvcache
{
    public sealed unsafe partial class Cache
    {
        /// <summary>The layer argument of Compress that means every layer.</summary>
        public const int AllLayers = -1;

        /// <summary>
        /// Compresses the listed sequences now on <paramref name="layer"/>, or on every layer when
        /// it is AllLayers. A cache without a policy does nothing.
        /// </summary>
        public void Compress(int layer, params int[] seqIds)
        {
            if (seqIds == null) throw new ArgumentNullException(nameof(seqIds));
            Shared(() => KvcacheException.Check(NativeMethods.kvc_compress(handle, layer, seqIds.Length, seqIds)));
        }

        /// <summary>The policy as in effect; NotFound for a cache created without one.</summary>
        public PolicyInfo GetPolicyInfo()
        {
            return Shared(() => {
                var info = new NativePolicyInfo { StructSize = (uint)Marshal.SizeOf(typeof(NativePolicyInfo)) };
                KvcacheException.Check(NativeMethods.kvc_cache_policy_info(handle, ref info));
                return new PolicyInfo(info);
            });
        }

        /// <summary>
        /// Reports statistics an engine computed with its own kernels: one value per stored token of
        /// (sequence, layer, KV head), in storage order.
        /// </summary>
        public void ReportStats(int seqId, int layer, int kvHead, StatKind kind, float[] values)
        {
            if (values == null) throw new ArgumentNullException(nameof(values));
            ReportStats(seqId, layer, kvHead, kind, new ReadOnlySpan<float>(values));
        }

        /// <summary>ReportStats from a span.</summary>
        public void ReportStats(int seqId, int layer, int kvHead, StatKind kind, ReadOnlySpan<float> values)
        {
            fixed (float* p = &MemoryMarshal.GetReference(values)) {
                var data = (IntPtr)p;
                int count = values.Length;
                Shared(() => KvcacheException.Check(
                    NativeMethods.kvc_report_stats(handle, seqId, layer, kvHead, kind, data, count)));
            }
        }

        /// <summary>Peak bytes one sequence holds for this prompt, chunking and decode length.</summary>
        public ulong EstimatePeakBytes(int promptTokens, int chunkTokens, int newTokens)
        {
            return Shared(() => {
                UIntPtr bytes;
                KvcacheException.Check(NativeMethods.kvc_cache_estimate_peak_bytes(handle, promptTokens, chunkTokens, newTokens, out bytes));
                return bytes.ToUInt64();
            });
        }

        /// <summary>
        /// EstimatePeakBytes for <paramref name="request"/>, whose prompt's last chunk may be marked:
        /// with PrefillCompression.Once each layer is then compressed right after it, so a prompt
        /// prefilled in one chunk needs about one layer holding the prompt and the others their budget.
        /// </summary>
        public ulong Estimate(EstimateRequest request)
        {
            EstimateRequest r = request.Versioned();
            return Shared(() => {
                UIntPtr bytes;
                KvcacheException.Check(NativeMethods.kvc_cache_estimate(handle, ref r, out bytes));
                return bytes.ToUInt64();
            });
        }
    }
}
