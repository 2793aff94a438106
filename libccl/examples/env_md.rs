//! Prints every libccl parameter as Markdown: `cargo run -q -p ccl --example env_md > docs/ENV.md`.

fn main() {
    print!("{}", ccl::params::markdown());
}
