//! Write each target's seeds into `fuzz/corpus/<target>/`, where `cargo fuzz run` starts from:
//! `cargo run -p uet-fuzz --example seed_corpus`.

use std::path::Path;

fn main() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for (target, seeds) in uet_fuzz::seeds() {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir)?;
        for (i, seed) in seeds.iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i}")), seed)?;
        }
        println!("{target}: {} seeds in {}", seeds.len(), dir.display());
    }
    Ok(())
}
