import ArgumentParser
import KeyManager
import Foundation

// keymgr's entry point: parse, run, and turn any error into the exit status and error output the README documents.
// Parsing errors (usage, 64) and running errors (KeyManagerError codes) are reported apart, because the
// argument parser's own exit codes only apply to the first.

// Before anything reads a master key, PIN or private key: no core file, no ptrace by other processes.
ProcessHardening.disableCoreDumps()
OpenSSLLibrary.initializeWithoutCleanupAtExit()

let arguments = Array(CommandLine.arguments.dropFirst())
// Known before parsing, so that even a usage error can be answered in JSON.
let wantsJSON = arguments.prefix(while: { $0 != "--" }).contains("--json")
let wantsVerbose = arguments.prefix(while: { $0 != "--" }).contains("--verbose")

// CommandLine.arguments has already replaced invalid UTF-8 with U+FFFD, which could then match another user's
// id: the raw argv decides.
if let bad = RawArguments.firstInvalidUTF8() {
    exit(FailureReport.running(KeyManagerError(.badInput, "argument \(bad) is not valid UTF-8 text: "
        + "give user ids and other values as UTF-8"), json: wantsJSON, verbose: wantsVerbose))
}

var command: ParsableCommand
if let plain = HotPathParser.command(for: arguments) {
    // `status` and `sign` in their plain shapes skip the argument parser's reflection.
    command = plain
} else {
    do {
        command = try Keymgr.parseAsRoot(arguments)
        if !(command is KeymgrCommand) {
            // The argument parser's help command, or a command group run bare (which shows its help).
            try command.run()
            exit(0)
        }
    } catch {
        exit(FailureReport.parsing(error, json: wantsJSON))
    }
}

do {
    try command.run()
} catch {
    // A journey's deadline can pass while a no-echo prompt still waits on another thread.
    TerminalRestore.restoreIfArmed()
    exit(FailureReport.running(error, json: wantsJSON, verbose: wantsVerbose))
}
exit(0)
