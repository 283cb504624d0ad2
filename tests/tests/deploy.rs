//! The deployment files, checked offline with the tools their users run:
//! `promtool` (Debian's prometheus 2.42) on the alerting rules and on the
//! exposition, `kubernetes-validate` (PyPI) on the manifests against the
//! Kubernetes schemas, and the names the rules, the dashboard and
//! docs/serve.md use against the names the agent exposes.
//!
//! What is proven: the rules parse and each alert fires and stays silent
//! where its unit test says; the PrometheusRule carries exactly those
//! rules; the core manifests validate strictly against two Kubernetes
//! versions (and a broken copy does not, so the validator is live); the
//! Service and PodMonitor select the DaemonSet's pods and port; every metric
//! the rules and the dashboard query exists; the documented table is the
//! exposition's set of families. Not proven: the PodMonitor and
//! PrometheusRule against the Prometheus Operator's CRD schemas (not
//! available offline), and the image build (no container engine here).
use std::{collections::BTreeSet, path::Path, process::Command};

use gdrtrace::serve::metrics::{Format, Snapshot, render};
use integration_tests::{documented_metrics, have, metric_names, promql_metric_names, repo_root, yaml};
use serde_json::Value;

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
    assert!(ok && out.contains("SUCCESS: 4 rules found"), "{out}");
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
    let manifest = std::fs::read_to_string(repo_root().join("deploy/kubernetes/prometheusrule.yaml")).unwrap();
    let (_, spec) = manifest.split_once("\nspec:\n").expect("a spec: line");
    let dedented: String = spec
        .lines()
        .map(|l| l.strip_prefix("  ").unwrap_or(l))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        dedented, rules,
        "deploy/kubernetes/prometheusrule.yaml's spec is not deploy/prometheus/rules.yaml indented by two spaces: regenerate it with sed 's/^/  /'"
    );
}

#[test]
fn manifests_validate_against_the_kubernetes_schemas() {
    if !have(
        "manifests_validate_against_the_kubernetes_schemas",
        "kubernetes-validate",
        HOW,
    ) {
        return;
    }
    let dir = repo_root().join("deploy/kubernetes");
    let files: Vec<String> = integration_tests_files(&dir);
    assert!(files.len() >= 5, "{files:?}");
    for version in ["1.29.0", "1.33.0"] {
        let out = Command::new("kubernetes-validate")
            .args(["--strict", "-k", version])
            .args(&files)
            .output()
            .expect("running kubernetes-validate");
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "kubernetes {version}:\n{text}");
        for core in ["daemonset/gdrtrace", "service/gdrtrace", "namespace/gdrtrace"] {
            assert!(
                text.contains(&format!("passed for resource {core}")),
                "{core} not validated:\n{text}"
            );
        }
    }
    // The validator is live: a misspelt field fails.
    let ds = std::fs::read_to_string(dir.join("daemonset.yaml")).unwrap();
    let bad = std::env::temp_dir().join(format!("gdrtrace-bad-ds-{}.yaml", std::process::id()));
    std::fs::write(&bad, ds.replace("hostPID: true", "hostPid: true")).unwrap();
    let out = Command::new("kubernetes-validate")
        .arg("--strict")
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success(), "a misspelt field passed");
    std::fs::remove_file(&bad).unwrap();
}

fn integration_tests_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("the deploy directory")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn service_and_podmonitor_select_the_daemonset() {
    let root = repo_root().join("deploy/kubernetes");
    let ds = &yaml(&root.join("daemonset.yaml"))[0];
    let pod_labels = &ds["spec"]["template"]["metadata"]["labels"];
    let container = &ds["spec"]["template"]["spec"]["containers"][0];
    let port = &container["ports"][0];
    assert_eq!(ds["spec"]["template"]["spec"]["hostPID"], true);
    let security = &container["securityContext"];
    assert_eq!(security["privileged"], false, "no privileged: true");
    let added: Vec<&str> = security["capabilities"]["add"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c.as_str())
        .collect();
    assert!(!added.contains(&"SYS_ADMIN"), "{added:?}");
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert_eq!(args[0], "serve");
    assert!(args.contains(&format!("--listen=0.0.0.0:{}", port["containerPort"]).as_str()));
    let mounts: BTreeSet<&str> = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["mountPath"].as_str())
        .collect();
    for m in ["/sys/kernel/tracing", "/sys/fs/cgroup", "/sys/fs/bpf", "/host/var/log"] {
        assert!(mounts.contains(m), "no mount at {m}: {mounts:?}");
    }
    assert!(args.contains(&"--kubelet-log-root=/host/var/log"));

    let svc = &yaml(&root.join("service.yaml"))[0];
    for (k, v) in svc["spec"]["selector"].as_object().unwrap() {
        assert_eq!(&pod_labels[k], v, "service selector {k}");
    }
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], port["name"]);
    let pm = &yaml(&root.join("podmonitor.yaml"))[0];
    assert_eq!(pm["kind"], "PodMonitor");
    for (k, v) in pm["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(&pod_labels[k], v, "podmonitor selector {k}");
    }
    assert_eq!(pm["spec"]["podMetricsEndpoints"][0]["port"], port["name"]);
    for doc in [ds, svc, pm] {
        assert_eq!(doc["metadata"]["namespace"], "gdrtrace");
    }
    let dockerfile = std::fs::read_to_string(repo_root().join("deploy/Dockerfile")).unwrap();
    assert!(dockerfile.contains(&format!("EXPOSE {}", port["containerPort"])));
}

#[test]
fn rules_and_dashboard_query_metrics_the_agent_exposes() {
    let names = example_names();
    let rules = std::fs::read_to_string(repo_root().join("deploy/prometheus/rules.yaml")).unwrap();
    let used = promql_metric_names(&rules);
    assert!(used.len() >= 4, "{used:?}");
    let missing: Vec<_> = used.difference(&names).collect();
    assert!(
        missing.is_empty(),
        "rules.yaml queries metrics the agent does not expose: {missing:?}"
    );

    let dash: Value = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("deploy/grafana/gdrtrace-dashboard.json")).unwrap(),
    )
    .expect("the dashboard is JSON");
    let mut exprs = Vec::new();
    for p in dash["panels"].as_array().expect("panels") {
        assert!(p["title"].as_str().is_some_and(|t| !t.is_empty()));
        for t in p["targets"].as_array().expect("targets") {
            exprs.push(t["expr"].as_str().expect("expr").to_string());
        }
    }
    assert!(exprs.len() >= 15, "{}", exprs.len());
    // Template variables: Grafana's label_values(metric, label).
    let variables: Vec<&str> = dash["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["definition"].as_str())
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
