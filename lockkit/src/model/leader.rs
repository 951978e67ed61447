//! [`Leader`]: who leads an election, as any client reads it. Plain data, shared by the election
//! (`election`) and the backends that read it.

use super::fence::Fence;

/// The current leader of an election: the value it campaigned with (its identity, as in etcd's
/// and Curator's recipes) and its term.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Leader {
    value: String,
    term: Fence,
}

impl Leader {
    pub(crate) fn new(value: String, term: Fence) -> Self {
        Self { value, term }
    }

    /// The value the leader campaigned with.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The leader's term: the fence of its lock, which its own
    /// [`Leadership::term`](crate::Leadership::term) also returns (on Redlock, the largest fence
    /// counter among the nodes that agree on the leader, which is the term once its grant was
    /// written back).
    pub fn term(&self) -> Fence {
        self.term
    }
}
