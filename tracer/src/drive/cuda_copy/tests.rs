use super::*;

#[test]
fn default_sizes_parse() {
    assert_eq!(
        parse_sizes(DEFAULT_COPY_SIZES),
        Ok(SizeList(vec![4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20]))
    );
}

#[test]
fn default_iters_are_bounded() {
    assert_eq!(default_iters(4096), MAX_DEFAULT_ITERS);
    assert_eq!(default_iters(1 << 20), 1024);
    assert_eq!(default_iters(256 << 20), 4);
    assert_eq!(default_iters(4 << 30), MIN_DEFAULT_ITERS);
}

#[test]
fn summary_first_line_is_parseable() {
    let r = CudaCopyReport {
        pid: 1,
        driver_version: 13000,
        devices: 1,
        device: 0,
        device_name: "X".into(),
        peer: None,
        peer_name: None,
        peer_access_supported: None,
        cases: vec![CopyCase::D2d],
        calls: 3,
        calls_by_function: BTreeMap::from([("cuMemcpyDtoD_v2".to_string(), 3)]),
        bytes: 12,
        results: vec![],
        skipped: vec!["skipping: needs 2 GPUs (g2g-staged, g2g-peer; found 1 device)".into()],
        elapsed_s: 0.0,
    };
    let lines = r.summary_lines();
    assert_eq!(lines[0], "cuda-copy: devices=1 cases=1 calls=3 bytes=12");
    assert!(lines.iter().any(|l| l.starts_with("cuda-copy: skipping: needs 2 GPUs")));
    // `validate` reads the summary back as this type.
    let back: CudaCopyReport = serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
    assert_eq!(back.calls_by_function, r.calls_by_function);
}
