//! The native time-window core: a tumbling or hopping window built-in aggregation (a count,
//! sum, min or max) suppressed until each window closes, a whole batch of records per call. Its
//! semantics are those of its pure-Python twin, the tests' oracle
//! (tests/streams_runtime/fused/oracle/time_window_core.py, whose docstring states them), call
//! for call; tests/streams_runtime/fused/test_time_window_core.py holds the two together.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

use rustc_hash::FxHashMap;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::window_core::{self, state_key, Agg, Aggregation, Final, Kind, WindowCore, WriteBehind};

/// A count as a long, after its timestamp (and so counted for every aggregate).
const VALUE_BYTES: i64 = 16;

struct Window {
    value: Agg,
    timestamp: i64,
    headers: Option<Py<PyAny>>,
}

#[pyclass(module = "streams_runtime._native")]
pub struct TimeWindowCore {
    size: i64,
    advance: i64,
    grace: i64,
    #[pyo3(get)]
    observed_time: i64,
    #[pyo3(get)]
    accepted_time: i64,
    /// state key (key, start, end) -> window.
    windows: FxHashMap<Vec<u8>, Window>,
    /// key -> starts of its windows.
    by_key: FxHashMap<Vec<u8>, BTreeSet<i64>>,
    /// (end, state key), smallest first.
    by_end: BinaryHeap<Reverse<(i64, Vec<u8>)>>,
    writes: WriteBehind,
    aggregation: Aggregation,
}

impl TimeWindowCore {
    /// Take the window out of the state (its entry in `by_end` goes stale).
    fn drop_window(&mut self, key: &[u8], start: i64, skey: &[u8]) -> Option<Window> {
        let window = self.windows.remove(skey)?;
        if let Some(starts) = self.by_key.get_mut(key) {
            starts.remove(&start);
            if starts.is_empty() {
                self.by_key.remove(key);
            }
        }
        Some(window)
    }
}

impl WindowCore for TimeWindowCore {
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
    ) -> PyResult<()> {
        self.observed_time = self.observed_time.max(t);
        let mut first = (t - self.size + self.advance).max(0);
        first -= first % self.advance;
        let mut start = first;
        while start <= t {
            let end = start + self.size;
            if end + self.grace <= self.observed_time {
                *late += 1;
                start += self.advance;
                continue;
            }
            self.accepted_time = self.accepted_time.max(t);
            let skey = state_key(key, start, end);
            let (acc, timestamp, exists) = match self.windows.get(&skey) {
                Some(window) if !window.value.is_none(py) => (
                    Some(window.value.clone_ref(py)),
                    t.max(window.timestamp),
                    true,
                ),
                existing => (self.aggregation.start(py)?, t, existing.is_some()),
            };
            let folded = self
                .aggregation
                .fold(py, key_object, acc, value.clone_ref(py))?;
            let aggregate = self.aggregation.finish(py, folded)?;
            if aggregate.is_none(py) {
                if exists {
                    self.drop_window(key, start, &skey);
                    self.writes.mark(skey, None, timestamp, offset, t);
                }
                start += self.advance;
                continue;
            }
            let header = if headers.is_none() {
                None
            } else {
                Some(headers.clone().unbind())
            };
            let written = aggregate.clone_ref(py);
            match self.windows.get_mut(&skey) {
                Some(window) => {
                    window.value = aggregate;
                    window.timestamp = timestamp;
                    window.headers = header;
                }
                None => {
                    let window = Window {
                        value: aggregate,
                        timestamp,
                        headers: header,
                    };
                    self.windows.insert(skey.clone(), window);
                    match self.by_key.get_mut(key) {
                        Some(starts) => {
                            starts.insert(start);
                        }
                        None => {
                            self.by_key.insert(key.to_vec(), BTreeSet::from([start]));
                        }
                    }
                    self.by_end.push(Reverse((end, skey.clone())));
                }
            }
            self.writes.mark(skey, Some(written), timestamp, offset, t);
            start += self.advance;
        }
        Ok(())
    }

    fn emit_closed(&mut self, py: Python<'_>, emitted: &mut Vec<Final>, offset: i64) {
        let now = self.observed_time - self.grace;
        while let Some(Reverse((end, _))) = self.by_end.peek() {
            if *end > now {
                break;
            }
            let Reverse((end, skey)) = self.by_end.pop().expect("peeked");
            let key = skey[..skey.len() - 16].to_vec();
            let start = end - self.size;
            let Some(window) = self.drop_window(&key, start, &skey) else {
                continue; // removed by an aggregate of None after it was pushed
            };
            let timestamp = window.timestamp.max(self.observed_time);
            self.writes
                .mark(skey, None, window.timestamp, offset, timestamp);
            let headers = window.headers.as_ref().map(|h| h.clone_ref(py));
            emitted.push((key, start, end, window.value, window.timestamp, headers));
        }
    }

    fn observe(&mut self, t: i64) {
        self.observed_time = self.observed_time.max(t);
    }

    fn counts(&self) -> bool {
        self.aggregation.kind == Kind::Count
    }

    fn needs_keys(&self) -> bool {
        self.aggregation.needs_keys()
    }
}

#[pymethods]
impl TimeWindowCore {
    #[new]
    #[pyo3(signature = (
        size_ms, advance_ms, grace_ms, observed_time, keep_headers, *,
        aggregation="count", functions=None, normalize=None, exact_ints=true, exact_floats=true
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        size_ms: i64,
        advance_ms: i64,
        grace_ms: i64,
        observed_time: i64,
        keep_headers: bool,
        aggregation: &str,
        functions: Option<Bound<'_, PyAny>>,
        normalize: Option<Py<PyAny>>,
        exact_ints: bool,
        exact_floats: bool,
    ) -> PyResult<Self> {
        let _ = keep_headers; // a window's update always carries its record's headers
        Ok(TimeWindowCore {
            size: size_ms,
            advance: advance_ms,
            grace: grace_ms,
            observed_time,
            accepted_time: -1,
            windows: FxHashMap::default(),
            by_key: FxHashMap::default(),
            by_end: BinaryHeap::new(),
            writes: WriteBehind::new(VALUE_BYTES),
            aggregation: Aggregation::new(
                py,
                aggregation,
                functions.as_ref(),
                normalize,
                exact_ints,
                exact_floats,
            )?,
        })
    }

    /// Take a window from the stored state (before the first batch).
    fn load(&mut self, key: &[u8], start: i64, end: i64, value: &Bound<'_, PyAny>, timestamp: i64) {
        let skey = state_key(key, start, end);
        let window = Window {
            value: Agg::of(value),
            timestamp,
            headers: None,
        };
        self.windows.insert(skey.clone(), window);
        self.by_key.entry(key.to_vec()).or_default().insert(start);
        self.writes.stored(skey.clone());
        self.by_end.push(Reverse((end, skey)));
    }

    /// Aggregate a batch of data records: (the windows emitted, late window updates, keyless
    /// records, the record whose aggregation raised or None).
    #[pyo3(signature = (keys, timestamps, offsets, headers, values=None, key_objects=None))]
    #[allow(clippy::too_many_arguments)]
    fn process<'py>(
        &mut self,
        py: Python<'py>,
        keys: &Bound<'py, PyList>,
        timestamps: Vec<i64>,
        offsets: Vec<i64>,
        headers: &Bound<'py, PyList>,
        values: Option<Bound<'py, PyList>>,
        key_objects: Option<Bound<'py, PyList>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        window_core::process_batch(
            self,
            py,
            keys,
            &timestamps,
            &offsets,
            headers,
            values.as_ref(),
            key_objects.as_ref(),
        )
    }

    /// Time passed to ``timestamp`` without data (a control record at ``offset``).
    fn advance<'py>(
        &mut self,
        py: Python<'py>,
        timestamp: i64,
        offset: i64,
    ) -> PyResult<Bound<'py, PyList>> {
        window_core::advance(self, py, timestamp, offset)
    }

    /// The changes since the last call, in the order of their latest change.
    fn take_writes<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        self.writes.take(py)
    }

    /// Bytes of the changes not written yet.
    #[getter]
    fn dirty_bytes(&self) -> i64 {
        self.writes.bytes
    }

    /// Windows not emitted yet (the suppression buffer's size).
    fn pending(&self) -> usize {
        self.windows.len()
    }

    /// The keys with windows not emitted yet, sorted.
    fn keys<'py>(&self, py: Python<'py>) -> Vec<Bound<'py, PyBytes>> {
        let mut keys: Vec<&Vec<u8>> = self
            .by_key
            .iter()
            .filter(|(_, starts)| !starts.is_empty())
            .map(|(key, _)| key)
            .collect();
        keys.sort_unstable();
        keys.into_iter().map(|key| PyBytes::new(py, key)).collect()
    }

    /// The key's windows not emitted yet, (start, end, aggregate, timestamp), by start.
    fn fetch<'py>(&self, py: Python<'py>, key: &[u8]) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        let Some(starts) = self.by_key.get(key) else {
            return Ok(list);
        };
        for &start in starts {
            let w = &self.windows[&state_key(key, start, start + self.size)];
            let item = (start, start + self.size, w.value.to_py(py)?, w.timestamp);
            list.append(item.into_pyobject(py)?)?;
        }
        Ok(list)
    }
}
