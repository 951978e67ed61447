//! The script behind [`LockClient::retire_fence`](crate::LockClient::retire_fence): deletes a
//! name's fence counter only while no key of the name exists.

use std::sync::LazyLock;

use redis::Script;

use super::{RedisScripts, holds, scripts::Call};
use crate::model::{
    error::Result,
    fence::{Fence, FenceRetirement},
    keys::LockKeys,
};

/// Deletes the fence counter if no key of the name exists. KEYS: fence, then every other key of
/// the name. Returns `{1, last}`, `{0, '0'}` while in use, `{2, '0'}` when there is no counter.
const RETIRE: &str = r"
for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then return {0, '0'} end
end
local last = redis.call('GET', KEYS[1])
if not last then return {2, '0'} end
redis.call('DEL', KEYS[1])
return {1, last}
";

static RETIRE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RETIRE));

/// Deletes `keys`' fence counter through `scripts` if nothing holds or waits for the name.
pub(crate) async fn retire(scripts: &dyn RedisScripts, keys: &LockKeys) -> Result<FenceRetirement> {
    let mut call_keys = vec![keys.fence.clone(), keys.lock.clone()];
    call_keys.extend(holds::side_keys(keys));
    let call = Call::new(&RETIRE_SCRIPT, call_keys, Vec::<String>::new());
    let (outcome, last): (i64, String) = redis::from_redis_value(scripts.run(&call).await?)?;
    Ok(match outcome {
        1 => FenceRetirement::Retired { last: Fence::new(parse_fence(&last)?) },
        0 => FenceRetirement::InUse,
        _ => FenceRetirement::Absent,
    })
}

fn parse_fence(value: &str) -> Result<u64> {
    value.parse().map_err(|_| {
        redis::RedisError::from((redis::ErrorKind::Parse, "the fence counter is not a number", value.to_owned())).into()
    })
}
