//! **Test only**: the pauses behind the failpoints that hold work rather than fail it
//! ([`crate::config::Failpoint`]). A test opens them from the same process; nothing opens them
//! in production, where no failpoint is enabled.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// Whether held batch answers go on (once opened, it stays open).
static BATCH_ANSWERS_OPEN: AtomicBool = AtomicBool::new(false);
/// Wakes the batchers waiting for [`release_batch_answers`].
static BATCH_ANSWERS: Notify = Notify::const_new();

/// Lets every batch answer held by `hold-batch-answers` go on, now and from then on.
pub fn release_batch_answers() {
    BATCH_ANSWERS_OPEN.store(true, Ordering::Release);
    BATCH_ANSWERS.notify_waiters();
}

/// Whether `panic-after-batch-commit` has fired (it fires once per process).
static PANICKED_AFTER_COMMIT: AtomicBool = AtomicBool::new(false);

/// True the first time it is called, false after: `panic-after-batch-commit` fires once.
pub(crate) fn first_panic_after_commit() -> bool {
    !PANICKED_AFTER_COMMIT.swap(true, Ordering::AcqRel)
}

/// Waits until [`release_batch_answers`] was called.
pub(crate) async fn batch_answers_released() {
    loop {
        let released = BATCH_ANSWERS.notified();
        tokio::pin!(released);
        // Registered before the flag is read, so a release in between is not missed.
        released.as_mut().enable();
        if BATCH_ANSWERS_OPEN.load(Ordering::Acquire) {
            return;
        }
        released.await;
    }
}
