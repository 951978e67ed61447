//! PostgreSQL: not built yet (being written in this change).

use std::sync::Arc;

use super::{Backend, PgMode};
use crate::{
    core::Config,
    error::{Error, ErrorKind, Result},
};

pub(crate) async fn open(_url: &str, _mode: PgMode, _config: &Config, _connections: usize) -> Result<Arc<dyn Backend>> {
    Err(Error::new(ErrorKind::Config, "the PostgreSQL backend is not built yet"))
}
