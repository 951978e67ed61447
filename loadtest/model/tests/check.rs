//! The model check `make test` runs: the fixed protocol keeps every property within the bound,
//! and each control, which lacks exactly one protection, has a counterexample (printed).

use owned_model::{
    Bounds, Variant, check,
    properties::{DEPOSED, MEMORY_AGREES, NOT_OVERSOLD, NOTHING_STRANDED, SOLD_OUT, STALE_ANSWER_AFTER_RECLAIM},
};

#[test]
fn the_fixed_protocol_keeps_every_property_through_a_reset() {
    assert_fixed_protocol_holds(Bounds::WITH_RESET);
}

#[test]
fn the_fixed_protocol_keeps_every_property_through_a_loss_of_the_lock_data() {
    assert_fixed_protocol_holds(Bounds::WITH_DATA_LOSS);
}

fn assert_fixed_protocol_holds(bounds: Bounds) {
    let report = check(Variant::Fixed, bounds, None);
    println!("{report}");

    assert!(report.violations.is_empty(), "{report}");
    // The bound reaches item 1's interleaving, fence refusals and a sale sold to the last unit:
    // the properties held where they are at stake.
    for reached in [STALE_ANSWER_AFTER_RECLAIM, DEPOSED, SOLD_OUT] {
        assert!(report.examples.contains_key(reached), "not reached within the bound: {reached}\n{report}");
    }
}

#[test]
fn shard_keyed_bookkeeping_subtracts_a_batch_twice_after_a_reclaim() {
    let report = check(Variant::ShardKeyed, Bounds::default(), Some(MEMORY_AGREES));
    println!("{report}");

    let trace = report.violation(MEMORY_AGREES).unwrap_or_else(|| panic!("shard-keyed bookkeeping passed:\n{report}"));
    println!("item 1's counterexample:\n{trace}");
}

#[test]
fn shard_keyed_bookkeeping_strands_stock() {
    let report = check(Variant::ShardKeyed, Bounds::default(), Some(NOTHING_STRANDED));
    println!("{report}");

    assert!(report.violation(NOTHING_STRANDED).is_some(), "shard-keyed bookkeeping stranded nothing:\n{report}");
}

#[test]
fn without_the_fence_a_delayed_batch_oversells() {
    // One unit, two buyers: a second sale of it is an oversell.
    let bounds = Bounds { stock: &[1], buyers: 2, ..Bounds::default() };
    let report = check(Variant::Unfenced, bounds, Some(NOT_OVERSOLD));
    println!("{report}");

    assert!(report.violation(NOT_OVERSOLD).is_some(), "the unfenced control did not oversell:\n{report}");
}
