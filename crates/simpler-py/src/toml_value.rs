//! `parse_toml(text)`: a TOML document as Python values, so the package reads `simpler.toml`
//! manifests on every supported Python (the standard library has `tomllib` only from 3.11).
//! Tables become dicts, arrays lists, datetimes their TOML text.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::error::Raise;

fn convert<'py>(py: Python<'py>, value: &toml::Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        toml::Value::String(s) => s.into_pyobject(py)?.into_any(),
        toml::Value::Integer(i) => i.into_pyobject(py)?.into_any(),
        toml::Value::Float(f) => f.into_pyobject(py)?.into_any(),
        toml::Value::Boolean(b) => b.into_pyobject(py)?.to_owned().into_any(),
        toml::Value::Datetime(d) => d.to_string().into_pyobject(py)?.into_any(),
        toml::Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(convert(py, item)?)?;
            }
            list.into_any()
        }
        toml::Value::Table(table) => {
            let dict = PyDict::new(py);
            for (k, v) in table {
                dict.set_item(k, convert(py, v)?)?;
            }
            dict.into_any()
        }
    })
}

/// Parses a TOML document into a dict; a syntax error is an `InvalidConfigError` whose
/// message gives the line and column.
#[pyfunction]
pub fn parse_toml<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        Raise::new("InvalidConfigError", e.to_string()).into_err(py)
    })?;
    convert(py, &toml::Value::Table(table))
}
