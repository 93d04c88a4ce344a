using System;
using System.IO;
using System.Linq;
using Kvcache;

// A program of a user's own, built outside the repository against an installed kvcache as
// docs/ffi.md (C#, Building) says; check-install builds and runs it. It uses a policy (from the
// installed plugin folder), the Span overloads and Cache.AllLayers, and checks that the
// libkvcache it runs on is the one under the prefix given as its argument.
static class Client
{
    const int Layers = 2, HeadDim = 4, Tokens = 8;

    static int Main(string[] args)
    {
        if (args.Length != 1) {
            Console.Error.WriteLine("usage: Client.exe <install prefix>");
            return 2;
        }
        string yaml = "cache: { layers: 2, kv_heads: 1, head_dim: 4, dtype: f32, memory_limit: 1MiB }\n" +
                      "policy: { name: streaming, budget: 4, sinks: 1 }\n";
        int kept;
        using (var context = new Context(yaml))
        using (Cache cache = context.CreateCacheFromYaml()) {
            cache.CreateSequence(0);
            Batch batch = Batch.Run(0, 0, Tokens);
            Span<float> kv = new float[2 * Tokens * HeadDim];
            for (int i = 0; i < kv.Length; i++) kv[i] = i * 0.01f;
            var output = new float[Tokens * HeadDim];
            for (int layer = 0; layer < Layers; layer++)
                cache.AppendAttend(layer, batch, kv.Slice(0, Tokens * HeadDim), kv.Slice(0, Tokens * HeadDim),
                                   kv.Slice(Tokens * HeadDim), output);
            cache.Compress(Cache.AllLayers, 0);
            kept = cache.Length(0, Layers - 1, 0);
        }
        if (kept != 4) {
            Console.Error.WriteLine("client: the streaming policy kept " + kept + " tokens, not its budget of 4");
            return 1;
        }
        string loaded = File.ReadLines("/proc/self/maps")
            .Select(line => line.Substring(line.IndexOf('/') < 0 ? line.Length : line.IndexOf('/')))
            .FirstOrDefault(path => Path.GetFileName(path).StartsWith("libkvcache.so", StringComparison.Ordinal));
        string prefix = Path.GetFullPath(args[0]).TrimEnd('/') + "/";
        if (loaded == null || !loaded.StartsWith(prefix, StringComparison.Ordinal)) {
            Console.Error.WriteLine("client: loaded " + (loaded ?? "no libkvcache") + ", not the one under " + prefix);
            return 1;
        }
        Console.WriteLine("client: kvcache " + Library.VersionString + " from " + loaded + ": OK");
        return 0;
    }
}
