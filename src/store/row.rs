//! Reading columns portably through `sqlx::Any`.
//!
//! MySQL reports TEXT columns as BLOBs, which `String` refuses to decode through
//! `Any`; [`LongText`] accepts both so long columns read the same on every engine.

use sqlx::any::{AnyRow, AnyTypeInfo, AnyValueRef};
use sqlx::error::BoxDynError;
use sqlx::{Any, Decode, Row, Type};

use super::error::StoreError;

pub struct LongText(pub String);

impl Type<Any> for LongText {
    fn type_info() -> AnyTypeInfo {
        <String as Type<Any>>::type_info()
    }

    fn compatible(ty: &AnyTypeInfo) -> bool {
        <String as Type<Any>>::compatible(ty) || <Vec<u8> as Type<Any>>::compatible(ty)
    }
}

impl<'r> Decode<'r, Any> for LongText {
    fn decode(value: AnyValueRef<'r>) -> Result<Self, BoxDynError> {
        match <String as Decode<Any>>::decode(value.clone()) {
            Ok(text) => Ok(LongText(text)),
            Err(_) => {
                let bytes = <Vec<u8> as Decode<Any>>::decode(value)?;
                Ok(LongText(String::from_utf8(bytes)?))
            }
        }
    }
}

/// A required text column of any length.
pub fn text(row: &AnyRow, column: &str) -> Result<String, StoreError> {
    Ok(row.try_get::<LongText, _>(column)?.0)
}

/// An optional text column of any length.
pub fn opt_text(row: &AnyRow, column: &str) -> Result<Option<String>, StoreError> {
    Ok(row
        .try_get::<Option<LongText>, _>(column)?
        .map(|text| text.0))
}

pub fn int(row: &AnyRow, column: &str) -> Result<i64, StoreError> {
    Ok(row.try_get::<i64, _>(column)?)
}

pub fn opt_int(row: &AnyRow, column: &str) -> Result<Option<i64>, StoreError> {
    Ok(row.try_get::<Option<i64>, _>(column)?)
}
