//! The one boot core of the lab, whatever the emulator: boot the guest with
//! a raw disk for its results, follow its console (init.sh's `lab:` lines
//! shown live), stop the emulator when the pass is over, out of time or
//! wedged (no heartbeat; the CPU state saved first), reboot after a wedge
//! to resume after the steps that finished, and merge what every boot left
//! on its disk into one results tree.
use super::console::{Follower, Line};
use super::host::{interrupted, log, Work};
use super::wedge;
use anyhow::{Context, Result};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// Boots after a wedge, at most (the first included).
const MAX_BOOTS: u32 = 3;
/// A reboot needs at least this much of the pass's time left, s.
const REBOOT_MIN_LEFT_S: u64 = 300;
/// Before the first heartbeat the kernel boots too: this much longer, s.
const BOOT_GRACE_S: u64 = 60;
/// After `lab: done` (or a panic, or a reboot) the emulator gets this long
/// to end by itself before it is stopped.
const DONE_GRACE: Duration = Duration::from_secs(20);
/// How long a stopped emulator gets between SIGTERM and SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(10);

/// One boot as the emulator is asked to run it.
pub struct BootSpec {
    /// The kernel command line.
    pub append: String,
    /// The raw disk the guest writes its results archive onto (created
    /// empty, [`Emulator::disk_bytes`] long).
    pub disk: PathBuf,
    /// Where the guest's serial console goes.
    pub console: PathBuf,
}

/// What differs between emulators; the boot core does the rest.
pub trait Emulator {
    /// For the log, e.g. `QEMU TCG` or `Bochs 3.0 (corei7_skylake_x)`.
    fn name(&self) -> String;
    /// The kernel arguments the emulator's machine needs (console, panic).
    fn console_args(&self) -> &'static str;
    /// The guest stops starting steps this long before the boot's limit, s.
    fn deadline_margin_s(&self) -> u64;
    /// Seconds without a heartbeat before the guest counts as wedged (None:
    /// no watchdog, e.g. where the guest clock runs far slower than the host's).
    fn wedge_after_s(&self) -> Option<u64>;
    /// Size of the results disk, bytes.
    fn disk_bytes(&self) -> u64;
    /// Starts one boot.
    fn spawn(&mut self, spec: &BootSpec) -> Result<Child>;
    /// Every CPU's registers, for a wedged guest ("" when the emulator
    /// cannot say).
    fn dump_state(&mut self) -> String {
        String::new()
    }
    /// What a panicked guest's CPUs hold: their registers and the end of
    /// each one's kernel stack, where "corrupted stack end" panics find the
    /// word overwritten ("" when the emulator cannot say, or the guest's
    /// panic already ended it).
    fn dump_panic(&mut self) -> String {
        String::new()
    }
    /// The emulator's own files for the results (its configuration, the
    /// end of its log).
    fn collect(&self, _into: &Path) -> Result<()> {
        Ok(())
    }
}

/// What the guest is told (init.sh reads `lab.*=` from its command line).
pub struct GuestArgs {
    /// `quick`, `full` or `shell`.
    pub pass: String,
    /// `lab.steps=`: only these steps.
    pub steps: Option<String>,
    /// `lab.iterations=`.
    pub iterations: Option<u32>,
    /// Further arguments (LAB_KERNEL_ARGS, then those after `--`).
    pub extra: Vec<String>,
}

impl GuestArgs {
    /// The command line of boot `n` with at most `limit_s` seconds, after the
    /// steps in `done`.
    pub fn append(&self, emu: &dyn Emulator, n: u32, limit_s: u64, done: &[String]) -> String {
        let mut a = vec![
            emu.console_args().to_string(),
            format!("lab.pass={}", self.pass),
            format!("lab.boot={n}"),
        ];
        if !self.extra.iter().any(|e| e.starts_with("lab.deadline=")) {
            a.push(format!(
                "lab.deadline={}",
                limit_s.saturating_sub(emu.deadline_margin_s())
            ));
        }
        if !done.is_empty() {
            a.push(format!("lab.done={}", done.join(",")));
        }
        if let Some(s) = &self.steps {
            a.push(format!("lab.steps={s}"));
        }
        if let Some(i) = self.iterations {
            a.push(format!("lab.iterations={i}"));
        }
        a.extend(self.extra.iter().cloned());
        a.join(" ")
    }
}

/// How one boot ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// The emulator ended (or was stopped after the guest was done).
    Ended,
    /// Out of the pass's time.
    OutOfTime,
    /// No heartbeat for too long.
    Wedged,
    /// The emulator ended before the guest said its pass was done (a reset
    /// of the guest under -no-reboot, an emulator that died): resumed like
    /// a wedge, so the steps still to run are not lost.
    Vanished,
    /// The guest's kernel panicked before its pass was done (the line
    /// that said so): resumed like a wedge, and named in the verdict.
    Panicked(String),
}

/// Stops the emulator: SIGTERM, then SIGKILL after [`TERM_GRACE`].
fn stop(child: &mut Child) -> Result<ExitStatus> {
    if let Some(s) = child.try_wait()? {
        return Ok(s);
    }
    let pid = rustix::process::Pid::from_child(child);
    let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    let t = Instant::now();
    while t.elapsed() < TERM_GRACE {
        if let Some(s) = child.try_wait()? {
            return Ok(s);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = child.kill();
    Ok(child.wait()?)
}

/// What one boot showed.
struct Watched {
    end: End,
    status: ExitStatus,
    /// The last step the console named.
    last_step: Option<String>,
    /// The CPU state at a wedge.
    dump: String,
}

/// The panic a kernel line reports, from "Kernel panic" on, its control
/// characters escaped (guest text, printed on the host's terminal).
fn panic_reason(line: &str) -> String {
    let from = line.find("Kernel panic").unwrap_or(0);
    line[from..].trim_end().escape_debug().to_string()
}

/// Follows one boot to its end.
fn watch(
    work: &mut Work,
    emu: &mut dyn Emulator,
    child: &mut Child,
    console: &Path,
    limit: Duration,
    stop_flag: &AtomicBool,
) -> Result<Watched> {
    let mut follow = Follower::new(console.to_path_buf());
    let start = Instant::now();
    let mut last_beat = start;
    let mut beats = 0u64;
    let mut banners = 0u32;
    let mut done_at: Option<Instant> = None;
    let mut panic: Option<String> = None;
    let mut last_step = None;
    let wedge_after = emu.wedge_after_s();
    loop {
        for line in follow.poll() {
            match Line::of(&line) {
                Line::Heartbeat => {
                    beats += 1;
                    last_beat = Instant::now();
                }
                Line::Step(s) => {
                    eprintln!("{line}");
                    last_step = Some(s);
                }
                Line::Lab => eprintln!("{line}"),
                Line::Done => {
                    eprintln!("{line}");
                    done_at.get_or_insert_with(Instant::now);
                }
                Line::Panic if done_at.is_none() => {
                    panic = Some(panic_reason(&line));
                    done_at = Some(Instant::now());
                }
                Line::Banner => {
                    banners += 1;
                    if banners > 1 && done_at.is_none() {
                        work.warn("the guest rebooted (see console.log)".into());
                        done_at = Some(Instant::now());
                    }
                }
                Line::Panic | Line::Other => {}
            }
        }
        if let Some(status) = child.try_wait()? {
            return Ok(Watched {
                end: match (&panic, done_at) {
                    (Some(p), _) => End::Panicked(p.clone()),
                    (None, Some(_)) => End::Ended,
                    (None, None) => End::Vanished,
                },
                status,
                last_step,
                dump: String::new(),
            });
        }
        if let Err(e) = interrupted(stop_flag) {
            stop(child)?;
            return Err(e);
        }
        let (end, dump) = if start.elapsed() >= limit {
            (End::OutOfTime, String::new())
        } else if wedge_after.is_some_and(|w| {
            let grace = if beats > 0 { 0 } else { BOOT_GRACE_S };
            last_beat.elapsed() >= Duration::from_secs(w + grace)
        }) {
            (End::Wedged, emu.dump_state())
        } else if done_at.is_some_and(|t| t.elapsed() >= DONE_GRACE) {
            match &panic {
                Some(p) => (End::Panicked(p.clone()), emu.dump_panic()),
                None => (End::Ended, String::new()),
            }
        } else {
            std::thread::sleep(Duration::from_secs(1));
            continue;
        };
        let status = stop(child)?;
        return Ok(Watched {
            end,
            status,
            last_step,
            dump,
        });
    }
}

/// The steps a results tree finished (init.sh appends each to steps.tsv).
pub fn done_steps(results: &Path) -> Vec<String> {
    fs::read_to_string(results.join("steps.tsv"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split('\t').next())
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// The suffix init.sh gives a test binary's second attempt (`test-X-retry`).
const RETRY: &str = "-retry";

/// The step a boot that ended during `step` must run again whole: a retry's
/// first attempt, which failed and so cannot stand for the step, or the
/// step itself.
fn rerun_of(step: &str) -> &str {
    step.strip_suffix(RETRY).unwrap_or(step)
}

/// The steps the next boot skips: those `results` finished, less those
/// whose retry a boot did not finish (`rerun`), which run again from their
/// first attempt.
fn resume_after(results: &Path, rerun: &[String]) -> Vec<String> {
    done_steps(results)
        .into_iter()
        .filter(|s| !rerun.contains(s))
        .collect()
}

/// Files every boot adds lines to, which merge by appending: the steps'
/// verdicts and the list of retried steps.
const APPENDED: [&str; 2] = ["steps.tsv", "retried.txt"];

/// Unpacks the results archive the guest wrote at the start of `disk`
/// into `into` (nothing when the guest wrote none).
pub fn unpack_disk(disk: &Path, into: &Path) -> Result<()> {
    fs::create_dir_all(into)?;
    let mut archive = tar::Archive::new(File::open(disk)?);
    archive.set_preserve_permissions(false);
    archive
        .unpack(into)
        .with_context(|| format!("the results archive on {}", disk.display()))
}

/// Where a resumed boot's results superseded an earlier boot's: one line
/// per results file kept aside, which the verdict lists.
pub const SUPERSEDED: &str = "superseded.txt";

/// Moves everything of `from` (what boot `boot` left) into `into` (files
/// replace files, trees merge), except that a results document (`.json`)
/// or a log (`.log`) an earlier boot wrote differently is not replaced: it
/// is kept as `NAME.before-bootN.EXT` beside the new one (so the checks,
/// which read every `NAME*.json`, judge its runs too), and `kept` names it.
/// A resumed boot re-runs the step a frozen one was in: the first attempt's
/// runs and logs, failing ones included, must not vanish behind the
/// second's.
fn merge_into(from: &Path, into: &Path, boot: u32, kept: &mut Vec<String>) -> Result<()> {
    fs::create_dir_all(into)?;
    for e in fs::read_dir(from)? {
        let e = e?;
        let to = into.join(e.file_name());
        if e.file_type()?.is_dir() {
            merge_into(&e.path(), &to, boot, kept)?;
            continue;
        }
        let ext = to
            .extension()
            .map(|x| x.to_string_lossy().into_owned())
            .unwrap_or_default();
        let kept_aside = matches!(ext.as_str(), "json" | "log");
        if kept_aside && to.is_file() && fs::read(&to)? != fs::read(e.path())? {
            let stem = to.file_stem().unwrap_or_default().to_string_lossy();
            let aside = to.with_file_name(format!("{stem}.before-boot{boot}.{ext}"));
            fs::rename(&to, &aside)?;
            let checked = if ext == "json" {
                " and checked too"
            } else {
                ""
            };
            kept.push(format!(
                "{}: boot {boot} wrote it again; the earlier boot's kept as {}{checked}",
                to.display(),
                aside.file_name().unwrap_or_default().to_string_lossy()
            ));
        }
        fs::rename(e.path(), &to)?;
    }
    fs::remove_dir_all(from)?;
    Ok(())
}

/// Moves boot `boot`'s results `from` into the merged tree `into`: the
/// files every boot adds lines to ([`APPENDED`]) appended, the rest by
/// [`merge_into`], whose list of results kept aside it returns.
fn merge_boot(from: &Path, into: &Path, boot: u32) -> Result<Vec<String>> {
    for f in APPENDED {
        append(&from.join(f), &into.join(f))?;
        let _ = fs::remove_file(from.join(f));
    }
    let mut kept = Vec::new();
    merge_into(from, into, boot, &mut kept)?;
    Ok(kept)
}

/// Appends the file `from` to `to` (a missing `from` adds nothing).
fn append(from: &Path, to: &Path) -> Result<()> {
    let Ok(bytes) = fs::read(from) else {
        return Ok(());
    };
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(to)?
        .write_all(&bytes)?;
    Ok(())
}

/// Boots until the pass ends, rebooting (at most twice) after a wedge and
/// resuming after the steps that finished; every boot's results are merged
/// into `new` (steps.tsv appended) and its console into `work/console.log`.
pub fn boot(
    work: &mut Work,
    emu: &mut dyn Emulator,
    guest: &GuestArgs,
    timeout_s: u64,
    new: &Path,
    stop_flag: &AtomicBool,
) -> Result<()> {
    let _ = fs::remove_dir_all(new);
    fs::create_dir_all(new)?;
    let all_console = work.dir.join("console.log");
    File::create(&all_console)?;
    let mut left = timeout_s;
    let mut rerun = Vec::new();
    for n in 1..=MAX_BOOTS {
        let started = Instant::now();
        let spec = BootSpec {
            append: guest.append(emu, n, left, &resume_after(new, &rerun)),
            disk: work.dir.join(format!("out-{n}.img")),
            console: work.dir.join(format!("console-{n}.log")),
        };
        let _ = fs::remove_file(&spec.disk);
        File::create(&spec.disk)?.set_len(emu.disk_bytes())?;
        File::create(&spec.console)?;
        log(format!(
            "boot {n}: {}, pass '{}', at most {left}s",
            emu.name(),
            guest.pass
        ));
        let mut child = emu.spawn(&spec)?;
        let w = watch(
            work,
            emu,
            &mut child,
            &spec.console,
            Duration::from_secs(left),
            stop_flag,
        )?;
        log(format!(
            "boot {n}: {} ended ({}) after {}s",
            emu.name(),
            w.status,
            started.elapsed().as_secs()
        ));
        let this = new.join(format!("boot-{n}"));
        if let Err(e) = unpack_disk(&spec.disk, &this) {
            log(format!("boot {n}: {e:#}"));
        }
        let kept = merge_boot(&this, new, n)?;
        for line in &kept {
            log(format!("boot {n}: {line}"));
        }
        if !kept.is_empty() {
            let mut f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(new.join(SUPERSEDED))?;
            for line in &kept {
                writeln!(f, "{line}")?;
            }
        }
        append(&spec.console, &all_console)?;
        fs::remove_file(&spec.disk)?;
        left = left.saturating_sub(started.elapsed().as_secs());
        let step = w.last_step.as_deref().unwrap_or("?");
        let why = match &w.end {
            End::Ended => break,
            End::OutOfTime => {
                work.warn(format!("{} stopped after {timeout_s}s in all", emu.name()));
                break;
            }
            End::Panicked(line) => {
                let state = if w.dump.is_empty() {
                    String::new()
                } else {
                    let file = format!("panic-{n}.txt");
                    fs::write(new.join(&file), &w.dump)?;
                    format!(", the CPUs' state in {file}")
                };
                format!("kernel panic in the guest during step {step} ({line}; console.log has the trace{state})")
            }
            End::Vanished => format!(
                "{} ended ({}) during step {step} before the pass was done (no kernel message)",
                emu.name(),
                w.status
            ),
            End::Wedged => {
                let wedge_s = emu.wedge_after_s().unwrap_or_default();
                let file = format!("wedge-{n}.txt");
                if !w.dump.is_empty() {
                    let syms = wedge::Symbols::parse(
                        &fs::read_to_string(new.join("kallsyms.txt")).unwrap_or_default(),
                    );
                    fs::write(work.dir.join(&file), &w.dump)?;
                    fs::write(new.join(&file), wedge::symbolize(&w.dump, &syms))?;
                    log(format!(
                        "boot {n}: wedged at: {}",
                        wedge::summary(&w.dump, &syms)
                    ));
                }
                format!("guest wedged during step {step} (no heartbeat for {wedge_s}s; CPU state in {file})")
            }
        };
        let redo = rerun_of(step);
        let whole = if redo != step {
            rerun.push(redo.to_string());
            format!(" ({redo} again from its first attempt)")
        } else {
            String::new()
        };
        work.warn(format!(
            "boot {n}: {why}; rebooted to resume after the steps that finished{whole}"
        ));
        if n == MAX_BOOTS || left <= REBOOT_MIN_LEFT_S {
            break;
        }
    }
    Ok(())
}

/// Moves the merged results `new` to `results` with what the host knows:
/// the console, versions, wall times so far, warnings, the pass and the
/// test binaries and plans the guest had.
pub fn collect(
    work: &mut Work,
    new: &Path,
    results: &Path,
    pass: &str,
    versions: &[String],
    tests: &[String],
    plans: &[String],
) -> Result<()> {
    let _ = fs::copy(work.dir.join("console.log"), new.join("console.log"));
    fs::write(new.join("versions.txt"), versions.join("\n") + "\n")?;
    let _ = fs::copy(work.dir.join("timings.txt"), new.join("timings.txt"));
    if !new.join("steps.tsv").is_file() {
        work.warn("no result archive on the output disk".into());
    }
    let w: String = work.warnings.iter().map(|w| format!("{w}\n")).collect();
    fs::write(new.join("warnings.txt"), w)?;
    fs::write(new.join("pass.txt"), format!("{pass}\n"))?;
    if !tests.is_empty() {
        fs::write(new.join("test-binaries.txt"), tests.join("\n") + "\n")?;
    }
    if !plans.is_empty() {
        fs::write(new.join("plans.txt"), plans.join("\n") + "\n")?;
    }
    let _ = fs::remove_dir_all(results);
    if let Some(p) = results.parent() {
        fs::create_dir_all(p)?;
    }
    fs::rename(new, results)
        .with_context(|| format!("cannot move {} to {}", new.display(), results.display()))?;
    for e in fs::read_dir(&work.dir)?.filter_map(|e| e.ok()) {
        let n = e.file_name().to_string_lossy().into_owned();
        if (n.starts_with("out-") && n.ends_with(".img"))
            || (n.starts_with("console-") && n.ends_with(".log"))
            || n == "initrd.cpio"
            || n == "initrd-extra.cpio"
        {
            let _ = fs::remove_file(e.path());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake;
    impl Emulator for Fake {
        fn name(&self) -> String {
            "fake".into()
        }
        fn console_args(&self) -> &'static str {
            "console=ttyS0"
        }
        fn deadline_margin_s(&self) -> u64 {
            60
        }
        fn wedge_after_s(&self) -> Option<u64> {
            None
        }
        fn disk_bytes(&self) -> u64 {
            0
        }
        fn spawn(&mut self, _: &BootSpec) -> Result<Child> {
            unreachable!()
        }
    }

    #[test]
    fn a_panic_is_named_by_its_message_escaped() {
        assert_eq!(
            panic_reason("[   72.933323] Kernel panic - not syncing: corrupted stack end detected inside scheduler\r"),
            "Kernel panic - not syncing: corrupted stack end detected inside scheduler"
        );
        assert_eq!(
            panic_reason("Kernel panic - not syncing: \x1b[2Jgone"),
            "Kernel panic - not syncing: \\u{1b}[2Jgone"
        );
    }

    #[test]
    fn the_command_line_carries_pass_resume_and_extras() {
        let g = GuestArgs {
            pass: "quick".into(),
            steps: Some("host,tests".into()),
            iterations: Some(5),
            extra: vec!["loglevel=4".into()],
        };
        assert_eq!(
            g.append(&Fake, 2, 1000, &["host".into(), "sweep".into()]),
            "console=ttyS0 lab.pass=quick lab.boot=2 lab.deadline=940 lab.done=host,sweep lab.steps=host,tests lab.iterations=5 loglevel=4"
        );
        let g = GuestArgs {
            pass: "quick".into(),
            steps: None,
            iterations: None,
            extra: vec!["lab.deadline=99".into()],
        };
        assert_eq!(
            g.append(&Fake, 1, 1000, &[]),
            "console=ttyS0 lab.pass=quick lab.boot=1 lab.deadline=99"
        );
    }

    #[test]
    fn boots_merge_into_one_tree() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (a, into) = (dir.join("boot-1"), dir.join("new"));
        fs::create_dir_all(a.join("runs")).unwrap();
        fs::create_dir_all(into.join("runs")).unwrap();
        fs::write(a.join("runs/x.json"), "new").unwrap();
        fs::write(into.join("runs/x.json"), "old").unwrap();
        fs::write(into.join("runs/y.json"), "kept").unwrap();
        fs::write(a.join("steps.tsv"), "tests\t0\t3\n").unwrap();
        fs::write(into.join("steps.tsv"), "host\t0\t2\n").unwrap();
        fs::write(a.join("console.txt"), "boot 2").unwrap();
        fs::write(into.join("console.txt"), "boot 1").unwrap();
        let kept = merge_boot(&a, &into, 2).unwrap();
        assert_eq!(fs::read_to_string(into.join("runs/x.json")).unwrap(), "new");
        // The first attempt's results are not replaced: kept, and named.
        assert_eq!(
            fs::read_to_string(into.join("runs/x.before-boot2.json")).unwrap(),
            "old"
        );
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert!(kept[0].contains("x.before-boot2.json"), "{kept:?}");
        assert_eq!(
            fs::read_to_string(into.join("runs/y.json")).unwrap(),
            "kept"
        );
        assert_eq!(
            fs::read_to_string(into.join("console.txt")).unwrap(),
            "boot 2"
        );
        assert_eq!(done_steps(&into), ["host", "tests"]);
        assert!(!a.exists());
    }

    #[test]
    fn a_boot_that_ended_in_a_retry_runs_the_step_again_from_its_first_attempt() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        // Boot 1 finished host and the failed first attempt of test-lifecycle,
        // then panicked in its retry.
        fs::write(
            dir.join("steps.tsv"),
            "host\t0\t1\ntest-lifecycle\t101\t9\n",
        )
        .unwrap();
        assert_eq!(rerun_of("test-lifecycle-retry"), "test-lifecycle");
        assert_eq!(rerun_of("sweep"), "sweep");
        let rerun = vec![rerun_of("test-lifecycle-retry").to_string()];
        assert_eq!(resume_after(dir, &rerun), ["host"]);
        // A boot that ended in an ordinary step skips every finished one.
        assert_eq!(resume_after(dir, &[]), ["host", "test-lifecycle"]);
    }

    #[test]
    fn a_second_boots_logs_and_retries_add_to_the_first_boots() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (b2, into) = (dir.join("boot-2"), dir.join("new"));
        fs::create_dir_all(b2.join("tests")).unwrap();
        fs::create_dir_all(into.join("tests")).unwrap();
        fs::write(into.join("tests/x.first-attempt.log"), "boot 1 failed").unwrap();
        fs::write(b2.join("tests/x.first-attempt.log"), "boot 2 failed").unwrap();
        fs::write(into.join("retried.txt"), "x\n").unwrap();
        fs::write(b2.join("retried.txt"), "x\n").unwrap();
        let kept = merge_boot(&b2, &into, 2).unwrap();
        assert_eq!(
            fs::read_to_string(into.join("tests/x.first-attempt.log")).unwrap(),
            "boot 2 failed"
        );
        assert_eq!(
            fs::read_to_string(into.join("tests/x.first-attempt.before-boot2.log")).unwrap(),
            "boot 1 failed"
        );
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert!(!kept[0].contains("checked too"), "{kept:?}");
        assert_eq!(
            fs::read_to_string(into.join("retried.txt")).unwrap(),
            "x\nx\n"
        );
    }

    #[test]
    fn a_disk_the_guest_never_wrote_holds_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let disk = dir.join("out.img");
        File::create(&disk).unwrap().set_len(1 << 20).unwrap();
        unpack_disk(&disk, &dir.join("r")).unwrap();
        assert_eq!(fs::read_dir(dir.join("r")).unwrap().count(), 0);
        // A tar at the start of the disk, zeros after it (as init.sh writes it).
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(4);
        h.set_mode(0o444);
        h.set_cksum();
        b.append_data(&mut h, "./steps.tsv", &b"a\t0\n"[..])
            .unwrap();
        let mut bytes = b.into_inner().unwrap();
        bytes.resize(1 << 20, 0);
        fs::write(&disk, bytes).unwrap();
        unpack_disk(&disk, &dir.join("s")).unwrap();
        assert_eq!(done_steps(&dir.join("s")), ["a"]);
    }
}
