//! An operator's reset on Redis: every key of the counters goes, one `DEL`
//! per counter (its keys share a hash slot in sluice's layout; in the
//! reference's they may not, so a Cluster gets one `DEL` per key).

use super::{Live, RedisStore};
use crate::pool::classify;
use crate::{Increment, StoreError};

impl RedisStore {
    /// Deletes every key of `batch`'s counters.
    pub async fn reset(&self, batch: &[&Increment]) -> Result<(), StoreError> {
        let live = self
            .live
            .load_full()
            .ok_or_else(|| StoreError::Unavailable("not connected".into()))?;
        let keys: Vec<String> = batch.iter().flat_map(|i| self.keys(i)).collect();
        if keys.is_empty() {
            return Ok(());
        }
        match &*live {
            Live::Single(_, pool) => {
                let mut conn = pool.get().await?.clone();
                redis::cmd("DEL")
                    .arg(&keys)
                    .query_async::<i64>(&mut conn)
                    .await
                    .map_err(|e| classify(&e))?;
            }
            Live::Cluster(conn) => {
                for key in &keys {
                    redis::cmd("DEL")
                        .arg(key)
                        .query_async::<i64>(&mut conn.clone())
                        .await
                        .map_err(|e| classify(&e))?;
                }
            }
        }
        Ok(())
    }
}
