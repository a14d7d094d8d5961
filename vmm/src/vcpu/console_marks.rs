//! Phases a multiboot test kernel's console ends (docs/kvm-unit-tests.md,
//! "Phases per test"): the kernel sends no markers, but prints a line
//! after each test (`ipi 123296`). The vCPU whose write completes a line
//! classifies it (`multiboot::test_lines`) and, when it ends a phase,
//! publishes a [`Mark`] and kicks the other vCPU threads out of KVM_RUN;
//! every vCPU then ends its open phase at the mark, on its own thread
//! with its own counters, as at a payload's marker: the writer at the
//! line, the others at their next exit (the kick's). Phases: `boot`, up to
//! the last line before the first test's; one per test line, named after
//! the test; `rest`, from the last test line to the exit port. A kernel
//! that prints no test line keeps one phase, `run`.
use super::window::join;
use super::{LoopCounts, RunLoop, VcpuEnd};
use crate::multiboot::test_lines::{
    classify, Line, TestNames, BOOT_PHASE, FIGURE_RECORD, REST_PHASE, RUN_PHASE,
};
use crate::results::PhaseResult;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Most marks a run takes: a kernel printing more test lines (or boot
/// lines) than this runs the rest in the phase open at the last one.
pub const MAX_MARKS: usize = 1024;
/// The id of the boot's phase (and of `run`, the whole run); tests count
/// from 2.
const BOOT_ID: u32 = 1;

/// Where a phase ends, for every vCPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mark {
    /// A line before the first test's: the boot may end here (each is a
    /// checkpoint until a test line says which was the last).
    Checkpoint,
    /// A test's line: the open phase is the test's.
    Test {
        /// Its phase id.
        id: u32,
        /// Its phase name (`TestNames`: a repeat has a `#N`).
        name: String,
        /// Its figure (`FIGURE_RECORD`), recorded on the writer's phase.
        figure: Option<u64>,
        /// The vCPU that wrote the line.
        writer: usize,
    },
}

/// What a line was, for the vCPU that wrote it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Heard {
    /// It ended a phase: the other vCPUs must be kicked.
    Mark,
    /// A figure of the last test: record it on that phase.
    Figure {
        /// The test's phase name.
        phase: String,
        /// The record.
        record: String,
        /// Its value.
        value: u64,
    },
    /// Nothing to do.
    Nothing,
}

#[derive(Default)]
struct State {
    marks: Vec<Mark>,
    names: TestNames,
    /// The last test line's name as printed and its phase name.
    last_test: Option<(String, String)>,
    /// [`MAX_MARKS`] reached (and said).
    full: bool,
    /// Test lines so far.
    tests: u32,
}

/// The marks of a run, shared by its vCPU threads.
pub struct ConsoleMarks {
    state: Mutex<State>,
    /// `state.marks.len()`, read without the lock on every exit.
    published: AtomicUsize,
    /// The pthread of each vCPU thread while it runs its loop (0: none).
    threads: Mutex<Vec<libc::pthread_t>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ConsoleMarks {
    /// For a VM of `vcpus`.
    pub fn new(vcpus: usize) -> Self {
        Self {
            state: Mutex::default(),
            published: AtomicUsize::new(0),
            threads: Mutex::new(vec![0; vcpus]),
        }
    }

    /// A line vCPU `writer` completed: classified, published if it ends a
    /// phase (a line before the first test's, or a test's).
    pub fn heard(&self, writer: usize, line: &str) -> Heard {
        let mut s = lock(&self.state);
        if s.marks.len() >= MAX_MARKS {
            if !std::mem::replace(&mut s.full, true) {
                log::warn!("the console ended {MAX_MARKS} phases; later lines end none");
            }
            return Heard::Nothing;
        }
        let last = s.last_test.as_ref().map(|(printed, _)| printed.as_str());
        let mark = match classify(line, last) {
            Line::Figure { record, value } => {
                let phase = s.last_test.as_ref().map(|(_, p)| p.clone());
                return phase.map_or(Heard::Nothing, |phase| Heard::Figure {
                    phase,
                    record,
                    value,
                });
            }
            Line::Test { name, figure } => {
                let phase = s.names.phase_name(name);
                s.last_test = Some((name.to_string(), phase.clone()));
                s.tests += 1;
                Mark::Test {
                    id: BOOT_ID + s.tests,
                    name: phase,
                    figure,
                    writer,
                }
            }
            // After the first test, other lines are the tests' output.
            Line::Other if s.last_test.is_none() => Mark::Checkpoint,
            Line::Other => return Heard::Nothing,
        };
        s.marks.push(mark);
        self.published.store(s.marks.len(), Ordering::Release);
        Heard::Mark
    }

    /// The marks after the first `seen` (none without taking the lock
    /// when nothing new was published).
    fn since(&self, seen: usize) -> Vec<Mark> {
        if self.published.load(Ordering::Acquire) <= seen {
            return Vec::new();
        }
        let s = lock(&self.state);
        s.marks
            .get(seen..)
            .map(<[Mark]>::to_vec)
            .unwrap_or_default()
    }

    /// The calling thread runs vCPU `index` (`on`) or has left its loop.
    fn register(&self, index: usize, on: bool) {
        // SAFETY: pthread_self has no preconditions.
        let me = unsafe { libc::pthread_self() };
        if let Some(slot) = lock(&self.threads).get_mut(index) {
            *slot = if on { me } else { 0 };
        }
    }

    /// Kick every other vCPU thread out of KVM_RUN (its next KVM_RUN
    /// returns at once if it is not in one).
    fn kick_others(&self, me: usize) {
        let threads = lock(&self.threads);
        for (_, &t) in threads
            .iter()
            .enumerate()
            .filter(|&(i, &t)| i != me && t != 0)
        {
            // SAFETY: `t` is the pthread of a vCPU thread that has not left
            // its loop: it clears its slot under this lock before it ends,
            // and is joined only after it ends.
            unsafe { libc::pthread_kill(t, crate::kick::kick_signal()) };
        }
    }
}

/// Registers the calling vCPU thread for kicks while it lives.
pub struct Registered<'a> {
    marks: &'a ConsoleMarks,
    index: usize,
}

impl<'a> Registered<'a> {
    /// Register vCPU `index`'s thread.
    pub fn new(marks: &'a ConsoleMarks, index: usize) -> Self {
        marks.register(index, true);
        Self { marks, index }
    }
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.marks.register(self.index, false);
    }
}

/// The per-vCPU side: what this vCPU's loop holds between marks.
#[derive(Default)]
pub struct VcpuMarks {
    /// Marks handled.
    seen: usize,
    /// The boot's windows up to the last checkpoint, joined.
    boot: Option<PhaseResult>,
}

impl RunLoop<'_> {
    /// A line this vCPU completed on the console; Some(end) when the vCPU
    /// must stop (its data did not fit the budget).
    pub(super) fn console_line(&mut self, line: &str) -> Option<VcpuEnd> {
        let marks = &self.env.shared.console_marks;
        match marks.heard(self.env.index, line) {
            Heard::Mark => {
                marks.kick_others(self.env.index);
                self.catch_up_marks()
            }
            Heard::Figure {
                phase,
                record,
                value,
            } => {
                // The test's phase is this vCPU's once it has caught up.
                if let Some(end) = self.catch_up_marks() {
                    return Some(end);
                }
                let mut r = self.env.shared.result(self.env.index);
                let p = r.phases.iter_mut().rev().find(|p| p.name == phase)?;
                let stored = self.store().record(p, record, value);
                drop(r);
                stored.err().map(|e| self.over_budget(e))
            }
            Heard::Nothing => None,
        }
    }

    /// End this vCPU's open phase at every mark published since it last
    /// looked; Some(end) if a phase did not fit the budget.
    pub(super) fn catch_up_marks(&mut self) -> Option<VcpuEnd> {
        if !self.env.whole_run_phase {
            return None;
        }
        for mark in self.env.shared.console_marks.since(self.marks.seen) {
            self.marks.seen += 1;
            if let Some(end) = self.at_mark(mark) {
                return Some(end);
            }
        }
        None
    }

    fn at_mark(&mut self, mark: Mark) -> Option<VcpuEnd> {
        let open = self.open.take()?;
        let now = LoopCounts {
            exits: &self.exits,
            guest: &self.guest,
        };
        let window = self.sources.end(open, &now);
        let (next_id, stored) = match mark {
            Mark::Checkpoint => {
                let boot = match self.marks.boot.take() {
                    Some(earlier) => join(earlier, window, &now),
                    None => window,
                };
                self.marks.boot = Some(boot);
                (BOOT_ID, None)
            }
            Mark::Test {
                id,
                name,
                figure,
                writer,
            } => {
                let mut test = window;
                (test.id, test.name) = (id, name);
                if let (Some(f), true) = (figure, writer == self.env.index) {
                    test.records.insert(FIGURE_RECORD.into(), f);
                }
                (id + 1, Some(test))
            }
        };
        // Until a test line names it, the open phase may be the whole run.
        let next = if stored.is_some() {
            REST_PHASE
        } else {
            RUN_PHASE
        };
        self.reopen(next_id, next);
        let test = stored?;
        if let Some(mut boot) = self.marks.boot.take() {
            boot.name = BOOT_PHASE.into();
            if let Some(end) = self.store_phase(boot) {
                return Some(end);
            }
        }
        self.store_phase(test)
    }

    /// Open the next phase (sources that open late open now).
    fn reopen(&mut self, id: u32, name: &str) {
        if self.sources.at_begin(false) {
            self.env.shared.result(self.env.index).sources = self.sources.status.clone();
        }
        let now = LoopCounts {
            exits: &self.exits,
            guest: &self.guest,
        };
        self.open = Some(self.sources.begin(id, name.into(), &now));
    }

    /// The boot's windows so far joined to the last one (the whole run of
    /// a kernel that printed no test line).
    pub(super) fn with_boot(&mut self, last: PhaseResult) -> PhaseResult {
        let now = LoopCounts {
            exits: &self.exits,
            guest: &self.guest,
        };
        match self.marks.boot.take() {
            Some(boot) => join(boot, last, &now),
            None => last,
        }
    }

    fn store_phase(&mut self, p: PhaseResult) -> Option<VcpuEnd> {
        let mut r = self.env.shared.result(self.env.index);
        if let Err(e) = self.store().phase(&mut r, p, None) {
            drop(r);
            return Some(self.over_budget(e));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_lines_are_checkpoints_until_the_first_test_then_tests_only() {
        let m = ConsoleMarks::new(2);
        assert_eq!(m.heard(0, "enabling apic"), Heard::Mark);
        assert_eq!(m.heard(1, "setup: CPU 1 online"), Heard::Mark);
        assert_eq!(
            m.heard(0, "  ipi ipi 5"),
            Heard::Mark,
            "no test yet: a boot line"
        );
        assert_eq!(m.heard(0, "ipi 123"), Heard::Mark);
        assert_eq!(
            m.heard(0, "  ipi ipi 5"),
            Heard::Figure {
                phase: "ipi".into(),
                record: "ipi_cycles".into(),
                value: 5
            }
        );
        assert_eq!(m.heard(0, "some output"), Heard::Nothing);
        assert_eq!(m.heard(1, "ipi 7"), Heard::Mark);
        assert_eq!(
            m.heard(0, "  eoi ipi 9"),
            Heard::Figure {
                phase: "ipi#2".into(),
                record: "eoi_cycles".into(),
                value: 9
            },
            "the repeat's phase"
        );
        let test = |id, name: &str, figure, writer| Mark::Test {
            id,
            name: name.into(),
            figure,
            writer,
        };
        let all = m.since(0);
        assert_eq!(
            all,
            [
                Mark::Checkpoint,
                Mark::Checkpoint,
                Mark::Checkpoint,
                test(2, "ipi", Some(123), 0),
                test(3, "ipi#2", Some(7), 1),
            ]
        );
        assert_eq!(m.since(4), all[4..]);
        assert!(m.since(5).is_empty());
    }

    #[test]
    fn marks_are_bounded() {
        let m = ConsoleMarks::new(1);
        for i in 0..MAX_MARKS + 10 {
            m.heard(0, &format!("t{i} 1"));
        }
        assert_eq!(m.since(0).len(), MAX_MARKS);
        assert_eq!(m.heard(0, "t 1"), Heard::Nothing);
        assert_eq!(m.since(MAX_MARKS), []);
    }
}
