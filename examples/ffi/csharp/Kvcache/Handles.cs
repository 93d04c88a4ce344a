using System.Collections.Generic;
using Microsoft.Win32.SafeHandles;

namespace Kvcache
{
    /// <summary>An owned kvc_status*; the P/Invoke return type of every fallible call.</summary>
    sealed class StatusHandle : SafeHandleZeroOrMinusOneIsInvalid
    {
        StatusHandle() : base(true) { }

        protected override bool ReleaseHandle()
        {
            NativeMethods.kvc_status_free(handle);
            return true;
        }
    }

    /// <summary>An owned kvc_context*.</summary>
    sealed class ContextHandle : SafeHandleZeroOrMinusOneIsInvalid
    {
        ContextHandle() : base(true) { }

        // Loggers given to the native context live as long as the handle (which caches keep
        // alive past their Context object): another thread may still be inside a replaced one.
        readonly List<NativeMethods.LogFn> loggers = new List<NativeMethods.LogFn>();

        internal void KeepAlive(NativeMethods.LogFn logger)
        {
            if (logger == null) return;
            lock (loggers) loggers.Add(logger);
        }

        protected override bool ReleaseHandle()
        {
            NativeMethods.kvc_context_destroy(handle);
            return true;
        }
    }

    /// <summary>
    /// An owned kvc_cache*. It holds a reference on its context's handle, so the context is
    /// destroyed only after every cache created from it, in whatever order they are disposed
    /// or finalized.
    /// </summary>
    sealed class CacheHandle : SafeHandleZeroOrMinusOneIsInvalid
    {
        CacheHandle() : base(true) { }

        ContextHandle owner;

        /// <summary>Takes over a reference the caller added on <paramref name="context"/>.</summary>
        internal void AdoptContextReference(ContextHandle context)
        {
            owner = context;
        }

        protected override bool ReleaseHandle()
        {
            NativeMethods.kvc_cache_destroy(handle);
            owner.DangerousRelease();
            return true;
        }
    }
}
