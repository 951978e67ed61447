//! Wake-ups on release: one pub/sub connection per [`LockClient`](crate::LockClient), shared by
//! every waiter of the process. Backends other than Redis feed a [local](WakeHub::local) hub from
//! their own notifications (watches, `NOTIFY`).
//!
//! Why pub/sub rather than a `BLPOP` signal list: a blocked `BLPOP` pins a whole connection per
//! waiter and wakes exactly one of them, and a signal pushed while nobody waits lingers in the
//! list and wakes a later waiter for nothing. Pub/sub multiplexes every waiting lock of the process
//! over a single connection, costs the releaser one `PUBLISH` (a no-op without subscribers), and a
//! missed message only costs latency: waiters always cap their sleep by the holder's remaining TTL
//! and a safety interval, and switch to jittered polling while this connection is down.

use std::{
    collections::HashMap,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    task::Poll,
    time::Duration,
};

use futures_util::{StreamExt, stream::FuturesUnordered};
use tokio::sync::{Notify, mpsc, watch};

/// Waiters of one channel in this process.
#[derive(Debug)]
struct Channel {
    /// A release wakes one local waiter (first come, first served): only one can win the lock,
    /// so waking all of them would turn every release into a burst of doomed attempts. When the
    /// connection drops or returns, all waiters are woken to re-check.
    notify: Arc<Notify>,
    /// Set when any waiter of the channel asked for every local waiter to be woken (readers and
    /// permits: several can get in on one release).
    wake_all: bool,
    waiters: usize,
    /// Whether Redis confirmed the subscription on the current connection. Set by the hub task
    /// whenever the confirmation arrives, however late; read by the waiters.
    confirmed: watch::Sender<bool>,
}

impl Channel {
    fn new() -> Self {
        Self { notify: Arc::default(), wake_all: false, waiters: 0, confirmed: watch::channel(false).0 }
    }

    /// Wakes one waiter, or all of them if any asked to be.
    fn wake(&self) {
        if self.wake_all {
            self.notify.notify_waiters();
        } else {
            self.notify.notify_one();
        }
    }
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

    fn set_confirmed(&self, channel: &str, confirmed: bool) {
        if let Some(entry) = self.channels.lock().unwrap().get(channel) {
            entry.confirmed.send_replace(confirmed);
        }
    }

    fn unconfirm_all(&self) {
        for channel in self.channels.lock().unwrap().values() {
            channel.confirmed.send_replace(false);
        }
    }
}

#[derive(Debug)]
enum Command {
    /// Make sure the channel is subscribed (the waiter's entry exists already).
    Subscribe(String),
    /// The last local waiter left; unsubscribe unless a new one arrived meanwhile.
    Unsubscribe(String),
    /// Drop the connection and connect again: the server moved (a Sentinel failover).
    Reconnect,
}

/// Opens the pub/sub connection. Asked again on every reconnection, so that a backend whose
/// server moves (Sentinel) points the next connection at the new one.
pub(crate) type ConnectPubSub =
    Arc<dyn Fn() -> futures_util::future::BoxFuture<'static, redis::RedisResult<redis::aio::PubSub>> + Send + Sync>;

/// Handle to the pub/sub task, or to a hub fed by the backend itself. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct WakeHub {
    shared: Arc<Shared>,
    /// Commands for the task that owns the pub/sub connection; the task ends when every sender
    /// (this hub and its subscriptions) is gone. `None` for a [local](Self::local) hub.
    commands: Option<mpsc::UnboundedSender<Command>>,
    /// The client's command timeout: bounds connecting and each (un)subscription.
    command_timeout: Duration,
}

/// A waiter's registration on one channel; unsubscribes when the last one is dropped.
#[derive(Debug)]
pub(crate) struct WakeSubscription {
    hub: WakeHub,
    channel: String,
    notify: Arc<Notify>,
    /// Redis confirmed the subscription (possibly after `subscribe` returned).
    confirmed: watch::Receiver<bool>,
}

impl WakeHub {
    /// Starts the task that owns the pub/sub connection (connecting lazily, reconnecting
    /// forever). Connecting and each (un)subscription are bounded by `command_timeout`.
    pub(crate) fn start(client: redis::Client, command_timeout: Duration) -> Self {
        Self::start_with(
            Arc::new(move || {
                let client = client.clone();
                Box::pin(async move { client.get_async_pubsub().await })
            }),
            command_timeout,
        )
    }

    /// Like [`start`](Self::start), connecting wherever `connect` says at each (re)connection.
    pub(crate) fn start_with(connect: ConnectPubSub, command_timeout: Duration) -> Self {
        let shared = Arc::new(Shared::default());
        let (commands, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(connect, shared.clone(), rx, command_timeout));
        Self { shared, commands: Some(commands), command_timeout }
    }

    /// Drops the pub/sub connection and connects again (through the `connect` it started with):
    /// the server moved. Waiters poll meanwhile and are woken to re-check once it is back.
    pub(crate) fn reconnect(&self) {
        if let Some(commands) = &self.commands {
            let _ = commands.send(Command::Reconnect);
        }
    }

    /// A hub that the backend feeds itself (a ZooKeeper watch, an etcd watch, a PostgreSQL
    /// `NOTIFY`) through [`deliver_all`](Self::deliver_all), and whose connection state it sets
    /// with [`set_connected`](Self::set_connected). Subscriptions are live as soon as they are
    /// made while the backend says it is connected.
    #[cfg_attr(not(any(feature = "zookeeper", feature = "etcd", feature = "postgres")), allow(dead_code))]
    pub(crate) fn local(command_timeout: Duration) -> Self {
        Self { shared: Arc::default(), commands: None, command_timeout }
    }

    /// Wakes the local waiters of `channel` as a release of its lock does on Redis: one of them
    /// (only one can take the lock), or every one once any waiter asked for it (readers, permits).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn deliver(&self, channel: &str) {
        if let Some(entry) = self.shared.channels.lock().unwrap().get(channel) {
            entry.wake();
        }
    }

    /// Wakes every local waiter of `channel` (a local hub's deliveries name the lock, not the
    /// waiter: each woken waiter re-checks its own place).
    #[cfg_attr(not(any(feature = "zookeeper", feature = "etcd")), allow(dead_code))]
    pub(crate) fn deliver_all(&self, channel: &str) {
        if let Some(entry) = self.shared.channels.lock().unwrap().get(channel) {
            entry.notify.notify_waiters();
        }
    }

    /// Says whether deliveries can be relied on. A change wakes every waiter to re-check: releases
    /// may have gone unnoticed while down, and waiters poll while it is.
    #[cfg_attr(not(any(feature = "zookeeper", feature = "etcd", feature = "postgres")), allow(dead_code))]
    pub(crate) fn set_connected(&self, connected: bool) {
        if self.shared.connected.swap(connected, Ordering::Relaxed) != connected {
            self.shared.wake_all();
        }
    }

    /// Registers interest in `channel` (a message wakes one local waiter, or all of them once any
    /// subscriber asked for `wake_all`) and waits, at most `within` (and never past the command
    /// timeout), until Redis will deliver its messages to us. Unconfirmed by then, the
    /// subscription still turns [live](WakeSubscription::is_live) when the confirmation arrives.
    pub(crate) async fn subscribe(&self, channel: &str, wake_all: bool, within: Duration) -> WakeSubscription {
        let (notify, confirmed) = {
            let mut channels = self.shared.channels.lock().unwrap();
            let entry = channels.entry(channel.to_owned()).or_insert_with(Channel::new);
            entry.waiters += 1;
            entry.wake_all |= wake_all;
            (entry.notify.clone(), entry.confirmed.subscribe())
        };
        // Built before any await, so a cancelled subscribe still unregisters.
        let subscription = WakeSubscription { hub: self.clone(), channel: channel.to_owned(), notify, confirmed };
        let Some(commands) = &self.commands else {
            // A local hub: nothing to subscribe to, the backend delivers.
            self.shared.set_confirmed(channel, true);
            return subscription;
        };
        let sent = commands.send(Command::Subscribe(channel.to_owned())).is_ok();
        if sent && self.is_connected() {
            let mut confirmed = subscription.confirmed.clone();
            let _ = tokio::time::timeout(within.min(self.command_timeout), confirmed.wait_for(|c| *c)).await;
        }
        subscription
    }

    /// Whether wake-ups are currently being delivered.
    pub(crate) fn is_connected(&self) -> bool {
        self.shared.connected.load(Ordering::Relaxed)
    }
}

impl WakeSubscription {
    /// Whether a release will wake this waiter: the subscription is confirmed and the connection
    /// is still up. Otherwise the waiter must poll.
    pub(crate) fn is_live(&self) -> bool {
        *self.confirmed.borrow() && self.hub.is_connected()
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
                if let Some(commands) = &self.hub.commands {
                    let _ = commands.send(Command::Unsubscribe(self.channel.clone()));
                }
            }
        }
    }
}

const RECONNECT_BACKOFF: Duration = Duration::from_millis(200);

/// A (un)subscription whose confirmation is awaited alongside the message loop.
type Pending = Pin<Box<dyn Future<Output = Done> + Send>>;

/// The outcome of a [`Pending`] (un)subscription.
struct Done {
    channel: String,
    /// Which subscription of the channel it confirms (`None`: an unsubscription).
    generation: Option<u64>,
    /// Redis confirmed it in time.
    ok: bool,
}

async fn run(
    connect: ConnectPubSub,
    shared: Arc<Shared>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    command_timeout: Duration,
) {
    loop {
        if let Ok(Ok(pubsub)) = tokio::time::timeout(command_timeout, connect()).await {
            let (sink, mut messages) = pubsub.split();
            let wanted: Vec<String> = shared.channels.lock().unwrap().keys().cloned().collect();
            if wanted.is_empty() || confirmed(command_timeout, sink.clone().subscribe(&wanted)).await {
                // Channel -> generation of its subscription, and whether Redis confirmed it.
                let mut subscribed: HashMap<String, (u64, bool)> = HashMap::new();
                for channel in wanted {
                    shared.set_confirmed(&channel, true);
                    subscribed.insert(channel, (0, true));
                }
                let mut generation = 0;
                let mut pending = FuturesUnordered::<Pending>::new();
                shared.connected.store(true, Ordering::Relaxed);
                // Releases may have happened while we were away.
                shared.wake_all();
                loop {
                    tokio::select! {
                        command = commands.recv() => match command {
                            None => return,
                            Some(Command::Reconnect) => break,
                            Some(Command::Subscribe(channel)) => match subscribed.get(&channel) {
                                Some(&(_, true)) => shared.set_confirmed(&channel, true),
                                // Confirmed when its confirmation arrives.
                                Some(&(_, false)) => {}
                                None => {
                                    generation += 1;
                                    subscribed.insert(channel.clone(), (generation, false));
                                    let mut sink = sink.clone();
                                    start(&mut pending, Box::pin(async move {
                                        let ok = confirmed(command_timeout, sink.subscribe(&channel)).await;
                                        Done { channel, generation: Some(generation), ok }
                                    }))
                                    .await;
                                }
                            },
                            Some(Command::Unsubscribe(channel)) => {
                                let unwanted = !shared.channels.lock().unwrap().contains_key(&channel);
                                if unwanted && subscribed.remove(&channel).is_some() {
                                    let mut sink = sink.clone();
                                    start(&mut pending, Box::pin(async move {
                                        let ok = confirmed(command_timeout, sink.unsubscribe(&channel)).await;
                                        Done { channel, generation: None, ok }
                                    }))
                                    .await;
                                }
                            }
                        },
                        Some(done) = pending.next(), if !pending.is_empty() => {
                            if !done.ok {
                                // Unconfirmed within the command timeout: presume the connection dead.
                                break;
                            }
                            if let Some(generation) = done.generation
                                && let Some(entry) = subscribed.get_mut(&done.channel)
                                && entry.0 == generation
                            {
                                entry.1 = true;
                                shared.set_confirmed(&done.channel, true);
                            }
                        }
                        message = messages.next() => match message {
                            Some(message) => {
                                if let Some(channel) = shared.channels.lock().unwrap().get(message.get_channel_name()) {
                                    channel.wake();
                                }
                            }
                            None => break,
                        },
                    }
                }
            }
        }
        shared.connected.store(false, Ordering::Relaxed);
        shared.unconfirm_all();
        shared.wake_all();
        tracing::debug!("lockkit wake-up connection down; waiters poll until it returns");
        // Waiters do not wait for confirmations while disconnected: they poll, and their channels
        // are subscribed again on reconnection.
        let pause = tokio::time::sleep(RECONNECT_BACKOFF);
        tokio::pin!(pause);
        loop {
            tokio::select! {
                () = &mut pause => break,
                command = commands.recv() => if command.is_none() { return },
            }
        }
    }
}

/// Polls `op` once, so that its command is queued on the connection now, in order with the
/// commands before it, and leaves the wait for its confirmation to `pending`.
async fn start(pending: &mut FuturesUnordered<Pending>, mut op: Pending) {
    match std::future::poll_fn(|cx| Poll::Ready(op.as_mut().poll(cx))).await {
        Poll::Ready(done) => pending.push(Box::pin(std::future::ready(done))),
        Poll::Pending => pending.push(op),
    }
}

/// Runs a (un)subscription; true if Redis confirmed it within `timeout`.
async fn confirmed(timeout: Duration, command: impl Future<Output = redis::RedisResult<()>>) -> bool {
    matches!(tokio::time::timeout(timeout, command).await, Ok(Ok(())))
}
