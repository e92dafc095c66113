//! The native session core: a session-window count suppressed until each session closes, a
//! whole batch of records per call. Its semantics are those of the pure-Python reference,
//! streams_runtime/fused/session_core.py (whose docstring states them), call for call; the
//! differential test (tests/streams_runtime/fused/test_session_core.py) holds the two together.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap;

use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use crate::window_core::{self, state_key, Final, WindowCore, WriteBehind};

/// A count is written as a long.
const VALUE_BYTES: i64 = 8;
/// The window suffix of a state key: start and end, 8-byte big-endian each.
const WINDOW_BYTES: usize = 16;

struct Session {
    start: i64,
    end: i64,
    value: i64,
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
}

impl SessionCore {
    /// Remove the session ``index`` of ``key``; a change to write behind.
    fn remove(&mut self, key: &[u8], index: usize, offset: i64, timestamp: i64) -> Session {
        let sessions = self.sessions.get_mut(key).expect("a live key");
        let session = sessions.remove(index);
        if sessions.is_empty() {
            self.sessions.remove(key);
        }
        self.live -= 1;
        let skey = state_key(key, session.start, session.end);
        self.writes.mark(skey, None, session.end, offset, timestamp);
        session
    }
}

impl WindowCore for SessionCore {
    fn count(&mut self, key: &[u8], t: i64, offset: i64, headers: &Bound<'_, PyAny>) -> i64 {
        let gap = self.gap;
        let retained_after = self.observed_time - self.retention;
        let found: Vec<usize> = match self.sessions.get(key) {
            Some(sessions) => sessions
                .iter()
                .enumerate()
                .filter(|(_, s)| s.end > retained_after && s.start - gap <= t && t <= s.end + gap)
                .map(|(i, _)| i)
                .collect(),
            None => Vec::new(),
        };
        if t > self.observed_time {
            self.observed_time = t;
        }
        let (mut start, mut end) = (t, t);
        if let Some(sessions) = self.sessions.get(key) {
            for &i in &found {
                start = start.min(sessions[i].start);
                end = end.max(sessions[i].end);
            }
        }
        if end < self.observed_time - self.retention {
            return 1; // late
        }
        self.accepted_time = self.accepted_time.max(t);
        let mut value = 1;
        // In the order found (the order the changes are written in); each removal shifts the
        // later ones down by one.
        for (removed, &i) in found.iter().enumerate() {
            value += self.remove(key, i - removed, offset, t).value;
        }
        let headers = if self.keep_headers && !headers.is_none() {
            Some(headers.clone().unbind())
        } else {
            None
        };
        let skey = state_key(key, start, end);
        let session = Session {
            start,
            end,
            value,
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
        self.writes.mark(skey, Some(value), end, offset, t);
        0
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
            let index = self
                .sessions
                .get(key)
                .and_then(|ss| ss.iter().position(|s| s.start == start && s.end == end));
            let Some(index) = index else {
                continue; // merged away after it was pushed
            };
            let timestamp = end.max(self.observed_time);
            let session = self.remove(key, index, offset, timestamp);
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
}

#[pymethods]
impl SessionCore {
    #[new]
    fn new(gap_ms: i64, grace_ms: i64, observed_time: i64, keep_headers: bool) -> Self {
        SessionCore {
            gap: gap_ms,
            retention: gap_ms + grace_ms,
            keep_headers,
            observed_time,
            accepted_time: -1,
            sessions: FxHashMap::default(),
            by_end: BinaryHeap::new(),
            live: 0,
            writes: WriteBehind::new(VALUE_BYTES),
        }
    }

    /// Take a session from the stored state (before the first batch).
    fn load(&mut self, key: &[u8], start: i64, end: i64, value: i64) {
        let skey = state_key(key, start, end);
        self.sessions
            .entry(key.to_vec())
            .or_default()
            .push(Session {
                start,
                end,
                value,
                headers: None,
            });
        self.live += 1;
        self.writes.stored(skey.clone());
        self.by_end.push(Reverse((end, skey)));
    }

    /// Count a batch of data records: (the windows emitted, late window updates, keyless records).
    fn process<'py>(
        &mut self,
        py: Python<'py>,
        keys: &Bound<'py, PyList>,
        timestamps: Vec<i64>,
        offsets: Vec<i64>,
        headers: &Bound<'py, PyList>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        window_core::process_batch(self, py, keys, &timestamps, &offsets, headers)
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

    /// The key's sessions not emitted yet, (start, end, count), by start.
    fn fetch(&self, key: &[u8]) -> Vec<(i64, i64, i64)> {
        let mut out: Vec<(i64, i64, i64)> = self
            .sessions
            .get(key)
            .map(|ss| ss.iter().map(|s| (s.start, s.end, s.value)).collect())
            .unwrap_or_default();
        out.sort_unstable();
        out
    }
}
