//! The SQL of the providers' shared limits (`store::provider_limits`).

use std::time::Duration;

use super::{Postgres, pg};
use crate::store::StoreError;
use crate::store::provider_limits::{ORPHAN_SLOT, SlotHolder};

fn seconds(d: Duration) -> f64 {
    d.as_secs_f64()
}

impl Postgres {
    pub(crate) async fn take_provider_slot(
        &self,
        provider: String,
        cap: u32,
        holder: SlotHolder,
    ) -> Result<bool, StoreError> {
        self.with_client(move |client| async move {
            let context = "taking a provider's request slot";
            let cap = i32::try_from(cap).unwrap_or(i32::MAX);
            // The slots exist before they are taken; a lower cap leaves
            // the higher ones unused.
            client
                .execute(
                    "INSERT INTO provider_slots (provider, slot)
                     SELECT $1, g FROM generate_series(0, $2 - 1) AS g
                     ON CONFLICT DO NOTHING",
                    &[&provider, &cap],
                )
                .await
                .map_err(pg(context))?;
            let taken = client
                .execute(
                    "UPDATE provider_slots SET holder = $3, node = $4, taken_at = clock_timestamp()
                     WHERE provider = $1 AND slot = (
                       SELECT s.slot FROM provider_slots s
                       WHERE s.provider = $1 AND s.slot < $2
                         AND (s.holder IS NULL
                              OR EXISTS (SELECT 1 FROM nodes n WHERE n.id = s.node
                                         AND (n.stopped_at IS NOT NULL
                                              OR n.heartbeat_at < clock_timestamp() - make_interval(secs => $5)))
                              OR (NOT EXISTS (SELECT 1 FROM nodes n WHERE n.id = s.node)
                                  AND s.taken_at < clock_timestamp() - make_interval(secs => $6)))
                       ORDER BY s.slot LIMIT 1 FOR UPDATE SKIP LOCKED)",
                    &[
                        &provider,
                        &cap,
                        &holder.holder,
                        &holder.node,
                        &seconds(holder.lease),
                        &seconds(ORPHAN_SLOT),
                    ],
                )
                .await
                .map_err(pg(context))?;
            Ok(taken == 1)
        })
        .await
    }

    pub(crate) async fn release_provider_slot(
        &self,
        provider: String,
        holder: String,
    ) -> Result<(), StoreError> {
        self.with_client(move |client| async move {
            client
                .execute(
                    "UPDATE provider_slots SET holder = NULL, node = NULL, taken_at = NULL
                     WHERE provider = $1 AND holder = $2",
                    &[&provider, &holder],
                )
                .await
                .map_err(pg("giving back a provider's request slot"))?;
            Ok(())
        })
        .await
    }

    pub(crate) async fn reserve_provider_request(
        &self,
        provider: String,
        request_interval: Option<Duration>,
        tokens: Option<(u64, Duration)>,
    ) -> Result<Duration, StoreError> {
        self.with_client(move |client| async move {
            let interval = request_interval.map_or(0.0, seconds);
            let (count, per_token) = tokens.map_or((0.0, 0.0), |(n, per)| (n as f64, seconds(per)));
            let uses_requests = request_interval.is_some();
            let uses_tokens = tokens.is_some();
            // One statement computing the start from the row itself: the
            // row lock orders the nodes, and a statement that waited for
            // it sees the row the one before it left (a FROM over a second
            // scan of the table would read the old row and hand two
            // requests the same start). The start is the latest of now,
            // the pause, the request spacing and the tokens' debt (each
            // only when that limit is set); RETURNING sees the new row, so
            // the start is read back from what was reserved after it.
            let reserve = "UPDATE provider_rates r SET
                 next_request = CASE WHEN $3 THEN GREATEST(clock_timestamp(), r.paused_until, r.next_request,
                                                           CASE WHEN $6 THEN r.tokens_paid ELSE r.paused_until END)
                                                  + make_interval(secs => $2::float8)
                                     ELSE r.next_request END,
                 tokens_paid = CASE WHEN $6 THEN GREATEST(clock_timestamp(), r.paused_until, r.tokens_paid,
                                                          CASE WHEN $3 THEN r.next_request ELSE r.paused_until END)
                                                 + make_interval(secs => $4::float8 * $5::float8)
                                    ELSE r.tokens_paid END
               WHERE r.provider = $1
               RETURNING EXTRACT(EPOCH FROM (
                 CASE WHEN $3 THEN r.next_request - make_interval(secs => $2::float8)
                      WHEN $6 THEN r.tokens_paid - make_interval(secs => $4::float8 * $5::float8)
                      ELSE GREATEST(clock_timestamp(), r.paused_until) END
                 - clock_timestamp()))::float8";
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] =
                [&provider, &interval, &uses_requests, &count, &per_token, &uses_tokens];
            let context = "reserving a provider request";
            let mut row = client.query_opt(reserve, &params).await.map_err(pg(context))?;
            if row.is_none() {
                // The provider's first reservation: its row is made, then
                // reserved in like any other (a row inserted by a CTE is
                // not visible to the UPDATE of the same statement).
                client
                    .execute(
                        "INSERT INTO provider_rates (provider, next_request, tokens_paid, paused_until)
                         VALUES ($1, clock_timestamp(), clock_timestamp(), clock_timestamp())
                         ON CONFLICT (provider) DO NOTHING",
                        &[&provider],
                    )
                    .await
                    .map_err(pg(context))?;
                row = client.query_opt(reserve, &params).await.map_err(pg(context))?;
            }
            let Some(row) = row else {
                return Err(StoreError::Invalid(format!(
                    "reserving a provider request: no rates row for {provider}"
                )));
            };
            let wait: f64 = row.get(0);
            Ok(Duration::from_secs_f64(wait.max(0.0)))
        })
        .await
    }

    pub(crate) async fn settle_provider_tokens(
        &self,
        provider: String,
        tokens: i64,
        per_token: Duration,
    ) -> Result<(), StoreError> {
        self.with_client(move |client| async move {
            client
                .execute(
                    "UPDATE provider_rates SET tokens_paid = tokens_paid + make_interval(secs => $2::float8 * $3::float8)
                     WHERE provider = $1",
                    &[&provider, &(tokens as f64), &seconds(per_token)],
                )
                .await
                .map_err(pg("settling a provider's tokens"))?;
            Ok(())
        })
        .await
    }

    pub(crate) async fn pause_provider(
        &self,
        provider: String,
        wait: Duration,
    ) -> Result<(), StoreError> {
        self.with_client(move |client| async move {
            client
                .execute(
                    "INSERT INTO provider_rates (provider, next_request, tokens_paid, paused_until)
                     VALUES ($1, clock_timestamp(), clock_timestamp(), clock_timestamp() + make_interval(secs => $2::float8))
                     ON CONFLICT (provider) DO UPDATE SET paused_until =
                       GREATEST(provider_rates.paused_until, EXCLUDED.paused_until)",
                    &[&provider, &seconds(wait)],
                )
                .await
                .map_err(pg("pausing a provider"))?;
            Ok(())
        })
        .await
    }
}
