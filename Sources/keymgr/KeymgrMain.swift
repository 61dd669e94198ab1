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
    ///   - context: the request this command line serves, with its streams, terminal and environment
    ///     (`CommandContext.direct` run directly; the agent's worker's `CommandContext.serving`). The command gets it
    ///     explicitly (`KeymgrCommand.run(in:)`); nothing of it is kept after the run.
    ///   - authorize: asked after parsing and before running (the agent's policy): the request with the policy's
    ///     decision, which the command then runs with; a thrown error is reported like any error of the command.
    static func run(arguments: [String], context: CommandContext,
                    authorize: ((any ParsableCommand, RequestContext) throws -> RequestContext)? = nil) -> Int32 {
        // Known before parsing, so that even a usage error can be answered in JSON.
        let scan = ArgumentScan(arguments)
        let wantsJSON = scan.has("--json")
        let wantsVerbose = scan.has("--verbose")
        let streams = context.streams

        var parsed: ParsableCommand
        if let plain = HotPathParser.command(for: arguments) {
            // `status` and `sign` in their plain shapes skip the argument parser's reflection.
            parsed = plain
        } else {
            do {
                // A completion request is answered while parsing, by static closures: they read the request (its
                // caller, no decision yet) bound to this parse alone (`StoreCompletion.context`, a task-local).
                parsed = try StoreCompletion.$context.withValue(context) { try Keymgr.parseAsRoot(arguments) }
            } catch {
                return FailureReport.parsing(error, json: wantsJSON, on: streams)
            }
        }
        guard let command = parsed as? KeymgrCommand else {
            // The argument parser's help command, or a command group run bare (which shows its help).
            do {
                try parsed.run()
            } catch {
                return FailureReport.parsing(error, json: wantsJSON, on: streams)
            }
            return 0
        }

        do {
            let decided = try authorize.map { context.deciding(try $0(command, context.request)) } ?? context
            try command.run(in: decided)
        } catch {
            // A journey's deadline can pass while a no-echo prompt still waits on another thread.
            TerminalRestore.restoreIfArmed()
            return FailureReport.running(error, json: wantsJSON, verbose: wantsVerbose, on: streams)
        }
        return 0
    }
}
