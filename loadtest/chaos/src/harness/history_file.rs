//! The history file of a run: `history/PLAN.jsonl` in the suite's work directory.

use anyhow::{Context, Result};

use crate::{checker, history::Op, settlement::SettleOp};

/// Writes the history as JSON lines: every operation (`invoked_ms`, `completed_ms`, `outcome`,
/// `key`, ...), then every payment and cancellation (`{"settle": ...}`), then every resolution of
/// an unknown one (`{"resolution": ...}`).
pub fn write_history(
    path: &std::path::Path,
    ops: &[Op],
    settles: &[SettleOp],
    resolutions: &[checker::Resolved],
) -> Result<()> {
    use std::io::Write as _;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?,
    );
    for op in ops {
        serde_json::to_writer(&mut out, op)?;
        out.write_all(b"\n")?;
    }
    for settle in settles {
        serde_json::to_writer(&mut out, &serde_json::json!({ "settle": settle }))?;
        out.write_all(b"\n")?;
    }
    for resolved in resolutions {
        serde_json::to_writer(&mut out, &serde_json::json!({ "resolution": resolved }))?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}
