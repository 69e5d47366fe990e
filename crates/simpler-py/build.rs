//! Copies the C headers (`include/simpler/*.h`) into the Python package
//! (`python/simpler/include/simpler/`), so that the wheel maturin builds carries them and an
//! installed `simpler` can compile kernels without the repository. A file is rewritten only
//! when its content differs, so the copy never dirties an unchanged tree.

use std::path::Path;

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let root = Path::new(&manifest).join("../..");
    let src = root.join("include/simpler");
    let dst = root.join("python/simpler/include/simpler");
    println!("cargo:rerun-if-changed={}", src.display());
    // Also when the copies are deleted or edited (cargo treats a missing path as changed).
    println!("cargo:rerun-if-changed={}", dst.display());
    // A source tree without the headers (a vendored crate) has nothing to copy.
    let Ok(entries) = std::fs::read_dir(&src) else {
        return;
    };
    if !root.join("python/simpler").is_dir() {
        return;
    }
    std::fs::create_dir_all(&dst).expect("create python/simpler/include/simpler");
    let mut names = Vec::new();
    for entry in entries {
        let path = entry.expect("read include/simpler").path();
        if path.extension().and_then(|e| e.to_str()) != Some("h") {
            continue;
        }
        names.push(
            path.file_name()
                .expect("a header has a file name")
                .to_owned(),
        );
        println!("cargo:rerun-if-changed={}", path.display());
        let content = std::fs::read(&path).expect("read a header");
        let target = dst.join(path.file_name().expect("a header has a file name"));
        if std::fs::read(&target).ok().as_deref() != Some(&content[..]) {
            std::fs::write(&target, &content).expect("write a header copy");
        }
    }
    // A header removed from include/ must not linger in the package.
    for entry in std::fs::read_dir(&dst).expect("read the header copies") {
        let path = entry.expect("read the header copies").path();
        let stale = path
            .file_name()
            .is_some_and(|n| !names.iter().any(|m| m == n));
        if stale && path.extension().and_then(|e| e.to_str()) == Some("h") {
            std::fs::remove_file(&path).expect("remove a stale header copy");
        }
    }
}
