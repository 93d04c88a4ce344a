using System;
using System.Runtime.InteropServices;

namespace Kvcache
{
    /// <summary>
    /// The C API of kvcache.h, declared by hand. The declarations import the logical name
    /// "kvcache", which the runtime maps to the SONAME (the ABI major these declarations
    /// mirror) or to a path the user gives: Mono through Kvcache.dll.config (a dllmap), .NET
    /// through the resolver in NativeLibraryResolver.cs. Strings go in as UTF-8 (LPUTF8Str);
    /// strings coming back are IntPtr because the library owns them.
    /// </summary>
    static class NativeMethods
    {
        internal const string Lib = "kvcache";
        internal const string Soname = "libkvcache.so.0";
        const UnmanagedType Utf8 = UnmanagedType.LPUTF8Str;

        // Mono unloads native libraries at exit while the library's TBB worker threads still
        // run. Once the first call has loaded it (from wherever the map points), dlopen by
        // SONAME finds that same copy, and RTLD_NODELETE keeps it (and libtbb) mapped until the
        // process ends. A library that cannot be loaded shows as the DllNotFoundException of
        // the first call outside this constructor.
        internal const int RTLD_LAZY = 0x1, RTLD_NOLOAD = 0x4, RTLD_NODELETE = 0x1000;

        static NativeMethods()
        {
            NativeLibraryResolver.Use();
            try {
                kvc_version();
                dlopen(Soname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
            } catch (DllNotFoundException) {
            } catch (EntryPointNotFoundException) {
            }
        }

        [DllImport("libc")] internal static extern IntPtr dlopen(string file, int mode);
        [DllImport("libc")] internal static extern IntPtr dlerror();

        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        internal delegate void LogFn(IntPtr userData, LogLevel level, IntPtr message);

        // version
        [DllImport(Lib)] internal static extern uint kvc_version();
        [DllImport(Lib)] internal static extern IntPtr kvc_version_string();

        // status
        [DllImport(Lib)] internal static extern StatusCode kvc_status_get_code(StatusHandle status);
        [DllImport(Lib)] internal static extern IntPtr kvc_status_message(StatusHandle status);
        [DllImport(Lib)] internal static extern void kvc_status_free(IntPtr status);
        [DllImport(Lib)] internal static extern IntPtr kvc_status_code_name(StatusCode code);

        // context
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_context_create([MarshalAs(Utf8)] string yaml, out ContextHandle context);
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_context_create_from_file([MarshalAs(Utf8)] string path, out ContextHandle context);
        [DllImport(Lib)] internal static extern void kvc_context_destroy(IntPtr context);
        [DllImport(Lib)]
        internal static extern void kvc_context_set_logger(ContextHandle context, LogFn fn, IntPtr userData, LogLevel minLevel);
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_context_load_plugin(ContextHandle context, [MarshalAs(Utf8)] string path);
        [DllImport(Lib)] internal static extern UIntPtr kvc_context_plugin_count(ContextHandle context);
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_context_plugin_info(ContextHandle context, UIntPtr index, ref NativePluginInfo info);

        // cache
        [DllImport(Lib)] internal static extern UIntPtr kvc_dtype_size(DType dtype);
        [DllImport(Lib)] internal static extern IntPtr kvc_dtype_name(DType dtype);
        [DllImport(Lib)] internal static extern StatusHandle kvc_format_describe(DType format, ref NativeFormatInfo info);
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_cache_create(ContextHandle context, ref NativeCacheParams parameters, out CacheHandle cache);
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_cache_create_from_yaml(ContextHandle context, [MarshalAs(Utf8)] string yaml, out CacheHandle cache);
        [DllImport(Lib)] internal static extern void kvc_cache_destroy(IntPtr cache);
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_cache_get_params(CacheHandle cache, ref NativeCacheParams parameters);
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_cache_get_stats(CacheHandle cache, ref CacheStats stats);
        [DllImport(Lib)] internal static extern StatusHandle kvc_cache_set_stream(CacheHandle cache, IntPtr stream);

        // sequences
        [DllImport(Lib)] internal static extern StatusHandle kvc_seq_create(CacheHandle cache, int seq);
        [DllImport(Lib)] internal static extern StatusHandle kvc_seq_remove(CacheHandle cache, int seq);
        [DllImport(Lib)] internal static extern StatusHandle kvc_seq_reserve(CacheHandle cache, int seq, int tokens);
        [DllImport(Lib)] internal static extern StatusHandle kvc_seq_fork(CacheHandle cache, int src, int dst);
        [DllImport(Lib)] internal static extern StatusHandle kvc_seq_truncate(CacheHandle cache, int seq, int position);
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_seq_remove_range(CacheHandle cache, int seq, int first, int end);
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_seq_export_size(CacheHandle cache, int seq, out UIntPtr size);
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_seq_export(CacheHandle cache, int seq, IntPtr buffer, UIntPtr capacity, out UIntPtr written);
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_seq_import(CacheHandle cache, int seq, IntPtr data, UIntPtr size);
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_seq_export_file(CacheHandle cache, int seq, [MarshalAs(Utf8)] string path);
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_seq_import_file(CacheHandle cache, int seq, [MarshalAs(Utf8)] string path);
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_seq_length(CacheHandle cache, int seq, int layer, int kvHead, out int length);
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_seq_view(CacheHandle cache, int seq, int layer, int kvHead,
                                                         [Out] NativeSegmentView[] views, UIntPtr capacity, out UIntPtr count);

        // data path
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_append(CacheHandle cache, int layer, ref NativeBatch batch,
                                                       ref NativeTensor k, ref NativeTensor v);
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_attend(CacheHandle cache, int layer, ref NativeBatch batch, ref NativeTensor q,
                                                       ref AttentionParams parameters, ref NativeTensor output);
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_append_attend(CacheHandle cache, int layer, ref NativeBatch batch,
                                                              ref NativeTensor q, ref NativeTensor k, ref NativeTensor v,
                                                              ref AttentionParams parameters, ref NativeTensor output);

        // compression
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_compress(CacheHandle cache, int layer, int nSeqs, int[] seqIds);
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_cache_policy_info(CacheHandle cache, ref NativePolicyInfo info);
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_report_stats(CacheHandle cache, int seq, int layer, int kvHead,
                                                             StatKind kind, IntPtr values, int nValues);
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_cache_estimate_peak_bytes(CacheHandle cache, int promptTokens, int chunkTokens,
                                                                          int newTokens, out UIntPtr bytes);
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_cache_estimate(CacheHandle cache, ref EstimateRequest request, out UIntPtr bytes);

        // stores
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_seq_offload(CacheHandle cache, int seq, [MarshalAs(Utf8)] string store,
                                                            [MarshalAs(Utf8)] string key);
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_seq_restore(CacheHandle cache, int seq, [MarshalAs(Utf8)] string store,
                                                            [MarshalAs(Utf8)] string key);
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_store_drop(ContextHandle context, [MarshalAs(Utf8)] string store,
                                                           [MarshalAs(Utf8)] string key);
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_prefix_save(CacheHandle cache, int seq, [MarshalAs(Utf8)] string store,
                                                            ref NativePrefix prefix, out int tokensSaved);
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_prefix_load(CacheHandle cache, int seq, [MarshalAs(Utf8)] string store,
                                                            ref NativePrefix prefix, out int tokensRestored);

        // prefix cache
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_prefix_attach(CacheHandle cache, int seq, ref NativePrefix prefix,
                                                              out int tokensAttached);
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_prefix_publish(CacheHandle cache, int seq, ref NativePrefix prefix,
                                                               out int tokensPublished);
        [DllImport(Lib)]
        internal static extern StatusHandle kvc_prefix_lookup(CacheHandle cache, ref NativePrefix prefix, out int tokens);

        // The binding fills its structs itself, struct_size being its mirror's size; the tests
        // call the *_init_sized functions with that size to check the mirrors' defaults.
        [DllImport(Lib)] internal static extern void kvc_cache_params_init_sized(IntPtr buffer, UIntPtr size);
        [DllImport(Lib)] internal static extern void kvc_cache_stats_init_sized(IntPtr buffer, UIntPtr size);
        [DllImport(Lib)] internal static extern void kvc_policy_info_init_sized(IntPtr buffer, UIntPtr size);
        [DllImport(Lib)] internal static extern void kvc_attention_params_init_sized(IntPtr buffer, UIntPtr size);
        [DllImport(Lib)]
        internal static extern void kvc_batch_init_sized(IntPtr buffer, UIntPtr size, int nSeqs, IntPtr seqIds,
                                                         IntPtr nTokens, IntPtr positions);
        [DllImport(Lib)]
        internal static extern void kvc_prefix_init_sized(IntPtr buffer, UIntPtr size, IntPtr model, IntPtr tokenIds,
                                                          int nTokens);
        [DllImport(Lib)]
        internal static extern void kvc_estimate_request_init_sized(IntPtr buffer, UIntPtr size, int promptTokens,
                                                                    int chunkTokens, int newTokens);

        /// <summary>A NUL-terminated UTF-8 string the library owns, copied.</summary>
        internal static string String(IntPtr utf8)
        {
            return Marshal.PtrToStringUTF8(utf8);
        }
    }
}
