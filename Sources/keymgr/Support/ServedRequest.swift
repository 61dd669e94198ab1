import KeyManager
import Synchronization

/// The request the agent's worker serves, as the CLI's edge sees it. A worker is a process for one request: it
/// builds the `RequestContext` once (the kernel's caller, the agent's policy, the client's terminal); `KeymgrMain`
/// records it here before parsing (a completion request, answered while parsing, sees a caller and no decision yet,
/// so it completes nothing) and once more with the gate's decision, before the command runs. The CLI
/// reads it where it opens the store (`GlobalOptions.openManager`, which passes it explicitly to `KeyManager.open`;
/// the facade reads no process state), asks on the terminal (`ControllingTerminal`) or reads a file for the caller.
///
/// It is a per-process value and not threaded through each command's `run()` because a prompt can run on a thread
/// of its own (a journey's callback with its deadline), where a task-local value would be lost and the worker would
/// fall back to the agent's own terminal. keymgr run directly never sets it: `.embedded`.
enum ServedRequest {
    private static let served = Mutex<RequestContext?>(nil)

    /// The request being served; `.embedded` when keymgr runs directly.
    static var context: RequestContext { served.withLock { $0 } ?? .embedded }

    /// The worker's request: first as built (no decision), then with the policy's decision for the same caller.
    static func serve(_ context: RequestContext) {
        served.withLock { current in
            precondition(current == nil || (current?.caller == context.caller && current?.scope == nil),
                         "a worker serves one request, decided once")
            current = context
        }
    }
}

extension AgentCaller {
    /// The caller the running command serves (nil run directly): `ServedRequest.context.caller`.
    static var current: AgentCaller? { ServedRequest.context.caller }
}
