//! The leaf of the crate: the data every layer shares (fences, errors, lock names and keys, what a
//! lease holds, what a backend answers, settings, inspection views). Nothing here depends on a
//! backend, a client or a task; everything else may depend on it. `scripts/module_cycles.py`
//! (run by `make test`) keeps it that way.

pub(crate) mod backend_kind;
pub(crate) mod controls;
pub(crate) mod error;
pub(crate) mod fence;
pub(crate) mod grant;
pub(crate) mod hold;
pub(crate) mod keys;
pub(crate) mod leader;
pub(crate) mod lease_loss;
pub(crate) mod lock_info;
pub(crate) mod settings;
pub(crate) mod token;
