//! The lab: every way of selling that is not the product, kept built and tested because it is the
//! comparison the project exists to show, and the controls that remove one protection each.
//!
//! | module | what it is |
//! |---|---|
//! | [`per_request`] | the articles' strategies: each request decides under shard locks or SQL, and `none`, the control that oversells |
//! | [`gate`] | `redis-gate`: the industry's Redis Lua pre-deduction with a stream to PostgreSQL |
//! | [`failpoint`] | test-only pauses that hold a batch's answers or the gate after its decision |
//!
//! The product's own control, `owned-unfenced`, is the owned path with its fence predicate
//! removed ([`Fencing::Unfenced`](crate::domain::Fencing)): it has to run the product's code to
//! show what the predicate is worth.

pub mod failpoint;
pub mod gate;
pub mod per_request;
