// The migrations are embedded at compile time; a new migration folder must rebuild the
// crate even though no Rust file changed.
fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
