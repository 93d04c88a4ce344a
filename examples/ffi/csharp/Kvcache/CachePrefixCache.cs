using System;

namespace Kvcache
{
    // The prefix cache (kvcache.h "prefix cache"): a cache created with CacheParams.PrefixCache
    // keeps the full blocks a sequence published, by the token ids they hold, so that a later
    // prompt sharing them attaches them instead of computing them again. The calls ignore
    // Prefix.ChunkTokens: their unit is the cache's block. Unsupported for a cache without it.
    public sealed partial class Cache
    {
        /// <summary>
        /// Creates <paramref name="seqId"/> (AlreadyExists when it exists) sharing the longest run
        /// of published full blocks of <paramref name="prefix"/> on every (layer, KV head),
        /// continued in the cache's PrefixStore if it has one; returns the tokens attached (a
        /// multiple of BlockTokens, possibly 0: the sequence is then empty). The engine prefills
        /// the rest from there. Exclusive.
        /// </summary>
        public int AttachPrefix(int seqId, Prefix prefix)
        {
            if (prefix == null) throw new ArgumentNullException(nameof(prefix));
            int attached = 0;
            Exclusive(() => prefix.WithNative((ref NativePrefix p) =>
                NativeMethods.kvc_prefix_attach(handle, seqId, ref p, out attached)));
            return attached;
        }

        /// <summary>
        /// Makes the full blocks of the sequence that hold the first tokens of
        /// <paramref name="prefix"/> (the token ids of positions 0, 1, ...) findable by
        /// AttachPrefix; returns the tokens they cover: the whole blocks that every (layer, KV
        /// head) holds in order from position 0. With CacheParams.PrefixWriteThrough, also writes
        /// them to the PrefixStore.
        /// </summary>
        public int PublishPrefix(int seqId, Prefix prefix)
        {
            if (prefix == null) throw new ArgumentNullException(nameof(prefix));
            int published = 0;
            Shared(() => prefix.WithNative((ref NativePrefix p) =>
                NativeMethods.kvc_prefix_publish(handle, seqId, ref p, out published)));
            return published;
        }

        /// <summary>
        /// The tokens AttachPrefix would attach from the cache itself now (the store is not
        /// asked); changes nothing but the blocks' recency.
        /// </summary>
        public int LookupPrefix(Prefix prefix)
        {
            if (prefix == null) throw new ArgumentNullException(nameof(prefix));
            int tokens = 0;
            Shared(() => prefix.WithNative((ref NativePrefix p) =>
                NativeMethods.kvc_prefix_lookup(handle, ref p, out tokens)));
            return tokens;
        }
    }
}
