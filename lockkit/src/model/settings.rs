//! [`Config`]: the settings every lock of a client shares, as the builder validated them.

/// Settings shared by every lock of a client.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) prefix: String,
    pub(crate) default_lease: std::time::Duration,
    pub(crate) command_timeout: std::time::Duration,
    pub(crate) wake_safety_interval: std::time::Duration,
    /// Redlock: longest wait for one node's answer (small against the lease).
    pub(crate) node_timeout: std::time::Duration,
    /// Connect to Redis servers whose eviction policy may drop lock keys (the user opted out of
    /// the check).
    pub(crate) allow_eviction: bool,
    /// Protections a test switched off (none otherwise).
    pub(crate) controls: super::controls::Controls,
}
