//! The one Arrow schema of the trajectory record, and conversions between
//! [`Record`]s and Arrow record batches (used by the Parquet reader and writer).
//!
//! Column types: strings are `Utf8`; counts are `UInt32`; `reward` is
//! `Float32`; per-token fields are `List<UInt32|UInt8|Float32>`;
//! `weight_versions` is `List<Utf8>`. JSON-typed fields (`label`,
//! `reward_detail`, `metadata`, `messages`, `tools`) are `Utf8` holding JSON text,
//! marked with Arrow's canonical `arrow.json` extension type. Fields arl does
//! not know travel in the JSON column `_extra` (an object per row). The schema
//! version is stored in the file's key-value metadata under
//! [`SCHEMA_VERSION_KEY`].
use crate::record::{FieldError, FieldKind, Record, Status, FIELDS};
use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Float32Builder, ListArray, ListBuilder, PrimitiveArray, StringBuilder,
    UInt32Builder, UInt8Builder,
};
use arrow::datatypes::{
    DataType, Field, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, Schema, SchemaRef,
    UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use arrow::record_batch::RecordBatch;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

pub const SCHEMA_VERSION_KEY: &str = "arl.schema_version";
pub const SCHEMA_VERSION: &str = "1";
/// Column holding the fields arl does not know, as one JSON object per row.
pub const EXTRA_COLUMN: &str = "_extra";

fn json_field(name: &str) -> Field {
    Field::new(name, DataType::Utf8, true).with_metadata(HashMap::from([
        ("ARROW:extension:name".to_string(), "arrow.json".to_string()),
        ("ARROW:extension:metadata".to_string(), String::new()),
    ]))
}

fn list_of(dt: DataType) -> DataType {
    DataType::List(Arc::new(Field::new("item", dt, true)))
}

pub fn data_type(kind: FieldKind) -> DataType {
    match kind {
        FieldKind::Str | FieldKind::Json | FieldKind::JsonObject => DataType::Utf8,
        FieldKind::U32 => DataType::UInt32,
        FieldKind::F32 => DataType::Float32,
        FieldKind::ListU32 => list_of(DataType::UInt32),
        FieldKind::ListU8 => list_of(DataType::UInt8),
        FieldKind::ListF32 => list_of(DataType::Float32),
        FieldKind::ListStr => list_of(DataType::Utf8),
    }
}

/// The Arrow schema every arl Parquet file is written with.
pub fn schema() -> SchemaRef {
    static S: OnceLock<SchemaRef> = OnceLock::new();
    S.get_or_init(|| {
        let mut fields: Vec<Field> = FIELDS
            .iter()
            .map(|&(name, kind)| match kind {
                FieldKind::Json | FieldKind::JsonObject => json_field(name),
                _ => Field::new(name, data_type(kind), true),
            })
            .collect();
        fields.push(json_field(EXTRA_COLUMN));
        let meta = HashMap::from([(SCHEMA_VERSION_KEY.to_string(), SCHEMA_VERSION.to_string())]);
        Arc::new(Schema::new_with_metadata(fields, meta))
    })
    .clone()
}

/// Builds one record batch from records, in the schema of [`schema`].
pub fn to_batch(records: &[Record]) -> RecordBatch {
    let n = records.len();
    let strs = |f: &dyn Fn(&Record) -> Option<&str>| -> ArrayRef {
        let mut b = StringBuilder::with_capacity(n, n * 8);
        for r in records {
            b.append_option(f(r));
        }
        Arc::new(b.finish())
    };
    let jsons = |f: &dyn Fn(&Record) -> Option<String>| -> ArrayRef {
        let mut b = StringBuilder::with_capacity(n, n * 16);
        for r in records {
            b.append_option(f(r));
        }
        Arc::new(b.finish())
    };
    let u32s = |f: &dyn Fn(&Record) -> Option<u32>| -> ArrayRef {
        let mut b = UInt32Builder::with_capacity(n);
        for r in records {
            b.append_option(f(r));
        }
        Arc::new(b.finish())
    };
    let list_u32 = |f: &dyn Fn(&Record) -> Option<&Vec<u32>>| -> ArrayRef {
        let total: usize = records.iter().filter_map(|r| f(r).map(Vec::len)).sum();
        let mut b = ListBuilder::with_capacity(UInt32Builder::with_capacity(total), n);
        for r in records {
            match f(r) {
                Some(v) => {
                    b.values().append_slice(v);
                    b.append(true);
                }
                None => b.append(false),
            }
        }
        Arc::new(b.finish())
    };
    let list_f32 = |f: &dyn Fn(&Record) -> Option<&Vec<f32>>| -> ArrayRef {
        let total: usize = records.iter().filter_map(|r| f(r).map(Vec::len)).sum();
        let mut b = ListBuilder::with_capacity(Float32Builder::with_capacity(total), n);
        for r in records {
            match f(r) {
                Some(v) => {
                    // NaN stands for a null element (JSON null in a per-token list).
                    if v.iter().all(|x| !x.is_nan()) {
                        b.values().append_slice(v);
                    } else {
                        for &x in v {
                            b.values().append_option((!x.is_nan()).then_some(x));
                        }
                    }
                    b.append(true);
                }
                None => b.append(false),
            }
        }
        Arc::new(b.finish())
    };
    let mut cols: Vec<ArrayRef> = Vec::with_capacity(FIELDS.len() + 1);
    for &(name, _) in FIELDS {
        let col: ArrayRef = match name {
            "prompt_id" => strs(&|r| r.prompt_id.as_deref()),
            "sample_index" => u32s(&|r| r.sample_index),
            "data_source" => strs(&|r| r.data_source.as_deref()),
            "prompt" => strs(&|r| r.prompt.as_deref()),
            "label" => jsons(&|r| r.label.as_ref().map(Value::to_string)),
            "tokens" => list_u32(&|r| r.tokens.as_ref()),
            "prompt_len" => u32s(&|r| r.prompt_len),
            "response" => strs(&|r| r.response.as_deref()),
            "loss_mask" => {
                let total: usize = records.iter().filter_map(|r| r.loss_mask.as_ref().map(Vec::len)).sum();
                let mut b = ListBuilder::with_capacity(UInt8Builder::with_capacity(total), n);
                for r in records {
                    match &r.loss_mask {
                        Some(v) => {
                            b.values().append_slice(v);
                            b.append(true);
                        }
                        None => b.append(false),
                    }
                }
                Arc::new(b.finish())
            }
            "rollout_log_probs" => list_f32(&|r| r.rollout_log_probs.as_ref()),
            "status" => strs(&|r| r.status.map(Status::as_str)),
            "finish_reason" => strs(&|r| r.finish_reason.as_deref()),
            "turns" => u32s(&|r| r.turns),
            "tool_calls" => u32s(&|r| r.tool_calls),
            "weight_versions" => {
                let mut b = ListBuilder::new(StringBuilder::new());
                for r in records {
                    match &r.weight_versions {
                        Some(v) => {
                            for s in v {
                                b.values().append_value(s);
                            }
                            b.append(true);
                        }
                        None => b.append(false),
                    }
                }
                Arc::new(b.finish())
            }
            "reward" => {
                let mut b = Float32Builder::with_capacity(n);
                for r in records {
                    b.append_option(r.reward.filter(|x| !x.is_nan()));
                }
                Arc::new(b.finish())
            }
            "reward_detail" => jsons(&|r| r.reward_detail.as_ref().map(Value::to_string)),
            "ref_log_probs" => list_f32(&|r| r.ref_log_probs.as_ref()),
            "values" => list_f32(&|r| r.values.as_ref()),
            "advantages" => list_f32(&|r| r.advantages.as_ref()),
            "returns" => list_f32(&|r| r.returns.as_ref()),
            "metadata" => jsons(&|r| r.metadata.as_ref().map(|m| serde_json::to_string(m).expect("json"))),
            "messages" => jsons(&|r| r.messages.as_ref().map(Value::to_string)),
            "tools" => jsons(&|r| r.tools.as_ref().map(Value::to_string)),
            other => unreachable!("field {other} has no column builder"),
        };
        cols.push(col);
    }
    cols.push(jsons(&|r| (!r.extra.is_empty()).then(|| serde_json::to_string(&r.extra).expect("json"))));
    RecordBatch::try_new(schema(), cols).expect("columns match the schema by construction")
}

/// How each column of an incoming batch maps onto the record.
enum Col {
    Known(&'static str, FieldKind, ArrayRef),
    Extra(ArrayRef),
    Unknown(String, ArrayRef),
}

/// Converts one batch (from arl or from another writer) into records.
///
/// Known columns of another type are cast to the record's type when Arrow can
/// do it losslessly (e.g. `List<Int64>` tokens); other columns become
/// unknown fields, converted to JSON. Returns one result per row: a row whose
/// value cannot be read is an error naming its column.
pub fn from_batch(batch: &RecordBatch) -> Result<Vec<Result<Record, FieldError>>, FieldError> {
    let schema = batch.schema();
    let mut cols = Vec::with_capacity(schema.fields().len());
    for (i, f) in schema.fields().iter().enumerate() {
        let arr = batch.column(i).clone();
        let name = f.name().as_str();
        if name == EXTRA_COLUMN {
            cols.push(Col::Extra(arr));
            continue;
        }
        match FIELDS.iter().find(|(n, _)| *n == name) {
            Some(&(n, kind)) => {
                let want = data_type(kind);
                let arr = if arr.data_type() == &want
                    || matches!((kind, arr.data_type()), (FieldKind::Str | FieldKind::Json | FieldKind::JsonObject, DataType::LargeUtf8 | DataType::Utf8View))
                    || matches!(kind, FieldKind::Json | FieldKind::JsonObject)
                    // verl-style datasets hold the prompt as a list of chat messages.
                    || (n == "prompt" && matches!(arr.data_type(), DataType::List(_) | DataType::LargeList(_)))
                {
                    arr
                } else {
                    let opts = arrow::compute::CastOptions { safe: false, ..Default::default() };
                    arrow::compute::cast_with_options(&arr, &want, &opts).map_err(|e| {
                        FieldError::new(
                            n,
                            format!("column type {} cannot be read as {} ({e})", arr.data_type(), kind.expected()),
                        )
                    })?
                };
                cols.push(Col::Known(n, kind, arr));
            }
            None => cols.push(Col::Unknown(name.to_string(), arr)),
        }
    }
    let mut out = Vec::with_capacity(batch.num_rows());
    for row in 0..batch.num_rows() {
        out.push(row_to_record(&cols, row));
    }
    Ok(out)
}

fn str_at(arr: &ArrayRef, row: usize) -> Option<String> {
    if arr.is_null(row) {
        return None;
    }
    match arr.data_type() {
        DataType::Utf8 => Some(arr.as_string::<i32>().value(row).to_string()),
        DataType::LargeUtf8 => Some(arr.as_string::<i64>().value(row).to_string()),
        DataType::Utf8View => Some(arr.as_string_view().value(row).to_string()),
        _ => None,
    }
}

fn list_values<T: arrow::datatypes::ArrowPrimitiveType>(arr: &ArrayRef, row: usize) -> Option<(Vec<T::Native>, bool)> {
    if arr.is_null(row) {
        return None;
    }
    let list: &ListArray = arr.as_list::<i32>();
    let offs = list.value_offsets();
    let (a, b) = (offs[row] as usize, offs[row + 1] as usize);
    let vals: &PrimitiveArray<T> = list.values().as_primitive::<T>();
    let has_null = vals.null_count() > 0 && (a..b).any(|i| vals.is_null(i));
    Some((vals.values()[a..b].to_vec(), has_null))
}

/// Sets a JSON-typed field of `r` from its column's value (`null`: absent).
fn set_json(r: &mut Record, name: &str, v: Value) -> Result<(), FieldError> {
    let wrong = |want: &str, got: &Value| {
        FieldError::new(name, format!("expected {want} (got {})", crate::record::json_type(got)))
    };
    match name {
        "label" => r.label = Some(v),
        "reward_detail" => r.reward_detail = Some(v),
        "messages" => r.messages = Some(v),
        "tools" => match v {
            Value::Array(_) => r.tools = Some(v),
            Value::Null => {}
            other => return Err(wrong("a list of tool objects", &other)),
        },
        "metadata" => match v {
            Value::Object(m) => r.metadata = Some(m),
            Value::Null => {}
            other => return Err(wrong("a JSON object", &other)),
        },
        _ => unreachable!("{name} is not a JSON field"),
    }
    Ok(())
}

fn row_to_record(cols: &[Col], row: usize) -> Result<Record, FieldError> {
    let mut r = Record::default();
    for c in cols {
        match c {
            Col::Known(name, kind, arr) => {
                if arr.is_null(row) {
                    continue;
                }
                match kind {
                    FieldKind::Str => {
                        let s = match str_at(arr, row) {
                            None if *name == "prompt" => Some(array_value_to_json(arr, row).to_string()),
                            s => s,
                        };
                        match *name {
                            "prompt_id" => r.prompt_id = s,
                            "data_source" => r.data_source = s,
                            "prompt" => r.prompt = s,
                            "response" => r.response = s,
                            "finish_reason" => r.finish_reason = s,
                            "status" => {
                                let s = s.unwrap_or_default();
                                r.status = Some(Status::parse(&s).ok_or_else(|| {
                                    FieldError::new(
                                        "status",
                                        format!("expected one of completed, truncated, aborted, failed (got {s:?})"),
                                    )
                                })?);
                            }
                            _ => unreachable!(),
                        }
                    }
                    FieldKind::U32 => {
                        let v = arr.as_primitive::<UInt32Type>().value(row);
                        match *name {
                            "sample_index" => r.sample_index = Some(v),
                            "prompt_len" => r.prompt_len = Some(v),
                            "turns" => r.turns = Some(v),
                            "tool_calls" => r.tool_calls = Some(v),
                            _ => unreachable!(),
                        }
                    }
                    FieldKind::F32 => r.reward = Some(arr.as_primitive::<Float32Type>().value(row)),
                    FieldKind::Json | FieldKind::JsonObject => {
                        let v = match str_at(arr, row) {
                            Some(text) => serde_json::from_str::<Value>(&text)
                                .map_err(|e| FieldError::new(*name, format!("expected JSON text ({e})")))?,
                            // A column written natively (e.g. a struct `label`) is converted.
                            None => array_value_to_json(arr, row),
                        };
                        set_json(&mut r, name, v)?;
                    }
                    FieldKind::ListU32 => {
                        let (v, nulls) = list_values::<UInt32Type>(arr, row).expect("checked non-null");
                        if nulls {
                            return Err(FieldError::new(*name, "expected a list of integers, found a null element"));
                        }
                        r.tokens = Some(v);
                    }
                    FieldKind::ListU8 => {
                        let (v, nulls) = list_values::<UInt8Type>(arr, row).expect("checked non-null");
                        if nulls {
                            return Err(FieldError::new(*name, "expected a list of 0/1, found a null element"));
                        }
                        r.loss_mask = Some(v);
                    }
                    FieldKind::ListF32 => {
                        let (mut v, nulls) = list_values::<Float32Type>(arr, row).expect("checked non-null");
                        if nulls {
                            let list = arr.as_list::<i32>();
                            let start = list.value_offsets()[row] as usize;
                            let vals = list.values();
                            for (i, x) in v.iter_mut().enumerate() {
                                if vals.is_null(start + i) {
                                    *x = f32::NAN;
                                }
                            }
                        }
                        match *name {
                            "rollout_log_probs" => r.rollout_log_probs = Some(v),
                            "ref_log_probs" => r.ref_log_probs = Some(v),
                            "values" => r.values = Some(v),
                            "advantages" => r.advantages = Some(v),
                            "returns" => r.returns = Some(v),
                            _ => unreachable!(),
                        }
                    }
                    FieldKind::ListStr => {
                        let list = arr.as_list::<i32>();
                        let inner = list.value(row);
                        let mut out = Vec::with_capacity(inner.len());
                        for i in 0..inner.len() {
                            match str_at(&inner, i) {
                                Some(s) => out.push(s),
                                None => return Err(FieldError::new(*name, "expected a list of strings, found a null")),
                            }
                        }
                        r.weight_versions = Some(out);
                    }
                }
            }
            Col::Extra(arr) => {
                if let Some(text) = str_at(arr, row) {
                    match serde_json::from_str::<Value>(&text) {
                        Ok(Value::Object(m)) => {
                            for (k, v) in m {
                                r.extra.insert(k, v);
                            }
                        }
                        Ok(_) | Err(_) => {
                            return Err(FieldError::new(EXTRA_COLUMN, "expected a JSON object of extra fields"))
                        }
                    }
                }
            }
            Col::Unknown(name, arr) => {
                if !arr.is_null(row) {
                    r.extra.insert(name.clone(), array_value_to_json(arr, row));
                }
            }
        }
    }
    r.validate()?;
    Ok(r)
}

/// Converts one Arrow value of any common type into JSON (for columns arl does not know).
pub fn array_value_to_json(arr: &ArrayRef, row: usize) -> Value {
    if arr.is_null(row) {
        return Value::Null;
    }
    macro_rules! prim {
        ($t:ty) => {
            Value::from(arr.as_primitive::<$t>().value(row))
        };
    }
    match arr.data_type() {
        DataType::Null => Value::Null,
        DataType::Boolean => Value::Bool(arr.as_any().downcast_ref::<BooleanArray>().expect("bool").value(row)),
        DataType::Int8 => prim!(Int8Type),
        DataType::Int16 => prim!(Int16Type),
        DataType::Int32 => prim!(Int32Type),
        DataType::Int64 => prim!(Int64Type),
        DataType::UInt8 => prim!(UInt8Type),
        DataType::UInt16 => prim!(UInt16Type),
        DataType::UInt32 => prim!(UInt32Type),
        DataType::UInt64 => prim!(UInt64Type),
        DataType::Float32 => {
            let x = arr.as_primitive::<Float32Type>().value(row);
            serde_json::Number::from_f64(x as f64).map(Value::Number).unwrap_or(Value::Null)
        }
        DataType::Float64 => {
            let x = arr.as_primitive::<Float64Type>().value(row);
            serde_json::Number::from_f64(x).map(Value::Number).unwrap_or(Value::Null)
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            Value::String(str_at(arr, row).unwrap_or_default())
        }
        DataType::List(_) => {
            let inner = arr.as_list::<i32>().value(row);
            Value::Array((0..inner.len()).map(|i| array_value_to_json(&inner, i)).collect())
        }
        DataType::LargeList(_) => {
            let inner = arr.as_list::<i64>().value(row);
            Value::Array((0..inner.len()).map(|i| array_value_to_json(&inner, i)).collect())
        }
        DataType::Struct(fields) => {
            let s = arr.as_struct();
            let mut m = Map::new();
            for (i, f) in fields.iter().enumerate() {
                m.insert(f.name().clone(), array_value_to_json(s.column(i), row));
            }
            Value::Object(m)
        }
        DataType::Map(_, _) => {
            let m = arr.as_map();
            let entries = m.value(row);
            let keys = entries.column(0).clone();
            let vals = entries.column(1).clone();
            let mut out = Map::new();
            for i in 0..entries.len() {
                let k = match array_value_to_json(&keys, i) {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                out.insert(k, array_value_to_json(&vals, i));
            }
            Value::Object(out)
        }
        DataType::Dictionary(_, _) => {
            let casted = arrow::compute::cast(arr, &DataType::Utf8);
            match casted {
                Ok(c) => array_value_to_json(&c, row),
                Err(_) => Value::Null,
            }
        }
        _ => match arrow::compute::cast(arr, &DataType::Utf8) {
            Ok(c) => Value::String(str_at(&c, row).unwrap_or_default()),
            Err(_) => Value::Null,
        },
    }
}
