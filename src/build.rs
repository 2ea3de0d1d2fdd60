// Rebuild when a migration is added or changed: `sqlx::migrate!` embeds them at
// compile time but cannot tell cargo to watch the folder on stable Rust.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
