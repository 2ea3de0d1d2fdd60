//! How an export's rows are written: NDJSON (one JSON object a line) or CSV (a
//! header, then one record a row). CSV is what operators open in a spreadsheet,
//! so a cell a spreadsheet would run as a formula is written as text.

use serde::Serialize;

use crate::service::ServiceError;

/// An export's file format, chosen by `format=` (NDJSON when absent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExportFormat {
    #[default]
    Ndjson,
    Csv,
}

impl ExportFormat {
    /// The format `value` names; absent or empty is NDJSON, the admin API's
    /// original answer.
    pub fn parse(value: Option<&str>) -> Result<ExportFormat, ServiceError> {
        match value.map(str::trim).filter(|v| !v.is_empty()) {
            None | Some("ndjson") => Ok(ExportFormat::Ndjson),
            Some("csv") => Ok(ExportFormat::Csv),
            Some(other) => Err(ServiceError::Invalid {
                field: "format",
                message: format!("must be csv or ndjson, not {other:?}"),
            }),
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            ExportFormat::Ndjson => "application/x-ndjson",
            ExportFormat::Csv => "text/csv; charset=utf-8",
        }
    }

    pub fn extension(self) -> &'static str {
        match self {
            ExportFormat::Ndjson => "ndjson",
            ExportFormat::Csv => "csv",
        }
    }
}

/// One page of an export as bytes: the CSV header first when `header` is given
/// (the first page), then each row as a JSON line or a CSV record of its `cells`.
pub(super) fn encode_page<R: Serialize>(
    format: ExportFormat,
    header: Option<&[&str]>,
    rows: &[R],
    cells: impl Fn(&R) -> Vec<Option<String>>,
) -> Result<Vec<u8>, ServiceError> {
    let failed = |e: &dyn std::fmt::Display| ServiceError::Internal(format!("an export page: {e}"));
    match format {
        ExportFormat::Ndjson => {
            let mut out = Vec::with_capacity(rows.len() * 512);
            for row in rows {
                serde_json::to_writer(&mut out, row).map_err(|e| failed(&e))?;
                out.push(b'\n');
            }
            Ok(out)
        }
        ExportFormat::Csv => {
            let mut writer = csv::Writer::from_writer(Vec::with_capacity(rows.len() * 256));
            if let Some(columns) = header {
                writer.write_record(columns).map_err(|e| failed(&e))?;
            }
            for row in rows {
                let record = cells(row)
                    .into_iter()
                    .map(|cell| spreadsheet_safe(cell.unwrap_or_default()));
                writer.write_record(record).map_err(|e| failed(&e))?;
            }
            writer.into_inner().map_err(|e| failed(&e))
        }
    }
}

/// A cell that starts like a formula (`=`, `+`, `-`, `@`, a tab or a carriage
/// return) gets a leading apostrophe, so a spreadsheet shows a receiver's error
/// text instead of running it (OWASP's CSV injection advice). No column Herald
/// exports starts that way otherwise: ids, times and counts begin with a digit
/// or a letter.
fn spreadsheet_safe(cell: String) -> String {
    if cell.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{cell}")
    } else {
        cell
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_format_is_named_or_refused() {
        assert_eq!(ExportFormat::parse(None).unwrap(), ExportFormat::Ndjson);
        assert_eq!(
            ExportFormat::parse(Some(" ")).unwrap(),
            ExportFormat::Ndjson
        );
        assert_eq!(ExportFormat::parse(Some("csv")).unwrap(), ExportFormat::Csv);
        let refused = ExportFormat::parse(Some("xlsx")).unwrap_err().to_string();
        assert!(
            refused.starts_with("format: must be csv or ndjson"),
            "{refused}"
        );
    }

    #[test]
    fn csv_cells_are_quoted_and_never_run_as_formulas() {
        let rows = [
            ("e1", Some("plain")),
            ("e2", Some("a, \"quoted\"\nline")),
            ("e3", Some("=HYPERLINK(\"x\")")),
            ("e4", Some("-1")),
            ("e5", Some("@sum")),
            ("e6", None),
        ];
        let cells = |(id, error): &(&str, Option<&str>)| {
            vec![Some(id.to_string()), error.map(str::to_string)]
        };
        let page = encode_page(ExportFormat::Csv, Some(&["id", "error"]), &rows, cells).unwrap();
        assert_eq!(
            String::from_utf8(page).unwrap(),
            "id,error\ne1,plain\ne2,\"a, \"\"quoted\"\"\nline\"\ne3,\"'=HYPERLINK(\"\"x\"\")\"\ne4,'-1\ne5,'@sum\ne6,\n"
        );
        // A later page has no header; NDJSON is the rows' JSON, one a line.
        let page = encode_page(ExportFormat::Csv, None, &rows[..1], cells).unwrap();
        assert_eq!(page, b"e1,plain\n");
        let page = encode_page(ExportFormat::Ndjson, None, &rows[5..], cells).unwrap();
        assert_eq!(page, b"[\"e6\",null]\n");
    }
}
