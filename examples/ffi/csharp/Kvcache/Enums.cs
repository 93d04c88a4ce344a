namespace Kvcache
{
    /// <summary>kvc_status_code: what went wrong. Values are stable across versions.</summary>
    public enum StatusCode
    {
        Ok = 0,
        InvalidArgument = 1,
        OutOfMemory = 2,
        NotFound = 3,
        AlreadyExists = 4,
        Config = 5,
        Plugin = 6,
        Unsupported = 7,
        NoDevice = 8,
        Internal = 9,
        Io = 10,
    }

    /// <summary>kvc_log_level.</summary>
    public enum LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3, Off = 4 }

    /// <summary>kvc_plugin_kind; Store: offload and sharing tiers (host, disk, redis).</summary>
    public enum PluginKind { Policy = 1, Backend = 2, Store = 3 }

    /// <summary>kvc_dtype: storage formats of K and V, and element types of passed tensors.
    /// Q8_0 and Q4_0 (groups of 32 values with an f16 scale, kvcache_format.h) are storage
    /// formats only: tensors passed to a cache of them are F32, F16 or BF16.</summary>
    public enum DType { F32 = 0, F16 = 1, BF16 = 2, Q8_0 = 3, Q4_0 = 4 }

    /// <summary>kvc_layout: storage layouts.</summary>
    public enum Layout { Paged = 0, Contiguous = 1 }

    /// <summary>
    /// kvc_rotation: a rotation the backend applies to K (kvcache_rotation.h), to each K row
    /// before it is stored and to each query at attention, so attention is unchanged up to
    /// rounding. Keys read back (views, exports, policies) are the rotated rows, of the same
    /// norms. Hadamard (a normalised Hadamard transform of each head row) spreads outlier
    /// channels, so 4-bit keys (Q4_0) lose less.
    /// </summary>
    public enum Rotation { None = 0, Hadamard = 1 }

    /// <summary>kvc_prefill_compression: when a cache compresses a prompt automatically.</summary>
    public enum PrefillCompression { None = 0, PerChunk = 1, Once = 2 }

    /// <summary>kvc_device: where a tensor's memory lives.</summary>
    enum Device { Host = 0, Backend = 1 }

    /// <summary>kvc_stat_kind: attention statistics an engine computed itself.</summary>
    public enum StatKind { AttnSum = 1, AttnLast = 2, AttnWindow = 4 }
}
