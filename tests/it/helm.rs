//! The Helm chart (deploy/helm/gdrtrace), rendered by Helm itself (v4.1.4,
//! which scripts/install-vm-deps.sh installs) and validated offline with
//! kubernetes-validate, as tests/it/deploy.rs does the kustomize base.
//!
//! What is proven: `helm lint --strict` passes; with its default values
//! the chart renders exactly the objects `kubectl kustomize
//! deploy/kubernetes` renders (Helm's own labels aside), so the DaemonSet
//! tests/it/container.rs runs under podman is the chart's too; its version,
//! appVersion and both manifests' image tags are the crates' version; each
//! value (namespace, image, node selector, TLS, the NetworkPolicy, the
//! ServiceMonitor, seccomp, SYS_ADMIN, runtime class) does what values.yaml
//! says; both renders validate strictly against Kubernetes 1.29 and 1.33.
//! Not proven here: the ServiceMonitor against the Prometheus Operator's
//! CRD schema (not available offline).
use std::{collections::BTreeMap, path::Path, process::Command};

use integration_tests::{
    have,
    k8s::{self, Chart, DaemonSet, Head, Service, ServiceMonitor},
    repo_root, yaml,
};
use serde_json::Value;

use crate::deploy::kustomize;

const HOW: &str = "bash scripts/setup.sh --vm installs it";
/// The labels Helm's conventions add to every object, beside the base's.
const HELM_LABELS: [&str; 4] = [
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
];

fn chart() -> std::path::PathBuf {
    repo_root().join("deploy/helm/gdrtrace")
}

fn helm(args: &[&str]) -> String {
    let out = Command::new("helm").args(args).output().expect("running helm");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "helm {args:?}: {}{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// `helm template` with `--set` pairs, parsed: objects by kind (kept whole,
/// to compare with the kustomize base; read through [`k8s`] types).
fn render(dir: &Path, name: &str, sets: &[&str]) -> (std::path::PathBuf, BTreeMap<String, Value>) {
    let chart = chart();
    let mut args = vec!["template", "gdrtrace", chart.to_str().expect("UTF-8 path")];
    for s in sets {
        args.extend(["--set", s]);
    }
    let text = helm(&args);
    let file = dir.join(format!("{name}.yaml"));
    std::fs::write(&file, &text).expect("writing the render");
    (file.clone(), by_kind(&file))
}

fn by_kind(file: &Path) -> BTreeMap<String, Value> {
    yaml(file)
        .into_iter()
        .filter(|d| !d.is_null())
        .map(|d| (k8s::of::<Head>("a rendered object", &d).kind, d))
        .collect()
}

/// `v` without Helm's labels (in every `labels` map).
fn without_helm_labels(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| {
                    let v = match (k.as_str(), v) {
                        ("labels", Value::Object(l)) => Value::Object(
                            l.iter()
                                .filter(|(k, _)| !HELM_LABELS.contains(&k.as_str()))
                                .map(|(k, v)| (k.clone(), v.clone()))
                                .collect(),
                        ),
                        _ => v.clone(),
                    };
                    (k.clone(), without_helm_labels(&v))
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_helm_labels).collect()),
        _ => v.clone(),
    }
}

fn validate(file: &Path, what: &str) {
    for version in ["1.29.0", "1.33.0"] {
        let out = Command::new("kubernetes-validate")
            .args(["--strict", "-k", version])
            .arg(file)
            .output()
            .expect("running kubernetes-validate");
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "kubernetes {version}, {what}:\n{text}");
        assert!(
            text.contains("passed for resource daemonset/gdrtrace"),
            "{what}:\n{text}"
        );
    }
}

/// The object of `kind`, into its type.
fn typed<T: serde::de::DeserializeOwned>(objs: &BTreeMap<String, Value>, kind: &str) -> T {
    k8s::of(kind, objs.get(kind).unwrap_or_else(|| panic!("no {kind} rendered")))
}

#[test]
fn the_chart_renders_the_kustomize_base_by_default() {
    let test = "the_chart_renders_the_kustomize_base_by_default";
    if !have(test, "helm", HOW) || !have(test, "kubectl", HOW) || !have(test, "kubernetes-validate", HOW) {
        return;
    }
    let out = helm(&["lint", "--strict", chart().to_str().expect("UTF-8 path")]);
    assert!(out.contains("0 chart(s) failed"), "{out}");
    let dir = integration_tests::scratch("helm");
    let (file, chart_objs) = render(&dir, "default", &[]);
    let base_file = dir.join("kustomize.yaml");
    std::fs::write(&base_file, kustomize(&[])).expect("writing the base");
    let base = by_kind(&base_file);
    assert_eq!(
        chart_objs.keys().collect::<Vec<_>>(),
        base.keys().collect::<Vec<_>>(),
        "the same kinds"
    );
    for (kind, obj) in &chart_objs {
        let labels = k8s::of::<Head>(kind, obj).metadata.labels;
        assert!(
            HELM_LABELS.iter().all(|l| labels.contains_key(*l)),
            "{kind}: Helm's labels: {labels:?}"
        );
        assert_eq!(
            without_helm_labels(obj),
            base[kind],
            "{kind}: the chart's default render differs from deploy/kubernetes"
        );
    }
    let release = gdrtrace::version::RELEASE;
    let meta: Chart = k8s::read(&chart().join("Chart.yaml"));
    assert_eq!((meta.version.as_str(), meta.app_version.as_str()), (release, release));
    let ds: DaemonSet = typed(&base, "DaemonSet");
    assert_eq!(
        ds.spec.template.spec.container().image,
        format!("localhost/gdrtrace:{release}"),
        "the image scripts/release.sh builds"
    );
    validate(&file, "default values");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn each_value_of_the_chart_does_what_it_says() {
    let test = "each_value_of_the_chart_does_what_it_says";
    if !have(test, "helm", HOW) || !have(test, "kubernetes-validate", HOW) {
        return;
    }
    let dir = integration_tests::scratch("helm-values");
    let (file, objs) = render(
        &dir,
        "values",
        &[
            "namespace.name=gpu-observability",
            "image.repository=registry.internal/obs/gdrtrace",
            "image.tag=0.1.0-rc1",
            "nodeSelector.pool=a100",
            "tls.secretName=gdrtrace-web-config",
            "networkPolicy.enabled=false",
            "serviceMonitor.enabled=true",
            "seccompProfile=Unconfined",
            "uprobesSysAdmin=true",
            "runtimeClassName=nvidia",
            "port=9500",
        ],
    );
    for (kind, obj) in &objs {
        let meta = k8s::of::<Head>(kind, obj).metadata;
        let ns = if kind == "Namespace" {
            Some(meta.name)
        } else {
            meta.namespace
        };
        assert_eq!(ns.as_deref(), Some("gpu-observability"), "{kind}");
    }
    assert!(!objs.contains_key("NetworkPolicy"), "networkPolicy.enabled=false");
    let sm: ServiceMonitor = typed(&objs, "ServiceMonitor");
    let svc: Service = typed(&objs, "Service");
    assert_eq!(
        sm.metadata.labels.get("release").map(String::as_str),
        Some("kube-prometheus-stack")
    );
    assert_eq!(
        sm.spec.endpoints.first().and_then(|e| e.scheme.as_deref()),
        Some("https"),
        "TLS on: scraped over HTTPS"
    );
    let name_label = "app.kubernetes.io/name";
    let service_name = svc.metadata.labels.get(name_label).expect("the Service's name label");
    assert_eq!(
        sm.spec.selector.match_labels,
        k8s::Labels::from([(name_label.to_string(), service_name.clone())]),
        "the ServiceMonitor selects the Service"
    );
    let ds: DaemonSet = typed(&objs, "DaemonSet");
    let pod = &ds.spec.template.spec;
    assert_eq!(pod.node_selector.get("pool").map(String::as_str), Some("a100"));
    assert!(pod.affinity.is_some(), "the GPU affinity stays");
    assert_eq!(pod.runtime_class_name.as_deref(), Some("nvidia"));
    let c = pod.container();
    assert_eq!(c.image, "registry.internal/obs/gdrtrace:0.1.0-rc1");
    let args = &c.args;
    let has = |a: &str| args.iter().any(|x| x == a);
    assert!(has("--web-config-file=/etc/gdrtrace/web-config.yml"), "{args:?}");
    assert!(has("--listen=:9500"), "{args:?}");
    assert_eq!(c.port().container_port, 9500);
    assert_eq!(svc.spec.ports.first().map(|p| p.port), Some(9500));
    for (probe, p) in [
        ("readinessProbe", &c.readiness_probe),
        ("livenessProbe", &c.liveness_probe),
    ] {
        assert_eq!(
            p.as_ref().and_then(|p| p.http_get.scheme.as_deref()),
            Some("HTTPS"),
            "{probe}"
        );
    }
    assert!(
        c.volume_mounts.iter().any(|m| m.mount_path == "/etc/gdrtrace"),
        "the web-config Secret is mounted"
    );
    assert!(
        pod.volumes.iter().any(|v| v
            .secret
            .as_ref()
            .is_some_and(|s| s.secret_name == "gdrtrace-web-config")),
        "from tls.secretName"
    );
    let sc = &c.security_context;
    assert_eq!(sc.seccomp_profile.kind, "Unconfined");
    assert!(sc.capabilities.add.iter().any(|c| c == "SYS_ADMIN"), "uprobesSysAdmin");
    validate(&file, "every value set");
    let _ = std::fs::remove_dir_all(&dir);
}
