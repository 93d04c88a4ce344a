using System;
using System.Reflection;
using System.Runtime.InteropServices;

namespace Kvcache
{
    /// <summary>
    /// Where the library named "kvcache" in the DllImports comes from. KVCACHE_LIBRARY, when
    /// set, is the path of the libkvcache.so.0 to load (an install prefix outside the dynamic
    /// linker's search path); otherwise the SONAME is looked up on that path (ld.so.conf,
    /// LD_LIBRARY_PATH). .NET (Core 3.0 and later) resolves the name through NativeLibrary;
    /// Mono has no NativeLibrary: Kvcache.dll.config maps the name to the SONAME, which also
    /// finds the copy loaded here from KVCACHE_LIBRARY (the dynamic linker matches a loaded
    /// library by its SONAME).
    ///
    /// This must happen before the first DllImport is bound. Mono binds one when it compiles
    /// its caller, before the caller's class is initialised, so Use() is called from the static
    /// constructors of the types every call into the library starts from (Context, Library),
    /// which run before their members are compiled, and from NativeMethods'.
    /// </summary>
    static class NativeLibraryResolver
    {
        internal const string PathVariable = "KVCACHE_LIBRARY";

        static NativeLibraryResolver()
        {
            Register();
        }

        /// <summary>Runs the static constructor, once.</summary>
        internal static void Use() { }

        static string ConfiguredPath
        {
            get {
                string path = Environment.GetEnvironmentVariable(PathVariable);
                return string.IsNullOrEmpty(path) ? null : path;
            }
        }

#if NETCOREAPP3_0_OR_GREATER
        static void Register()
        {
            NativeLibrary.SetDllImportResolver(typeof(NativeLibraryResolver).Assembly, Resolve);
        }

        static IntPtr Resolve(string name, Assembly assembly, DllImportSearchPath? searchPath)
        {
            if (name != NativeMethods.Lib) return IntPtr.Zero;
            string path = ConfiguredPath;
            return path != null ? NativeLibrary.Load(path) : NativeLibrary.Load(NativeMethods.Soname, assembly, searchPath);
        }
#else
        static void Register()
        {
            string path = ConfiguredPath;
            if (path == null) return;
            if (NativeMethods.dlopen(path, NativeMethods.RTLD_LAZY | NativeMethods.RTLD_NODELETE) == IntPtr.Zero) {
                throw new DllNotFoundException(PathVariable + "=" + path + ": " +
                                               NativeMethods.String(NativeMethods.dlerror()));
            }
        }
#endif
    }
}
