//! `docs/ENV.md` must be the parameter registry's rendering, so the list users read cannot
//! drift from what the library reads.

#[test]
fn env_md_matches_the_parameter_registry() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/ENV.md");
    let on_disk = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let rendered = ccl::params::markdown();
    if on_disk != rendered {
        let line = on_disk
            .lines()
            .zip(rendered.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| on_disk.lines().count().min(rendered.lines().count()));
        panic!(
            "docs/ENV.md is stale (first difference at line {}): regenerate it with\n\
             \n    cargo run -q -p ccl --example env_md > docs/ENV.md\n",
            line + 1
        );
    }
}
