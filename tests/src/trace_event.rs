//! Chrome's Trace Event Format (`--trace-event`), the fields the tests
//! read: the format is Chrome's, and the tracer writes it without a type
//! of its own.
use serde::Deserialize;

/// A `--trace-event` file.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TraceFile {
    pub trace_events: Vec<Event>,
    pub other_data: OtherData,
}

#[derive(Debug, Deserialize)]
pub struct OtherData {
    pub schema: String,
}

#[derive(Debug, Deserialize)]
pub struct Event {
    pub ph: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub cat: String,
    pub pid: u64,
    #[serde(default)]
    pub tid: Option<u64>,
    #[serde(default)]
    pub ts: Option<f64>,
    #[serde(default)]
    pub args: Args,
}

#[derive(Debug, Default, Deserialize)]
pub struct Args {
    pub transport: Option<String>,
    pub evidence: Option<String>,
    pub calls: Option<u64>,
    pub bytes: Option<f64>,
    pub moved: Option<f64>,
}

impl TraceFile {
    pub fn thread_names(&self) -> impl Iterator<Item = &Event> {
        self.trace_events
            .iter()
            .filter(|e| e.ph == "M" && e.name == "thread_name")
    }
}
