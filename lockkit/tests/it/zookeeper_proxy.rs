//! A TCP proxy in front of ZooKeeper that reads the requests clients send (ZooKeeper's jute
//! framing: a 4-byte length, then for every request after the connect request its `xid` and op
//! code), counts the `sync` requests, and on demand never forwards one. It stands in for a
//! follower cut off from its leader, which a one-node ensemble cannot show: such a follower still
//! answers reads from its own view, but a `sync`, which goes through the leader, never completes.

#![cfg(feature = "zookeeper")]

use std::sync::{
    Arc,
    atomic::{AtomicBool, AtomicUsize, Ordering},
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

/// ZooKeeper's op code of `sync` (`ZooDefs.OpCode.sync`).
const SYNC: i32 = 9;

#[derive(Default)]
struct State {
    syncs: AtomicUsize,
    /// While set, a connection that sends a `sync` forwards nothing more (nor the `sync`).
    hold_syncs: AtomicBool,
}

/// The proxy; its tasks end with the test's runtime.
pub(crate) struct ZkProxy {
    port: u16,
    state: Arc<State>,
}

impl ZkProxy {
    /// Listens on a free loopback port, forwarding to `upstream` (`host:port`).
    pub(crate) async fn start(upstream: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(State::default());
        let (shared, upstream) = (state.clone(), upstream.to_owned());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else { continue };
                let (mut from_client, mut to_client) = client.into_split();
                let (mut from_server, mut to_server) = server.into_split();
                tokio::spawn(async move { tokio::io::copy(&mut from_server, &mut to_client).await });
                let state = shared.clone();
                tokio::spawn(async move {
                    let mut connect_request = true;
                    loop {
                        let mut length = [0u8; 4];
                        if from_client.read_exact(&mut length).await.is_err() {
                            return;
                        }
                        let mut body = vec![0; u32::from_be_bytes(length) as usize];
                        if from_client.read_exact(&mut body).await.is_err() {
                            return;
                        }
                        let is_sync = !std::mem::replace(&mut connect_request, false)
                            && body.len() >= 8
                            && i32::from_be_bytes(body[4..8].try_into().unwrap()) == SYNC;
                        if is_sync {
                            state.syncs.fetch_add(1, Ordering::SeqCst);
                            if state.hold_syncs.load(Ordering::SeqCst) {
                                std::future::pending::<()>().await;
                            }
                        }
                        if to_server.write_all(&length).await.is_err() || to_server.write_all(&body).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Self { port, state }
    }

    /// `zk://127.0.0.1:PORT<chroot>`.
    pub(crate) fn url(&self, chroot: &str) -> String {
        format!("zk://127.0.0.1:{}{chroot}", self.port)
    }

    /// From now on, a `sync` is never answered, and nothing after it on its connection either.
    pub(crate) fn hold_syncs(&self) {
        self.state.hold_syncs.store(true, Ordering::SeqCst);
    }

    /// How many `sync` requests clients sent through the proxy.
    pub(crate) fn syncs(&self) -> usize {
        self.state.syncs.load(Ordering::SeqCst)
    }
}
