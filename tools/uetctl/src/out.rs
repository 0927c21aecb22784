//! Standard output for people and scripts, where a closed reader ends the output.
//!
//! `println!` panics when standard output fails, and Rust programs ignore `SIGPIPE`, so
//! `uetctl av dump --demo | head` would end in a panic message once `head` has its lines
//! and closes the pipe. Every line `uetctl` prints goes through [`outln!`](crate::outln!) / [`out!`](crate::out!)
//! instead: when the reader has gone (`EPIPE`), there is no one left to tell, and `uetctl`
//! exits at once with status 0, as a program killed by `SIGPIPE` would stop, without the
//! noise; any other write error (a full disk, an I/O error) is a message on standard error
//! and exit status 1. The process exits through `exit(3)`, so `atexit` handlers still run
//! (a telemetry socket the process serves is removed).

use std::fmt;
use std::io::{self, Write};

/// Exit status when standard output fails for a reason other than a closed reader.
pub const WRITE_FAILED: i32 = 1;

/// Write `args` to standard output; see the module documentation for what a failure does.
pub fn write(args: fmt::Arguments<'_>) {
    let mut stdout = io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args) {
        ended(&e)
    }
}

/// Write `value` to standard output as pretty-printed JSON (as `{:#}` prints a
/// `serde_json::Value`) and a newline, as it serializes: a large document is never held
/// whole. A failure is handled as [`write()`]'s.
pub fn json_pretty(value: &impl serde::Serialize) {
    let mut stdout = io::BufWriter::new(io::stdout().lock());
    let written = serde_json::to_writer_pretty(&mut stdout, value)
        .map_err(io::Error::from)
        .and_then(|()| stdout.write_all(b"\n"))
        .and_then(|()| stdout.flush());
    if let Err(e) = written {
        ended(&e)
    }
}

/// What [`write()`] does when standard output fails: exit, quietly for a closed reader.
pub fn ended(e: &io::Error) -> ! {
    if e.kind() == io::ErrorKind::BrokenPipe {
        std::process::exit(0)
    }
    // Standard error may be gone too; there is nothing more to do about it then.
    let _ = writeln!(io::stderr(), "uetctl: writing standard output: {e}");
    std::process::exit(WRITE_FAILED)
}

/// `s`, text another process sent (a name, a message), as it may be printed among uetctl's
/// own lines: each control character escaped as Rust writes it (`\n`, `\u{1b}`), so that
/// the text cannot start lines of its own, which would read as uetctl's (a row of a NIC's
/// table, a message), nor steer the terminal with an escape sequence. Anything else is kept
/// as it is. JSON needs none of this: its strings escape control characters.
pub fn printable(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut escaped = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if c.is_control() {
            escaped.extend(c.escape_debug());
        } else {
            escaped.push(c);
        }
    }
    std::borrow::Cow::Owned(escaped)
}

/// `print!` to standard output, ending the process quietly when the reader has gone.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::out::write(format_args!($($arg)*))
    };
}

/// `println!` to standard output, ending the process quietly when the reader has gone.
#[macro_export]
macro_rules! outln {
    () => {
        $crate::out::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}
