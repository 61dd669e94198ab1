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

    package init(caller: AgentCaller? = nil, policy: AgentPolicy? = nil, scope: AccessScope? = nil,
                 terminal: Int32? = nil, columns: Int? = nil, home: String? = nil) {
        self.home = home
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

    /// This context with the policy's decision for it.
    package func deciding(_ scope: AccessScope?) -> RequestContext {
        var decided = self
        decided.scope = scope
        return decided
    }
}
