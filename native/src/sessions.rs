//! The native session core: a session-window built-in aggregation (a count, sum, min or max)
//! suppressed until each session closes, a whole batch of records per call. Its semantics are
//! those of its pure-Python twin, the tests' oracle (tests/streams_runtime/fused/oracle/
//! session_core.py, whose docstring states them), call for call; the differential test
//! (tests/streams_runtime/fused/test_session_core.py) holds the two together.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::window_core::{self, state_key, Agg, Aggregation, Final, Kind, WindowCore, WriteBehind};

/// A count is written as a long (and so counted for every aggregate).
const VALUE_BYTES: i64 = 8;
/// The window suffix of a state key: start and end, 8-byte big-endian each.
const WINDOW_BYTES: usize = 16;

struct Session {
    start: i64,
    end: i64,
    value: Agg,
    headers: Option<Py<PyAny>>,
}

#[pyclass(module = "streams_runtime._native")]
pub struct SessionCore {
    gap: i64,
    retention: i64,
    keep_headers: bool,
    #[pyo3(get)]
    observed_time: i64,
    #[pyo3(get)]
    accepted_time: i64,
    sessions: FxHashMap<Vec<u8>, Vec<Session>>,
    /// (end, state key), smallest first; may hold entries of sessions gone since.
    by_end: BinaryHeap<Reverse<(i64, Vec<u8>)>>,
    live: usize,
    writes: WriteBehind,
    aggregation: Aggregation,
}

impl SessionCore {
    /// Remove the session ``start, end`` of ``key``; a change to write behind.
    fn remove(&mut self, key: &[u8], start: i64, end: i64, offset: i64, timestamp: i64) -> Session {
        let sessions = self.sessions.get_mut(key).expect("a live key");
        let index = sessions
            .iter()
            .position(|s| s.start == start && s.end == end)
            .expect("a live session");
        let session = sessions.remove(index);
        if sessions.is_empty() {
            self.sessions.remove(key);
        }
        self.live -= 1;
        let skey = state_key(key, session.start, session.end);
        self.writes.mark(skey, None, session.end, offset, timestamp);
        session
    }

    /// The value of the live session ``start, end`` of ``key``.
    fn value(&self, key: &[u8], start: i64, end: i64) -> &Agg {
        let sessions = &self.sessions[key];
        let session = sessions.iter().find(|s| s.start == start && s.end == end);
        &session.expect("a live session").value
    }
}

impl WindowCore for SessionCore {
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
        let gap = self.gap;
        let retained_after = self.observed_time - self.retention;
        // As the session store finds them: by (start, end).
        let mut found: Vec<(i64, i64)> = match self.sessions.get(key) {
            Some(sessions) => sessions
                .iter()
                .filter(|s| s.end > retained_after && s.start - gap <= t && t <= s.end + gap)
                .map(|s| (s.start, s.end))
                .collect(),
            None => Vec::new(),
        };
        found.sort_unstable();
        if t > self.observed_time {
            self.observed_time = t;
        }
        let (mut start, mut end) = (t, t);
        for &(s_start, s_end) in &found {
            start = start.min(s_start);
            end = end.max(s_end);
        }
        if end < self.observed_time - self.retention {
            *late += 1;
            return Ok(());
        }
        self.accepted_time = self.accepted_time.max(t);
        let mut aggregate = self.aggregation.start(py)?;
        for &(s_start, s_end) in &found {
            let other = self.value(key, s_start, s_end);
            aggregate = self.aggregation.merge(py, key_object, aggregate, other)?;
        }
        let aggregate = self.aggregation.fold(py, key_object, aggregate, value)?;
        let aggregate = self.aggregation.finish(py, aggregate)?;
        // Removed once the aggregate is known, as Kafka Streams does: a record the reducer or
        // the serde refuses leaves the sessions it would have merged.
        for &(s_start, s_end) in &found {
            self.remove(key, s_start, s_end, offset, t);
        }
        if aggregate.is_none(py) {
            return Ok(());
        }
        let headers = if self.keep_headers && !headers.is_none() {
            Some(headers.clone().unbind())
        } else {
            None
        };
        let skey = state_key(key, start, end);
        let written = aggregate.clone_ref(py);
        let session = Session {
            start,
            end,
            value: aggregate,
            headers,
        };
        match self.sessions.get_mut(key) {
            Some(sessions) => sessions.push(session),
            None => {
                self.sessions.insert(key.to_vec(), vec![session]);
            }
        }
        self.live += 1;
        self.by_end.push(Reverse((end, skey.clone())));
        self.writes.mark(skey, Some(written), end, offset, t);
        Ok(())
    }

    fn emit_closed(&mut self, py: Python<'_>, emitted: &mut Vec<Final>, offset: i64) {
        let now = self.observed_time - self.retention;
        while let Some(Reverse((end, _))) = self.by_end.peek() {
            if *end > now {
                break;
            }
            let Reverse((end, skey)) = self.by_end.pop().expect("peeked");
            let key = &skey[..skey.len() - WINDOW_BYTES];
            let start =
                i64::from_be_bytes(skey[key.len()..key.len() + 8].try_into().expect("8 bytes"));
            let live = self
                .sessions
                .get(key)
                .is_some_and(|ss| ss.iter().any(|s| s.start == start && s.end == end));
            if !live {
                continue; // merged away after it was pushed
            }
            let timestamp = end.max(self.observed_time);
            let session = self.remove(key, start, end, offset, timestamp);
            let headers = session.headers.as_ref().map(|h| h.clone_ref(py));
            emitted.push((key.to_vec(), start, end, session.value, end, headers));
        }
        if self.by_end.len() > 2 * self.live + 64 {
            // Stale entries of merged-away sessions: rebuild rather than let them pile up.
            let mut rebuilt = Vec::with_capacity(self.live);
            for (key, sessions) in &self.sessions {
                for s in sessions {
                    rebuilt.push(Reverse((s.end, state_key(key, s.start, s.end))));
                }
            }
            self.by_end = BinaryHeap::from(rebuilt);
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
impl SessionCore {
    #[new]
    #[pyo3(signature = (
        gap_ms, grace_ms, observed_time, keep_headers, *,
        aggregation="count", functions=None, normalize=None, exact_ints=true, exact_floats=true
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        gap_ms: i64,
        grace_ms: i64,
        observed_time: i64,
        keep_headers: bool,
        aggregation: &str,
        functions: Option<Bound<'_, PyAny>>,
        normalize: Option<Py<PyAny>>,
        exact_ints: bool,
        exact_floats: bool,
    ) -> PyResult<Self> {
        Ok(SessionCore {
            gap: gap_ms,
            retention: gap_ms + grace_ms,
            keep_headers,
            observed_time,
            accepted_time: -1,
            sessions: FxHashMap::default(),
            by_end: BinaryHeap::new(),
            live: 0,
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

    /// Take a session from the stored state (before the first batch).
    fn load(&mut self, key: &[u8], start: i64, end: i64, value: &Bound<'_, PyAny>) {
        let skey = state_key(key, start, end);
        self.sessions
            .entry(key.to_vec())
            .or_default()
            .push(Session {
                start,
                end,
                value: Agg::of(value),
                headers: None,
            });
        self.live += 1;
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

    /// Sessions not emitted yet (the suppression buffer's size).
    fn pending(&self) -> usize {
        self.live
    }

    /// The keys with sessions not emitted yet, sorted.
    fn keys<'py>(&self, py: Python<'py>) -> Vec<Bound<'py, PyBytes>> {
        let mut keys: Vec<&Vec<u8>> = self
            .sessions
            .iter()
            .filter(|(_, sessions)| !sessions.is_empty())
            .map(|(key, _)| key)
            .collect();
        keys.sort_unstable();
        keys.into_iter().map(|key| PyBytes::new(py, key)).collect()
    }

    /// The key's sessions not emitted yet, (start, end, aggregate), by start.
    fn fetch<'py>(&self, py: Python<'py>, key: &[u8]) -> PyResult<Bound<'py, PyList>> {
        let mut found: Vec<&Session> = self
            .sessions
            .get(key)
            .map(|ss| ss.iter().collect())
            .unwrap_or_default();
        found.sort_unstable_by_key(|s| (s.start, s.end));
        let list = PyList::empty(py);
        for s in found {
            list.append((s.start, s.end, s.value.to_py(py)?).into_pyobject(py)?)?;
        }
        Ok(list)
    }
}
