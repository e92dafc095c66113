//! What a fused operator's cores share (streams_runtime/fused/window_core.py is its Python
//! twin): the batch loop (`WindowCore`), the state written behind (every change since the last
//! write, in the order of its latest change), and handing emitted windows to Python.

use rustc_hash::{FxHashMap, FxHashSet};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

/// Bytes counted per written-behind entry besides key and value (as the record cache counts).
const ENTRY_OVERHEAD: i64 = 64;

/// An emitted window: (key, start, end, count, timestamp, headers).
pub type Final = (Vec<u8>, i64, i64, i64, i64, Option<Py<PyAny>>);

/// The state key of a window: key bytes, then start and end (8-byte big-endian each).
pub fn state_key(key: &[u8], start: i64, end: i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 16);
    out.extend_from_slice(key);
    out.extend_from_slice(&start.to_be_bytes());
    out.extend_from_slice(&end.to_be_bytes());
    out
}

struct Dirty {
    value: Option<i64>,
    value_ts: i64,
    offset: i64,
    timestamp: i64,
    /// Order of the latest change: writes come out in it.
    seq: u64,
}

#[derive(Default)]
pub struct WriteBehind {
    dirty: FxHashMap<Vec<u8>, Dirty>,
    seq: u64,
    stored: FxHashSet<Vec<u8>>,
    /// Bytes of the changes not written yet, counted as the record cache counts.
    pub bytes: i64,
    /// Bytes of a value written (a count, and its timestamp where one is kept).
    value_bytes: i64,
}

impl WriteBehind {
    pub fn new(value_bytes: i64) -> Self {
        WriteBehind {
            value_bytes,
            ..Default::default()
        }
    }

    fn size(&self, key_len: usize, value: Option<i64>) -> i64 {
        key_len as i64 + ENTRY_OVERHEAD + if value.is_some() { self.value_bytes } else { 0 }
    }

    /// A window read from the stored state.
    pub fn stored(&mut self, key: Vec<u8>) {
        self.stored.insert(key);
    }

    /// A change to write: ``value`` None when the window is gone.
    pub fn mark(
        &mut self,
        key: Vec<u8>,
        value: Option<i64>,
        value_ts: i64,
        offset: i64,
        timestamp: i64,
    ) {
        self.seq += 1;
        let key_len = key.len();
        self.bytes += self.size(key_len, value);
        let entry = Dirty {
            value,
            value_ts,
            offset,
            timestamp,
            seq: self.seq,
        };
        if let Some(old) = self.dirty.insert(key, entry) {
            self.bytes -= self.size(key_len, old.value);
        }
    }

    /// The changes since the last call, in the order of their latest change, as
    /// (state key, count or None, count's timestamp, offset, timestamp); a window both made
    /// and gone in between is left out unless it was written before.
    pub fn take<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let mut dirty: Vec<(Vec<u8>, Dirty)> = self.dirty.drain().collect();
        dirty.sort_unstable_by_key(|(_, d)| d.seq);
        self.bytes = 0;
        let list = PyList::empty(py);
        for (key, d) in dirty {
            match d.value {
                None if !self.stored.remove(&key) => continue,
                None => {}
                Some(_) => {
                    self.stored.insert(key.clone());
                }
            }
            let item = (
                PyBytes::new(py, &key),
                d.value,
                d.value_ts,
                d.offset,
                d.timestamp,
            );
            list.append(item.into_pyobject(py)?)?;
        }
        Ok(list)
    }
}

/// A windowed count's core: what a record does to its windows, and which windows time closed.
pub trait WindowCore {
    /// Count the record into its windows (moving the stream time); how many were late.
    fn count(&mut self, key: &[u8], t: i64, offset: i64, headers: &Bound<'_, PyAny>) -> i64;
    /// Append the windows now closed, in (end, state key) order, and remove them.
    fn emit_closed(&mut self, py: Python<'_>, emitted: &mut Vec<Final>, offset: i64);
    /// Move the stream time to at least `t`.
    fn observe(&mut self, t: i64);
}

/// Count a batch of data records: (the windows emitted, late window updates, keyless records).
pub fn process_batch<'py, C: WindowCore>(
    core: &mut C,
    py: Python<'py>,
    keys: &Bound<'py, PyList>,
    timestamps: &[i64],
    offsets: &[i64],
    headers: &Bound<'py, PyList>,
) -> PyResult<Bound<'py, PyTuple>> {
    let n = keys.len();
    if timestamps.len() != n || offsets.len() != n || headers.len() != n {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "batch columns differ in length",
        ));
    }
    let mut emitted = Vec::new();
    let (mut late, mut keyless) = (0i64, 0i64);
    for (i, key) in keys.iter().enumerate() {
        if key.is_none() {
            keyless += 1;
            continue;
        }
        let key = key.cast::<PyBytes>()?;
        let header = headers.get_item(i)?;
        late += core.count(key.as_bytes(), timestamps[i], offsets[i], &header);
        core.emit_closed(py, &mut emitted, offsets[i]);
    }
    (finals(py, emitted)?, late, keyless).into_pyobject(py)
}

/// Time passed to `timestamp` without data (a control record at `offset`): the windows closed.
pub fn advance<'py, C: WindowCore>(
    core: &mut C,
    py: Python<'py>,
    timestamp: i64,
    offset: i64,
) -> PyResult<Bound<'py, PyList>> {
    core.observe(timestamp);
    let mut emitted = Vec::new();
    core.emit_closed(py, &mut emitted, offset);
    finals(py, emitted)
}

/// Emitted windows as a Python list of tuples.
fn finals(py: Python<'_>, emitted: Vec<Final>) -> PyResult<Bound<'_, PyList>> {
    let list = PyList::empty(py);
    for (key, start, end, value, timestamp, headers) in emitted {
        let item = (
            PyBytes::new(py, &key),
            start,
            end,
            value,
            timestamp,
            headers,
        );
        list.append(item.into_pyobject(py)?)?;
    }
    Ok(list)
}
