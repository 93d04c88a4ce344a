using System;

namespace Kvcache
{
    // The data path takes f32 host arrays, row-major [batch.Total, heads, head_dim] with no
    // padding; their lengths are checked here, so the library never reads past an array.
    public sealed unsafe partial class Cache
    {
        /// <summary>Stores the batch's K and V ([Total, kv_heads, head_dim]) of <paramref name="layer"/>; all or nothing.</summary>
        public void Append(int layer, Batch batch, float[] k, float[] v)
        {
            CheckRows(batch, k, kvRow, nameof(k));
            CheckRows(batch, v, kvRow, nameof(v));
            Shared(() => {
                fixed (float* pk = k) fixed (float* pv = v) {
                    var tk = NativeTensor.HostF32((IntPtr)pk);
                    var tv = NativeTensor.HostF32((IntPtr)pv);
                    WithBatch(batch, (ref NativeBatch b) => NativeMethods.kvc_append(handle, layer, ref b, ref tk, ref tv));
                }
            });
        }

        /// <summary>
        /// Attention of the batch's queries ([Total, q_heads, head_dim]) over what the cache holds,
        /// causal by position, into <paramref name="output"/> (same shape).
        /// </summary>
        public void Attend(int layer, Batch batch, float[] q, float[] output, AttentionParams parameters = default(AttentionParams))
        {
            CheckRows(batch, q, qRow, nameof(q));
            CheckRows(batch, output, qRow, nameof(output));
            AttentionParams p = parameters.Versioned();
            Shared(() => {
                fixed (float* pq = q) fixed (float* po = output) {
                    var tq = NativeTensor.HostF32((IntPtr)pq);
                    var to = NativeTensor.HostF32((IntPtr)po);
                    WithBatch(batch, (ref NativeBatch b) => NativeMethods.kvc_attend(handle, layer, ref b, ref tq, ref p, ref to));
                }
            });
        }

        /// <summary>Append then Attend in one call; on error nothing is stored.</summary>
        public void AppendAttend(int layer, Batch batch, float[] q, float[] k, float[] v, float[] output,
                                 AttentionParams parameters = default(AttentionParams))
        {
            CheckRows(batch, q, qRow, nameof(q));
            CheckRows(batch, k, kvRow, nameof(k));
            CheckRows(batch, v, kvRow, nameof(v));
            CheckRows(batch, output, qRow, nameof(output));
            AttentionParams p = parameters.Versioned();
            Shared(() => {
                fixed (float* pq = q) fixed (float* pk = k) fixed (float* pv = v) fixed (float* po = output) {
                    var tq = NativeTensor.HostF32((IntPtr)pq);
                    var tk = NativeTensor.HostF32((IntPtr)pk);
                    var tv = NativeTensor.HostF32((IntPtr)pv);
                    var to = NativeTensor.HostF32((IntPtr)po);
                    WithBatch(batch, (ref NativeBatch b) =>
                        NativeMethods.kvc_append_attend(handle, layer, ref b, ref tq, ref tk, ref tv, ref p, ref to));
                }
            });
        }

        delegate StatusHandle BatchCall(ref NativeBatch batch);

        static void WithBatch(Batch batch, BatchCall call)
        {
            fixed (int* ids = batch.SeqIds) fixed (int* n = batch.NTokens) fixed (int* pos = batch.Positions)
            fixed (int* ends = batch.PromptEnd) {
                var b = new NativeBatch {
                    StructSize = (uint)System.Runtime.InteropServices.Marshal.SizeOf(typeof(NativeBatch)),
                    NSeqs = batch.SeqIds.Length, SeqIds = (IntPtr)ids, NTokens = (IntPtr)n, Positions = (IntPtr)pos,
                    PromptEnd = (IntPtr)ends,
                };
                KvcacheException.Check(call(ref b));
            }
        }

        static void CheckRows(Batch batch, float[] data, int row, string name)
        {
            if (batch == null) throw new ArgumentNullException(nameof(batch));
            if (data == null) throw new ArgumentNullException(name);
            if (data.LongLength != (long)batch.Total * row)
                throw new ArgumentException(name + " has " + data.LongLength + " floats, the batch needs " +
                                            batch.Total + " rows of " + row, name);
        }
    }
}
