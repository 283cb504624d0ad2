//! The deployment files, checked offline with the tools their users run:
//! `promtool` (Debian's prometheus 2.42) on the alerting rules and on the
//! exposition, `kubernetes-validate` (PyPI) on the manifests against the
//! Kubernetes schemas, and the names the rules, the dashboard and
//! docs/serve.md use against the names the agent exposes.
//!
//! What is proven: the rules parse and each alert fires and stays silent
//! where its unit test says; the PrometheusRule carries exactly those
//! rules; `kubectl kustomize` renders deploy/kubernetes (alone and with
//! every component) with the Namespace first, and what it renders validates
//! strictly against two Kubernetes versions (and a broken copy does not, so
//! the validator is live); every manifest is in a kustomization; the
//! Service, PodMonitor and NetworkPolicy select the DaemonSet's pods and
//! port; every metric the rules and the dashboard query exists; the
//! documented table is the exposition's set of families. Not proven here:
//! the PodMonitor and PrometheusRule against the Prometheus Operator's CRD
//! schemas (not available offline); the DaemonSet's security context and
//! mounts under a container runtime are tests/it/container.rs.
use std::{collections::BTreeSet, path::Path, process::Command};

use gdrtrace::serve::metrics::{Format, Snapshot, render};
use integration_tests::{
    documented_metrics, have,
    k8s::{self, DaemonSet, Kustomization, NetworkPolicy, PodMonitor, Service},
    metric_names, promql_metric_names, read_as, repo_root,
};
use serde::Deserialize;

const HOW: &str = "bash scripts/setup.sh --vm installs it";

fn promtool(args: &[&str], stdin: Option<&str>) -> (bool, String) {
    use std::io::Write as _;
    let mut child = Command::new("promtool")
        .args(args)
        .current_dir(repo_root())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawning promtool");
    let mut input = child.stdin.take().expect("stdin");
    input
        .write_all(stdin.unwrap_or("").as_bytes())
        .expect("writing to promtool");
    drop(input);
    let out = child.wait_with_output().expect("promtool output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn example_names() -> BTreeSet<String> {
    metric_names(&render(&Snapshot::example(), Format::Text))
}

#[test]
fn alerting_rules_pass_promtool_check_and_their_unit_tests() {
    if !have(
        "alerting_rules_pass_promtool_check_and_their_unit_tests",
        "promtool",
        HOW,
    ) {
        return;
    }
    let (ok, out) = promtool(&["check", "rules", "deploy/prometheus/rules.yaml"], None);
    assert!(ok && out.contains("SUCCESS: 9 rules found"), "{out}");
    let (ok, out) = promtool(&["test", "rules", "deploy/prometheus/rules-test.yaml"], None);
    assert!(ok && out.contains("SUCCESS"), "{out}");
    // The unit tests can fail: the same tests against a rule file whose
    // thresholds are out of reach.
    let dir = integration_tests::scratch("rules");
    let rules = std::fs::read_to_string(repo_root().join("deploy/prometheus/rules.yaml")).unwrap();
    let broken = rules
        .replace(") > 0.5", ") > 5")
        .replace("[10m])) > 0", "[10m])) > 1e9");
    assert_ne!(broken, rules);
    std::fs::write(dir.join("rules.yaml"), broken).unwrap();
    std::fs::copy(
        repo_root().join("deploy/prometheus/rules-test.yaml"),
        dir.join("rules-test.yaml"),
    )
    .unwrap();
    let (ok, out) = promtool(&["test", "rules", dir.join("rules-test.yaml").to_str().unwrap()], None);
    assert!(!ok, "the unit tests pass against rules that cannot fire:\n{out}");
    for alert in [
        "GdrtraceHostStagedRatioHigh",
        "GdrtraceEventsLost",
        "GdrtraceTargetsShed",
    ] {
        assert!(out.contains(alert), "no failure reported for {alert}:\n{out}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_prometheusrule_carries_the_rules_file() {
    let rules = std::fs::read_to_string(repo_root().join("deploy/prometheus/rules.yaml")).unwrap();
    let manifest =
        std::fs::read_to_string(repo_root().join("deploy/kubernetes/components/prometheusrule/prometheusrule.yaml"))
            .unwrap();
    let (_, spec) = manifest.split_once("\nspec:\n").expect("a spec: line");
    let dedented: String = spec
        .lines()
        .map(|l| l.strip_prefix("  ").unwrap_or(l))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        dedented, rules,
        "deploy/kubernetes/components/prometheusrule/prometheusrule.yaml's spec is not deploy/prometheus/rules.yaml indented by two spaces: regenerate it with sed 's/^/  /'"
    );
}

/// The optional parts of deploy/kubernetes (each a kustomize Component).
const COMPONENTS: [&str; 6] = [
    "podmonitor",
    "prometheusrule",
    "seccomp-unconfined",
    "nvidia-runtime-class",
    "uprobes-sys-admin",
    "web-config",
];

/// `kubectl kustomize` of deploy/kubernetes with `components` (their
/// directory names), through a kustomization in a directory of target/
/// (kustomize takes only relative paths to bases and components).
pub(crate) fn kustomize(components: &[&str]) -> String {
    let dir = repo_root().join(format!("target/kustomize-{}-{}", components.len(), std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory under target/");
    let mut k = String::from("resources:\n  - ../../deploy/kubernetes\ncomponents:\n");
    for c in components {
        k.push_str(&format!("  - ../../deploy/kubernetes/components/{c}\n"));
    }
    if components.is_empty() {
        k = k.replace("components:\n", "");
    }
    std::fs::write(dir.join("kustomization.yaml"), k).expect("writing the kustomization");
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(&dir)
        .output()
        .expect("running kubectl");
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "kubectl kustomize with {components:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

fn kinds(rendered: &str) -> Vec<String> {
    rendered
        .lines()
        .filter_map(|l| l.strip_prefix("kind: "))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_kustomization_renders_the_namespace_first_and_validates() {
    let test = "the_kustomization_renders_the_namespace_first_and_validates";
    if !have(test, "kubectl", HOW) || !have(test, "kubernetes-validate", HOW) {
        return;
    }
    let dir = integration_tests::scratch("kustomize");
    for components in [&[][..], &COMPONENTS[..]] {
        let rendered = kustomize(components);
        let kinds = kinds(&rendered);
        assert_eq!(
            kinds.first().map(String::as_str),
            Some("Namespace"),
            "{components:?}: {kinds:?}"
        );
        for want in ["DaemonSet", "Service", "NetworkPolicy"] {
            assert!(
                kinds.iter().any(|k| k == want),
                "{components:?}: no {want} in {kinds:?}"
            );
        }
        for (c, kind) in [("podmonitor", "PodMonitor"), ("prometheusrule", "PrometheusRule")] {
            assert_eq!(
                kinds.iter().any(|k| k == kind),
                components.contains(&c),
                "{kind} only with its component"
            );
        }
        let file = dir.join(format!("rendered-{}.yaml", components.len()));
        std::fs::write(&file, &rendered).unwrap();
        for version in ["1.29.0", "1.33.0"] {
            let out = Command::new("kubernetes-validate")
                .args(["--strict", "-k", version])
                .arg(&file)
                .output()
                .expect("running kubernetes-validate");
            let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "kubernetes {version}, {components:?}:\n{text}");
            for core in [
                "daemonset/gdrtrace",
                "service/gdrtrace",
                "namespace/gdrtrace",
                "networkpolicy/gdrtrace",
            ] {
                assert!(
                    text.contains(&format!("passed for resource {core}")),
                    "{core} not validated:\n{text}"
                );
            }
        }
        if components.len() == COMPONENTS.len() {
            // Each component did what it says.
            for want in [
                "type: Unconfined",
                "runtimeClassName: nvidia",
                "- SYS_ADMIN",
                "--web-config-file=/etc/gdrtrace/web-config.yml",
                "scheme: HTTPS",
                "release: kube-prometheus-stack",
            ] {
                assert!(rendered.contains(want), "{want} missing:\n{rendered}");
            }
        } else {
            assert!(rendered.contains("type: RuntimeDefault"), "{rendered}");
        }
    }
    // The validator is live: a misspelt field fails.
    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, kustomize(&[]).replace("hostPID: true", "hostPid: true")).unwrap();
    let out = Command::new("kubernetes-validate")
        .arg("--strict")
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success(), "a misspelt field passed");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every manifest under deploy/kubernetes is in the kustomization or in a
/// component's (nothing is left out of `kubectl apply -k`), and every file
/// a kustomization names exists.
#[test]
fn every_manifest_is_in_a_kustomization() {
    let root = repo_root().join("deploy/kubernetes");
    let mut listed = BTreeSet::new();
    let mut dirs = vec![root.clone()];
    dirs.extend(COMPONENTS.iter().map(|c| root.join("components").join(c)));
    for dir in &dirs {
        let k: Kustomization = k8s::read(&dir.join("kustomization.yaml"));
        for r in &k.resources {
            let f = dir.join(r);
            assert!(
                f.is_file(),
                "{} names {}, which does not exist",
                dir.display(),
                f.display()
            );
            listed.insert(f);
        }
    }
    let on_disk: Vec<_> = dirs
        .iter()
        .flat_map(|d| yaml_files(d))
        .filter(|p| p.file_name().is_some_and(|n| n != "kustomization.yaml"))
        .collect();
    for f in on_disk {
        assert!(listed.contains(&f), "{} is in no kustomization", f.display());
    }
    let components: BTreeSet<String> = std::fs::read_dir(root.join("components"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let known: BTreeSet<String> = COMPONENTS.iter().map(|c| c.to_string()).collect();
    assert_eq!(components, known, "deploy/kubernetes/components and COMPONENTS differ");
}

fn yaml_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .expect("the deploy directory")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    v.sort();
    v
}

#[test]
fn service_and_podmonitor_select_the_daemonset() {
    let root = repo_root().join("deploy/kubernetes");
    let ds: DaemonSet = k8s::read(&root.join("daemonset.yaml"));
    let pod = &ds.spec.template.spec;
    let pod_labels = &ds.spec.template.metadata.labels;
    let container = pod.container();
    let port = container.port();
    assert_eq!(pod.host_pid, Some(true));
    let security = &container.security_context;
    assert_eq!(security.privileged, Some(false), "no privileged: true");
    let added = &security.capabilities.add;
    assert!(!added.iter().any(|c| c == "SYS_ADMIN"), "{added:?}");
    let args = &container.args;
    assert_eq!(args[0], "serve");
    assert!(args.contains(&format!("--listen=:{}", port.container_port)));
    let mounts: BTreeSet<&str> = container.volume_mounts.iter().map(|m| m.mount_path.as_str()).collect();
    for m in [
        "/sys/kernel/tracing",
        "/sys/fs/cgroup",
        "/sys/fs/bpf",
        "/host/var/log/pods",
    ] {
        assert!(mounts.contains(m), "no mount at {m}: {mounts:?}");
    }
    let has = |a: &str| args.iter().any(|x| x == a);
    assert!(has("--kubelet-log-root=/host/var/log"));
    assert!(has("--labels=pod"), "pod-level series in the DaemonSet: {args:?}");
    // Of the host's /var/log only the kubelet's pod directories.
    let host_paths: Vec<&str> = pod
        .volumes
        .iter()
        .filter_map(|v| v.host_path.as_ref())
        .map(|h| h.path.as_str())
        .collect();
    assert!(
        host_paths
            .iter()
            .all(|p| *p == "/var/log/pods" || !p.starts_with("/var/log")),
        "{host_paths:?}"
    );
    assert_eq!(security.seccomp_profile.kind, "RuntimeDefault");
    let probe_path = |p: &Option<k8s::Probe>| p.as_ref().map(|p| p.http_get.path.clone());
    assert_eq!(probe_path(&container.readiness_probe).as_deref(), Some("/readyz"));
    assert_eq!(probe_path(&container.liveness_probe).as_deref(), Some("/healthz"));
    let env: Vec<&str> = container.env.iter().map(|e| e.name.as_str()).collect();
    assert!(env.contains(&"NVIDIA_VISIBLE_DEVICES"), "NVML in the pod: {env:?}");
    let terms = &pod
        .affinity
        .as_ref()
        .expect("a node affinity")
        .node_affinity
        .required_during_scheduling_ignored_during_execution
        .node_selector_terms;
    assert!(
        terms
            .iter()
            .flat_map(|t| &t.match_expressions)
            .any(|e| e.key == "nvidia.com/gpu.present"),
        "GPU node affinity: {terms:?}"
    );

    let svc: Service = k8s::read(&root.join("service.yaml"));
    for (k, v) in &svc.spec.selector {
        assert_eq!(pod_labels.get(k), Some(v), "service selector {k}");
    }
    assert!(
        svc.spec.ports.first().is_some_and(|p| p.target_port.names(&port.name)),
        "the Service targets the port {}: {:?}",
        port.name,
        svc.spec.ports
    );
    let pm: PodMonitor = k8s::read(&root.join("components/podmonitor/podmonitor.yaml"));
    assert_eq!(pm.kind, "PodMonitor");
    for (k, v) in &pm.spec.selector.match_labels {
        assert_eq!(pod_labels.get(k), Some(v), "podmonitor selector {k}");
    }
    assert_eq!(
        pm.spec.pod_metrics_endpoints.first().map(|e| e.port.as_str()),
        Some(port.name.as_str())
    );
    assert_eq!(
        pm.metadata.labels.get("release").map(String::as_str),
        Some("kube-prometheus-stack")
    );
    let np: NetworkPolicy = k8s::read(&root.join("networkpolicy.yaml"));
    for (k, v) in &np.spec.pod_selector.match_labels {
        assert_eq!(pod_labels.get(k), Some(v), "networkpolicy selector {k}");
    }
    assert!(
        np.spec
            .ingress
            .first()
            .and_then(|i| i.ports.first())
            .is_some_and(|p| p.port.names(&port.name)),
        "the NetworkPolicy admits the port {}: {:?}",
        port.name,
        np.spec.ingress
    );
    assert_eq!(
        np.spec.egress.as_ref().map(Vec::len),
        Some(0),
        "the agent needs no egress"
    );
    for meta in [&ds.metadata, &svc.metadata, &pm.metadata, &np.metadata] {
        assert_eq!(meta.namespace.as_deref(), Some("gdrtrace"), "{}", meta.name);
    }
    let containerfile = std::fs::read_to_string(repo_root().join("deploy/Containerfile")).unwrap();
    assert!(containerfile.contains(&format!("EXPOSE {}", port.container_port)));
}

/// The parts of a Grafana dashboard the test reads.
#[derive(Deserialize)]
struct Dashboard {
    panels: Vec<Panel>,
    templating: Templating,
}

#[derive(Deserialize)]
struct Panel {
    title: String,
    targets: Vec<Target>,
}

#[derive(Deserialize)]
struct Target {
    expr: String,
}

#[derive(Deserialize)]
struct Templating {
    list: Vec<Variable>,
}

#[derive(Deserialize)]
struct Variable {
    #[serde(default)]
    definition: Option<String>,
}

#[test]
fn rules_and_dashboard_query_metrics_the_agent_exposes() {
    let names = example_names();
    let rules = std::fs::read_to_string(repo_root().join("deploy/prometheus/rules.yaml")).unwrap();
    let used = promql_metric_names(&rules);
    assert!(used.len() >= 4, "{used:?}");
    // The missing-agent alerts read what Prometheus itself and
    // kube-state-metrics export, not the agent.
    let foreign: BTreeSet<String> = [
        "up",
        "kube_daemonset_status_number_ready",
        "kube_daemonset_status_desired_number_scheduled",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    let missing: Vec<_> = used.difference(&names).filter(|n| !foreign.contains(*n)).collect();
    assert!(
        missing.is_empty(),
        "rules.yaml queries metrics the agent does not expose: {missing:?}"
    );

    let dash: Dashboard = read_as(&repo_root().join("deploy/grafana/gdrtrace-dashboard.json"));
    let mut exprs = Vec::new();
    for p in &dash.panels {
        assert!(!p.title.is_empty());
        for t in &p.targets {
            exprs.push(t.expr.clone());
        }
    }
    assert!(exprs.len() >= 15, "{}", exprs.len());
    // Template variables: Grafana's label_values(metric, label).
    let variables: Vec<&str> = dash
        .templating
        .list
        .iter()
        .filter_map(|v| v.definition.as_deref())
        .collect();
    let used: BTreeSet<String> = exprs
        .iter()
        .map(String::as_str)
        .chain(variables)
        .flat_map(promql_metric_names)
        .collect();
    let missing: Vec<_> = used.difference(&names).collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries metrics the agent does not expose: {missing:?}"
    );
    // Every panel query at least parses as PromQL (promtool has no parser
    // command; a rule file of recording rules is parsed on check).
    if have("rules_and_dashboard_query_metrics_the_agent_exposes", "promtool", HOW) {
        let dir = integration_tests::scratch("dash");
        let mut file = String::from("groups:\n  - name: dashboard\n    rules:\n");
        for (i, e) in exprs.iter().enumerate() {
            let e = e
                .replace("$__rate_interval", "5m")
                .replace("$node", ".*")
                .replace("$namespace", ".*");
            file.push_str(&format!(
                "      - record: dashboard:q{i}\n        expr: {}\n",
                serde_json::to_string(&e).unwrap()
            ));
        }
        std::fs::write(dir.join("dash.yaml"), file).unwrap();
        let (ok, out) = promtool(&["check", "rules", dir.join("dash.yaml").to_str().unwrap()], None);
        assert!(ok, "a dashboard query does not parse:\n{out}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn documented_metrics_are_the_exposition() {
    let names = example_names();
    let families: BTreeSet<String> = names
        .iter()
        .filter(|n| {
            !["_bucket", "_sum", "_count"]
                .iter()
                .any(|s| n.ends_with(s) && names.contains(&n[..n.len() - s.len()]))
        })
        .cloned()
        .collect();
    let documented = documented_metrics();
    assert!(documented.len() >= 30, "{documented:?}");
    let undocumented: Vec<_> = families.difference(&documented).collect();
    let stale: Vec<_> = documented.difference(&families).collect();
    assert!(
        undocumented.is_empty() && stale.is_empty(),
        "docs/serve.md's table and the exposition differ: not documented {undocumented:?}, documented but not exposed {stale:?}"
    );
}

#[test]
fn the_exposition_passes_promtool_check_metrics() {
    if !have("the_exposition_passes_promtool_check_metrics", "promtool", HOW) {
        return;
    }
    let text = render(&Snapshot::example(), Format::Text);
    let (ok, out) = promtool(&["check", "metrics"], Some(&text));
    assert!(ok && out.trim().is_empty(), "promtool check metrics:\n{out}");
    // promtool's linter is live: a counter without _total is reported.
    let (ok, out) = promtool(
        &["check", "metrics"],
        Some("# HELP x_bytes x\n# TYPE x_bytes counter\nx_bytes 1\n"),
    );
    assert!(!ok && out.contains("_total"), "{out}");
}

/// Every alert has a `runbook_url` whose anchor is a section of
/// docs/fleet.md (the on-call page), as GitHub names heading anchors.
#[test]
fn every_alert_has_a_runbook_in_the_fleet_page() {
    let rules = std::fs::read_to_string(repo_root().join("deploy/prometheus/rules.yaml")).unwrap();
    let page = std::fs::read_to_string(repo_root().join("docs/fleet.md")).unwrap();
    let anchors: BTreeSet<String> = page
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|h| {
            h.trim_start_matches('#')
                .trim()
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-')
                .map(|c| if c == ' ' { '-' } else { c })
                .collect()
        })
        .collect();
    let alerts = rules.matches("- alert: ").count();
    let urls: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("runbook_url: "))
        .collect();
    assert_eq!(urls.len(), alerts, "one runbook_url per alert");
    for u in urls {
        let anchor = u.trim_matches('"').rsplit_once('#').map(|(_, a)| a).unwrap_or("");
        assert!(anchors.contains(anchor), "{u}: no section #{anchor} in docs/fleet.md");
    }
}
