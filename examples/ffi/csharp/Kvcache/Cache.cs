using System;
using System.Runtime.InteropServices;
using System.Threading;

namespace Kvcache
{
    /// <summary>
    /// A kvc_cache: one model shape's K/V store with its memory limit and backend.
    ///
    /// Threading, as kvcache.h states it: calls that name disjoint sequences may run
    /// concurrently; creating or removing sequences (Create/Remove/Fork/Import) and Dispose need
    /// exclusive access. This class enforces the exclusive part with a ReaderWriterLockSlim
    /// (those calls wait for the others); keeping concurrent calls on disjoint sequences is the
    /// caller's job.
    /// </summary>
    public sealed partial class Cache : IDisposable
    {
        internal delegate StatusHandle CreateFn(ContextHandle context, out CacheHandle cache);

        readonly CacheHandle handle;
        // Never disposed: a call racing Dispose then fails on the closed handle
        // (ObjectDisposedException) rather than on a disposed lock.
        readonly ReaderWriterLockSlim rw = new ReaderWriterLockSlim();
        readonly int qRow, kvRow;

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
