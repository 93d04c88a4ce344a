using System;
using System.Runtime.InteropServices;
using System.Threading;

namespace Kvcache
{
    /// <summary>
    /// A kvc_cache: one model shape's K/V store with its memory limit and backend.
    ///
    /// Threading: every member may be called from any thread concurrently, on the same
    /// sequences or on others; the library serialises calls on one sequence (kvcache.h).
    /// Creating or removing sequences (Create/Remove/Fork/Import/...), View (which copies
    /// storage) and Dispose take a ReaderWriterLockSlim exclusively, so they wait for the
    /// calls running; the others share it.
    /// </summary>
    public sealed partial class Cache : IDisposable
    {
        internal delegate StatusHandle CreateFn(ContextHandle context, out CacheHandle cache);

        readonly CacheHandle handle;
        // Never disposed: a call racing Dispose then fails on the closed handle
        // (ObjectDisposedException) rather than on a disposed lock.
        readonly ReaderWriterLockSlim rw = new ReaderWriterLockSlim();
        readonly int qRow, kvRow;
        readonly int kRowBytes, vRowBytes;  // of one KV head's row in storage
        readonly bool hostMemory;           // the backend's memory is the host's (cpu)

        Cache(CacheHandle handle)
        {
            this.handle = handle;
            CacheParams shape;
            try {
                shape = Params;
            } catch {
                handle.Dispose();
                throw;
            }
            int qHeads = shape.QHeads != 0 ? shape.QHeads : shape.KvHeads;
            qRow = qHeads * shape.HeadDim;
            kvRow = shape.KvHeads * shape.HeadDim;
            kRowBytes = (int)Library.DescribeFormat(shape.KDType ?? shape.DType).RowBytes(shape.HeadDim);
            vRowBytes = (int)Library.DescribeFormat(shape.VDType ?? shape.DType).RowBytes(shape.HeadDim);
            hostMemory = shape.Backend == null || shape.Backend == "cpu";
        }

        internal static Cache Create(Context context, CreateFn create)
        {
            ContextHandle c = context.Handle;
            bool referenced = false;
            c.DangerousAddRef(ref referenced);
            try {
                CacheHandle h;
                KvcacheException.Check(create(c, out h));
                h.AdoptContextReference(c);
                referenced = false;
                return new Cache(h);
            } finally {
                if (referenced) c.DangerousRelease();
            }
        }

        /// <summary>A fresh copy of the parameters the cache was created with, defaults filled in (no PolicyParams).</summary>
        public CacheParams Params
        {
            get {
                var p = new NativeCacheParams { StructSize = (uint)Marshal.SizeOf(typeof(NativeCacheParams)) };
                KvcacheException.Check(NativeMethods.kvc_cache_get_params(handle, ref p));
                return CacheParams.FromNative(p);
            }
        }

        /// <summary>Memory and token counters.</summary>
        public CacheStats GetStats()
        {
            return Shared(() => {
                CacheStats stats = CacheStats.Empty();
                KvcacheException.Check(NativeMethods.kvc_cache_get_stats(handle, ref stats));
                return stats;
            });
        }

        /// <summary>Sets the backend stream (for the CUDA backend a <c>cudaStream_t</c>) that the cache orders its
        /// work on wherever a call names none; <see cref="IntPtr.Zero"/> is the backend's default. The stream must stay
        /// valid until another is set or the cache is disposed; the CPU backend ignores it. Exclusive.</summary>
        public void SetStream(IntPtr stream)
        {
            Exclusive(() => KvcacheException.Check(NativeMethods.kvc_cache_set_stream(handle, stream)));
        }

        public void Dispose()
        {
            Exclusive(() => handle.Dispose());
        }

        T Shared<T>(Func<T> call)
        {
            rw.EnterReadLock();
            try { return call(); } finally { rw.ExitReadLock(); }
        }

        void Shared(Action call)
        {
            rw.EnterReadLock();
            try { call(); } finally { rw.ExitReadLock(); }
        }

        void Exclusive(Action call)
        {
            rw.EnterWriteLock();
            try { call(); } finally { rw.ExitWriteLock(); }
        }
    }
}
