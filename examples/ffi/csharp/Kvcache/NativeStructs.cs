using System;
using System.Runtime.InteropServices;

// Field for field the structs of kvcache.h (x86-64 and every other LP64 or LLP64 target):
// size_t is UIntPtr, pointers are IntPtr, enums are int-sized. All are blittable, so P/Invoke
// passes them by pointer without copying. Fields the library fills are never assigned here.
#pragma warning disable 0649

namespace Kvcache
{
    [StructLayout(LayoutKind.Sequential)]
    struct NativePluginInfo
    {
        public uint StructSize;
        public PluginKind Kind;
        public IntPtr Name;
        public uint Version;
        public IntPtr Path;
    }

    [StructLayout(LayoutKind.Sequential)]
    struct NativeKeyValue
    {
        public IntPtr Key;
        public IntPtr Value;
    }

    [StructLayout(LayoutKind.Sequential)]
    struct NativeCacheParams
    {
        public uint StructSize;
        public int Layers;
        public int KvHeads;
        public int QHeads;
        public int HeadDim;
        public DType DType;
        public Layout Layout;
        public int BlockTokens;
        public double GrowthFactor;
        public UIntPtr MemoryLimit;
        public IntPtr Backend;
        public IntPtr Policy;
        public int Budget;
        public double BudgetRatio;
        public int Sinks;
        public int Recent;
        public IntPtr PolicyParams;
        public UIntPtr NPolicyParams;
        public PrefillCompression Prefill;
        public int DecodeEvery;
        public int DecodeSlack;
        public int KDType;
        public int VDType;
        public Rotation KRotation;
        public int PrefixCache;
        public IntPtr PrefixStore;
        public int PrefixWriteThrough;
        public double DemoteKeep;
        public int DemoteKDType;
        public int DemoteVDType;
    }

    [StructLayout(LayoutKind.Sequential)]
    struct NativeFormatInfo
    {
        public uint StructSize;
        public DType Format;
        public IntPtr Name;
        public uint GroupSize;
        public uint GroupBytes;
    }

    [StructLayout(LayoutKind.Sequential)]
    struct NativePolicyInfo
    {
        public uint StructSize;
        public IntPtr Name;
        public int Sinks;
        public int Recent;
        public int BudgetTokens;
        public double BudgetRatio;
        public uint Stats;
        public int ObservationWindow;
    }

    /// <summary>kvc_tensor, and kvc_tensor_mut, which has the same layout.</summary>
    [StructLayout(LayoutKind.Sequential)]
    struct NativeTensor
    {
        public IntPtr Data;
        public DType DType;
        public Device Device;
        public UIntPtr RowStride;

        public static NativeTensor HostF32(IntPtr data)
        {
            return new NativeTensor { Data = data, DType = DType.F32, Device = Device.Host };
        }
    }

    [StructLayout(LayoutKind.Sequential)]
    struct NativePrefix
    {
        public uint StructSize;
        public IntPtr Model;
        public IntPtr TokenIds;
        public int NTokens;
        public int ChunkTokens;
    }

    [StructLayout(LayoutKind.Sequential)]
    struct NativeBatch
    {
        public uint StructSize;
        public int NSeqs;
        public IntPtr SeqIds;
        public IntPtr NTokens;
        public IntPtr Positions;
        public IntPtr Stream;
        public IntPtr PromptEnd;
    }
}
