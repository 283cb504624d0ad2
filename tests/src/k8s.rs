//! The Kubernetes objects the deployment tests read (deploy/kubernetes,
//! the Helm chart's renders, kustomizations, Chart.yaml), with only the
//! fields the tests check. Every field has a default: an absent one reads
//! as empty and the assertion that wants it fails, naming what it wanted;
//! a field of the wrong type fails here, naming its path.
use std::{collections::BTreeMap, path::Path};

use serde::{Deserialize, de::DeserializeOwned};

/// A label or selector map.
pub type Labels = BTreeMap<String, String>;

/// Any object: its kind and metadata (the spec read by kind).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Head {
    pub kind: String,
    pub metadata: Metadata,
}

/// An object of a kind whose spec is `S`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Object<S> {
    pub kind: String,
    pub metadata: Metadata,
    pub spec: S,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Metadata {
    pub name: String,
    pub namespace: Option<String>,
    pub labels: Labels,
}

pub type DaemonSet = Object<DaemonSetSpec>;
pub type Service = Object<ServiceSpec>;
pub type PodMonitor = Object<PodMonitorSpec>;
pub type ServiceMonitor = Object<ServiceMonitorSpec>;
pub type NetworkPolicy = Object<NetworkPolicySpec>;

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct DaemonSetSpec {
    pub template: PodTemplate,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct PodTemplate {
    pub metadata: Metadata,
    pub spec: PodSpec,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodSpec {
    #[serde(rename = "hostPID")]
    pub host_pid: Option<bool>,
    pub containers: Vec<Container>,
    pub volumes: Vec<Volume>,
    pub affinity: Option<Affinity>,
    pub node_selector: Labels,
    pub runtime_class_name: Option<String>,
}

impl PodSpec {
    /// The first container (the agent's: the pod has one).
    pub fn container(&self) -> &Container {
        self.containers.first().expect("the pod has a container")
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Affinity {
    pub node_affinity: NodeAffinity,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NodeAffinity {
    pub required_during_scheduling_ignored_during_execution: NodeSelector,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NodeSelector {
    pub node_selector_terms: Vec<NodeSelectorTerm>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NodeSelectorTerm {
    pub match_expressions: Vec<Requirement>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Requirement {
    pub key: String,
    pub operator: String,
    pub values: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Container {
    pub name: String,
    pub image: String,
    pub args: Vec<String>,
    pub env: Vec<EnvVar>,
    pub ports: Vec<ContainerPort>,
    pub readiness_probe: Option<Probe>,
    pub liveness_probe: Option<Probe>,
    pub security_context: SecurityContext,
    pub volume_mounts: Vec<VolumeMount>,
}

impl Container {
    /// The first port (the metrics port: the agent has one).
    pub fn port(&self) -> &ContainerPort {
        self.ports.first().expect("the container has a port")
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct EnvVar {
    pub name: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerPort {
    pub name: String,
    pub container_port: u16,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Probe {
    pub http_get: HttpGet,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct HttpGet {
    pub path: String,
    pub scheme: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SecurityContext {
    pub privileged: Option<bool>,
    pub read_only_root_filesystem: Option<bool>,
    pub seccomp_profile: SeccompProfile,
    pub capabilities: Capabilities,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SeccompProfile {
    #[serde(rename = "type")]
    pub kind: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Capabilities {
    pub add: Vec<String>,
    pub drop: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct VolumeMount {
    pub name: String,
    pub mount_path: String,
    pub read_only: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Volume {
    pub name: String,
    pub host_path: Option<HostPath>,
    pub secret: Option<SecretVolume>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct HostPath {
    pub path: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SecretVolume {
    pub secret_name: String,
}

/// A port given by number or by the container port's name.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum IntOrString {
    Int(i64),
    Str(String),
}

impl Default for IntOrString {
    fn default() -> Self {
        IntOrString::Str(String::new())
    }
}

impl IntOrString {
    /// Whether this names the port `name`.
    pub fn names(&self, name: &str) -> bool {
        matches!(self, IntOrString::Str(s) if s == name)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ServiceSpec {
    pub selector: Labels,
    pub ports: Vec<ServicePort>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ServicePort {
    pub name: String,
    pub port: u16,
    pub target_port: IntOrString,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct LabelSelector {
    pub match_labels: Labels,
}

/// A Prometheus Operator scrape endpoint (of a PodMonitor or a
/// ServiceMonitor).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Endpoint {
    pub port: String,
    pub scheme: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodMonitorSpec {
    pub selector: LabelSelector,
    pub pod_metrics_endpoints: Vec<Endpoint>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ServiceMonitorSpec {
    pub selector: LabelSelector,
    pub endpoints: Vec<Endpoint>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NetworkPolicySpec {
    pub pod_selector: LabelSelector,
    pub ingress: Vec<IngressRule>,
    /// Absent: egress is not restricted; empty: none is allowed.
    pub egress: Option<Vec<serde::de::IgnoredAny>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct IngressRule {
    pub ports: Vec<NetworkPolicyPort>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct NetworkPolicyPort {
    pub port: IntOrString,
}

/// A kustomization.yaml (the fields the tests read).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Kustomization {
    pub resources: Vec<String>,
}

/// A Helm chart's Chart.yaml.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Chart {
    pub version: String,
    pub app_version: String,
}

/// A document parsed as YAML into its type (`what` names it on failure).
pub fn of<T: DeserializeOwned>(what: &str, v: &serde_json::Value) -> T {
    serde_path_to_error::deserialize(v).unwrap_or_else(|e| panic!("{what}: `{}`: {}", e.path(), e.inner()))
}

/// The first YAML document of a file, into its type.
pub fn read<T: DeserializeOwned>(path: &Path) -> T {
    let docs = crate::yaml(path);
    let first = docs
        .first()
        .unwrap_or_else(|| panic!("{}: no YAML document", path.display()));
    of(&path.display().to_string(), first)
}
