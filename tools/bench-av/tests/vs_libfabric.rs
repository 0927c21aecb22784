//! `tools/bench-av-vs-libfabric` as a user runs it, with stand-ins for the compiler, cargo,
//! the anchor harness and `bench-av` (each prints figures fixed here), so that what the
//! script makes of the figures can be checked: the medians it prints and the targets it
//! compares.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A fresh directory for one test.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bench-av-vs-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn executable(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Run the script on `counts` and `rounds` with an anchor harness whose run is `harness` (a
/// shell script given `prov n batch`), and a `bench-av` that prints `bench` (a shell script
/// given `--counts n --rounds r`). `None` when the machine lacks the libfabric headers the
/// script looks for before anything else.
fn run(test: &str, counts: &str, rounds: &str, harness: &str, bench: &str) -> Option<Output> {
    run_with(test, counts, rounds, (harness, bench), &[])
}

/// [`run`] with more environment variables.
fn run_with(
    test: &str,
    counts: &str,
    rounds: &str,
    (harness, bench): (&str, &str),
    env: &[(&str, &str)],
) -> Option<Output> {
    if !Path::new("/usr/include/rdma/fabric.h").exists() {
        eprintln!("skipped: no libfabric headers (the script refuses to run without them)");
        return None;
    }
    let dir = scratch(test);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench-av-vs-libfabric");
    let (bin, anchors, target) = (dir.join("bin"), dir.join("anchors"), dir.join("target"));
    for d in [&bin, &anchors, &target.join("release")] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(anchors.join("libfabric_av_bench.c"), "").unwrap();
    // The compiler writes the harness where it is asked to.
    let harness_file = dir.join("harness");
    executable(&harness_file, &format!("#!/bin/sh\n{harness}\n"));
    executable(
        &bin.join("gcc"),
        &format!(
            "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = -o ] && cp {} \"$2\"; shift; done\n",
            harness_file.display()
        ),
    );
    executable(&bin.join("cargo"), "#!/bin/sh\nexit 0\n");
    executable(&bin.join("pkg-config"), "#!/bin/sh\necho 1.17.0\n");
    executable(
        &target.join("release/bench-av"),
        &format!("#!/bin/sh\n{bench}\n"),
    );
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .arg(&script)
        .args([counts, rounds])
        .env("PATH", path)
        .env("UET_ANCHORS", &anchors)
        .env("CARGO_TARGET_DIR", &target)
        .env_remove("UET_BENCH_SLOW")
        .env_remove("UET_BENCH_CPU")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    Some(out)
}

/// The lines of `bench-av` the targets need, at the count `$2`.
const BENCH: &str = r#"n=$2
for l in "insert 100.0" "insert_batch 30.0" "lookup 5.0" "remove 20.0"; do
  set -- $l
  echo "bench=av impl=uet-nic op=$1 n=$n ns_per_op=$2 bytes_per_entry=40.0"
done"#;

/// libfabric writes its warnings to standard error (as with `FI_LOG_LEVEL=warn`): they are
/// no figures of the anchor, and its medians are those of its figure lines alone.
#[test]
fn the_anchors_warnings_are_not_taken_for_figures() {
    let harness = r#"for i in 1 2 3; do
  echo "libfabric:1:1::core:core:fi_getinfo_():1230<warn> fi_getinfo: provider ofi_rxm returned -61 (No data available)" >&2
done
echo "prov=$1 n=$2 batch=$3 inserted=$2 insert_ns=150.0 lookup_ns=5.0 remove_ns=1000.0 rss_bytes_per_entry=120.0""#;
    let Some(out) = run("warnings", "1000", "3", harness, BENCH) else {
        return;
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for batch in [1, 256] {
        let median = format!(
            "median prov=udp n=1000 batch={batch} rounds=3 insert_ns=150.0 lookup_ns=5.0 \
             remove_ns=1000.0 rss_bytes_per_entry=120.0"
        );
        assert!(stdout.contains(&median), "{stdout}\n{stderr}");
    }
    let insert = stdout
        .lines()
        .find(|l| l.starts_with("insert (1/call) ns n=1000"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        insert.contains("<= udp 150.0") && insert.ends_with(" met"),
        "{insert}"
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
}

/// An anchor run whose inserts did not all succeed (libfabric's AV refused some) timed
/// lookups and removes of entries that are not there: its figures are not taken for a
/// median, the targets that need them read `n/a`, and the script exits 1.
#[test]
fn an_anchor_run_that_inserted_fewer_than_n_gives_no_median() {
    let harness = r#"inserted=$2
[ "$1" = udp ] && [ "$3" = 1 ] && inserted=$(($2 / 2))
echo "prov=$1 n=$2 batch=$3 inserted=$inserted insert_ns=150.0 lookup_ns=5.0 remove_ns=1000.0 rss_bytes_per_entry=120.0""#;
    let Some(out) = run("short", "1000", "3", harness, BENCH) else {
        return;
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stdout.contains("median prov=udp n=1000 batch=1 "),
        "{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("median prov=udp n=1000 batch=256 "),
        "{stdout}\n{stderr}"
    );
    assert!(stdout.contains("inserted 500 of 1000"), "{stdout}");
    let insert = stdout
        .lines()
        .find(|l| l.starts_with("insert (1/call) ns n=1000"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(insert.contains("n/a"), "{insert}");
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
}

/// At a million entries the insertsym target is always listed: a run whose `bench-av` printed
/// no insertsym figure reads `n/a` there and exits 1, instead of leaving the target out and
/// passing; with the figure, it is the AV's bytes for the million peers.
#[test]
fn a_missing_insertsym_figure_at_a_million_entries_reads_n_a() {
    let harness = r#"echo "prov=$1 n=$2 batch=$3 inserted=$2 insert_ns=150.0 lookup_ns=5.0 remove_ns=40.0 rss_bytes_per_entry=64.0""#;
    let with_sym = format!(
        "{BENCH}\necho \"bench=av impl=uet-nic op=insertsym n=$n ns_per_op=2.0 bytes_per_entry=0.000720\""
    );
    for (bench, have, code) in [(BENCH.to_string(), "n/a", 1), (with_sym, "720", 0)] {
        let Some(out) = run("sym", "1000000", "1", harness, &bench) else {
            return;
        };
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let sym = stdout
            .lines()
            .find(|l| l.starts_with("insertsym of 1,000,000 peers"))
            .unwrap_or_else(|| panic!("{stdout}\n{stderr}"));
        assert!(sym.split_whitespace().any(|w| w == have), "{sym}");
        assert_eq!(out.status.code(), Some(code), "{stdout}\n{stderr}");
    }
}

/// `UET_BENCH_CPU` runs the bench and the anchor alike on that CPU alone, and says so in the
/// first line; a value that is no CPU of the machine is refused before anything runs.
#[test]
fn the_bench_and_the_anchor_run_on_the_cpu_asked_for() {
    let cpus = r##"echo "# cpus $(grep Cpus_allowed_list /proc/self/status | cut -f2)""##;
    let harness = format!(
        "{cpus} >&2\necho \"prov=$1 n=$2 batch=$3 inserted=$2 insert_ns=150.0 lookup_ns=5.0 \
         remove_ns=1000.0 rss_bytes_per_entry=120.0\""
    );
    let bench = format!("{cpus}\n{BENCH}");
    let Some(out) = run_with(
        "cpu",
        "1000",
        "1",
        (&harness, &bench),
        &[("UET_BENCH_CPU", "0")],
    ) else {
        return;
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout
            .lines()
            .next()
            .is_some_and(|l| l.ends_with(", on CPU 0")),
        "{stdout}"
    );
    assert!(
        stdout.contains("# cpus 0\n"),
        "bench-av on CPU 0:\n{stdout}"
    );
    // The anchor's standard error is the script's.
    assert_eq!(
        stderr.matches("# cpus 0\n").count(),
        4,
        "every anchor run on CPU 0:\n{stderr}"
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    for cpu in ["x", "1x", "99999"] {
        let out = run_with(
            "cpu-bad",
            "1000",
            "1",
            (&harness, &bench),
            &[("UET_BENCH_CPU", cpu)],
        )
        .unwrap();
        assert_eq!(out.status.code(), Some(2), "UET_BENCH_CPU={cpu}");
        assert!(
            String::from_utf8_lossy(&out.stdout).is_empty(),
            "nothing ran"
        );
    }
}
