//! The callable registry of one worker (`docs/health.md` §5: ids
//! explicit or automatic; every occupancy of a slot gets a new generation, so a reused id is
//! never mistaken for the callable it replaced).
//!
//! **Owns:** the [`MAX_CALLABLES`] slots (the slot number *is* the callable id), the rules of
//! explicit and automatic ids, the per-occupancy generation, and the image cache.
//!
//! - **One namespace.** Explicit ids ([`CallableTable::insert_explicit`]: out of range or
//!   taken → invalid-argument) and automatic ids ([`CallableTable::insert_auto`]: the lowest
//!   free slot; a full table → invalid-state, [`HostError::RegistryFull`]) share one table.
//! - **Generations.** Every occupancy gets a generation from a registry-wide counter, so an
//!   id that is unregistered and registered again never repeats its generation; a run keeps
//!   the occupancy it was submitted with.
//! - **Image cache.** Code images are loaded through [`ImageCache`], keyed by an FNV-1a hash
//!   of the image (bytes and entry symbol, or the in-process entry address) and confirmed by
//!   full comparison: equal images share one load (one "upload") while their callables get
//!   distinct ids. An image leaves the cache when its last callable (and the last run using
//!   it) is gone, and its library is unmapped then unless a run since its load was given up
//!   on (a device thread may still execute it: [`crate::loader`]).
//! - **Out-parameter form.** [`register_into`] writes the new id, or −1 on any failure, the
//!   way `simpler_register_callable_v2(image, size, *out_id)` does.
//!
//! Serialization (register, unregister and close on the context; mutation refused while a
//! run is outstanding) is the worker's: it holds its context lock across a whole
//! registration and checks the lane at the commit point (the worker).

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use simpler_abi::{CoreType, MAX_FUNC_ID};

use crate::loader::{self, EntryKind, LoadedCode, UnloadGate};
use crate::{CallableSpec, CodeImage, HostError, Signature};

/// Number of callable slots (`MAX_REGISTERED_CALLABLE_IDS`).
pub const MAX_CALLABLES: usize = 64;

/// Id of a registered callable (its registry slot, `0..64`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CallableId(pub u32);

/// What the registry says about one occupied slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallableInfo {
    /// The id (slot).
    pub id: CallableId,
    /// The occupancy's generation: unique in the worker, new on every registration.
    pub generation: u64,
    /// The callable's name.
    pub name: String,
    /// The callable's signature, shared with the occupancy (what a binding checks its
    /// arguments against before submitting; the submit checks them again against the
    /// occupancy it finds).
    pub signature: Arc<Signature>,
}

/// Counters of the image cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImageCacheStats {
    /// Images loaded and still alive.
    pub live_images: usize,
    /// Loads performed (cache misses).
    pub uploads: u64,
    /// Loads avoided because an equal image was alive (cache hits).
    pub shared: u64,
}

/// A registered callable: loaded code and its func tables, for one occupancy.
pub(crate) struct Registered {
    pub(crate) name: String,
    pub(crate) signature: Arc<Signature>,
    pub(crate) orchestration: Arc<LoadedCode>,
    pub(crate) _kernels: Vec<Arc<LoadedCode>>,
    /// func id → entry address (0 = none), `func_count` entries.
    pub(crate) func_addrs: Vec<u64>,
    /// The func table as published to the device (little-endian u64 per func id).
    pub(crate) func_table_bytes: Vec<u8>,
    /// The core-type table as published (little-endian u32 per func id).
    pub(crate) func_type_bytes: Vec<u8>,
    /// The occupancy's generation.
    pub(crate) generation: u64,
    /// func id → the kernel's name ([`KernelSpec::display_name`]), as traces show it
    /// (`docs/tracing.md`).
    pub(crate) kernel_names: std::collections::BTreeMap<u32, String>,
    /// The callable's own runtime variant, if it names one.
    pub(crate) runtime: Option<crate::Runtime>,
}

/// What identifies an image for sharing.
#[derive(Clone, Debug, PartialEq, Eq)]
enum ImageKey {
    Library {
        kind: EntryKind,
        entry: String,
        bytes: Vec<u8>,
    },
    InProcess {
        kind: EntryKind,
        addr: u64,
    },
}

impl ImageKey {
    fn of(image: &CodeImage, kind: EntryKind) -> ImageKey {
        match image {
            CodeImage::Library { bytes, entry } => ImageKey::Library {
                kind,
                entry: entry.clone(),
                bytes: bytes.clone(),
            },
            CodeImage::Kernel(f) => ImageKey::InProcess {
                kind,
                addr: *f as usize as u64,
            },
            CodeImage::Orchestration(f) => ImageKey::InProcess {
                kind,
                addr: *f as usize as u64,
            },
        }
    }

    /// FNV-1a over the kind, the entry and the bytes (or the address).
    fn hash(&self) -> u64 {
        let mut h = Fnv1a::default();
        match self {
            ImageKey::Library { kind, entry, bytes } => {
                h.write(&[0, *kind as u8]);
                h.write(entry.as_bytes());
                h.write(&[0]);
                h.write(bytes);
            }
            ImageKey::InProcess { kind, addr } => {
                h.write(&[1, *kind as u8]);
                h.write(&addr.to_le_bytes());
            }
        }
        h.0
    }
}

/// 64-bit FNV-1a.
struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv1a {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// Loaded images shared by equal content (refcounted through `Arc<LoadedCode>`).
#[derive(Default)]
pub(crate) struct ImageCache {
    entries: HashMap<u64, Vec<(ImageKey, Weak<LoadedCode>)>>,
    uploads: u64,
    shared: u64,
    /// The device's give-ups: code loaded here is unmapped on drop only while it says none
    /// happened since the load (`loader` module doc).
    gate: Arc<UnloadGate>,
}

impl ImageCache {
    /// An empty cache for the device whose give-ups `gate` counts.
    pub(crate) fn for_device(gate: Arc<UnloadGate>) -> ImageCache {
        ImageCache {
            gate,
            ..ImageCache::default()
        }
    }

    /// The loaded code of `image`: shared with an equal live image, or loaded now.
    pub(crate) fn load(
        &mut self,
        image: &CodeImage,
        kind: EntryKind,
        what: &str,
    ) -> Result<Arc<LoadedCode>, HostError> {
        let key = ImageKey::of(image, kind);
        let hash = key.hash();
        let bucket = self.entries.entry(hash).or_default();
        bucket.retain(|(_, w)| w.strong_count() > 0);
        if let Some(code) = bucket
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, w)| w.upgrade())
        {
            self.shared += 1;
            return Ok(code);
        }
        let code = Arc::new(loader::load_for_device(image, kind, what, &self.gate)?);
        self.uploads += 1;
        bucket.push((key, Arc::downgrade(&code)));
        Ok(code)
    }

    pub(crate) fn stats(&self) -> ImageCacheStats {
        ImageCacheStats {
            live_images: self
                .entries
                .values()
                .flatten()
                .filter(|(_, w)| w.strong_count() > 0)
                .count(),
            uploads: self.uploads,
            shared: self.shared,
        }
    }
}

/// Validates `spec` and loads its code through `cache` into a new occupancy of `generation`.
pub(crate) fn build(
    cache: &mut ImageCache,
    spec: &CallableSpec,
    generation: u64,
) -> Result<Registered, HostError> {
    spec.signature.validate()?;
    let invalid = |reason: String| HostError::InvalidCallable {
        name: spec.name.clone(),
        reason,
    };
    let mut count = 0usize;
    for (i, k) in spec.kernels.iter().enumerate() {
        if k.func_id as usize >= MAX_FUNC_ID {
            return Err(invalid(format!(
                "func id {} is not below {MAX_FUNC_ID}",
                k.func_id
            )));
        }
        if spec.kernels[..i].iter().any(|o| o.func_id == k.func_id) {
            return Err(invalid(format!(
                "func id {} is used by two kernels",
                k.func_id
            )));
        }
        count = count.max(k.func_id as usize + 1);
    }
    for k in &spec.kernels {
        crate::check_kernel_name(&k.display_name())
            .map_err(|e| invalid(format!("kernel func {}: {e}", k.func_id)))?;
    }
    let named: Vec<(u32, Option<&str>, String)> = spec
        .kernels
        .iter()
        .map(|k| (k.func_id, k.name.as_deref(), k.display_name()))
        .collect();
    let names = crate::resolve_kernel_names(&named).map_err(|(name, first, second)| {
        invalid(format!(
            "kernels func {} and func {} are both named `{name}`; kernel names must be unique \
             in a callable",
            spec.kernels[first].func_id, spec.kernels[second].func_id
        ))
    })?;
    let orchestration = cache.load(
        &spec.orchestration,
        EntryKind::Orchestration,
        &format!("`{}` orchestration", spec.name),
    )?;
    let mut func_addrs = vec![0u64; count];
    let mut func_types = vec![0u32; count];
    let mut kernels = Vec::with_capacity(spec.kernels.len());
    let mut kernel_names = std::collections::BTreeMap::new();
    for (k, name) in spec.kernels.iter().zip(names) {
        let code = cache.load(
            &k.image,
            EntryKind::Kernel,
            &format!("`{}` kernel `{name}` (func {})", spec.name, k.func_id),
        )?;
        kernel_names.insert(k.func_id, name);
        func_addrs[k.func_id as usize] = code.addr;
        func_types[k.func_id as usize] = match k.core_type {
            CoreType::Aic => 1,
            CoreType::Aiv => 2,
        };
        kernels.push(code);
    }
    Ok(Registered {
        name: spec.name.clone(),
        signature: Arc::new(spec.signature.clone()),
        orchestration,
        _kernels: kernels,
        func_table_bytes: func_addrs.iter().flat_map(|a| a.to_le_bytes()).collect(),
        func_type_bytes: func_types.iter().flat_map(|t| t.to_le_bytes()).collect(),
        func_addrs,
        generation,
        kernel_names,
        runtime: spec.runtime,
    })
}

/// The slots. Slot number = callable id.
pub(crate) struct CallableTable {
    slots: Vec<Option<Arc<Registered>>>,
}

impl Default for CallableTable {
    fn default() -> Self {
        CallableTable {
            slots: (0..MAX_CALLABLES).map(|_| None).collect(),
        }
    }
}

/// Why an explicit id cannot be used, if it cannot.
pub(crate) fn check_explicit(table: &CallableTable, id: u32) -> Result<(), HostError> {
    let bad = |reason: String| HostError::InvalidArgument {
        arg: "callable_id".into(),
        reason,
    };
    match table.slots.get(id as usize) {
        None => Err(bad(format!(
            "callable id {id} is out of range (ids are 0..{MAX_CALLABLES})"
        ))),
        Some(Some(r)) => Err(bad(format!(
            "callable id {id} is taken by `{}` (generation {})",
            r.name, r.generation
        ))),
        Some(None) => Ok(()),
    }
}

impl CallableTable {
    /// The lowest free id.
    pub(crate) fn lowest_free(&self) -> Result<u32, HostError> {
        self.slots
            .iter()
            .position(Option::is_none)
            .map(|i| i as u32)
            .ok_or(HostError::RegistryFull(MAX_CALLABLES))
    }

    /// Occupies the lowest free slot.
    pub(crate) fn insert_auto(&mut self, r: Arc<Registered>) -> Result<CallableId, HostError> {
        let id = self.lowest_free()?;
        self.slots[id as usize] = Some(r);
        Ok(CallableId(id))
    }

    /// Occupies slot `id`.
    pub(crate) fn insert_explicit(
        &mut self,
        id: u32,
        r: Arc<Registered>,
    ) -> Result<CallableId, HostError> {
        check_explicit(self, id)?;
        self.slots[id as usize] = Some(r);
        Ok(CallableId(id))
    }

    /// Empties slot `id`, handing back its occupancy.
    pub(crate) fn remove(&mut self, id: CallableId) -> Result<Arc<Registered>, HostError> {
        self.slots
            .get_mut(id.0 as usize)
            .and_then(Option::take)
            .ok_or(HostError::UnknownCallable(id.0))
    }

    /// The occupancy of slot `id`.
    pub(crate) fn get(&self, id: CallableId) -> Result<Arc<Registered>, HostError> {
        self.slots
            .get(id.0 as usize)
            .and_then(Clone::clone)
            .ok_or(HostError::UnknownCallable(id.0))
    }

    /// What slot `id` holds.
    pub(crate) fn info(&self, id: CallableId) -> Option<CallableInfo> {
        let r = self.slots.get(id.0 as usize)?.as_ref()?;
        Some(CallableInfo {
            id,
            generation: r.generation,
            name: r.name.clone(),
            signature: r.signature.clone(),
        })
    }

    /// Occupied slots.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }
}

/// The out-parameter form of a registration: `out_id` receives the new id, or −1 whenever
/// `register` fails (whatever it held before).
///
/// # Errors
/// `register`'s error.
pub fn register_into(
    out_id: &mut i32,
    register: impl FnOnce() -> Result<CallableId, HostError>,
) -> Result<(), HostError> {
    *out_id = -1;
    let id = register()?;
    *out_id = id.0 as i32;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ArgDirection, ArgSpec, KernelSpec};
    use simpler_abi::{DataType, OrchArgs, OrchOps};

    unsafe extern "C-unwind" fn orch_a(_: *const OrchOps, _: *const OrchArgs) -> i32 {
        0
    }
    unsafe extern "C-unwind" fn orch_b(_: *const OrchOps, _: *const OrchArgs) -> i32 {
        1
    }
    unsafe extern "C-unwind" fn kern(_: *mut i64) {}

    fn spec(name: &str, orch: simpler_abi::OrchEntry) -> CallableSpec {
        CallableSpec {
            name: name.into(),
            signature: Signature::new(vec![ArgSpec {
                name: "x".into(),
                direction: ArgDirection::In,
                dtype: DataType::Float32,
                shape: None,
            }])
            .unwrap(),
            orchestration: CodeImage::Orchestration(orch),
            kernels: vec![KernelSpec {
                func_id: 0,
                core_type: CoreType::Aiv,
                image: CodeImage::Kernel(kern),
                name: None,
            }],
            runtime: None,
        }
    }

    struct Reg {
        table: CallableTable,
        cache: ImageCache,
        next_gen: u64,
    }

    impl Reg {
        fn new() -> Reg {
            Reg {
                table: CallableTable::default(),
                cache: ImageCache::default(),
                next_gen: 1,
            }
        }
        fn occupancy(&mut self, s: &CallableSpec) -> Arc<Registered> {
            self.next_gen += 1;
            Arc::new(build(&mut self.cache, s, self.next_gen - 1).unwrap())
        }
    }

    #[derive(Clone, Copy, Debug)]
    enum Op {
        Auto,
        Explicit(u32),
        Unregister(u32),
        /// Fill every free slot automatically.
        Fill,
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Want {
        Id(u32),
        InvalidArgument,
        InvalidState,
        Unknown,
        Ok,
    }

    #[test]
    fn explicit_and_automatic_ids_share_one_namespace() {
        use Op::*;
        use Want::*;
        let rows: &[(&str, &[Op], &[Want])] = &[
            (
                "auto takes the lowest free id",
                &[Auto, Auto],
                &[Id(0), Id(1)],
            ),
            (
                "explicit takes its own id",
                &[Explicit(5), Auto],
                &[Id(5), Id(0)],
            ),
            (
                "auto skips explicit ids",
                &[Explicit(0), Explicit(1), Auto],
                &[Id(0), Id(1), Id(2)],
            ),
            (
                "explicit refuses a taken id",
                &[Auto, Explicit(0)],
                &[Id(0), InvalidArgument],
            ),
            (
                "explicit refuses id 64",
                &[Explicit(64)],
                &[InvalidArgument],
            ),
            (
                "explicit refuses a huge id",
                &[Explicit(u32::MAX)],
                &[InvalidArgument],
            ),
            ("explicit 63 is in range", &[Explicit(63)], &[Id(63)]),
            (
                "auto reuses a freed id",
                &[Auto, Auto, Unregister(0), Auto],
                &[Id(0), Id(1), Ok, Id(0)],
            ),
            (
                "a full table refuses auto",
                &[Fill, Auto],
                &[Ok, InvalidState],
            ),
            (
                "a full table refuses explicit as taken",
                &[Fill, Explicit(3)],
                &[Ok, InvalidArgument],
            ),
            ("unregistering a free id", &[Unregister(9)], &[Unknown]),
        ];
        for (name, ops, wants) in rows {
            let mut reg = Reg::new();
            let s = spec("c", orch_a);
            for (op, want) in ops.iter().zip(*wants) {
                let got = match op {
                    Auto => {
                        let r = reg.occupancy(&s);
                        reg.table.insert_auto(r).map(|i| Id(i.0))
                    }
                    Explicit(id) => {
                        let r = reg.occupancy(&s);
                        reg.table.insert_explicit(*id, r).map(|i| Id(i.0))
                    }
                    Unregister(id) => reg.table.remove(CallableId(*id)).map(|_| Ok),
                    Fill => {
                        while reg.table.lowest_free().is_ok() {
                            let r = reg.occupancy(&s);
                            reg.table.insert_auto(r).unwrap();
                        }
                        Result::Ok(Ok)
                    }
                };
                let got = got.unwrap_or_else(|e| {
                    if e.is_invalid_argument() {
                        InvalidArgument
                    } else if e.is_invalid_state() {
                        InvalidState
                    } else if matches!(e, HostError::UnknownCallable(_)) {
                        Unknown
                    } else {
                        panic!("{name}: unexpected {e}")
                    }
                });
                assert_eq!(got, *want, "{name}: {op:?}");
            }
        }
    }

    #[test]
    fn each_occupancy_has_its_own_generation_new_on_reuse() {
        let mut reg = Reg::new();
        let s = spec("c", orch_a);
        let a = reg.occupancy(&s);
        let id = reg.table.insert_explicit(3, a).unwrap();
        let g1 = reg.table.info(id).unwrap().generation;
        reg.table.remove(id).unwrap();
        assert_eq!(reg.table.info(id), None);
        let b = reg.occupancy(&s);
        reg.table.insert_explicit(3, b).unwrap();
        let g2 = reg.table.info(id).unwrap().generation;
        assert_ne!(g1, g2, "id reuse gets a new generation");
        let c = reg.occupancy(&s);
        let other = reg.table.insert_auto(c).unwrap();
        assert_ne!(reg.table.info(other).unwrap().generation, g2);
        assert_eq!(reg.table.len(), 2);
    }

    #[test]
    fn equal_images_share_one_load_with_distinct_ids() {
        let mut reg = Reg::new();
        let a1 = reg.occupancy(&spec("a", orch_a));
        let a2 = reg.occupancy(&spec("a-again", orch_a));
        let b = reg.occupancy(&spec("b", orch_b));
        assert!(Arc::ptr_eq(&a1.orchestration, &a2.orchestration));
        assert!(!Arc::ptr_eq(&a1.orchestration, &b.orchestration));
        // orch_a, kern: 2 uploads; the second "a" shares both; "b" shares the kernel.
        let st = reg.cache.stats();
        assert_eq!((st.live_images, st.uploads, st.shared), (3, 3, 3));
        let i1 = reg.table.insert_auto(a1).unwrap();
        let i2 = reg.table.insert_auto(a2).unwrap();
        assert_ne!(i1, i2);
        // Unregistering one keeps the shared image alive for the other.
        drop(reg.table.remove(i1).unwrap());
        assert_eq!(reg.cache.stats().live_images, 3);
        drop(reg.table.remove(i2).unwrap());
        drop(b);
        assert_eq!(reg.cache.stats().live_images, 0, "the last holder unloads");
        // A library image is keyed by its bytes and entry, not by where it came from.
        let lib = |bytes: &[u8], entry: &str| {
            ImageKey::of(
                &CodeImage::Library {
                    bytes: bytes.to_vec(),
                    entry: entry.into(),
                },
                EntryKind::Kernel,
            )
        };
        assert_eq!(lib(b"elf", "k").hash(), lib(b"elf", "k").hash());
        assert_ne!(lib(b"elf", "k").hash(), lib(b"elf", "k2").hash());
        assert_ne!(lib(b"elf", "k").hash(), lib(b"elg", "k").hash());
        assert_ne!(lib(b"elf", "k"), lib(b"elg", "k"));
    }

    #[test]
    fn the_out_parameter_is_minus_one_on_any_failure() {
        let rows: Vec<(&str, Result<CallableId, HostError>, i32)> = vec![
            ("success", Ok(CallableId(7)), 7),
            ("full", Err(HostError::RegistryFull(MAX_CALLABLES)), -1),
            (
                "taken",
                Err(HostError::InvalidArgument {
                    arg: "callable_id".into(),
                    reason: "taken".into(),
                }),
                -1,
            ),
            (
                "mutation refused",
                Err(HostError::InvalidState("busy".into())),
                -1,
            ),
        ];
        for (name, result, want) in rows {
            let mut out = 42;
            let r = register_into(&mut out, || result);
            assert_eq!(out, want, "{name}");
            assert_eq!(r.is_ok(), want >= 0, "{name}");
        }
    }
}
