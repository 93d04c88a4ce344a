using System;
using System.Runtime.InteropServices;

namespace Kvcache
{
    /// <summary>
    /// A kvc_context: plugins, configuration, thread arena and logger. Thread-safe: every member
    /// may be called from any thread concurrently. Dispose it when done; caches created from it
    /// keep the native context alive until they are disposed too.
    /// </summary>
    public sealed class Context : IDisposable
    {
        static Context()
        {
            NativeLibraryResolver.Use();
        }

        readonly ContextHandle handle;

        /// <summary>A context from YAML text (docs/config.md); null or "" means the defaults.</summary>
        public Context(string yaml = null)
        {
            KvcacheException.Check(NativeMethods.kvc_context_create(yaml, out handle));
        }

        Context(ContextHandle handle)
        {
            this.handle = handle;
        }

        /// <summary>A context from a YAML file.</summary>
        public static Context FromFile(string path)
        {
            ContextHandle h;
            KvcacheException.Check(NativeMethods.kvc_context_create_from_file(path, out h));
            return new Context(h);
        }

        internal ContextHandle Handle { get { return handle; } }

        /// <summary>
        /// Routes log messages at or above <paramref name="minLevel"/> to <paramref name="logger"/>,
        /// which may be called from any thread, concurrently; null restores the default
        /// (warnings and errors to stderr). An exception the logger throws does not reach the
        /// library (it cannot unwind through native frames): it is written to stderr instead.
        /// </summary>
        public void SetLogger(Action<LogLevel, string> logger, LogLevel minLevel = LogLevel.Info)
        {
            NativeMethods.LogFn fn = null;
            if (logger != null) {
                fn = (user, level, message) => {
                    try {
                        logger(level, NativeMethods.String(message));
                    } catch (Exception e) {
                        try {
                            Console.Error.WriteLine("kvcache: the logger threw " + e);
                        } catch {
                            // stderr itself failed: nothing is left to report to
                        }
                    }
                };
            }
            handle.KeepAlive(fn);
            NativeMethods.kvc_context_set_logger(handle, fn, IntPtr.Zero, minLevel);
        }

        /// <summary>Loads the plugins exported by the shared library at <paramref name="path"/>.</summary>
        public void LoadPlugin(string path)
        {
            KvcacheException.Check(NativeMethods.kvc_context_load_plugin(handle, path));
        }

        /// <summary>The loaded plugins.</summary>
        public PluginInfo[] Plugins
        {
            get {
                var plugins = new PluginInfo[(int)NativeMethods.kvc_context_plugin_count(handle)];
                for (int i = 0; i < plugins.Length; i++) {
                    var info = new NativePluginInfo { StructSize = (uint)Marshal.SizeOf(typeof(NativePluginInfo)) };
                    KvcacheException.Check(NativeMethods.kvc_context_plugin_info(handle, new UIntPtr((uint)i), ref info));
                    plugins[i] = new PluginInfo(info);
                }
                return plugins;
            }
        }

        /// <summary>Deletes the value under <paramref name="key"/> in <paramref name="store"/> (a name from the YAML's `stores:`); NotFound when there is none.</summary>
        public void StoreDrop(string store, string key)
        {
            if (store == null) throw new ArgumentNullException(nameof(store));
            if (key == null) throw new ArgumentNullException(nameof(key));
            KvcacheException.Check(NativeMethods.kvc_store_drop(handle, store, key));
        }

        /// <summary>A cache of the given shape and storage.</summary>
        public Cache CreateCache(CacheParams parameters)
        {
            if (parameters == null) throw new ArgumentNullException(nameof(parameters));
            using (var memory = new NativeMemory()) {
                NativeCacheParams p = parameters.ToNative(memory);
                return Cache.Create(this, (ContextHandle c, out CacheHandle h) =>
                    NativeMethods.kvc_cache_create(c, ref p, out h));
            }
        }

        /// <summary>
        /// A cache from YAML holding `cache:` and optionally `backend:` and `policy:` sections;
        /// null uses the context's own configuration.
        /// </summary>
        public Cache CreateCacheFromYaml(string yaml = null)
        {
            return Cache.Create(this, (ContextHandle c, out CacheHandle h) =>
                NativeMethods.kvc_cache_create_from_yaml(c, yaml, out h));
        }

        public void Dispose()
        {
            handle.Dispose();
        }
    }
}
