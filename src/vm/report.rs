//! Reading the device host's report (`ptplab devhost --report`, src/devhost.rs) after a VM
//! test: every access or frame the model did not carry out is a counter there, and a VM test
//! that saw one has not tested what it claims (issue 24: a TSO frame the model dropped cost 122
//! retransmits and no test noticed).
//!
//! [`report_problems`] lists them. It knows today's counters by name ([`PROBLEM_COUNTERS`]) and
//! also takes any numeric field, at any depth, whose name says the model did not do something
//! ([`PROBLEM_WORDS`]: `tx_tso_unmodelled`, `rx_too_big`, `..._dropped`), so a counter the
//! model gains later fails every VM test without each test naming it.

use serde_json::Value;

/// Counters the report carries today that mean something was not carried out: messages QEMU
/// sent that could not be decoded, DMA the model could not do, BAR accesses outside BAR0, MSI-X
/// messages with no path to the guest, guest RAM regions refused.
pub const PROBLEM_COUNTERS: &[&str] = &["malformed", "dma_faults", "bar_misses", "ram_refused"];

/// Counters whose name matches [`PROBLEM_WORDS`] but which do not count something lost. None
/// today: `msix_dropped` counted every interrupt raised while the guest was on INTx until the
/// device host routed signals by the config space (issue 24); it now counts only MSI-X
/// messages that could not reach the guest.
pub const NOT_PROBLEMS: &[&str] = &[];

/// Words in a counter's name that mean the model did not carry something out. `rx_missed`
/// (no free descriptor: the guest was slow), `rx_not_ready` (link down or RX off), `rx_filtered`
/// (not addressed to us) are what a real part does too, and do not match.
pub const PROBLEM_WORDS: &[&str] = &[
    "unimplemented",
    "unmodelled",
    "unmodeled",
    "unsupported",
    "dropped",
    "too_big",
    "oversize",
    "malformed",
    "dma_fault",
    "dma_error",
];

/// What in `report` shows an access or frame the model did not carry out, one line each; empty
/// when nothing did. The `unimplemented` list is given offset by offset.
pub fn report_problems(report: &Value) -> Vec<String> {
    let mut out = Vec::new();
    match &report["unimplemented"] {
        Value::Array(a) => {
            for u in a {
                let off = u["offset"].as_u64().unwrap_or(u64::MAX);
                out.push(format!(
                    "unimplemented BAR0 offset {off:#06x} ({} reads, {} writes)",
                    u["reads"], u["writes"]
                ));
            }
        }
        Value::Null => out.push("the report has no \"unimplemented\" list".into()),
        other => out.push(format!("\"unimplemented\" is not a list: {other}")),
    }
    for key in PROBLEM_COUNTERS {
        if report.get(key).is_none() {
            out.push(format!("the report has no {key:?} counter"));
        }
    }
    walk(report, "", &mut out);
    out
}

/// Non-zero numeric fields under `v` whose name is a problem counter.
fn walk(v: &Value, path: &str, out: &mut Vec<String>) {
    let Value::Object(map) = v else {
        return;
    };
    for (k, child) in map {
        let p = if path.is_empty() {
            k.clone()
        } else {
            format!("{path}.{k}")
        };
        match child {
            Value::Object(_) => walk(child, &p, out),
            Value::Number(n)
                if (is_problem(k) || not_carried_out(&p))
                    && n.as_f64().is_some_and(|x| x != 0.0) =>
            {
                out.push(format!("{p} = {n}"));
            }
            _ => {}
        }
    }
}

/// Every counter of the report's `not_carried_out` object (the model's own list of frames it
/// did not carry out: malformed TX, skipped checksums, runts, oversize, DMA errors) except
/// `tx_no_wire`: frames sent while no cable is attached, which a test without a wire
/// (tests/vm_igc.rs) makes by design and a real part with nothing plugged in would not send.
fn not_carried_out(path: &str) -> bool {
    path.strip_prefix("not_carried_out.")
        .is_some_and(|k| k != "tx_no_wire")
}

fn is_problem(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    !NOT_PROBLEMS.contains(&k.as_str())
        && (PROBLEM_COUNTERS.contains(&k.as_str()) || PROBLEM_WORDS.iter().any(|w| k.contains(w)))
}

/// Panics with every problem [`report_problems`] finds, prefixed with `tag`.
pub fn assert_report_clean(tag: &str, report: &Value) {
    let p = report_problems(report);
    assert!(
        p.is_empty(),
        "[{tag}] the device host's report shows accesses or frames the model did not carry \
         out:\n  {}",
        p.join("\n  ")
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn clean() -> Value {
        json!({"malformed": 0, "dma_faults": 0, "bar_misses": 0, "msix_dropped": 0,
               "ram_refused": 0, "rx_missed": 7, "peers_refused": 2, "tx_frames": 10,
               "unimplemented": [], "tx_stamp_delivery_us": {"p50": 3.0}})
    }

    #[test]
    fn a_clean_report_has_no_problems() {
        assert_eq!(report_problems(&clean()), Vec::<String>::new());
        assert_report_clean("t", &clean());
    }

    #[test]
    fn every_kind_of_problem_is_named() {
        let mut r = clean();
        r["unimplemented"] = json!([{"offset": 0x1694, "reads": 2, "writes": 0}]);
        r["msix_dropped"] = json!(3);
        r["dma_faults"] = json!(1);
        r["model"] = json!({"tx_tso_unmodelled": 5, "rx_too_big": 1, "rx_missed": 4});
        r["rx_oversize_dropped"] = json!(2);
        r["not_carried_out"] = json!({"rx_runt": 3, "tx_csum_skipped": 1, "tx_no_wire": 2});
        let p = report_problems(&r);
        let all = p.join("\n");
        for want in [
            "offset 0x1694 (2 reads, 0 writes)",
            "dma_faults = 1",
            "model.tx_tso_unmodelled = 5",
            "model.rx_too_big = 1",
            "rx_oversize_dropped = 2",
            "not_carried_out.rx_runt = 3",
            "not_carried_out.tx_csum_skipped = 1",
        ] {
            assert!(all.contains(want), "{want} not in {all}");
        }
        assert!(!all.contains("rx_missed"), "{all}");
        assert!(all.contains("msix_dropped = 3"), "{all}");
        assert_eq!(p.len(), 8, "{all}");
    }

    #[test]
    fn a_report_without_its_counters_is_a_problem() {
        let p = report_problems(&json!({"tx_frames": 1}));
        assert!(
            p.iter().any(|l| l.contains("no \"unimplemented\"")),
            "{p:?}"
        );
        assert!(p.iter().any(|l| l.contains("\"dma_faults\"")), "{p:?}");
    }
}
