//! How a fused operator's aggregate folds values in (the Python twin's `Aggregation`, in
//! tests/streams_runtime/fused/oracle/window_core.py): the aggregate (`Agg`: an exact int or
//! float held natively, else the Python object), the built-ins computed natively, and the user's
//! reducer or aggregate functions called from the core.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyInt};

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
    /// A reduce by the user's own reducer: called for every combination, never natively.
    Reduce,
    /// An aggregate by the user's initializer, aggregator and merger (sessions), called with
    /// the record's key.
    Aggregate,
}

/// The user's functions of an `aggregate`.
struct UserFunctions {
    initializer: Py<PyAny>,
    aggregator: Py<PyAny>,
    merger: Option<Py<PyAny>>,
}

/// An aggregation as the chain computes it (the Python twin's `Aggregation` says how):
/// `combine` is `operator.add` (a count's merge, a sum), `min` or `max`, natively where both
/// sides are exact ints (checked add) or exact floats, or the user's reducer; `finish` is what
/// the chain's round trip through its store does to an aggregate (`normalize`, skipped where
/// the value serde keeps the value as it is), and every NaN the one NaN.
pub struct Aggregation {
    pub kind: Kind,
    reducer: Py<PyAny>,
    user: Option<UserFunctions>,
    normalize: Option<Py<PyAny>>,
    exact_ints: bool,
    exact_floats: bool,
}

impl Aggregation {
    /// `functions`: a reduce's reducer, or an aggregate's (initializer, aggregator, merger or
    /// None).
    pub fn new(
        py: Python<'_>,
        kind: &str,
        functions: Option<&Bound<'_, PyAny>>,
        normalize: Option<Py<PyAny>>,
        exact_ints: bool,
        exact_floats: bool,
    ) -> PyResult<Self> {
        let (kind, module, name) = match (kind, functions.is_some()) {
            ("count", false) => (Kind::Count, "operator", "add"),
            ("sum", false) => (Kind::Sum, "operator", "add"),
            ("min", false) => (Kind::Min, "builtins", "min"),
            ("max", false) => (Kind::Max, "builtins", "max"),
            ("reduce", true) => (Kind::Reduce, "operator", "add"),
            ("aggregate", true) => (Kind::Aggregate, "operator", "add"),
            (other, _) => {
                return Err(PyValueError::new_err(format!(
                    "not an aggregation the core runs: {other:?} (a reduce takes a reducer, an \
                     aggregate its functions, a built-in none)"
                )))
            }
        };
        let (reducer, user) = match (kind, functions) {
            (Kind::Reduce, Some(reducer)) => (reducer.clone().unbind(), None),
            (Kind::Aggregate, Some(functions)) => {
                let (initializer, aggregator, merger): (Py<PyAny>, Py<PyAny>, Option<Py<PyAny>>) =
                    functions.extract()?;
                let user = UserFunctions {
                    initializer,
                    aggregator,
                    merger,
                };
                (py.import(module)?.getattr(name)?.unbind(), Some(user))
            }
            _ => (py.import(module)?.getattr(name)?.unbind(), None),
        };
        Ok(Aggregation {
            kind,
            reducer,
            user,
            normalize,
            exact_ints,
            exact_floats,
        })
    }

    /// The aggregate a window starts from: an aggregate's `initializer()`, else none yet.
    pub fn start(&self, py: Python<'_>) -> PyResult<Option<Agg>> {
        match &self.user {
            Some(user) => Ok(Some(Agg::of(&user.initializer.bind(py).call0()?))),
            None => Ok(None),
        }
    }

    /// Sessions merged: `merger(key, acc, other)`, or a reduce's merge (whichever is not None,
    /// else both combined).
    pub fn merge(
        &self,
        py: Python<'_>,
        key: Option<&Bound<'_, PyAny>>,
        acc: Option<Agg>,
        other: &Agg,
    ) -> PyResult<Option<Agg>> {
        if let Some(user) = &self.user {
            let merger = user.merger.as_ref().ok_or_else(|| {
                PyValueError::new_err("merging sessions needs the aggregate's merger")
            })?;
            let acc = acc.expect("an aggregate starts from its initializer");
            let merged =
                merger
                    .bind(py)
                    .call1((user_key(key)?, acc.to_py(py)?, other.to_py(py)?))?;
            return Ok(Some(Agg::of(&merged)));
        }
        Ok(Some(match acc {
            Some(a) if !a.is_none(py) => {
                if other.is_none(py) {
                    a
                } else {
                    self.combine(py, &a, other)?
                }
            }
            _ => other.clone_ref(py),
        }))
    }

    /// A record's value folded in: `aggregator(key, value, acc)`, or a reduce's (the value as
    /// it is when there is no aggregate yet, else both combined).
    pub fn fold(
        &self,
        py: Python<'_>,
        key: Option<&Bound<'_, PyAny>>,
        acc: Option<Agg>,
        value: Agg,
    ) -> PyResult<Agg> {
        if let Some(user) = &self.user {
            let acc = acc.expect("an aggregate starts from its initializer");
            let folded = user.aggregator.bind(py).call1((
                user_key(key)?,
                value.to_py(py)?,
                acc.to_py(py)?,
            ))?;
            return Ok(Agg::of(&folded));
        }
        match acc {
            Some(a) if !a.is_none(py) => self.combine(py, &a, &value),
            _ => Ok(value),
        }
    }

    /// Whether the user's functions take the records' keys.
    pub fn needs_keys(&self) -> bool {
        self.user.is_some()
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

/// The record's key, as an aggregate's functions take it.
fn user_key<'a, 'py>(key: Option<&'a Bound<'py, PyAny>>) -> PyResult<&'a Bound<'py, PyAny>> {
    key.ok_or_else(|| PyValueError::new_err("an aggregate's functions need the records' keys"))
}
