//! Appends one token to a cache and attends over it: with one key, the attention output is
//! that token's V, which it prints (and checks).
use kvcache::{Attention, Batch, CacheParams, Context, DType};

fn main() -> Result<(), kvcache::Error> {
    let context = Context::new("threads: 1\n")?;
    let mut cache =
        context.cache(&CacheParams::new().head_dim(4).dtype(DType::F32).policy("window").budget(8))?;
    cache.create_seq(0)?;
    let (q, k, v) = ([1.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.5, 0.5], [0.25, -1.0, 2.0, 3.5]);
    let mut out = [0.0f32; 4];
    cache.append_attend(0, &Batch::new().seq(0, [0]), &q, &k, &v, &Attention::new(), &mut out)?;
    println!("kvcache {}: attention over one token = {out:?}", kvcache::version());
    if out != v {
        eprintln!("expected V = {v:?}");
        std::process::exit(1);
    }
    Ok(())
}
