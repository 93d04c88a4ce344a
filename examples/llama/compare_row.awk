# compare_row.awk: one Markdown table row from the name=value lines of `kvc-llama compare
# --generate N` over several windows (docs/formats_results.md):
#   first window: perplexity (vs baseline), KL, top-1 agreement, generated agreement;
#   all windows: perplexity +- SE, perplexity vs baseline (exp of the paired NLL difference;
#   its SE by the delta method), KL +- SE, top-1 agreement +- SE, generated agreement +- SE,
#   identical prefix +- SE (generations identical throughout).
#   awk -f examples/llama/compare_row.awk -v label='q8_0 / q8_0' compare-output.txt
BEGIN { FS = "=" }
/^[a-z_0-9.]+=/ { v[$1] = $2 }
END {
  w0 = exp(v["window.0.config_nll"])
  w0_vs = 100 * (exp(v["window.0.config_nll"] - v["window.0.baseline_nll"]) - 1)
  vs = 100 * (exp(v["nll_delta"]) - 1)
  printf "| %s | %.2f (%+.2f%%) | %.5f | %.3f | %.3f | %.2f +- %.2f | %+.2f%% +- %.2f%% " \
         "| %.5f +- %.5f | %.3f +- %.3f | %.3f +- %.3f | %.1f +- %.1f (%d of %d whole) |\n", \
    label, w0, w0_vs, v["window.0.kl"], v["window.0.top1_agreement"],
    v["window.0.generate_agreement"], v["config.ppl"], v["config.ppl_se"], vs,
    100 * exp(v["nll_delta"]) * v["nll_delta_se"], v["kl"], v["kl_se"], v["top1_agreement"],
    v["top1_agreement_se"],
    v["generate.agreement"], v["generate.agreement_se"], v["generate.prefix_mean"],
    v["generate.prefix_se"], v["generate.identical_runs"], v["generate.runs"]
}
