//! etcd: not built yet (being written in this change).

use std::sync::Arc;

use super::Backend;
use crate::{
    core::Config,
    error::{Error, ErrorKind, Result},
};

pub(crate) async fn open(
    _endpoints: &[String],
    _credentials: Option<&(String, String)>,
    _config: &Config,
) -> Result<Arc<dyn Backend>> {
    Err(Error::new(ErrorKind::Config, "the etcd backend is not built yet"))
}
