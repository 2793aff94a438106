// The workspace lints are inherited as a whole, so the `loom` cfg is declared here rather than
// in a `[lints.rust]` table of this crate.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(loom)");
}
