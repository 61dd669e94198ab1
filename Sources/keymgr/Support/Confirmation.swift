import ArgumentParser
import Foundation
import KeyManager

/// `--yes`: do it without asking.
struct ConfirmationOptions: ParsableArguments {
    @Flag(help: "Do not ask for confirmation on a terminal.")
    var yes = false

    /// On a terminal, asks `question` (unless --yes) and aborts on anything but yes; without a terminal, never asks.
    func confirm(_ question: String) throws {
        guard !yes, isatty(STDIN_FILENO) == 1 else { return }
        guard try Terminal.askYesNo(question) else {
            throw KeyManagerError(.abort, "nothing was done")
        }
    }
}

extension Terminal {
    /// Asks a yes/no question on the controlling terminal; only "y" or "yes" (any case) is yes.
    static func askYesNo(_ question: String) throws -> Bool {
        let tty = open("/dev/tty", O_RDWR | O_CLOEXEC)
        guard tty >= 0 else { throw KeyManagerError(.abort, "cannot open the terminal to ask: pass --yes") }
        defer { close(tty) }
        StandardStream(descriptor: tty).write(question + " [y/N] ")
        guard let line = try LineInput(descriptor: tty, name: "the terminal").line(0) else { return false }
        let answer = String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespaces).lowercased()
        return answer == "y" || answer == "yes"
    }
}
