//! The text of a panic that unwound out of an in-process user kernel or orchestration, from
//! where it was caught (the core's dispatch call) to where the run's failure is worded (the
//! scheduler, after the core's FIN). It owns that hand-over table and nothing else.

use std::collections::HashMap;
use std::sync::OnceLock;

use parking_lot::Mutex;

fn table() -> &'static Mutex<HashMap<usize, String>> {
    static TABLE: OnceLock<Mutex<HashMap<usize, String>>> = OnceLock::new();
    TABLE.get_or_init(Default::default)
}

/// The text of an unwind payload (`panic!`'s message, or a placeholder).
pub(crate) fn text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Leaves `text` for whoever words the failure of the dispatch in mailbox `key`.
pub(crate) fn note(key: usize, text: String) {
    table().lock().insert(key, text);
}

/// Takes the text left for mailbox `key`.
pub(crate) fn take(key: usize) -> Option<String> {
    table().lock().remove(&key)
}
