//! `faultproxy`: the suite's TCP fault proxy as a standalone tool, for trying faults by hand.
//!
//! ```text
//! faultproxy --listen 127.0.0.1:7000 --upstream 127.0.0.1:6391
//! faultproxy --upstream 127.0.0.1:5441 --address-file /tmp/proxy.addr   # a free port, written there
//! ```
//!
//! then type commands on standard input: `pass`, `delay MS`, `delay-requests MS`, `blackhole`,
//! `reset`, `stats`, `quit`.

use std::{net::SocketAddr, path::PathBuf};

use anyhow::Result;
use chaos::faultproxy::{FaultProxy, Mode};
use clap::Parser;
use tokio::io::{AsyncBufReadExt, BufReader};

/// Forwards TCP to an upstream and injects faults on command.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Address to listen on (port 0 picks one).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Where to forward.
    #[arg(long)]
    upstream: SocketAddr,
    /// Once listening, write the bound address (`127.0.0.1:PORT`) to this file, atomically, so
    /// that a script that started the proxy on port 0 need not read its output.
    #[arg(long)]
    address_file: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let proxy = FaultProxy::start(args.listen, args.upstream).await?;
    if let Some(file) = &args.address_file {
        let partial = file.with_extension("partial");
        std::fs::write(&partial, format!("{}\n", proxy.addr()))?;
        std::fs::rename(partial, file)?;
    }
    println!("listening on {} -> {}", proxy.addr(), proxy.upstream());
    println!("commands: pass | delay MS | delay-requests MS | blackhole | reset | stats | quit");
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        let command = line.trim();
        match command {
            "" => continue,
            "quit" | "exit" => break,
            "reset" => {
                proxy.reset_all();
                println!("reset every open connection");
            }
            "stats" => {
                let s = proxy.stats();
                let load =
                    |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
                println!(
                    "mode {:?}, accepted {}, reset {}, bytes {}",
                    proxy.mode(),
                    load(&s.accepted),
                    load(&s.reset),
                    load(&s.bytes)
                );
            }
            other => match other.parse::<Mode>() {
                Ok(mode) => {
                    proxy.set_mode(mode);
                    println!("mode {mode:?}");
                }
                Err(e) => println!("{e}"),
            },
        }
    }
    Ok(())
}
