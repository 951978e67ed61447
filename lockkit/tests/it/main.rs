//! lockkit against a real Redis (`make services` starts one; `REDIS_URL` points elsewhere).
//! One test binary; each module is one behaviour a user relies on.

mod support;

mod cancel;
mod fencing;
mod interop;
mod lease;
mod lockctl;
mod mutual_exclusion;
mod operations;
mod waiting;
