using System;
using System.Runtime.InteropServices;

namespace Kvcache
{
    public sealed unsafe partial class Cache
    {
        // Bounds Export's attempts on a sequence other threads keep changing.
        const int ExportAttempts = 64;

        /// <summary>Creates an empty sequence; ids are chosen by the caller and must be &gt;= 0. Exclusive.</summary>
        public void CreateSequence(int seqId)
        {
            Exclusive(() => KvcacheException.Check(NativeMethods.kvc_seq_create(handle, seqId)));
        }

        /// <summary>Removes a sequence and returns its memory to the pool. Exclusive.</summary>
        public void RemoveSequence(int seqId)
        {
            Exclusive(() => KvcacheException.Check(NativeMethods.kvc_seq_remove(handle, seqId)));
        }

        /// <summary>Ensures every (layer, KV head) can hold <paramref name="tokens"/> without allocating.</summary>
        public void Reserve(int seqId, int tokens)
        {
            Shared(() => KvcacheException.Check(NativeMethods.kvc_seq_reserve(handle, seqId, tokens)));
        }

        /// <summary>Creates <paramref name="dstSeqId"/> sharing the K/V blocks of <paramref name="srcSeqId"/>. Exclusive.</summary>
        public void Fork(int srcSeqId, int dstSeqId)
        {
            Exclusive(() => KvcacheException.Check(NativeMethods.kvc_seq_fork(handle, srcSeqId, dstSeqId)));
        }

        /// <summary>Drops every stored token at positions &gt;= <paramref name="position"/>.</summary>
        public void Truncate(int seqId, int position)
        {
            Shared(() => KvcacheException.Check(NativeMethods.kvc_seq_truncate(handle, seqId, position)));
        }

        /// <summary>Drops the stored tokens at positions in [first, end); the others keep their positions.</summary>
        public void RemoveRange(int seqId, int first, int end)
        {
            Shared(() => KvcacheException.Check(NativeMethods.kvc_seq_remove_range(handle, seqId, first, end)));
        }

        /// <summary>Bytes Export writes for the sequence as it is now.</summary>
        public long ExportSize(int seqId)
        {
            return Shared(() => {
                UIntPtr size;
                KvcacheException.Check(NativeMethods.kvc_seq_export_size(handle, seqId, out size));
                return (long)size.ToUInt64();
            });
        }

        /// <summary>Everything stored for the sequence, in the format of docs/sequence_format.md.</summary>
        public byte[] Export(int seqId)
        {
            return Shared(() => {
                UIntPtr size;
                KvcacheException.Check(NativeMethods.kvc_seq_export_size(handle, seqId, out size));
                for (int attempt = 1; ; ++attempt) {
                    var buffer = new byte[size.ToUInt64()];
                    UIntPtr written;
                    StatusHandle status;
                    fixed (byte* p = buffer) status = NativeMethods.kvc_seq_export(handle, seqId, (IntPtr)p, size, out written);
                    if (status.IsInvalid) {
                        status.Dispose();
                        if (written.ToUInt64() != size.ToUInt64()) Array.Resize(ref buffer, (int)written.ToUInt64());
                        return buffer;
                    }
                    // A concurrent call on the sequence may have grown it past the buffer (and
                    // others may have changed it again since): try again with its size now, a
                    // bounded number of times.
                    UIntPtr now;
                    using (StatusHandle sizing = NativeMethods.kvc_seq_export_size(handle, seqId, out now)) {
                        if (sizing.IsInvalid && attempt < ExportAttempts) {
                            status.Dispose();
                            size = now;
                            continue;
                        }
                    }
                    KvcacheException.Check(status);
                }
            });
        }

        /// <summary>
        /// Export into <paramref name="destination"/>, returning the bytes written; InvalidArgument,
        /// writing nothing, when it is shorter than the image (ExportSize).
        /// </summary>
        public int Export(int seqId, Span<byte> destination)
        {
            fixed (byte* p = &MemoryMarshal.GetReference(destination)) {
                var buffer = (IntPtr)p;
                var capacity = new UIntPtr((uint)destination.Length);
                return Shared(() => {
                    UIntPtr written;
                    KvcacheException.Check(NativeMethods.kvc_seq_export(handle, seqId, buffer, capacity, out written));
                    return (int)written.ToUInt64();
                });
            }
        }

        /// <summary>Creates <paramref name="seqId"/> from bytes of Export, from any cache of this shape. Exclusive.</summary>
        public void Import(int seqId, byte[] data)
        {
            if (data == null) throw new ArgumentNullException(nameof(data));
            Import(seqId, new ReadOnlySpan<byte>(data));
        }

        /// <summary>Import from a span. Exclusive.</summary>
        public void Import(int seqId, ReadOnlySpan<byte> data)
        {
            fixed (byte* p = &MemoryMarshal.GetReference(data)) {
                var image = (IntPtr)p;
                var size = new UIntPtr((uint)data.Length);
                Exclusive(() => KvcacheException.Check(NativeMethods.kvc_seq_import(handle, seqId, image, size)));
            }
        }

        /// <summary>Export into a file, replaced atomically.</summary>
        public void ExportFile(int seqId, string path)
        {
            if (path == null) throw new ArgumentNullException(nameof(path));
            Shared(() => KvcacheException.Check(NativeMethods.kvc_seq_export_file(handle, seqId, path)));
        }

        /// <summary>Import from a file written by ExportFile. Exclusive.</summary>
        public void ImportFile(int seqId, string path)
        {
            if (path == null) throw new ArgumentNullException(nameof(path));
            Exclusive(() => KvcacheException.Check(NativeMethods.kvc_seq_import_file(handle, seqId, path)));
        }

        /// <summary>Tokens stored for (sequence, layer, KV head).</summary>
        public int Length(int seqId, int layer, int kvHead)
        {
            return Shared(() => {
                int length;
                KvcacheException.Check(NativeMethods.kvc_seq_length(handle, seqId, layer, kvHead, out length));
                return length;
            });
        }

        /// <summary>
        /// Copies of the stored tokens of (sequence, layer, KV head), segment by segment in
        /// position order. The library's views point into its storage, valid only until the
        /// next call that changes the sequence, so they are copied while this cache lets no
        /// other call run (exclusive). Unsupported unless the backend's memory is host memory.
        /// </summary>
        public SegmentView[] View(int seqId, int layer, int kvHead)
        {
            if (!hostMemory) {
                throw new KvcacheException(StatusCode.Unsupported, "View: the backend's memory is not host memory");
            }
            SegmentView[] copies = null;
            Exclusive(() => {
                UIntPtr count;
                KvcacheException.Check(NativeMethods.kvc_seq_view(handle, seqId, layer, kvHead, null, UIntPtr.Zero, out count));
                var views = new NativeSegmentView[count.ToUInt64()];
                KvcacheException.Check(NativeMethods.kvc_seq_view(handle, seqId, layer, kvHead, views, count, out count));
                copies = new SegmentView[views.Length];
                for (int i = 0; i < views.Length; i++) {
                    NativeSegmentView view = views[i];
                    var k = new byte[view.Count * kRowBytes];
                    var v = new byte[view.Count * vRowBytes];
                    var positions = new int[view.Count];
                    if (view.Count > 0) {
                        Marshal.Copy(view.K, k, 0, k.Length);
                        Marshal.Copy(view.V, v, 0, v.Length);
                        Marshal.Copy(view.Pos, positions, 0, positions.Length);
                    }
                    copies[i] = new SegmentView(k, v, positions);
                }
            });
            return copies;
        }
    }
}
