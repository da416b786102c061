//! Text for people: aligned tables, a progress line, an error with its causes.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// An error and its causes on one line: "what failed: because: because".
pub fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut line = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        // Transparent wrappers repeat their source's text.
        if !line.ends_with(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    line
}

/// `rows` under `headers`, each column as wide as its widest cell.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let cells: Vec<String> = cells
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    };
    line(&mut headers.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

static SHOWN: AtomicBool = AtomicBool::new(false);

/// Shows `line` as the current progress on stderr: rewritten in place on a terminal, one line
/// each time it changes otherwise.
pub fn progress(line: &str) {
    static LAST: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());
    let mut stderr = std::io::stderr();
    if stderr.is_terminal() {
        let _ = write!(stderr, "\r\x1b[2K{line}");
        let _ = stderr.flush();
        SHOWN.store(true, Ordering::Relaxed);
    } else {
        let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
        if *last != line {
            let _ = writeln!(stderr, "{line}");
            *last = line.to_owned();
        }
    }
}

/// Ends a progress line shown in place.
pub fn progress_done() {
    if SHOWN.swap(false, Ordering::Relaxed) {
        eprintln!();
    }
}
