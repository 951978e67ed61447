//! Running a check and telling what it found: the state count and time, and for each violated
//! property a counterexample as a numbered list of steps with the state they change.

use std::{
    collections::BTreeMap,
    fmt,
    time::{Duration, Instant},
};

use stateright::{Checker, Expectation, HasDiscoveries, Model, Path};

use crate::{
    action::Action,
    config::{Bounds, Variant},
    model::OwnedShardsModel,
    state::State,
    symmetry,
};

/// What one exhaustive check found.
#[derive(Debug)]
pub struct CheckReport {
    /// The variant checked.
    pub variant: Variant,
    /// Its bound.
    pub bounds: Bounds,
    /// Distinct states visited.
    pub unique_states: usize,
    /// States generated, repeats included.
    pub states: usize,
    /// The longest path explored.
    pub max_depth: usize,
    /// Wall time of the check.
    pub elapsed: Duration,
    /// Whether every state within the bound was visited (false when the check stopped at the
    /// first counterexample it was asked for).
    pub exhaustive: bool,
    /// Safety properties violated, each with its counterexample.
    pub violations: BTreeMap<&'static str, String>,
    /// Properties that must be reachable and were reached, each with an example.
    pub examples: BTreeMap<&'static str, String>,
}

impl CheckReport {
    /// The counterexample of `property`, if it was violated.
    pub fn violation(&self, property: &str) -> Option<&str> {
        self.violations.get(property).map(String::as_str)
    }
}

/// How far a check goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Search {
    /// Every state within the bound, depth first, each state checked once up to a renaming of
    /// the instances (see [`crate::symmetry`]).
    Everything,
    /// Breadth first until this property is violated: the counterexample is a shortest one.
    Shortest(&'static str),
    /// Depth first until this property is violated: found sooner when it lies deep, but the
    /// counterexample may wander.
    First(&'static str),
}

/// Checks `variant` within `bounds`, as far as `search` says. Counterexamples name the
/// instances as they acted (no renaming) unless the search is [`Search::Everything`].
pub fn check(variant: Variant, bounds: Bounds, search: Search) -> CheckReport {
    let model = OwnedShardsModel::new(variant, bounds);
    let started = Instant::now();
    let builder = model.clone().checker();
    let stop = |property: &'static str| HasDiscoveries::AnyOf([property].into());
    let (discoveries, unique_states, states, max_depth) = match search {
        Search::Everything => counts(builder.threads(threads()).symmetry_fn(symmetry::representative).spawn_dfs().join()),
        // One thread: with several, each explores its own queue and the first counterexample
        // found need not be a shortest one.
        Search::Shortest(property) => counts(builder.finish_when(stop(property)).spawn_bfs().join()),
        Search::First(property) => counts(builder.threads(threads()).finish_when(stop(property)).spawn_dfs().join()),
    };
    let elapsed = started.elapsed();
    let (mut violations, mut examples) = (BTreeMap::new(), BTreeMap::new());
    for property in model.properties() {
        let Some(path) = discoveries.get(property.name) else { continue };
        let trace = trace(&model, path.clone());
        match property.expectation {
            Expectation::Sometimes => examples.insert(property.name, trace),
            Expectation::Always | Expectation::Eventually => violations.insert(property.name, trace),
        };
    }
    CheckReport {
        variant,
        bounds,
        unique_states,
        states,
        max_depth,
        elapsed,
        exhaustive: search == Search::Everything,
        violations,
        examples,
    }
}

type Found = (std::collections::HashMap<&'static str, Path<State, Action>>, usize, usize, usize);

/// What a finished checker found, and how many states it took.
fn counts(checker: impl Checker<OwnedShardsModel>) -> Found {
    (checker.discoveries(), checker.unique_state_count(), checker.state_count(), checker.max_depth())
}

/// Two threads: the check is CPU-bound, and `make test` shares the machine with other builds.
fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(2))
}

/// A path as numbered steps. The initial state is shown whole; after each step, only the lines
/// of the state that the step changed.
pub fn trace(model: &OwnedShardsModel, path: Path<State, Action>) -> String {
    let mut out = String::new();
    let mut previous: Vec<String> = Vec::new();
    let mut action: Option<Action> = None;
    for (step, (state, next)) in path.into_vec().into_iter().enumerate() {
        let lines: Vec<String> = state.to_string().lines().map(str::to_owned).collect();
        match action.take() {
            None => out.push_str("  0. initial state\n"),
            Some(a) => out.push_str(&format!("  {step}. {}\n", model.format_action(&a))),
        }
        for line in &lines {
            if !previous.contains(line) {
                out.push_str(line);
                out.push('\n');
            }
        }
        if previous.iter().any(|l| l.trim_start().starts_with("on the wire"))
            && !lines.iter().any(|l| l.trim_start().starts_with("on the wire"))
        {
            out.push_str("    on the wire: nothing\n");
        }
        previous = lines;
        action = next;
    }
    out
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.bounds;
        writeln!(
            f,
            "{:?}: {} instances, stock {:?}, {} buyers, fences up to {}, {} data loss(es), {} reset(s)",
            self.variant, b.instances, b.stock, b.buyers, b.max_fence, b.data_losses, b.resets
        )?;
        writeln!(
            f,
            "{} distinct states ({} generated), depth {}, {:.2?}{}",
            self.unique_states,
            self.states,
            self.max_depth,
            self.elapsed,
            if self.exhaustive {
                ", every state within the bound (up to renaming the instances)"
            } else {
                ", stopped at the first counterexample asked for"
            }
        )?;
        if self.violations.is_empty() {
            writeln!(f, "no property violated")?;
        }
        for (property, trace) in &self.violations {
            writeln!(f, "VIOLATED: {property}\ncounterexample:\n{trace}")?;
        }
        let reached: Vec<&str> = self.examples.keys().copied().collect();
        writeln!(f, "reached: {reached:?}")
    }
}
