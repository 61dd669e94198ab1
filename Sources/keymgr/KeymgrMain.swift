import AgentWire
import ArgumentParser
import KeyManager

/// One keymgr command line, parsed, run and reported: the same code for keymgr run directly and for a request the
/// agent's worker serves, so both print the same bytes and end with the same status.
///
/// Parsing errors (usage, 64) and running errors (the codes of KeymgrFailure) are reported apart, because the argument
/// parser's own exit codes only apply to the first. Nothing here exits the process: the status is returned.
enum KeymgrMain {
    /// Runs `arguments` (without the program name) and returns the process status.
    /// - Parameters:
    ///   - request: the request this command line serves (`.embedded` run directly; the agent's worker's caller).
    ///   - authorize: asked after parsing and before running (the agent's policy): the request with the policy's
    ///     decision, which the command then runs with (`ServedRequest`, the worker's one request); a thrown error
    ///     is reported like any error of the command.
    static func run(arguments: [String], request: RequestContext = .embedded,
                    authorize: ((any ParsableCommand, RequestContext) throws -> RequestContext)? = nil) -> Int32 {
        if request.isServed { ServedRequest.serve(request) }
        // Known before parsing, so that even a usage error can be answered in JSON.
        let scan = ArgumentScan(arguments)
        let wantsJSON = scan.has("--json")
        let wantsVerbose = scan.has("--verbose")

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
                    return 0
                }
            } catch {
                return FailureReport.parsing(error, json: wantsJSON)
            }
        }

        do {
            if let authorize { ServedRequest.serve(try authorize(command, request)) }
            try command.run()
        } catch {
            // A journey's deadline can pass while a no-echo prompt still waits on another thread.
            TerminalRestore.restoreIfArmed()
            return FailureReport.running(error, json: wantsJSON, verbose: wantsVerbose)
        }
        return 0
    }
}
