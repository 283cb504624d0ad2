//! The reader: a recording parsed back, line by line, with one-line errors.
use super::*;

/// A parsed recording.
#[derive(Clone, Debug)]
pub struct Recording {
    pub header: Header,
    pub inputs: Vec<(Input, Vec<Fact>)>,
    pub footer: Footer,
    pub workloads: Vec<Value>,
}

/// Why a recording cannot be replayed: one line, with the line number.
pub fn parse(text: &str) -> std::result::Result<Recording, String> {
    read(&mut text.as_bytes())
}

/// Parses a recording line by line from `r` (the text is never held whole:
/// recordings of long jobs are large). Lines are bounded (`input::MAX_LINE`).
pub fn read(r: &mut dyn std::io::BufRead) -> std::result::Result<Recording, String> {
    let mut n = 0usize;
    let mut buf = String::new();
    // The next non-blank line and its number, or None at the end.
    let mut next = |buf: &mut String| -> std::result::Result<Option<usize>, String> {
        loop {
            n += 1;
            match crate::input::next_line(r, buf) {
                Ok(None) => return Ok(None),
                Ok(Some(())) if buf.trim().is_empty() => continue,
                Ok(Some(())) => return Ok(Some(n)),
                Err(e) => return Err(format!("line {n}: {e}")),
            }
        }
    };
    next(&mut buf)?.ok_or("empty file (no header line)")?;
    let first = buf.as_str();
    let h: Value = serde_json::from_str(first)
        .map_err(|e| format!("not a gdrtrace recording: line 1 is not a JSON header ({e})"))?;
    let schema = h["schema"].as_str().unwrap_or("");
    if h["type"] != "header" || !schema.starts_with(SCHEMA_PREFIX) {
        return Err(format!(
            "line 1: not a gdrtrace recording (expected a header with schema {SCHEMA})"
        ));
    }
    if schema != SCHEMA {
        let newer = schema[SCHEMA_PREFIX.len()..].parse::<u32>().is_ok_and(|v| v > 1);
        return Err(if newer {
            format!(
                "recording schema {schema} is newer than this gdrtrace ({}) reads ({SCHEMA}); replay it with a newer gdrtrace",
                env!("CARGO_PKG_VERSION")
            )
        } else {
            format!("unknown recording schema {schema} (expected {SCHEMA})")
        });
    }
    let header: Header = serde_json::from_value(h).map_err(|e| format!("line 1: header: {e}"))?;
    let mut inputs: Vec<(Input, Vec<Fact>)> = Vec::new();
    let mut footer = None;
    let mut workloads = Vec::new();
    while let Some(n) = next(&mut buf)? {
        let line = buf.as_str();
        let v: Value = serde_json::from_str(line).map_err(|e| format!("line {n}: not JSON ({e})"))?;
        let ty = v["type"]
            .as_str()
            .ok_or_else(|| format!("line {n}: no \"type\""))?
            .to_string();
        let ty = ty.as_str();
        if footer.is_some() {
            match ty {
                "workloads" => {
                    workloads = v["workloads"].as_array().cloned().unwrap_or_default();
                    continue;
                }
                _ => return Err(format!("line {n}: {ty} after the footer")),
            }
        }
        let input = match ty {
            "event" => Input::Event(event_of(&v).map_err(|e| format!("line {n}: {e}"))?),
            "target" => Input::Target {
                pid: pid_of(&v["pid"], "target pid")
                    .and_then(|p| p.ok_or_else(|| "target without pid".into()))
                    .map_err(|e| format!("line {n}: {e}"))?,
                parent: pid_of(&v["parent"], "target parent").map_err(|e| format!("line {n}: {e}"))?,
            },
            "tick" => Input::Tick,
            "alive-check" => Input::AliveCheck,
            "setup-closed" => Input::SetupClosed,
            "aggregates" => Input::Aggregates {
                t_ns: num(&v["t_ns"]).unwrap_or(0),
                rows: agg_of(&v).map_err(|e| format!("line {n}: {e}"))?,
            },
            "duty" => Input::Duty {
                on_us: required(&v["on_us"], "duty on_us").map_err(|e| format!("line {n}: {e}"))?,
                off_us: required(&v["off_us"], "duty off_us").map_err(|e| format!("line {n}: {e}"))?,
            },
            "trap-cost" => {
                let ns = |f: &str| {
                    v[f].as_f64()
                        .filter(|x| x.is_finite() && *x >= 0.0)
                        .ok_or_else(|| format!("line {n}: trap-cost {f} is not a non-negative number"))
                };
                Input::TrapCost {
                    entry_ns: ns("entry_ns")?,
                    pair_ns: ns("pair_ns")?,
                }
            }
            "process" | "env" | "sample" | "gone" | "space" => {
                let f: Fact = serde_json::from_value(v).map_err(|e| format!("line {n}: {ty}: {e}"))?;
                if let Fact::Sample {
                    cpu_seconds: Some(c), ..
                } = f
                    && !(c.is_finite() && c >= 0.0)
                {
                    return Err(format!(
                        "line {n}: sample: cpu_seconds is {c}, not a non-negative number"
                    ));
                }
                match inputs.last_mut() {
                    Some((_, facts)) => facts.push(f),
                    None => return Err(format!("line {n}: {ty} before any input")),
                }
                continue;
            }
            "footer" => {
                let f = serde_json::from_value::<Footer>(v).map_err(|e| format!("line {n}: footer: {e}"))?;
                if !(f.duration_s.is_finite() && f.duration_s >= 0.0) {
                    return Err(format!(
                        "line {n}: footer: duration_s is {}, not a non-negative number of seconds",
                        f.duration_s
                    ));
                }
                footer = Some(f);
                continue;
            }
            // Lines of later minor revisions are skipped, as report fields are.
            _ => continue,
        };
        inputs.push((input, Vec::new()));
    }
    let footer = footer.ok_or("truncated: no footer line (the recording was cut off before the trace ended)")?;
    let seen = inputs.iter().filter(|(i, _)| matches!(i, Input::Event(_))).count() as u64;
    if seen != footer.events {
        return Err(format!(
            "the footer counts {} events but the file holds {seen}: lines are missing",
            footer.events
        ));
    }
    Ok(Recording {
        header,
        inputs,
        footer,
        workloads,
    })
}
