//! Tests of the compiler driver and the example build, compiling with the system C compiler
//! against the repository's `include/`.

use super::*;
use crate::cache::CacheStats;

#[test]
fn include_dir_search_order() {
    let root = tempfile::tempdir().unwrap();
    let repo = root.path().join("repo");
    let inc = repo.join("include/simpler");
    std::fs::create_dir_all(&inc).unwrap();
    std::fs::write(inc.join("kernel.h"), "").unwrap();
    let example = repo.join("examples/gemm");
    std::fs::create_dir_all(&example).unwrap();

    // 1. The environment wins, and must hold the headers.
    let e = find_include_dir(&example, Some(root.path().into()), None).unwrap_err();
    assert!(e.to_string().contains("SIMPLER_INCLUDE_DIR"), "{e}");
    let got = find_include_dir(&example, Some(repo.join("include").into()), None).unwrap();
    assert_eq!(got, repo.join("include"));
    // 2. Next to the executable.
    std::fs::create_dir_all(repo.join("target/debug")).unwrap();
    let exe = repo.join("target/debug/simpler");
    let got = find_include_dir(root.path(), None, Some(exe)).unwrap();
    assert_eq!(got, std::fs::canonicalize(repo.join("include")).unwrap());
    // 3. Walking up from the example.
    let got = find_include_dir(&example, None, Some(root.path().join("a/b/simpler"))).unwrap();
    assert_eq!(got, std::fs::canonicalize(repo.join("include")).unwrap());
    // 4. The compile-time fallback.
    let got = find_include_dir(root.path(), None, None).unwrap();
    assert!(got.ends_with("../../include"), "{}", got.display());
    assert!(got.join(MARKER_HEADER).is_file());
}

#[test]
fn compiler_from_env() {
    assert_eq!(compiler_words(None).unwrap(), vec!["cc"]);
    assert_eq!(compiler_words(Some("".into())).unwrap(), vec!["cc"]);
    assert_eq!(
        compiler_words(Some("ccache  gcc".into())).unwrap(),
        vec!["ccache", "gcc"]
    );
    assert!(matches!(
        compiler_words(Some("  ".into())),
        Err(CompileError::EmptyCc)
    ));
    assert!(matches!(
        Compiler::new(vec![], vec![], KernelCache::new("/unused")),
        Err(CompileError::EmptyCc)
    ));
}

#[test]
fn one_flag_set_with_the_core_defines() {
    assert_eq!(Target::Kernel(CoreType::Aiv).defines(), ["-D__DAV_VEC__"]);
    assert_eq!(Target::Kernel(CoreType::Aic).defines(), ["-D__DAV_CUBE__"]);
    assert!(Target::Orchestration.defines().is_empty());
    let c = Compiler::new(
        vec!["cc".into()],
        vec![PathBuf::from("/no/such/include")],
        KernelCache::new("/unused"),
    )
    .unwrap()
    .with_extra_flags(vec!["-g".into()]);
    assert_eq!(
        c.args(&["-DX".into()], &[PathBuf::from("/more")]),
        [
            "-std=c11",
            "-O2",
            "-shared",
            "-fPIC",
            "-g",
            "-DX",
            "-I",
            "/no/such/include",
            "-I",
            "/more"
        ]
    );
}

#[test]
fn first_error_is_located() {
    let out = "k.c: In function 'f':\nk.c:6:5: warning: unused\nk.c:7:12: error: 'x' undeclared\n\
               k.c:9: error: later\n";
    let d = first_error(out).unwrap();
    assert_eq!(
        (d.file.as_str(), d.line, d.column, d.message.as_str()),
        ("k.c", 7, Some(12), "'x' undeclared")
    );
    assert_eq!(d.to_string(), "k.c:7:12: error: 'x' undeclared");
    let d = first_error("m.c:1:10: fatal error: no.h: No such file or directory").unwrap();
    assert_eq!((d.line, d.column), (1, Some(10)));
    let d = first_error("/a b/k.c:3: error: old style").unwrap();
    assert_eq!((d.file.as_str(), d.line, d.column), ("/a b/k.c", 3, None));
    assert_eq!(first_error("ld: cannot find -lfoo\n"), None);
}

#[test]
fn depfiles_are_split_into_prerequisites() {
    let text = "k.o: /src/k.c /inc/simpler/kernel.h \\\n /src/my\\ dir/k.h\n";
    assert_eq!(
        depfile_prerequisites(text),
        ["/src/k.c", "/inc/simpler/kernel.h", "/src/my dir/k.h"]
    );
    assert!(depfile_prerequisites("").is_empty());
}

const KERNEL: &str = "#include \"simpler/kernel.h\"\n#include \"k.h\"\n\
    SIMPLER_KERNEL void kernel_entry(int64_t *args) {\n\
    SIMPLER_TENSOR_DATA(float, simpler_arg_tensor(args, 0))[0] *= FACTOR;\n}\n";

fn compiler(cache: &Path) -> Compiler {
    Compiler::new(
        vec!["cc".into()],
        vec![repository_include_dir()],
        KernelCache::new(cache),
    )
    .unwrap()
}

#[test]
fn compiles_through_the_cache_and_misses_when_a_header_changes() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("k.c");
    let header = dir.path().join("k.h");
    std::fs::write(&header, "#define FACTOR 2.0f\n").unwrap();
    std::fs::write(&src, KERNEL).unwrap();
    let kc = compiler(&dir.path().join("cache"));
    let aiv = Target::Kernel(CoreType::Aiv);
    let first = kc.compile_target(&src, aiv).unwrap();
    assert!(first.image.starts_with(b"\x7fELF") && !first.cached);
    let again = kc.compile_target(&src, aiv).unwrap();
    assert!(again.cached);
    assert_eq!(again.image, first.image);
    assert_eq!(kc.cache().stats(), CacheStats { hits: 1, misses: 1 });
    // Another core type is another flag set, so another entry.
    assert!(
        !kc.compile_target(&src, Target::Kernel(CoreType::Aic))
            .unwrap()
            .cached
    );
    // Editing an included header or the source misses.
    std::fs::write(&header, "#define FACTOR 3.0f\n").unwrap();
    assert!(!kc.compile_target(&src, aiv).unwrap().cached);
    std::fs::write(&src, format!("{KERNEL}/* edited */\n")).unwrap();
    assert!(!kc.compile_target(&src, aiv).unwrap().cached);
    assert_eq!(kc.cache().stats(), CacheStats { hits: 1, misses: 4 });
    // A fresh compiler (another process) finds the entries on disk.
    let fresh = compiler(&dir.path().join("cache"));
    assert!(fresh.compile_target(&src, aiv).unwrap().cached);
    let path = fresh.cache_path(&src, &["-D__DAV_VEC__".into()]).unwrap();
    assert!(path.is_file(), "{}", path.display());
}

#[test]
fn the_core_defines_reach_the_source() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("k.c");
    std::fs::write(
        &src,
        "#include \"simpler/kernel.h\"\n#ifndef __DAV_CUBE__\n#error not a cube kernel\n#endif\n\
         SIMPLER_KERNEL void kernel_entry(int64_t *args) { (void)args; }\n",
    )
    .unwrap();
    let kc = compiler(&dir.path().join("cache"));
    assert!(kc
        .compile_target(&src, Target::Kernel(CoreType::Aic))
        .is_ok());
    let e = kc
        .compile_target(&src, Target::Kernel(CoreType::Aiv))
        .unwrap_err();
    assert!(e.to_string().contains("not a cube kernel"), "{e}");
}

#[test]
fn rejected_sources_name_file_and_line_and_cache_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("bad.c");
    std::fs::write(
        &src,
        "#include \"simpler/kernel.h\"\n\nSIMPLER_KERNEL void kernel_entry(int64_t *args) {\n    \
         undeclared_identifier = 1;\n}\n",
    )
    .unwrap();
    let cache = dir.path().join("cache");
    let kc = compiler(&cache);
    let e = kc.compile(&src, &[], &[]).unwrap_err();
    match &e {
        CompileError::Rejected { diagnostic, .. } => {
            let d = diagnostic.as_ref().expect("a located error");
            assert!(d.file.ends_with("bad.c") && d.line == 4, "{d:?}");
        }
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("bad.c:4:"), "{e}");
    let left: Vec<_> = std::fs::read_dir(&cache).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    // A missing header is a located error too (from the dependency scan).
    std::fs::write(&src, "#include \"no_such_header.h\"\n").unwrap();
    match kc.compile(&src, &[], &[]).unwrap_err() {
        CompileError::Rejected { diagnostic, .. } => assert_eq!(diagnostic.unwrap().line, 1),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        kc.compile(&dir.path().join("missing.c"), &[], &[]),
        Err(CompileError::MissingSource { .. })
    ));
    let nowhere = Compiler::new(
        vec!["/nonexistent/simpler-test-cc".into()],
        vec![],
        KernelCache::new(&cache),
    )
    .unwrap();
    let e = nowhere.compile(&src, &[], &[]).unwrap_err();
    assert!(matches!(e, CompileError::CompilerNotFound { .. }), "{e:?}");
}

const ORCH: &str = "#include \"simpler/orchestration.h\"\n\
    SIMPLER_ORCHESTRATION int32_t aicpu_orchestration_entry(const SimplerOrchOps *ops,\n\
    const SimplerOrchArgs *args) { (void)ops; (void)args; return 0; }\n";

fn tiny_example(kernel: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::write(
        p.join("simpler.toml"),
        "name = \"tiny\"\n[orchestration]\nsource = \"o.c\"\n[[kernels]]\nfunc_id = 2\n\
         core = \"aic\"\nsource = \"k.c\"\n[[args]]\nname = \"x\"\ndirection = \"inout\"\n\
         dtype = \"f32\"\n",
    )
    .unwrap();
    std::fs::write(p.join("o.c"), ORCH).unwrap();
    std::fs::write(p.join("k.c"), kernel).unwrap();
    dir
}

#[test]
fn an_example_builds_into_a_bundle_and_entry_symbols_are_checked() {
    let ex = tiny_example(
        "#include \"simpler/kernel.h\"\nSIMPLER_KERNEL void kernel_entry(int64_t *args) \
         { (void)args; }\n",
    );
    let kc = compiler(&ex.path().join("cache"));
    let built = build_example(ex.path(), &kc).unwrap();
    assert_eq!(built.bundle.name, "tiny");
    assert_eq!(built.bundle.kernels[0].func_id, 2);
    assert_eq!(built.units.len(), 2);
    assert_eq!(built.units[1].role, "kernel 2 (aic)");
    assert!(built.units.iter().all(|u| !u.cached));
    let again = build_example(ex.path(), &kc).unwrap();
    assert!(again.units.iter().all(|u| u.cached));
    assert_eq!(again.bundle, built.bundle);
    assert_eq!(built.bundle.runtime, None);

    // The manifest's runtime goes into the bundle.
    let manifest = ex.path().join("simpler.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, format!("runtime = \"host_build_graph\"\n{text}")).unwrap();
    let hbg = build_example(ex.path(), &kc).unwrap();
    assert_eq!(
        hbg.bundle.runtime,
        Some(simpler_host::Runtime::HostBuildGraph)
    );
    assert_eq!(hbg.bundle.kernels, built.bundle.kernels);

    // The kernel is named after its source's stem.
    assert_eq!(built.bundle.kernels[0].name, "k");

    let bad = tiny_example(
        "#include \"simpler/kernel.h\"\nstatic void kernel_entry(int64_t *args) { (void)args; }\n\
         SIMPLER_KERNEL void other(int64_t *args) { kernel_entry(args); }\n",
    );
    let e = build_example(bad.path(), &kc).unwrap_err();
    assert!(matches!(e, BuildError::MissingEntry { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("kernels[0].entry") && msg.contains("marked SIMPLER_KERNEL"),
        "{msg}"
    );
    std::fs::remove_file(bad.path().join("k.c")).unwrap();
    let e = build_example(bad.path(), &kc).unwrap_err();
    assert!(
        matches!(&e, BuildError::MissingSource { field, .. } if field == "kernels[0].source"),
        "{e:?}"
    );
    // A source that is a directory (or a FIFO, a device) is named for what it is.
    std::fs::create_dir(bad.path().join("k.c")).unwrap();
    let e = build_example(bad.path(), &kc).unwrap_err();
    assert!(
        matches!(&e, BuildError::BadSource { field, .. } if field == "kernels[0].source"),
        "{e:?}"
    );
    assert!(e.to_string().contains("is a directory"), "{e}");
}

#[test]
fn two_kernels_of_one_entry_symbol_keep_their_names_in_the_bundle() {
    let ex = tiny_example(
        "#include \"simpler/kernel.h\"\nSIMPLER_KERNEL void kernel_entry(int64_t *args) \
         { (void)args; }\n",
    );
    let p = ex.path();
    std::fs::copy(p.join("k.c"), p.join("second.c")).unwrap();
    let manifest = p.join("simpler.toml");
    let text = std::fs::read_to_string(&manifest).unwrap().replace(
        "[[args]]",
        "[[kernels]]\nfunc_id = 5\ncore = \"aiv\"\nsource = \"second.c\"\nname = \"softmax_update\"\n[[args]]",
    );
    std::fs::write(&manifest, text).unwrap();
    let kc = compiler(&p.join("cache"));
    let built = build_example(p, &kc).unwrap();
    let names: Vec<(&str, &str)> = built
        .bundle
        .kernels
        .iter()
        .map(|k| (k.name.as_str(), k.code.entry.as_str()))
        .collect();
    assert_eq!(
        names,
        [("k", "kernel_entry"), ("softmax_update", "kernel_entry")]
    );
    let back = simpler_host::Bundle::from_bytes(&built.bundle.to_bytes()).unwrap();
    assert_eq!(back.kernels, built.bundle.kernels);
}

#[test]
fn a_source_that_is_not_a_regular_file_or_too_large_is_refused_naming_it() {
    use simpler_host::fsio::ReadFileError;
    let dir = tempfile::tempdir().unwrap();
    let c = compiler(&dir.path().join("cache"));
    for (path, kind) in simpler_test_support::files::non_regular(dir.path(), "k.c") {
        // A FIFO with no writer is refused at once, not waited on.
        let e = c.compile(&path, &[], &[]).unwrap_err();
        assert!(
            matches!(&e, CompileError::Source(ReadFileError::NotRegular { kind: k, .. }) if *k == kind),
            "{path:?}: {e:?}"
        );
    }
    let big = dir.path().join("big.c");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(MAX_SOURCE_BYTES + 1).unwrap(); // sparse: nothing is written
    let e = c.compile(&big, &[], &[]).unwrap_err();
    assert!(
        matches!(&e, CompileError::Source(ReadFileError::TooLarge { .. })),
        "{e:?}"
    );
    assert!(e.to_string().contains("big.c"), "{e}");
    assert!(matches!(
        c.compile(&dir.path().join("none.c"), &[], &[]),
        Err(CompileError::MissingSource { .. })
    ));
}
