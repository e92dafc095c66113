//! What a fused operator's cores share (streams_runtime/fused/window_core.py is its Python
//! twin): how an aggregate folds values in (`Aggregation`, over `Agg`), the batch loop
//! (`WindowCore`), the state written behind (every change since the last write, in the order
//! of its latest change), and handing emitted windows to Python.

use rustc_hash::{FxHashMap, FxHashSet};

use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyFloat, PyInt, PyList, PyTuple};

/// Bytes counted per written-behind entry besides key and value (as the record cache counts).
const ENTRY_OVERHEAD: i64 = 64;

/// The one NaN an aggregate holds: Python's `math.nan`, and what Kafka's `DoubleSerializer`
/// writes for every NaN (`Double.doubleToLongBits`).
const CANONICAL_NAN: f64 = f64::from_bits(0x7ff8_0000_0000_0000);

/// An aggregate: an exact `int` of 64 bits or an exact `float` held natively (what Python
/// would compute for them is computed here, bit for bit), anything else as the Python object.
pub enum Agg {
    Int(i64),
    Float(f64),
    Obj(Py<PyAny>),
}

impl Agg {
    /// The aggregate a Python value is.
    pub fn of(value: &Bound<'_, PyAny>) -> Agg {
        if value.is_exact_instance_of::<PyInt>() {
            if let Ok(i) = value.extract::<i64>() {
                return Agg::Int(i);
            }
        } else if value.is_exact_instance_of::<PyFloat>() {
            if let Ok(f) = value.cast::<PyFloat>() {
                return Agg::Float(f.value());
            }
        }
        Agg::Obj(value.clone().unbind())
    }

    /// As a Python object.
    pub fn to_py<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(match self {
            Agg::Int(i) => i.into_pyobject(py)?.into_any(),
            Agg::Float(f) => PyFloat::new(py, *f).into_any(),
            Agg::Obj(o) => o.bind(py).clone(),
        })
    }

    pub fn clone_ref(&self, py: Python<'_>) -> Agg {
        match self {
            Agg::Int(i) => Agg::Int(*i),
            Agg::Float(f) => Agg::Float(*f),
            Agg::Obj(o) => Agg::Obj(o.clone_ref(py)),
        }
    }

    /// Whether this is Python's `None`.
    pub fn is_none(&self, py: Python<'_>) -> bool {
        matches!(self, Agg::Obj(o) if o.is_none(py))
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Count,
    Sum,
    Min,
    Max,
}

/// A built-in aggregation as the chain computes it (the Python twin's `Aggregation` says
/// how): `combine` is `operator.add` (a count's merge, a sum), `min` or `max`, natively where
/// both sides are exact ints (checked add) or exact floats; `finish` is what the chain's
/// round trip through its store does to an aggregate (`normalize`, skipped where the value
/// serde keeps the value as it is), and every NaN the one NaN.
pub struct Aggregation {
    pub kind: Kind,
    reducer: Py<PyAny>,
    normalize: Option<Py<PyAny>>,
    exact_ints: bool,
    exact_floats: bool,
}

impl Aggregation {
    pub fn new(
        py: Python<'_>,
        kind: &str,
        normalize: Option<Py<PyAny>>,
        exact_ints: bool,
        exact_floats: bool,
    ) -> PyResult<Self> {
        let (kind, module, name) = match kind {
            "count" => (Kind::Count, "operator", "add"),
            "sum" => (Kind::Sum, "operator", "add"),
            "min" => (Kind::Min, "builtins", "min"),
            "max" => (Kind::Max, "builtins", "max"),
            other => {
                return Err(PyValueError::new_err(format!(
                    "not a built-in aggregation: {other:?}"
                )))
            }
        };
        let reducer = py.import(module)?.getattr(name)?.unbind();
        Ok(Aggregation {
            kind,
            reducer,
            normalize,
            exact_ints,
            exact_floats,
        })
    }

    /// `reducer(a, b)`.
    pub fn combine(&self, py: Python<'_>, a: &Agg, b: &Agg) -> PyResult<Agg> {
        match (self.kind, a, b) {
            (Kind::Count | Kind::Sum, Agg::Int(x), Agg::Int(y)) => {
                if let Some(sum) = x.checked_add(*y) {
                    return Ok(Agg::Int(sum));
                }
            }
            (Kind::Count | Kind::Sum, Agg::Float(x), Agg::Float(y)) => {
                return Ok(Agg::Float(x + y));
            }
            // min and max keep the first of equal ones, as Python's do.
            (Kind::Min, Agg::Int(x), Agg::Int(y)) => {
                return Ok(Agg::Int(if y < x { *y } else { *x }))
            }
            (Kind::Min, Agg::Float(x), Agg::Float(y)) => {
                return Ok(Agg::Float(if y < x { *y } else { *x }))
            }
            (Kind::Max, Agg::Int(x), Agg::Int(y)) => {
                return Ok(Agg::Int(if y > x { *y } else { *x }))
            }
            (Kind::Max, Agg::Float(x), Agg::Float(y)) => {
                return Ok(Agg::Float(if y > x { *y } else { *x }))
            }
            _ => {}
        }
        let result = self.reducer.bind(py).call1((a.to_py(py)?, b.to_py(py)?))?;
        Ok(Agg::of(&result))
    }

    /// The aggregate as the chain reads it back from its store.
    pub fn finish(&self, py: Python<'_>, aggregate: Agg) -> PyResult<Agg> {
        let kept = match aggregate {
            Agg::Int(_) => self.exact_ints,
            Agg::Float(_) => self.exact_floats,
            Agg::Obj(_) => aggregate.is_none(py),
        };
        let aggregate = match &self.normalize {
            Some(normalize) if !kept => {
                Agg::of(&normalize.bind(py).call1((aggregate.to_py(py)?,))?)
            }
            _ => aggregate,
        };
        Ok(match aggregate {
            // One NaN, as Kafka's DoubleSerializer writes every NaN: an addition's NaN takes
            // its sign from whichever operand LLVM (free to swap them) and the hardware pick.
            Agg::Float(f) if f.is_nan() => Agg::Float(CANONICAL_NAN),
            other => other,
        })
    }
}

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
        t: i64,
        offset: i64,
        headers: &Bound<'_, PyAny>,
        value: Agg,
        late: &mut i64,
    ) -> PyResult<()>;
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
) -> PyResult<Bound<'py, PyTuple>> {
    let n = keys.len();
    if timestamps.len() != n
        || offsets.len() != n
        || headers.len() != n
        || values.is_some_and(|v| v.len() != n)
    {
        return Err(PyValueError::new_err("batch columns differ in length"));
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
        let result = core.aggregate(
            py,
            key.as_bytes(),
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
