//! Checks one variant within a bound given on the command line, and prints the report:
//! `cargo run -p owned-model --example check -- fixed 1,1 2 3 0 0` (variant, stock per shard,
//! buyers, highest fence, data losses, resets). Larger bounds than `make test` checks take
//! minutes to hours.

use owned_model::{Bounds, Search, Variant, check};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let variant = match args.first().map(String::as_str) {
        Some("shard-keyed") => Variant::ShardKeyed,
        Some("unfenced") => Variant::Unfenced,
        Some("requeue-unchecked") => Variant::RequeueUnchecked,
        _ => Variant::Fixed,
    };
    let number = |i: usize, default: u8| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let stock: Vec<i8> = args.get(1).map_or_else(|| vec![2], |a| a.split(',').filter_map(|s| s.parse().ok()).collect());
    let stock: &'static [i8] = Box::leak(stock.into_boxed_slice());
    let defaults = Bounds::default();
    let bounds = Bounds {
        stock,
        buyers: number(2, defaults.buyers),
        max_fence: number(3, defaults.max_fence),
        data_losses: number(4, defaults.data_losses),
        resets: number(5, defaults.resets),
        ..defaults
    };
    println!("{}", check(variant, bounds, Search::Everything));
}
