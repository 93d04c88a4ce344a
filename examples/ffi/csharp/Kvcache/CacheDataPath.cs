using System;
using System.Runtime.InteropServices;

namespace Kvcache
{
    // The data path takes f32 host memory, row-major [batch.Total, heads, head_dim] with no
    // padding, as arrays or spans (a slice of a larger buffer, stack or native memory); their
    // lengths are checked here, so the library never reads or writes past them. Spans are
    // pinned for the call only.
    public sealed unsafe partial class Cache
    {
        /// <summary>Stores the batch's K and V ([Total, kv_heads, head_dim]) of <paramref name="layer"/>; all or nothing.</summary>
        public void Append(int layer, Batch batch, float[] k, float[] v)
        {
            Append(layer, batch, In(k, nameof(k)), In(v, nameof(v)));
        }

        /// <summary>Append from spans.</summary>
        public void Append(int layer, Batch batch, ReadOnlySpan<float> k, ReadOnlySpan<float> v)
        {
            CheckRows(batch, k.Length, kvRow, nameof(k));
            CheckRows(batch, v.Length, kvRow, nameof(v));
            fixed (float* pk = &MemoryMarshal.GetReference(k)) fixed (float* pv = &MemoryMarshal.GetReference(v)) {
                var tk = NativeTensor.HostF32((IntPtr)pk);
                var tv = NativeTensor.HostF32((IntPtr)pv);
                Shared(() => WithBatch(batch, (ref NativeBatch b) => NativeMethods.kvc_append(handle, layer, ref b, ref tk, ref tv)));
            }
        }

        /// <summary>
        /// Attention of the batch's queries ([Total, q_heads, head_dim]) over what the cache holds,
        /// causal by position, into <paramref name="output"/> (same shape).
        /// </summary>
        public void Attend(int layer, Batch batch, float[] q, float[] output, AttentionParams parameters = default(AttentionParams))
        {
            Attend(layer, batch, In(q, nameof(q)), Out(output, nameof(output)), parameters);
        }

        /// <summary>Attend from and into spans.</summary>
        public void Attend(int layer, Batch batch, ReadOnlySpan<float> q, Span<float> output,
                           AttentionParams parameters = default(AttentionParams))
        {
            CheckRows(batch, q.Length, qRow, nameof(q));
            CheckRows(batch, output.Length, qRow, nameof(output));
            AttentionParams p = parameters.Versioned();
            fixed (float* pq = &MemoryMarshal.GetReference(q)) fixed (float* po = &MemoryMarshal.GetReference(output)) {
                var tq = NativeTensor.HostF32((IntPtr)pq);
                var to = NativeTensor.HostF32((IntPtr)po);
                Shared(() => WithBatch(batch, (ref NativeBatch b) => NativeMethods.kvc_attend(handle, layer, ref b, ref tq, ref p, ref to)));
            }
        }

        /// <summary>Append then Attend in one call; on error nothing is stored.</summary>
        public void AppendAttend(int layer, Batch batch, float[] q, float[] k, float[] v, float[] output,
                                 AttentionParams parameters = default(AttentionParams))
        {
            AppendAttend(layer, batch, In(q, nameof(q)), In(k, nameof(k)), In(v, nameof(v)),
                         Out(output, nameof(output)), parameters);
        }

        /// <summary>AppendAttend from and into spans.</summary>
        public void AppendAttend(int layer, Batch batch, ReadOnlySpan<float> q, ReadOnlySpan<float> k, ReadOnlySpan<float> v,
                                 Span<float> output, AttentionParams parameters = default(AttentionParams))
        {
            CheckRows(batch, q.Length, qRow, nameof(q));
            CheckRows(batch, k.Length, kvRow, nameof(k));
            CheckRows(batch, v.Length, kvRow, nameof(v));
            CheckRows(batch, output.Length, qRow, nameof(output));
            AttentionParams p = parameters.Versioned();
            fixed (float* pq = &MemoryMarshal.GetReference(q)) fixed (float* pk = &MemoryMarshal.GetReference(k))
            fixed (float* pv = &MemoryMarshal.GetReference(v)) fixed (float* po = &MemoryMarshal.GetReference(output)) {
                var tq = NativeTensor.HostF32((IntPtr)pq);
                var tk = NativeTensor.HostF32((IntPtr)pk);
                var tv = NativeTensor.HostF32((IntPtr)pv);
                var to = NativeTensor.HostF32((IntPtr)po);
                Shared(() => WithBatch(batch, (ref NativeBatch b) =>
                    NativeMethods.kvc_append_attend(handle, layer, ref b, ref tq, ref tk, ref tv, ref p, ref to)));
            }
        }

        delegate StatusHandle BatchCall(ref NativeBatch batch);

        static void WithBatch(Batch batch, BatchCall call)
        {
            fixed (int* ids = batch.SeqIds) fixed (int* n = batch.NTokens) fixed (int* pos = batch.Positions)
            fixed (int* ends = batch.PromptEnd) {
                var b = new NativeBatch {
                    StructSize = (uint)Marshal.SizeOf(typeof(NativeBatch)),
                    NSeqs = batch.SeqIds.Length, SeqIds = (IntPtr)ids, NTokens = (IntPtr)n, Positions = (IntPtr)pos,
                    PromptEnd = (IntPtr)ends,
                };
                KvcacheException.Check(call(ref b));
            }
        }

        static ReadOnlySpan<float> In(float[] data, string name)
        {
            if (data == null) throw new ArgumentNullException(name);
            return data;
        }

        static Span<float> Out(float[] data, string name)
        {
            if (data == null) throw new ArgumentNullException(name);
            return data;
        }

        static void CheckRows(Batch batch, int length, int row, string name)
        {
            if (batch == null) throw new ArgumentNullException(nameof(batch));
            if (length != (long)batch.Total * row)
                throw new ArgumentException(name + " has " + length + " floats, the batch needs " +
                                            batch.Total + " rows of " + row, name);
        }
    }
}
