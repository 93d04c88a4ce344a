namespace Kvcache
{
    /// <summary>A cache's policy as in effect (kvc_policy_info), its name copied out of the cache.</summary>
    public sealed class PolicyInfo
    {
        internal PolicyInfo(NativePolicyInfo info)
        {
            Name = NativeMethods.String(info.Name);
            Sinks = info.Sinks;
            Recent = info.Recent;
            BudgetTokens = info.BudgetTokens;
            BudgetRatio = info.BudgetRatio;
            Stats = info.Stats;
            ObservationWindow = info.ObservationWindow;
        }

        public string Name { get; }
        /// <summary>First tokens always kept (the policy's default if none was given).</summary>
        public int Sinks { get; }
        /// <summary>Newest tokens always kept (the policy's default if none was given).</summary>
        public int Recent { get; }
        /// <summary>Tokens kept per (sequence, layer, KV head); 0: BudgetRatio applies.</summary>
        public int BudgetTokens { get; }
        /// <summary>Budget as a share of a head's received tokens; 0 with BudgetTokens.</summary>
        public double BudgetRatio { get; }
        /// <summary>What the policy reads: StatKind bits, and 8 for the keys.</summary>
        public uint Stats { get; }
        /// <summary>Last queries summed by StatKind.AttnWindow.</summary>
        public int ObservationWindow { get; }
    }
}
