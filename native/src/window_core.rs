//! What a fused operator's cores share (tests/streams_runtime/fused/oracle/window_core.py is
//! its Python twin): the batch loop (`WindowCore`), the state written behind (every change since
//! the last write, in the order of its latest change), and handing emitted windows to Python;
//! how an aggregate folds values in is `aggregation`.

use rustc_hash::{FxHashMap, FxHashSet};

use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

pub use crate::aggregation::{Agg, Aggregation, Kind};

/// Bytes counted per written-behind entry besides key and value (as the record cache counts).
const ENTRY_OVERHEAD: i64 = 64;

/// An emitted window: (key, start, end, aggregate, timestamp, headers).
pub type Final = (Vec<u8>, i64, i64, Agg, i64, Option<Py<PyAny>>);

/// The state key of a window: key bytes, then start and end (8-byte big-endian each).
pub fn state_key(key: &[u8], start: i64, end: i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 16);
    out.extend_from_slice(key);
    out.extend_from_slice(&start.to_be_bytes());
    out.extend_from_slice(&end.to_be_bytes());
    out
}

struct Dirty {
    value: Option<Agg>,
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

    fn size(&self, key_len: usize, present: bool) -> i64 {
        key_len as i64 + ENTRY_OVERHEAD + if present { self.value_bytes } else { 0 }
    }

    /// A window read from the stored state.
    pub fn stored(&mut self, key: Vec<u8>) {
        self.stored.insert(key);
    }

    /// A change to write: ``value`` None when the window is gone.
    pub fn mark(
        &mut self,
        key: Vec<u8>,
        value: Option<Agg>,
        value_ts: i64,
        offset: i64,
        timestamp: i64,
    ) {
        self.seq += 1;
        let key_len = key.len();
        self.bytes += self.size(key_len, value.is_some());
        let entry = Dirty {
            value,
            value_ts,
            offset,
            timestamp,
            seq: self.seq,
        };
        if let Some(old) = self.dirty.insert(key, entry) {
            self.bytes -= self.size(key_len, old.value.is_some());
        }
    }

    /// The changes since the last call, in the order of their latest change, as
    /// (state key, aggregate or None, aggregate's timestamp, offset, timestamp); a window both
    /// made and gone in between is left out unless it was written before.
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
            let value = match &d.value {
                Some(v) => Some(v.to_py(py)?),
                None => None,
            };
            let item = (
                PyBytes::new(py, &key),
                value,
                d.value_ts,
                d.offset,
                d.timestamp,
            );
            list.append(item.into_pyobject(py)?)?;
        }
        Ok(list)
    }
}

/// A windowed built-in aggregation's core: what a record does to its windows, and which
/// windows time closed.
pub trait WindowCore {
    /// Fold the record's value (a count's: 1) into its windows (moving the stream time), adding
    /// late window updates to `late`; an error stops there, the changes before it kept.
    #[allow(clippy::too_many_arguments)]
    fn aggregate(
        &mut self,
        py: Python<'_>,
        key: &[u8],
        key_object: Option<&Bound<'_, PyAny>>,
        t: i64,
        offset: i64,
        headers: &Bound<'_, PyAny>,
        value: Agg,
        late: &mut i64,
    ) -> PyResult<()>;
    /// Whether the aggregation's functions take the records' keys (an aggregate's).
    fn needs_keys(&self) -> bool;
    /// Append the windows now closed, in (end, state key) order, and remove them.
    fn emit_closed(&mut self, py: Python<'_>, emitted: &mut Vec<Final>, offset: i64);
    /// Move the stream time to at least `t`.
    fn observe(&mut self, t: i64);
    /// Whether this core counts (and so needs no values).
    fn counts(&self) -> bool;
}

/// Aggregate a batch of data records: (the windows emitted, late window updates, keyless
/// records, the record whose aggregation raised as (index, exception), or None).
#[allow(clippy::too_many_arguments)]
pub fn process_batch<'py, C: WindowCore>(
    core: &mut C,
    py: Python<'py>,
    keys: &Bound<'py, PyList>,
    timestamps: &[i64],
    offsets: &[i64],
    headers: &Bound<'py, PyList>,
    values: Option<&Bound<'py, PyList>>,
    key_objects: Option<&Bound<'py, PyList>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let n = keys.len();
    if timestamps.len() != n
        || offsets.len() != n
        || headers.len() != n
        || values.is_some_and(|v| v.len() != n)
        || key_objects.is_some_and(|k| k.len() != n)
    {
        return Err(PyValueError::new_err("batch columns differ in length"));
    }
    if core.needs_keys() && key_objects.is_none() {
        return Err(PyValueError::new_err(
            "an aggregate's functions need the records' keys",
        ));
    }
    let counts = core.counts();
    let values = match values {
        None if !counts => {
            return Err(PyValueError::new_err(
                "a built-in reduce needs the records' values",
            ))
        }
        _ if counts => None,
        v => v,
    };
    let mut emitted = Vec::new();
    let (mut late, mut keyless) = (0i64, 0i64);
    let mut failure: Option<(usize, Bound<'py, PyAny>)> = None;
    for (i, key) in keys.iter().enumerate() {
        if key.is_none() {
            keyless += 1;
            continue;
        }
        let key = key.cast::<PyBytes>()?;
        let header = headers.get_item(i)?;
        let value = match values {
            Some(vs) => Agg::of(&vs.get_item(i)?),
            None => Agg::Int(1),
        };
        let key_object = match key_objects {
            Some(objects) => Some(objects.get_item(i)?),
            None => None,
        };
        let result = core.aggregate(
            py,
            key.as_bytes(),
            key_object.as_ref(),
            timestamps[i],
            offsets[i],
            &header,
            value,
            &mut late,
        );
        if let Err(err) = result {
            if !err.is_instance_of::<PyException>(py) {
                return Err(err); // KeyboardInterrupt and the like: not the record's
            }
            failure = Some((i, err.into_value(py).into_bound(py).into_any()));
            break;
        }
        core.emit_closed(py, &mut emitted, offsets[i]);
    }
    (finals(py, emitted)?, late, keyless, failure).into_pyobject(py)
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
            value.to_py(py)?,
            timestamp,
            headers,
        );
        list.append(item.into_pyobject(py)?)?;
    }
    Ok(list)
}
