//! streams_runtime's native core (docs/design.md §5, "the native core"): the per-record path of
//! fused operators, behind the interfaces their pure-Python twins, the tests' oracle in
//! tests/streams_runtime/fused/oracle/, implement too.

use pyo3::prelude::*;

mod aggregation;
mod sessions;
mod time_windows;
mod window_core;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<sessions::SessionCore>()?;
    m.add_class::<time_windows::TimeWindowCore>()?;
    Ok(())
}
