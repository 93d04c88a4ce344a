using System;

namespace Kvcache
{
    // Stores keep byte values under string keys outside the cache: in this process (plugin
    // host), in a folder (disk) or in Redis; they are configured in the context's YAML
    // (`stores:`), each under the name these calls take. Store errors keep their code and name
    // the store: NotFound for a key without a value or an unknown store, Io when it cannot be
    // reached or a value fails its checksum, OutOfMemory when it is full.
    public sealed partial class Cache
    {
        /// <summary>
        /// Writes the sequence's Export image to <paramref name="store"/> under <paramref name="key"/>
        /// (replacing any value), then removes the sequence; on any error it stays as it was. Exclusive.
        /// </summary>
        public void Offload(int seqId, string store, string key)
        {
            if (store == null) throw new ArgumentNullException(nameof(store));
            if (key == null) throw new ArgumentNullException(nameof(key));
            Exclusive(() => KvcacheException.Check(NativeMethods.kvc_seq_offload(handle, seqId, store, key)));
        }

        /// <summary>
        /// Creates <paramref name="seqId"/> from the value under <paramref name="key"/> in
        /// <paramref name="store"/>, as Import does; the value stays (Context.StoreDrop removes it). Exclusive.
        /// </summary>
        public void Restore(int seqId, string store, string key)
        {
            if (store == null) throw new ArgumentNullException(nameof(store));
            if (key == null) throw new ArgumentNullException(nameof(key));
            Exclusive(() => KvcacheException.Check(NativeMethods.kvc_seq_restore(handle, seqId, store, key)));
        }

        /// <summary>
        /// Saves the K/V of the whole chunks of <paramref name="prefix"/> the sequence holds to
        /// <paramref name="store"/>, skipping chunks already there; returns the tokens they cover.
        /// Every (layer, KV head) must hold positions 0, 1, ... up to the last saved token
        /// (Unsupported otherwise, before anything is written): save right after the prefill.
        /// </summary>
        public int SavePrefix(int seqId, string store, Prefix prefix)
        {
            if (store == null) throw new ArgumentNullException(nameof(store));
            if (prefix == null) throw new ArgumentNullException(nameof(prefix));
            int saved = 0;
            Shared(() => prefix.WithNative((ref NativePrefix p) =>
                NativeMethods.kvc_prefix_save(handle, seqId, store, ref p, out saved)));
            return saved;
        }

        /// <summary>
        /// Creates <paramref name="seqId"/> holding the longest run of <paramref name="prefix"/>'s
        /// chunks found in <paramref name="store"/>, from chunk 0 on; returns the tokens restored
        /// (a multiple of ChunkTokens, possibly 0: the sequence is then empty). A missing chunk
        /// ends the run; on any other error nothing is created. Exclusive.
        /// </summary>
        public int LoadPrefix(int seqId, string store, Prefix prefix)
        {
            if (store == null) throw new ArgumentNullException(nameof(store));
            if (prefix == null) throw new ArgumentNullException(nameof(prefix));
            int restored = 0;
            Exclusive(() => prefix.WithNative((ref NativePrefix p) =>
                NativeMethods.kvc_prefix_load(handle, seqId, store, ref p, out restored)));
            return restored;
        }
    }
}
