//! Progress of long work (`progress.rs`), in its form for logs and pipes:
//! with standard error not a terminal, `baseline record` (which runs
//! `validate`) prints one line when each step starts and one when it ends,
//! with its time, steps inside steps nested, and no terminal control
//! sequences (the live line is for terminals only).
use integration_tests::{can_trace, path_str as s, run, scratch, stderr};

/// (step, "started" | the end's outcome, seconds) of each progress line.
fn steps(err: &str) -> Vec<(String, String, Option<f64>)> {
    err.lines()
        .filter_map(|l| {
            if let Some(step) = l.strip_suffix(": started") {
                return Some((step.to_string(), "started".into(), None));
            }
            let (head, secs) = l.rsplit_once(" after ")?;
            let secs: f64 = secs.strip_suffix(" s")?.parse().ok()?;
            let (step, outcome) = head.rsplit_once(": ")?;
            Some((step.to_string(), outcome.to_string(), Some(secs)))
        })
        .collect()
}

#[test]
fn validate_and_baseline_record_say_each_step_as_lines() {
    if !can_trace("validate_and_baseline_record_say_each_step_as_lines") {
        return;
    }
    let dir = scratch("progress");
    let out = dir.join("base.json");
    let o = run(&[
        "baseline",
        "record",
        "--out",
        s(&out),
        "--iterations",
        "20",
        "--no-ucx",
        "--repeat",
        "1",
    ]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        !err.contains('\r') && !err.contains('\u{1b}'),
        "no live line without a terminal: {err:?}"
    );
    let got = steps(&err);
    let names: Vec<&str> = got.iter().map(|(n, ..)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"baseline record: validate"), "{err}");
    assert_eq!(names.last(), Some(&"baseline record: validate"), "{err}");
    assert!(names.contains(&"validate: pin-churn"), "{err}");
    // Every step starts once and then ends once, `done`, with its time;
    // the outer step's time covers the inner ones'.
    let mut open: Vec<&str> = Vec::new();
    let (mut inner, mut steps_inside) = (0.0, 0.0);
    for (name, what, secs) in &got {
        match secs {
            None => {
                assert_eq!(what, "started");
                open.push(name);
            }
            Some(t) => {
                assert_eq!(open.pop(), Some(name.as_str()), "steps end innermost first: {err}");
                assert_eq!(what, "done", "{err}");
                assert!(*t >= 0.0);
                if open.is_empty() {
                    // Each time is rounded to 0.1 s.
                    assert!(
                        *t + 0.05 * (steps_inside + 1.0) >= inner,
                        "the outer step took {t} s, its steps {inner} s: {err}"
                    );
                } else {
                    inner += t;
                    steps_inside += 1.0;
                }
            }
        }
    }
    assert!(open.is_empty(), "every step ended: {err}");
}
