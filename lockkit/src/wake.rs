//! Wake-ups on release: one pub/sub connection per [`LockClient`](crate::LockClient), shared by
//! every waiter of the process.
//!
//! Why pub/sub rather than a `BLPOP` signal list: a blocked `BLPOP` pins a whole connection per
//! waiter and wakes exactly one of them, and a signal pushed while nobody waits lingers in the
//! list and wakes a later waiter for nothing. Pub/sub multiplexes every waiting lock of the process
//! over a single connection, costs the releaser one `PUBLISH` (a no-op without subscribers), and a
//! missed message only costs latency: waiters always cap their sleep by the holder's remaining TTL
//! and a safety interval, and switch to jittered polling while this connection is down.

use std::{
    collections::{HashMap, HashSet},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures_util::StreamExt;
use tokio::sync::{Notify, mpsc, oneshot};

/// Waiters of one channel in this process.
#[derive(Debug, Default)]
struct Channel {
    /// A release wakes one local waiter (first come, first served): only one can win the lock,
    /// so waking all of them would turn every release into a burst of doomed attempts. When the
    /// connection drops or returns, all waiters are woken to re-check.
    notify: Arc<Notify>,
    waiters: usize,
}

#[derive(Debug, Default)]
struct Shared {
    channels: Mutex<HashMap<String, Channel>>,
    connected: AtomicBool,
}

impl Shared {
    fn wake_all(&self) {
        for channel in self.channels.lock().unwrap().values() {
            channel.notify.notify_waiters();
        }
    }
}

#[derive(Debug)]
enum Command {
    /// Make sure the channel is subscribed; the ack says whether Redis confirmed it (`false` at
    /// once if the connection is down: the waiter then polls).
    Subscribe(String, oneshot::Sender<bool>),
    /// The last local waiter left; unsubscribe unless a new one arrived meanwhile.
    Unsubscribe(String),
}

/// Handle to the pub/sub task. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct WakeHub {
    shared: Arc<Shared>,
    /// Commands for the task that owns the pub/sub connection; the task ends when every sender
    /// (this hub and its subscriptions) is gone.
    commands: mpsc::UnboundedSender<Command>,
}

/// A waiter's registration on one channel; unsubscribes when the last one is dropped.
#[derive(Debug)]
pub(crate) struct WakeSubscription {
    hub: WakeHub,
    channel: String,
    notify: Arc<Notify>,
    /// Redis confirmed the subscription in time.
    confirmed: bool,
}

impl WakeHub {
    /// Starts the task that owns the pub/sub connection (connecting lazily, reconnecting forever).
    pub(crate) fn start(client: redis::Client) -> Self {
        let shared = Arc::new(Shared::default());
        let (commands, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(client, shared.clone(), rx));
        Self { shared, commands }
    }

    /// Registers interest in `channel` and returns once Redis will deliver its messages to us.
    pub(crate) async fn subscribe(&self, channel: &str) -> WakeSubscription {
        let notify = {
            let mut channels = self.shared.channels.lock().unwrap();
            let entry = channels.entry(channel.to_owned()).or_default();
            entry.waiters += 1;
            entry.notify.clone()
        };
        let (ack, acked) = oneshot::channel();
        let confirmed = self.commands.send(Command::Subscribe(channel.to_owned(), ack)).is_ok()
            && matches!(tokio::time::timeout(COMMAND_TIMEOUT, acked).await, Ok(Ok(true)));
        WakeSubscription { hub: self.clone(), channel: channel.to_owned(), notify, confirmed }
    }

    /// Whether wake-ups are currently being delivered.
    pub(crate) fn is_connected(&self) -> bool {
        self.shared.connected.load(Ordering::Relaxed)
    }
}

impl WakeSubscription {
    /// Whether a release will wake this waiter: the subscription was confirmed and the
    /// connection is still up. Otherwise the waiter must poll.
    pub(crate) fn is_live(&self) -> bool {
        self.confirmed && self.hub.is_connected()
    }

    /// The notifier to wait on; create the `notified()` future *before* trying to acquire, so a
    /// release between the attempt and the wait is not missed.
    pub(crate) fn notify(&self) -> &Notify {
        &self.notify
    }
}

impl Drop for WakeSubscription {
    fn drop(&mut self) {
        let mut channels = self.hub.shared.channels.lock().unwrap();
        if let Some(entry) = channels.get_mut(&self.channel) {
            entry.waiters -= 1;
            if entry.waiters == 0 {
                channels.remove(&self.channel);
                let _ = self.hub.commands.send(Command::Unsubscribe(self.channel.clone()));
            }
        }
    }
}

const RECONNECT_BACKOFF: Duration = Duration::from_millis(200);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest wait for Redis to confirm a (un)subscription; past it the connection is presumed dead
/// and replaced, and waiters poll meanwhile.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(1);

async fn run(client: redis::Client, shared: Arc<Shared>, mut commands: mpsc::UnboundedReceiver<Command>) {
    loop {
        if let Ok(Ok(pubsub)) = tokio::time::timeout(CONNECT_TIMEOUT, client.get_async_pubsub()).await {
            let (mut sink, mut messages) = pubsub.split();
            let wanted: Vec<String> = shared.channels.lock().unwrap().keys().cloned().collect();
            if wanted.is_empty() || confirmed(sink.subscribe(&wanted)).await {
                let mut subscribed: HashSet<String> = wanted.into_iter().collect();
                shared.connected.store(true, Ordering::Relaxed);
                // Releases may have happened while we were away.
                shared.wake_all();
                loop {
                    tokio::select! {
                        command = commands.recv() => match command {
                            None => return,
                            Some(Command::Subscribe(channel, ack)) => {
                                if !subscribed.contains(&channel) {
                                    if !confirmed(sink.subscribe(&channel)).await {
                                        let _ = ack.send(false);
                                        break;
                                    }
                                    subscribed.insert(channel);
                                }
                                let _ = ack.send(true);
                            }
                            Some(Command::Unsubscribe(channel)) => {
                                let unwanted = !shared.channels.lock().unwrap().contains_key(&channel);
                                if unwanted && subscribed.remove(&channel) && !confirmed(sink.unsubscribe(&channel)).await {
                                    break;
                                }
                            }
                        },
                        message = messages.next() => match message {
                            Some(message) => {
                                if let Some(channel) = shared.channels.lock().unwrap().get(message.get_channel_name()) {
                                    channel.notify.notify_one();
                                }
                            }
                            None => break,
                        },
                    }
                }
            }
        }
        shared.connected.store(false, Ordering::Relaxed);
        shared.wake_all();
        tracing::debug!("lockkit wake-up connection down; waiters poll until it returns");
        // Acknowledge subscriptions at once while disconnected: waiters then poll.
        let pause = tokio::time::sleep(RECONNECT_BACKOFF);
        tokio::pin!(pause);
        loop {
            tokio::select! {
                () = &mut pause => break,
                command = commands.recv() => match command {
                    None => return,
                    Some(Command::Subscribe(_, ack)) => { let _ = ack.send(false); }
                    Some(Command::Unsubscribe(_)) => {}
                },
            }
        }
    }
}

/// Runs a (un)subscription, true if Redis confirmed it within [`COMMAND_TIMEOUT`].
async fn confirmed(command: impl Future<Output = redis::RedisResult<()>>) -> bool {
    matches!(tokio::time::timeout(COMMAND_TIMEOUT, command).await, Ok(Ok(())))
}
