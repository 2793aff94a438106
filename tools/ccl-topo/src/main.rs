//! `ccl-topo`: prints the system topology and the search result.

fn main() {
    println!("ccl-topo: not yet implemented");
}
