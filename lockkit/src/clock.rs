//! The clock that lease deadlines are measured on.
//!
//! On Linux it is `CLOCK_BOOTTIME`: monotonic like [`Instant`](std::time::Instant), but it keeps
//! counting while the machine is suspended, as Redis' expiry does. A lease that ran out during a
//! suspend is then seen as lost on resume instead of seeming to have time left. Elsewhere it falls
//! back to a monotonic clock started with the process.

use std::{
    ops::{Add, Sub},
    time::Duration,
};

/// A point on the lease clock, in nanoseconds since an arbitrary origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Moment(u64);

impl Moment {
    /// The current moment.
    pub(crate) fn now() -> Self {
        Self(now_nanos())
    }

    /// A moment no deadline ever reaches.
    pub(crate) const NEVER: Self = Self(u64::MAX);

    /// Nanoseconds since the clock's origin (for storing in an atomic).
    pub(crate) fn as_nanos(self) -> u64 {
        self.0
    }

    /// The inverse of [`as_nanos`](Self::as_nanos).
    pub(crate) fn from_nanos(nanos: u64) -> Self {
        Self(nanos)
    }

    /// Time from `earlier` to `self`; zero if `earlier` is later.
    pub(crate) fn saturating_duration_since(self, earlier: Self) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// Time from now until `self`; zero if it has passed.
    pub(crate) fn until(self) -> Duration {
        self.saturating_duration_since(Self::now())
    }
}

impl Add<Duration> for Moment {
    type Output = Self;

    /// Saturates at [`Moment::NEVER`].
    fn add(self, d: Duration) -> Self {
        Self(self.0.saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)))
    }
}

impl Sub for Moment {
    type Output = Duration;

    /// Saturating: zero if `rhs` is later.
    fn sub(self, rhs: Self) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

#[cfg(target_os = "linux")]
fn now_nanos() -> u64 {
    use nix::time::{ClockId, clock_gettime};
    match clock_gettime(ClockId::CLOCK_BOOTTIME) {
        Ok(t) => (t.tv_sec() as u64).saturating_mul(1_000_000_000).saturating_add(t.tv_nsec() as u64),
        // Only fails on kernels older than 2.6.39; the process clock is then the best we have.
        Err(_) => process_nanos(),
    }
}

#[cfg(not(target_os = "linux"))]
fn now_nanos() -> u64 {
    process_nanos()
}

/// Nanoseconds since the first reading of this clock in the process (monotonic, but it stops
/// while the machine sleeps).
fn process_nanos() -> u64 {
    static START: std::sync::LazyLock<std::time::Instant> = std::sync::LazyLock::new(std::time::Instant::now);
    u64::try_from(START.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moments_advance_and_differences_saturate() {
        let a = Moment::now();
        std::thread::sleep(Duration::from_millis(2));
        let b = Moment::now();
        assert!(b > a);
        assert!(b - a >= Duration::from_millis(2));
        assert_eq!(a - b, Duration::ZERO);
        assert_eq!(a + Duration::from_secs(1) - a, Duration::from_secs(1));
        assert_eq!(Moment::NEVER + Duration::from_secs(1), Moment::NEVER);
        assert_eq!(Moment::from_nanos(a.as_nanos()), a);
    }
}
