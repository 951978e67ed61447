//! Buyers PostgreSQL refused for the per-user limit, remembered briefly by the sale's owner: a
//! buyer who keeps ordering past the limit (a bot with a few accounts, a user clicking "buy"
//! again on every instance) is refused from memory instead of riding every batch to be refused
//! there again. A refusal from memory still looks for an earlier order under the request's
//! idempotency key first (see `selling::refusals`), so a replay is answered with its order.
//!
//! Only what PostgreSQL said is remembered, and only for the trust (`owner.limit_refusal_trust_ms`,
//! 500 ms by default): a cancelled or expired order gives the buyer units back
//! (`seckill_end_order`), and a buyer refused from memory within the trust of that is refused
//! once more than the database would. Never the other way round: memory can only refuse, and
//! every order it lets through is checked by the batch.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use crate::domain::UserId;

/// Buyers remembered at most; when full, the expired ones go, and a refusal that still finds no
/// room is not remembered (the batch refuses it again, as without this memory).
const MOST_REMEMBERED: usize = 10_000;

/// The smallest quantity refused per buyer, and when.
#[derive(Debug)]
pub(crate) struct LimitRefusals {
    /// How long a refusal is trusted (zero: nothing is remembered).
    trust: Duration,
    by_user: HashMap<UserId, (u32, Instant)>,
}

impl LimitRefusals {
    /// A memory whose refusals are trusted for `trust`.
    pub(crate) fn new(trust: Duration) -> Self {
        Self { trust, by_user: HashMap::new() }
    }

    /// Notes that PostgreSQL refused `quantity` units to `user` at `now`: every order of at
    /// least that many is refused until the trust has passed.
    pub(crate) fn record(&mut self, user: &UserId, quantity: u32, now: Instant) {
        if self.trust.is_zero() {
            return;
        }
        let trust = self.trust;
        if let Some((refused, at)) = self.by_user.get_mut(user) {
            if now.saturating_duration_since(*at) >= trust || quantity <= *refused {
                *refused = quantity;
                *at = now;
            }
            return;
        }
        if self.by_user.len() >= MOST_REMEMBERED {
            self.by_user.retain(|_, (_, at)| now.saturating_duration_since(*at) < trust);
            if self.by_user.len() >= MOST_REMEMBERED {
                return;
            }
        }
        self.by_user.insert(user.clone(), (quantity, now));
    }

    /// Whether an order of `quantity` units by `user` is known, at `now`, to be refused.
    pub(crate) fn refuses(&self, user: &UserId, quantity: u32, now: Instant) -> bool {
        self.by_user.get(user).is_some_and(|(refused, at)| quantity >= *refused && now.saturating_duration_since(*at) < self.trust)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRUST: Duration = Duration::from_millis(500);

    fn user(id: &str) -> UserId {
        UserId::parse(id).unwrap()
    }

    #[test]
    fn a_refused_quantity_and_more_are_refused_while_trusted() {
        let mut memory = LimitRefusals::new(TRUST);
        let now = Instant::now();

        memory.record(&user("u1"), 2, now);

        assert!(memory.refuses(&user("u1"), 2, now + TRUST / 2));
        assert!(memory.refuses(&user("u1"), 3, now));
        assert!(!memory.refuses(&user("u1"), 1, now), "one unit may still fit under the limit");
        assert!(!memory.refuses(&user("u2"), 2, now), "another buyer");
    }

    #[test]
    fn a_refusal_is_forgotten_after_the_trust() {
        let mut memory = LimitRefusals::new(TRUST);
        let now = Instant::now();

        memory.record(&user("u1"), 1, now);

        assert!(!memory.refuses(&user("u1"), 1, now + TRUST), "a cancelled order may have given units back");
    }

    #[test]
    fn a_smaller_refusal_widens_what_is_refused_and_an_expired_one_is_replaced() {
        let mut memory = LimitRefusals::new(TRUST);
        let now = Instant::now();

        memory.record(&user("u1"), 2, now);
        memory.record(&user("u1"), 1, now);
        assert!(memory.refuses(&user("u1"), 1, now));

        let later = now + TRUST;
        memory.record(&user("u1"), 2, later);
        assert!(!memory.refuses(&user("u1"), 1, later), "the old refusal of one unit expired");
        assert!(memory.refuses(&user("u1"), 2, later));
    }

    #[test]
    fn no_trust_remembers_nothing() {
        let mut memory = LimitRefusals::new(Duration::ZERO);
        let now = Instant::now();

        memory.record(&user("u1"), 1, now);

        assert!(!memory.refuses(&user("u1"), 1, now));
    }

    #[test]
    fn a_full_memory_makes_room_from_expired_refusals_only() {
        let mut memory = LimitRefusals::new(TRUST);
        let now = Instant::now();
        for i in 0..MOST_REMEMBERED {
            memory.record(&user(&format!("u{i}")), 1, now);
        }

        memory.record(&user("late"), 1, now);
        assert!(!memory.refuses(&user("late"), 1, now), "no room: not remembered");

        let later = now + TRUST;
        memory.record(&user("late"), 1, later);
        assert!(memory.refuses(&user("late"), 1, later));
    }
}
