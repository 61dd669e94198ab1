import Foundation
import KeyManager

/// The person's terminal, for prompts: `/dev/tty` when keymgr runs directly; in the agent's worker, the terminal
/// the client passed with its request (the worker has no terminal of its own, and /dev/tty there would be the
/// agent's).
enum ControllingTerminal {
    /// A descriptor of the terminal that the caller closes (`close`), or -1 when there is none: the request's
    /// (`RequestContext.terminal`) when the agent serves it.
    static func open(flags: Int32) -> Int32 {
        let request = ServedRequest.context
        if request.isServed {
            guard let passed = request.terminal, passed >= 0 else { return -1 }
            return fcntl(passed, F_DUPFD_CLOEXEC, 3)
        }
        return Foundation.open("/dev/tty", flags | O_CLOEXEC)
    }
}
