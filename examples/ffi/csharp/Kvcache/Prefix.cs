using System;
using System.Runtime.InteropServices;

namespace Kvcache
{
    /// <summary>
    /// A prompt prefix whose K/V is shared through a store in chunks of ChunkTokens tokens
    /// (kvc_prefix), each keyed by the model, the cache's shape and every token id up to the
    /// chunk's end, so that any cache of the same shape, in any process, finds the chunks it
    /// shares (Cache.SavePrefix, LoadPrefix); and the prompt whose blocks a cache with
    /// CacheParams.PrefixCache publishes and attaches (Cache.PublishPrefix, AttachPrefix,
    /// LookupPrefix), whose unit is the cache's block: they ignore ChunkTokens. ChunkTokens
    /// starts at the header's default, set here as CacheParams' defaults are.
    /// </summary>
    public sealed class Prefix
    {
        /// <param name="model">Identifies the weights (e.g. a hash of the model file), not empty: K/V of one model must never be restored into another.</param>
        /// <param name="tokenIds">The prefix's token ids, position 0 first; read at each call, not copied.</param>
        public Prefix(string model, int[] tokenIds)
        {
            if (model == null) throw new ArgumentNullException(nameof(model));
            if (tokenIds == null) throw new ArgumentNullException(nameof(tokenIds));
            Model = model;
            TokenIds = tokenIds;
        }

        public string Model { get; }
        public int[] TokenIds { get; }
        /// <summary>Tokens per chunk, 1..65536; only whole chunks are saved or restored.</summary>
        public int ChunkTokens { get; set; } = 256;

        internal delegate StatusHandle NativeCall(ref NativePrefix prefix);

        /// <summary>Runs <paramref name="call"/> with the native struct; the model's copy and the pinned ids live until it returns.</summary>
        internal unsafe void WithNative(NativeCall call)
        {
            using (var memory = new NativeMemory())
            fixed (int* ids = TokenIds) {
                var prefix = new NativePrefix {
                    StructSize = (uint)Marshal.SizeOf(typeof(NativePrefix)),
                    Model = memory.Utf8(Model),
                    TokenIds = (IntPtr)ids,
                    NTokens = TokenIds.Length,
                    ChunkTokens = ChunkTokens,
                };
                KvcacheException.Check(call(ref prefix));
            }
        }
    }
}
