using System;
using System.Collections.Generic;
using System.Runtime.InteropServices;

namespace Kvcache
{
    /// <summary>Unmanaged copies that live until Dispose, for pointers inside structs.</summary>
    sealed class NativeMemory : IDisposable
    {
        readonly List<IntPtr> blocks = new List<IntPtr>();

        /// <summary>A NUL-terminated UTF-8 copy; IntPtr.Zero for null.</summary>
        public IntPtr Utf8(string s)
        {
            if (s == null) return IntPtr.Zero;
            IntPtr p = Marshal.StringToCoTaskMemUTF8(s);
            blocks.Add(p);
            return p;
        }

        /// <summary>A copy of blittable structs, laid out as a C array.</summary>
        public IntPtr Array<T>(T[] items) where T : struct
        {
            int size = Marshal.SizeOf(typeof(T));
            IntPtr p = Marshal.AllocCoTaskMem(size * items.Length);
            blocks.Add(p);
            for (int i = 0; i < items.Length; i++)
                Marshal.StructureToPtr(items[i], p + i * size, false);
            return p;
        }

        public void Dispose()
        {
            foreach (IntPtr p in blocks) Marshal.FreeCoTaskMem(p);
            blocks.Clear();
        }
    }
}
