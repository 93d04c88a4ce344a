namespace Kvcache
{
    /// <summary>A loaded plugin (kvc_plugin_info), its strings copied out of the context.</summary>
    public sealed class PluginInfo
    {
        internal PluginInfo(NativePluginInfo info)
        {
            Kind = info.Kind;
            Name = NativeMethods.String(info.Name);
            Version = info.Version;
            Path = NativeMethods.String(info.Path);
        }

        public PluginKind Kind { get; }
        /// <summary>The name used in YAML, such as "cpu" or "snapkv".</summary>
        public string Name { get; }
        /// <summary>The plugin's own version.</summary>
        public uint Version { get; }
        /// <summary>The shared library it came from.</summary>
        public string Path { get; }
    }
}
