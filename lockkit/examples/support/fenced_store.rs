//! A store that checks fences, for the examples: one Redis hash holding a value and the fence of
//! its owner, changed only by scripts that compare the fence first (the steps of
//! `lockkit::guide::fencing`). Any store with a conditional write does the same: a PostgreSQL row
//! with `WHERE fence < $1` and `WHERE fence = $1`, a compare-and-set in etcd.

use lockkit::Fence;
use redis::{Script, aio::MultiplexedConnection};

/// One fenced record: the hash `key` with the fields `fence` and `value`.
pub(crate) struct FencedStore {
    conn: MultiplexedConnection,
    key: String,
}

impl FencedStore {
    /// The record `key` on the Redis at `url`.
    pub(crate) async fn open(url: &str, key: String) -> redis::RedisResult<Self> {
        let conn = redis::Client::open(url)?.get_multiplexed_async_connection().await?;
        Ok(Self { conn, key })
    }

    /// Claims the record for `fence`: only a fence newer than every earlier claim wins, so a
    /// holder whose lease was taken over cannot claim again.
    pub(crate) async fn claim(&mut self, fence: Fence) -> redis::RedisResult<bool> {
        let claim = Script::new(
            r"if tonumber(redis.call('HGET', KEYS[1], 'fence') or '0') < tonumber(ARGV[1]) then
                  redis.call('HSET', KEYS[1], 'fence', ARGV[1])
                  return 1
              end
              return 0",
        );
        claim.key(&self.key).arg(fence.get()).invoke_async(&mut self.conn).await
    }

    /// Writes `value` if the record is still claimed by `fence`: a write from a holder that was
    /// deposed (a newer fence claimed the record) is refused, however late it arrives.
    pub(crate) async fn write(&mut self, fence: Fence, value: &str) -> redis::RedisResult<bool> {
        let write = Script::new(
            r"if redis.call('HGET', KEYS[1], 'fence') == ARGV[1] then
                  redis.call('HSET', KEYS[1], 'value', ARGV[2])
                  return 1
              end
              return 0",
        );
        write.key(&self.key).arg(fence.get()).arg(value).invoke_async(&mut self.conn).await
    }

    /// The value last written.
    pub(crate) async fn value(&mut self) -> redis::RedisResult<Option<String>> {
        redis::cmd("HGET").arg(&self.key).arg("value").query_async(&mut self.conn).await
    }

    /// Removes the record (the examples clean up after themselves).
    pub(crate) async fn remove(&mut self) -> redis::RedisResult<()> {
        redis::cmd("DEL").arg(&self.key).query_async(&mut self.conn).await
    }
}
