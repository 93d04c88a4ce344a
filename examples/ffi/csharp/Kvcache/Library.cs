using System.Runtime.CompilerServices;

[assembly: InternalsVisibleTo("KvcacheTests")]

namespace Kvcache
{
    /// <summary>Facts about the loaded libkvcache.</summary>
    public static class Library
    {
        static Library()
        {
            NativeLibraryResolver.Use();
        }

        /// <summary>MAJOR*10000 + MINOR*100 + PATCH.</summary>
        public static uint Version { get { return NativeMethods.kvc_version(); } }

        /// <summary>"MAJOR.MINOR.PATCH".</summary>
        public static string VersionString { get { return NativeMethods.String(NativeMethods.kvc_version_string()); } }

        /// <summary>Bytes per element of <paramref name="dtype"/>.</summary>
        public static int DTypeSize(DType dtype) { return (int)NativeMethods.kvc_dtype_size(dtype); }

        /// <summary>The name of <paramref name="dtype"/> as written in YAML ("f32", "f16", "bf16").</summary>
        public static string DTypeName(DType dtype) { return NativeMethods.String(NativeMethods.kvc_dtype_name(dtype)); }

        /// <summary>
        /// The library's format table entry for <paramref name="format"/> (kvc_format_describe);
        /// throws KvcacheException for a value outside the table.
        /// </summary>
        public static FormatInfo DescribeFormat(DType format)
        {
            var info = new NativeFormatInfo { StructSize = (uint)System.Runtime.InteropServices.Marshal.SizeOf(typeof(NativeFormatInfo)) };
            KvcacheException.Check(NativeMethods.kvc_format_describe(format, ref info));
            return new FormatInfo(info);
        }
    }
}
