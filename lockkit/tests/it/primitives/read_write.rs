//! The read-write lock: readers share, writers exclude everyone (overlap detection), the fence
//! rises with each write and readers see the latest, writer preference, downgrade.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use super::Occupancy;
use crate::support::{client, unique};

#[derive(Default)]
struct Book {
    readers: Occupancy,
    writers: Occupancy,
    /// Readers inside while a writer was, or writers inside while a reader was.
    conflicts: AtomicU64,
    /// The fence of the latest write.
    written: AtomicU64,
}

async fn run(locked: bool) -> Arc<Book> {
    let client = client().await;
    let name = unique("rw");
    let book = Arc::new(Book::default());
    let mut tasks = Vec::new();
    for task in 0..12 {
        let (client, name, book) = (client.clone(), name.clone(), book.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..4 {
                let writer = task % 4 == 0;
                let rw = client.read_write(&name);
                let guard = match (locked, writer) {
                    (false, _) => None,
                    (true, true) => Some(rw.write().wait(Duration::from_secs(60)).await.unwrap()),
                    (true, false) => Some(rw.read().wait(Duration::from_secs(60)).await.unwrap()),
                };
                if writer {
                    book.writers.enter();
                    if book.readers.inside() > 0 || book.writers.inside() > 1 {
                        book.conflicts.fetch_add(1, Ordering::SeqCst);
                    }
                    if let Some(guard) = &guard {
                        let before = book.written.swap(guard.fence().get(), Ordering::SeqCst);
                        assert!(guard.fence().get() > before, "the fence increases on each write grant");
                    }
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    book.writers.leave();
                } else {
                    book.readers.enter();
                    if book.writers.inside() > 0 {
                        book.conflicts.fetch_add(1, Ordering::SeqCst);
                    }
                    if let Some(guard) = &guard {
                        assert_eq!(
                            guard.fence().get(),
                            book.written.load(Ordering::SeqCst),
                            "readers see the write fence"
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    book.readers.leave();
                }
                if let Some(guard) = guard {
                    assert!(guard.release().await.unwrap());
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    book
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_share_and_writers_exclude() {
    let book = run(true).await;
    assert_eq!(book.conflicts.load(Ordering::SeqCst), 0, "a writer overlapped someone");
    assert_eq!(book.writers.most(), 1);
    assert!(book.readers.most() >= 2, "readers shared the lock");
}

/// Control: without the lock, writers overlap readers, so the check above can fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn control_without_the_lock_writers_overlap() {
    let book = run(false).await;
    assert!(book.conflicts.load(Ordering::SeqCst) > 0);
}

#[tokio::test]
async fn a_waiting_writer_keeps_new_readers_out_unless_readers_are_preferred() {
    let client = client().await;
    for prefer_writers in [true, false] {
        let name = unique("rw-preference");
        let rw = client.read_write(&name).prefer_writers(prefer_writers);
        let reader = rw.read().await.unwrap();
        // The writer's first attempt marks it as waiting.
        assert!(rw.write().await.unwrap_err().is_timeout());
        let newcomer = rw.read().await;
        if prefer_writers {
            assert!(newcomer.unwrap_err().is_timeout(), "the waiting writer goes first");
        } else {
            newcomer.expect("readers preferred: the newcomer shares").release().await.unwrap();
        }
        reader.release().await.unwrap();
    }
}

#[tokio::test]
async fn a_writer_downgrades_to_a_reader_and_keeps_its_fence() {
    let client = client().await;
    let name = unique("rw-downgrade");
    let rw = client.read_write(&name).prefer_writers(false);
    let writer = rw.write().await.unwrap();
    let fence = writer.fence();
    assert!(rw.read().await.unwrap_err().is_timeout(), "the writer excludes readers");

    let reader = writer.downgrade().await.unwrap();

    assert_eq!(reader.fence(), fence);
    let other = rw.read().await.expect("readers share with the downgraded writer");
    assert!(rw.write().await.unwrap_err().is_timeout(), "readers exclude writers");
    assert!(other.release().await.unwrap());
    assert!(reader.release().await.unwrap());
    let next = rw.write().await.unwrap();
    assert!(next.fence() > fence);
    next.release().await.unwrap();
    let plain = client.try_lock(&unique("rw-plain")).await.unwrap().unwrap();
    assert_eq!(plain.downgrade().await.unwrap_err().kind(), lockkit::ErrorKind::Config);
}
