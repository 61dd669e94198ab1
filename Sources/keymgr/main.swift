import ArgumentParser
import Foundation

// keymgr's entry point: parse, run, and turn any error into the exit status and error output the README documents.
// Parsing errors (usage, 64) and running errors (KeyManagerError codes) are reported apart, because the
// argument parser's own exit codes only apply to the first.

let arguments = Array(CommandLine.arguments.dropFirst())
// Known before parsing, so that even a usage error can be answered in JSON.
let wantsJSON = arguments.prefix(while: { $0 != "--" }).contains("--json")
let wantsVerbose = arguments.prefix(while: { $0 != "--" }).contains("--verbose")

var command: ParsableCommand
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

do {
    try command.run()
} catch {
    exit(FailureReport.running(error, json: wantsJSON, verbose: wantsVerbose))
}
exit(0)
