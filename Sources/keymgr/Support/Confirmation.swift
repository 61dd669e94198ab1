import ArgumentParser
import Foundation
import KeyManager

/// `--yes`: do it without asking. The one place a destructive command asks before it acts.
///
/// Every destructive command (`revoke`, `master rotate`, `admin revoke`, `dcr delete`, `token revoke`,
/// `server remove`) first finds its target (a missing one fails with 66 before anything is asked), then calls
/// `confirm`, then acts. On a terminal it asks unless `--yes`; without a terminal it never asks. An answer other
/// than yes exits 1 with the code `declined` (not 77: nobody failed to authenticate).
struct ConfirmationOptions: ParsableArguments {
    @Flag(help: "Do not ask for confirmation on a terminal.")
    var yes = false

    /// When the request's stdin is a terminal, asks `question` on the request's terminal (unless --yes) and fails
    /// with `declined` on anything but yes; without a terminal, never asks.
    func confirm(_ question: String, in context: CommandContext) throws {
        guard !yes, context.inputIsTerminal else { return }
        guard try Terminal.askYesNo(question, on: context.terminal) else {
            throw CommandFailure(.declined, "declined: nothing was done")
        }
    }
}

extension Terminal {
    /// Asks a yes/no question on the request's terminal; only "y" or "yes" (any case) is yes.
    static func askYesNo(_ question: String, on terminal: ControllingTerminal) throws -> Bool {
        let tty = terminal.open(flags: O_RDWR)
        guard tty >= 0 else { throw CommandFailure(.abort, "cannot open the terminal to ask: pass --yes") }
        defer { close(tty) }
        // A question may quote what a server gave (a client id): nothing of it may rewrite the terminal.
        StandardStream(descriptor: tty).write(TextTable.printable(question) + " [y/N] ")
        guard let line = try LineInput(descriptor: tty, name: "the terminal").line(0) else { return false }
        let answer = String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespaces).lowercased()
        return answer == "y" || answer == "yes"
    }
}
