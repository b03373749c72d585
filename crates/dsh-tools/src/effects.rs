//! [`ToolEffects`]: what a tool declares it touches, so that policy (permission presets, the
//! scheduler's parallel pool) decides from the declaration instead of from tool names.
//!
//! Behaviour notes: `docs/tools.md` ("Effects").

/// What a tool touches, declared by the tool itself ([`crate::Tool::effects`],
/// [`crate::ToolDefinition::effects`]).
///
/// A small set of effect flags — [`ToolEffects::READ_ONLY`] is the empty set; the others are
/// [`ToolEffects::WRITES_FILES`], [`ToolEffects::RUNS_COMMANDS`], [`ToolEffects::NETWORK`] and
/// [`ToolEffects::OTHER`] (changes something none of the others names, e.g. stops a job) —
/// plus two pieces of call metadata:
/// - [`ToolEffects::parallel_safe`]: every call may run in the scheduler's parallel pool
///   (the default of [`crate::Tool::concurrency_safe`]);
/// - [`ToolEffects::target`]: the name of the string argument naming the path the effect lands
///   at (`file_path` for a file write, `workdir` for a command), relative to the workspace root
///   or absolute; policy may check it against the workspace.
///
/// Combine flags with `|` (or [`ToolEffects::union`]); metadata of the left operand wins for
/// [`ToolEffects::target`], parallel-safety is kept only when both are parallel-safe.
///
/// ```
/// use dsh_tools::ToolEffects;
/// let e = ToolEffects::WRITES_FILES.target("file_path");
/// assert!(e.writes_files() && !e.is_read_only());
/// assert_eq!(e.target_arg(), Some("file_path"));
/// assert!(ToolEffects::READ_ONLY.parallel_safe().is_parallel_safe());
/// assert!((ToolEffects::WRITES_FILES | ToolEffects::NETWORK).uses_network());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ToolEffects {
    bits: u8,
    parallel: bool,
    target: Option<&'static str>,
}

const WRITES: u8 = 1;
const COMMANDS: u8 = 1 << 1;
const NET: u8 = 1 << 2;
const OTHER: u8 = 1 << 3;

impl ToolEffects {
    /// Reads only: no file writes, no commands, no network, no other side effect.
    pub const READ_ONLY: Self = Self::bits(0);
    /// Creates, modifies or deletes files.
    pub const WRITES_FILES: Self = Self::bits(WRITES);
    /// Runs external commands (which may do anything the process may do).
    pub const RUNS_COMMANDS: Self = Self::bits(COMMANDS);
    /// Talks to the network.
    pub const NETWORK: Self = Self::bits(NET);
    /// Changes something none of the other flags names (e.g. stops a background job).
    pub const OTHER: Self = Self::bits(OTHER);
    /// What a definition that declares nothing is taken to do: [`ToolEffects::OTHER`] (not
    /// read-only, no known target).
    pub const UNDECLARED: Self = Self::OTHER;

    const fn bits(bits: u8) -> Self {
        Self {
            bits,
            parallel: false,
            target: None,
        }
    }

    /// The union of both flag sets; `self`'s target (else `other`'s); parallel-safe only if
    /// both are.
    pub const fn union(self, other: Self) -> Self {
        Self {
            bits: self.bits | other.bits,
            parallel: self.parallel && other.parallel,
            target: match self.target {
                Some(t) => Some(t),
                None => other.target,
            },
        }
    }

    /// The same effects, with every call parallel-safe.
    pub const fn parallel_safe(self) -> Self {
        Self {
            parallel: true,
            ..self
        }
    }

    /// The same effects, landing at the path named by the string argument `arg`.
    pub const fn target(self, arg: &'static str) -> Self {
        Self {
            target: Some(arg),
            ..self
        }
    }

    /// True when no effect flag is set.
    pub const fn is_read_only(self) -> bool {
        self.bits == 0
    }

    /// True when [`ToolEffects::WRITES_FILES`] is set.
    pub const fn writes_files(self) -> bool {
        self.bits & WRITES != 0
    }

    /// True when [`ToolEffects::RUNS_COMMANDS`] is set.
    pub const fn runs_commands(self) -> bool {
        self.bits & COMMANDS != 0
    }

    /// True when [`ToolEffects::NETWORK`] is set.
    pub const fn uses_network(self) -> bool {
        self.bits & NET != 0
    }

    /// True when [`ToolEffects::OTHER`] is set.
    pub const fn has_other_effects(self) -> bool {
        self.bits & OTHER != 0
    }

    /// True when every call may join the parallel pool.
    pub const fn is_parallel_safe(self) -> bool {
        self.parallel
    }

    /// The argument naming where the effect lands, if declared.
    pub const fn target_arg(self) -> Option<&'static str> {
        self.target
    }
}

impl std::ops::BitOr for ToolEffects {
    type Output = Self;

    /// [`ToolEffects::union`].
    fn bitor(self, rhs: Self) -> Self {
        self.union(rhs)
    }
}
