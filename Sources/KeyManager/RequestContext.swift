import AgentWire

/// One request: who asks, what the agent's policy decided for it, and where it came from. Built once per request —
/// by the agent's worker after it read the kernel's word on the caller and asked the policy, or as `.embedded` by
/// keymgr run directly — and passed explicitly: to `KeyManager.open` (the manager keeps it for its life, and every
/// decision of the facade reads it there: `KeyManager.reach`, the one place that decides) and, through the manager,
/// to the services.
///
/// There is no process-wide "current caller": a manager opened without a context is embedded (no limit), and one
/// request's context cannot leak into another's manager.
package struct RequestContext: Sendable, Equatable {
    /// The person the agent's worker acts for, as the kernel reported them; nil run directly (embedded).
    package var caller: AgentCaller?
    /// The policy that decided (its `[self]` table, its file for `status`); nil run directly.
    package var policy: AgentPolicy?
    /// What the policy decided for this request: the operation and the users, auth types and PIN rule it may touch;
    /// nil run directly (no limit).
    package var scope: AccessScope?
    /// The terminal the client passed with its request, for prompts (-1: it passed none, so nothing is asked);
    /// nil run directly (`/dev/tty`).
    package var terminal: Int32?
    /// The client's terminal width (`COLUMNS`), when it sent one.
    package var columns: Int?
    /// The store the agent serves when it was given `--home` (the request's `KEYMGR_HOME`); nil: the environment's.
    package var home: String?
    /// The descriptor numbers the client passed (`fds`: stdin, stdout, stderr, a `--pin-fd`'s); nil run directly.
    /// A number the client did not pass may be one of the worker's own, and is never read for the caller.
    package var passedDescriptors: [Int32]?
    /// The files the command line's options name, opened by the client with the caller's rights and passed with the
    /// request; empty run directly (the command opens them itself).
    package var files: [PassedFile]

    package init(caller: AgentCaller? = nil, policy: AgentPolicy? = nil, scope: AccessScope? = nil,
                 terminal: Int32? = nil, columns: Int? = nil, home: String? = nil, passedDescriptors: [Int32]? = nil,
                 files: [PassedFile] = []) {
        self.home = home
        self.passedDescriptors = passedDescriptors
        self.files = files
        self.caller = caller
        self.policy = policy
        self.scope = scope
        self.terminal = terminal
        self.columns = columns
    }

    /// keymgr run directly: the OS user running it, no policy, no limit.
    package static let embedded = RequestContext()

    /// Whether the agent serves this request (a caller the kernel reported).
    package var isServed: Bool { caller != nil }

    /// Whether the command may read `descriptor` for the caller: any run directly; through the agent, only one the
    /// client passed.
    package func mayUse(descriptor: Int32) -> Bool { passedDescriptors?.contains(descriptor) ?? true }

    /// This context with the policy's decision for it.
    package func deciding(_ scope: AccessScope?) -> RequestContext {
        var decided = self
        decided.scope = scope
        return decided
    }
}

/// A file an option named (`--metadata FILE`), opened by the agent's client with the caller's own rights and passed
/// with the request: the worker reads or writes it through `descriptor` and never opens the name itself.
package struct PassedFile: Sendable, Equatable {
    /// The option, the path as the caller gave it, and whether the client created it (`--output`) or opened it to
    /// read.
    package var argument: NamedFileArgument
    /// Where the descriptor is in the worker.
    package var descriptor: Int32

    package init(argument: NamedFileArgument, descriptor: Int32) {
        self.argument = argument
        self.descriptor = descriptor
    }
}
