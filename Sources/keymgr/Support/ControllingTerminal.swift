import Foundation
import KeyManager

/// The person's terminal, for prompts (`CommandContext.terminal`): `/dev/tty` when keymgr runs directly; in the
/// agent's worker, the terminal the client passed with its request (the worker has no terminal of its own, and
/// /dev/tty there would be the agent's); none when there is nobody to ask (a request without a terminal, a test).
///
/// A value, handed to what prompts: a prompt that runs on a thread of its own (a journey's callback, with its
/// deadline) asks on the terminal it was given, not on one it would look up.
enum ControllingTerminal: Sendable, Equatable {
    /// `/dev/tty`: keymgr run directly.
    case device
    /// A descriptor the request passed.
    case passed(Int32)
    /// Nothing is asked.
    case none

    /// A descriptor of the terminal that the caller closes (`close`), or -1 when there is none.
    func open(flags: Int32) -> Int32 {
        switch self {
        case .device: Foundation.open("/dev/tty", flags | O_CLOEXEC)
        case .passed(let descriptor): fcntl(descriptor, F_DUPFD_CLOEXEC, 3)
        case .none: -1
        }
    }
}
