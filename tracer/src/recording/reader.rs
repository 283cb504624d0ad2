//! The reader: a recording parsed back, line by line, into its typed
//! records, with one-line errors.
use super::*;

/// A parsed recording.
#[derive(Clone, Debug)]
pub struct Recording {
    pub header: Header,
    pub inputs: Vec<(Input, Vec<Fact>)>,
    pub footer: Footer,
    pub workloads: Vec<Value>,
    /// Lines that could not be read as records, skipped.
    pub damage: Damage,
}

impl Recording {
    /// The report inputs its header and footer hold, with the damaged lines
    /// in the loss.
    pub fn inputs(&self) -> Inputs {
        let mut inputs = inputs_of(&self.header, &self.footer);
        inputs.loss.damaged_lines = self.damage.lines;
        inputs.loss.settle();
        inputs
    }
}

/// The damaged lines of a recording: lines that are not text, longer than
/// `input::MAX_LINE`, not JSON, nested deeper than JSON readers take (128
/// levels) or not an object with a `type`. A well-formed line of a type
/// this build does not know is no damage: it is a later minor revision's,
/// skipped as report fields are.
#[derive(Clone, Debug, Default)]
pub struct Damage {
    pub lines: u64,
    /// The first [`Damage::NAMED`], with why each is damaged.
    pub first: Vec<Damaged>,
}

#[derive(Clone, Debug)]
pub struct Damaged {
    pub line: usize,
    pub why: String,
}

impl Damage {
    /// Damaged lines named one by one; the rest are counted.
    pub const NAMED: usize = 10;

    fn add(&mut self, line: usize, why: String) {
        self.lines += 1;
        if self.first.len() < Self::NAMED {
            self.first.push(Damaged { line, why });
        }
    }
}

/// Why a recording cannot be replayed: one line, with the line number.
pub fn parse(text: &str) -> std::result::Result<Recording, String> {
    read(&mut text.as_bytes())
}

/// One line read as `T`; the error names the field (`pid`, `args[2]`).
fn typed<'a, T: serde::Deserialize<'a>>(line: &'a str, ty: &str) -> std::result::Result<T, String> {
    let de = &mut serde_json::Deserializer::from_str(line);
    serde_path_to_error::deserialize(de).map_err(|e| {
        // The line number is the recording's (the caller adds it); serde's
        // own "at line 1 column N" of a one-line document says nothing more
        // than the field's path.
        let msg = crate::input::json_message(e.inner());
        match e.path().to_string().as_str() {
            "." => format!("{ty}: {msg}"),
            path => format!("{ty} field {path}: {msg}"),
        }
    })
}

/// The `type` of a line, or why the line is damaged.
fn type_of(line: &str) -> std::result::Result<std::borrow::Cow<'_, str>, String> {
    use serde_json::error::Category;
    match serde_json::from_str::<codec::Type>(line) {
        Ok(codec::Type { ty: Some(t) }) => Ok(t),
        Ok(codec::Type { ty: None }) => Err("no \"type\"".into()),
        Err(e) => {
            // The line number is the recording's; serde's is always 1.
            let msg = format!("{} at column {}", crate::input::json_message(&e), e.column());
            Err(match e.classify() {
                Category::Data => format!("not a record ({msg})"),
                _ if msg.starts_with("recursion limit") => format!("nested deeper than JSON readers take ({msg})"),
                _ => format!("not JSON ({msg})"),
            })
        }
    }
}

/// The header line: a recording of this schema, or why not.
fn header(first: &str) -> std::result::Result<Header, String> {
    #[derive(serde::Deserialize)]
    struct Head {
        #[serde(rename = "type", default)]
        ty: Option<String>,
        #[serde(default)]
        schema: Option<String>,
    }
    let h: Head = serde_json::from_str(first).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => {
            format!("line 1: not a gdrtrace recording (expected a header with schema {SCHEMA})")
        }
        _ => format!("not a gdrtrace recording: line 1 is not a JSON header ({e})"),
    })?;
    let schema = h.schema.unwrap_or_default();
    if h.ty.as_deref() != Some("header") || !schema.starts_with(SCHEMA_PREFIX) {
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
    typed(first, "header").map_err(|e| format!("line 1: {e}"))
}

/// A fact line, checked.
fn fact(line: &str, ty: &str) -> std::result::Result<Fact, String> {
    let f: Fact = typed(line, ty)?;
    if let Fact::Sample {
        cpu_seconds: Some(c), ..
    } = f
        && !(c.is_finite() && c >= 0.0)
    {
        return Err(format!("sample: cpu_seconds is {c}, not a non-negative number"));
    }
    Ok(f)
}

/// A footer line, checked, its coverage in this build's strategy names.
fn footer(line: &str) -> std::result::Result<Footer, String> {
    let mut f: Footer = typed(line, "footer")?;
    if !(f.duration_s.is_finite() && f.duration_s >= 0.0) {
        return Err(format!(
            "footer: duration_s is {}, not a non-negative number of seconds",
            f.duration_s
        ));
    }
    // Builds before 2026-12-06 said a library no process mapped was "neither
    // installed nor mapped", though `attach` and `top` never looked.
    let looked =
        !matches!(f.command.get(..2), Some([g, c]) if g.ends_with("gdrtrace") && (c == "attach" || c == "top"));
    for c in &mut f.coverage {
        c.via = c.via.map(strategy);
        for t in &mut c.tried {
            t.strategy = strategy(t.strategy);
        }
        if c.reason
            .as_deref()
            .is_some_and(|r| r.ends_with(" is neither installed nor mapped by a traced process"))
        {
            use crate::probes::planner::{NOT_INSTALLED, NOT_MAPPED};
            c.reason = Some(if looked { NOT_INSTALLED } else { NOT_MAPPED }.into());
        }
    }
    Ok(f)
}

/// One input line (None: a line of a later minor revision, skipped as
/// report fields are).
pub(super) fn input(line: &str, ty: &str) -> std::result::Result<Option<Input>, String> {
    Ok(Some(match ty {
        "event" => Input::Event(typed::<EventLine>(line, "event")?.event()?),
        "target" => {
            let t: Target = typed(line, "target")?;
            Input::Target {
                pid: t.pid.0,
                parent: t.parent.map(|p| p.0),
            }
        }
        "tick" => Input::Tick,
        "alive-check" => Input::AliveCheck,
        "setup-closed" => Input::SetupClosed,
        "aggregates" => {
            let a: Aggregates = typed(line, "aggregates")?;
            Input::Aggregates {
                t_ns: a.t_ns.0,
                rows: a.rows()?,
            }
        }
        "clock" => Input::Clock {
            t_ns: typed::<Clock>(line, "clock")?.t_ns.0,
        },
        "duty" => {
            let d: Duty = typed(line, "duty")?;
            Input::Duty {
                on_us: d.on_us.0,
                off_us: d.off_us.0,
                rest: d.rest,
                cpu: d.cpu.iter().map(|(p, us)| (p.0, us.0)).collect(),
            }
        }
        "trap-cost" => {
            let c: TrapCost = typed(line, "trap-cost")?;
            let stepped_ns = c.stepped_ns.unwrap_or(c.entry_ns);
            for (f, x) in [
                ("entry_ns", c.entry_ns),
                ("pair_ns", c.pair_ns),
                ("stepped_ns", stepped_ns),
            ] {
                if !(x.is_finite() && x >= 0.0) {
                    return Err(format!("trap-cost {f} is not a non-negative number"));
                }
            }
            Input::TrapCost(crate::sampling::TrapCost {
                entry_ns: c.entry_ns,
                pair_ns: c.pair_ns,
                stepped_ns,
            })
        }
        "stepped" => {
            let s: Stepped = typed(line, "stepped")?;
            Input::Stepped {
                pid: s.pid.0,
                rows: s.rows,
            }
        }
        "exact-rows" => Input::ExactRows {
            ops: typed::<ExactRows>(line, "exact-rows")?.ops,
        },
        "nccl-ras" => Input::NcclRas(Box::new(typed(line, "nccl-ras")?)),
        _ => return Ok(None),
    }))
}

/// Clears the id slots of the `ncclCommInitRank*` events of a recording
/// whose header does not say they hold hashes: a register's value read as
/// a hash gave every rank an identity of its own (issue 48).
fn unread_ids(inputs: &mut [(Input, Vec<Fact>)]) {
    use tracer_common::nccl_id::{HASH_ARG, LEGACY_HASH_ARG};
    for (i, _) in inputs.iter_mut() {
        if let Input::Event(e) = i
            && crate::probes::uapi::row_of(e.op).is_some_and(|(_, r)| r.unique_id.is_some())
        {
            e.args[HASH_ARG] = 0;
            e.args[LEGACY_HASH_ARG] = 0;
        }
    }
}

/// Parses a recording line by line from `r` (the text is never held whole:
/// recordings of long jobs are large). Lines are bounded (`input::MAX_LINE`);
/// damaged lines are skipped and kept in [`Recording::damage`] for the
/// caller to say and count.
pub fn read(r: &mut dyn std::io::BufRead) -> std::result::Result<Recording, String> {
    let mut n = 0usize;
    let mut buf = String::new();
    let mut damage = Damage::default();
    // The next non-blank line and its number, or None at the end; a line
    // that is not text or too long is damage.
    let mut next = |buf: &mut String, damage: &mut Damage| -> std::result::Result<Option<usize>, String> {
        loop {
            n += 1;
            match crate::input::next_line(r, buf) {
                Ok(None) => return Ok(None),
                Ok(Some(())) if buf.trim().is_empty() => continue,
                Ok(Some(())) => return Ok(Some(n)),
                Err(crate::input::LineError::Line(e)) if n > 1 => damage.add(n, e),
                Err(e) => return Err(format!("line {n}: {e}")),
            }
        }
    };
    next(&mut buf, &mut damage)?.ok_or("empty file (no header line)")?;
    let header = header(&buf)?;
    let mut inputs: Vec<(Input, Vec<Fact>)> = Vec::new();
    let mut footer_line = None;
    let mut workloads = Vec::new();
    while let Some(n) = next(&mut buf, &mut damage)? {
        let line = buf.as_str();
        let at = |e: String| format!("line {n}: {e}");
        let ty = match type_of(line) {
            Ok(ty) => ty,
            Err(why) => {
                damage.add(n, why);
                continue;
            }
        };
        let ty = ty.as_ref();
        if footer_line.is_some() {
            match ty {
                "workloads" => {
                    workloads = typed::<Workloads>(line, "workloads").map_err(at)?.workloads;
                    continue;
                }
                _ => return Err(at(format!("{ty} after the footer"))),
            }
        }
        match ty {
            "process" | "env" | "sample" | "gone" | "space" | "connections" => {
                let f = fact(line, ty).map_err(at)?;
                match inputs.last_mut() {
                    Some((_, facts)) => facts.push(f),
                    None => return Err(at(format!("{ty} before any input"))),
                }
            }
            "footer" => footer_line = Some(footer(line).map_err(at)?),
            _ => {
                if let Some(i) = input(line, ty).map_err(at)? {
                    inputs.push((i, Vec::new()));
                }
            }
        }
    }
    if !header.nccl_id_hashes {
        unread_ids(&mut inputs);
    }
    let Some(footer) = footer_line else {
        let last = damage
            .first
            .last()
            .filter(|d| d.line + 1 >= n)
            .map(|d| format!(" (line {} is damaged: {})", d.line, d.why))
            .unwrap_or_default();
        return Err(format!(
            "truncated: no footer line{last}: the recording was cut off before the trace ended"
        ));
    };
    // A damaged line may have been an event.
    let seen = inputs.iter().filter(|(i, _)| matches!(i, Input::Event(_))).count() as u64;
    if seen > footer.events || seen + damage.lines < footer.events {
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
        damage,
    })
}
