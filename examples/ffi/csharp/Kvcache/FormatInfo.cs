namespace Kvcache
{
    /// <summary>A storage format as the library's format table (kvcache_format.h) describes it.</summary>
    public sealed class FormatInfo
    {
        internal FormatInfo(NativeFormatInfo info)
        {
            Format = info.Format;
            Name = NativeMethods.String(info.Name);
            GroupSize = info.GroupSize;
            GroupBytes = info.GroupBytes;
        }

        public DType Format { get; }
        /// <summary>The name used in YAML, such as "f16".</summary>
        public string Name { get; }
        /// <summary>Values sharing one scale; 1 for a format without scales.</summary>
        public uint GroupSize { get; }
        /// <summary>Bytes of one group of values, its scale included.</summary>
        public uint GroupBytes { get; }

        /// <summary>Bytes of a row of <paramref name="values"/> values (a multiple of GroupSize), scales included.</summary>
        public long RowBytes(int values) { return (long)(values / GroupSize) * GroupBytes; }
    }
}
