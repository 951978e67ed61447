//! The model check `make test` runs: the fixed protocol keeps every property within the bound,
//! and each control, which lacks exactly one protection, has a counterexample (printed).

use owned_model::{
    Bounds, Search, Variant, check,
    properties::{DEPOSED, MEMORY_AGREES, NOT_OVERSOLD, NOTHING_STRANDED, SOLD_OUT, STALE_ANSWER_AFTER_RECLAIM},
};

// Each bound reaches the situations its properties are at stake in (item 1's interleaving,
// fence refusals, a sale sold to the last unit): a check that never gets there proves nothing.

#[test]
fn the_fixed_protocol_keeps_every_property_through_a_reset() {
    assert_fixed_protocol_holds(Bounds::WITH_RESET, &[STALE_ANSWER_AFTER_RECLAIM, DEPOSED, SOLD_OUT]);
}

#[test]
fn the_fixed_protocol_keeps_every_property_through_a_loss_of_the_lock_data() {
    assert_fixed_protocol_holds(Bounds::WITH_DATA_LOSS, &[STALE_ANSWER_AFTER_RECLAIM, DEPOSED, SOLD_OUT]);
}

#[test]
fn the_fixed_protocol_keeps_every_property_with_batches_over_two_shards() {
    // One unit per shard: a shard is never claimed again with stock, so item 1's interleaving
    // is the other bounds' business.
    assert_fixed_protocol_holds(Bounds::TWO_SHARDS, &[DEPOSED, SOLD_OUT]);
}

fn assert_fixed_protocol_holds(bounds: Bounds, reaches: &[&'static str]) {
    let report = check(Variant::Fixed, bounds, Search::Everything);
    println!("{report}");

    assert!(report.violations.is_empty(), "{report}");
    for reached in reaches {
        assert!(report.examples.contains_key(reached), "not reached within the bound: {reached}\n{report}");
    }
}

#[test]
fn shard_keyed_bookkeeping_subtracts_a_batch_twice_after_a_reclaim() {
    let report = check(Variant::ShardKeyed, Bounds::default(), Search::Shortest(MEMORY_AGREES));
    println!("{report}");

    let trace = report.violation(MEMORY_AGREES).unwrap_or_else(|| panic!("shard-keyed bookkeeping passed:\n{report}"));
    println!("item 1's counterexample:\n{trace}");
}

#[test]
fn shard_keyed_bookkeeping_strands_stock() {
    let report = check(Variant::ShardKeyed, Bounds::default(), Search::Shortest(NOTHING_STRANDED));
    println!("{report}");

    assert!(report.violation(NOTHING_STRANDED).is_some(), "shard-keyed bookkeeping stranded nothing:\n{report}");
}

#[test]
fn without_the_fence_a_delayed_batch_oversells() {
    // One unit, two buyers: a second sale of it is an oversell.
    let bounds = Bounds { stock: &[1], buyers: 2, ..Bounds::default() };
    let report = check(Variant::Unfenced, bounds, Search::Shortest(NOT_OVERSOLD));
    println!("{report}");

    assert!(report.violation(NOT_OVERSOLD).is_some(), "the unfenced control did not oversell:\n{report}");
}

#[test]
fn a_deposed_batch_that_requeues_by_shard_puts_an_unreserved_order_into_a_newer_ownership() {
    // The counterexample lies 24 steps deep: depth first finds it in a fraction of the time.
    let report = check(Variant::RequeueUnchecked, Bounds::TWO_SHARDS, Search::First(MEMORY_AGREES));
    println!("{report}");

    assert!(report.violation(MEMORY_AGREES).is_some(), "requeueing by shard kept memory right:\n{report}");
}
