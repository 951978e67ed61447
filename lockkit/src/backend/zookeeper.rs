//! ZooKeeper: not built yet (being written in this change).

use std::sync::Arc;

use super::Backend;
use crate::{
    core::Config,
    error::{Error, ErrorKind, Result},
};

pub(crate) async fn open(_servers: &str, _chroot: &str, _config: &Config) -> Result<Arc<dyn Backend>> {
    Err(Error::new(ErrorKind::Config, "the ZooKeeper backend is not built yet"))
}
