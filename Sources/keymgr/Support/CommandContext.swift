import Foundation
import KeyManager

/// One command line being run, as the CLI sees it: the request (`RequestContext`: who asks, what the agent's policy
/// decided, the files the client passed; what the facade gets), and where the request's own input and output are:
/// its standard streams, its terminal for prompts and its environment.
///
/// Built once per command line, by whoever runs it — keymgr's `main` run directly (`direct`), the agent's worker for
/// a request (`serving`), a test — and passed explicitly: `KeymgrMain.run` hands it, with the gate's decision, to the
/// command (`KeymgrCommand.run(in:)`), which hands it on (`GlobalOptions.openManager(in:)`, `console(in:)`, the
/// prompts). Nothing of it is process-wide, so two command lines run in one process cannot see each other's caller,
/// streams or environment.
struct CommandContext: Sendable {
    /// The request: caller, policy decision, passed descriptors and files (`.embedded` run directly).
    var request: RequestContext
    /// The request's stdin, stdout and stderr.
    var streams: StandardStreams
    /// Where a prompt asks the person (a no-echo PIN or password, a yes/no question).
    var terminal: ControllingTerminal
    /// The environment the command sees: `KEYMGR_HOME`, `KEYMGR_MASTER_KEY_FILE`, `COLUMNS`, `HOME`, ….
    var environment: [String: String]

    /// keymgr run directly: the OS user running it (no policy, no limit), descriptors 0, 1 and 2, `/dev/tty`, and
    /// the process's environment.
    static func direct(environment: [String: String]) -> CommandContext {
        CommandContext(request: .embedded, streams: .standard, terminal: .device, environment: environment)
    }

    /// A request the agent's worker serves: the passed descriptors are already at 0, 1 and 2 (or /dev/null), the
    /// terminal is the one the client passed (none: nothing is asked), and the environment is the agent's with the
    /// request's own over it (the agent's store as `KEYMGR_HOME` when it was given `--home`, the client's `COLUMNS`
    /// or none).
    static func serving(_ request: RequestContext, agentEnvironment: [String: String]) -> CommandContext {
        var environment = agentEnvironment
        if let home = request.home { environment["KEYMGR_HOME"] = home }
        environment["COLUMNS"] = request.columns.map(String.init)
        let terminal: ControllingTerminal = request.terminal.map { $0 >= 0 ? .passed($0) : .none } ?? .none
        return CommandContext(request: request, streams: .standard, terminal: terminal, environment: environment)
    }

    /// This context with the policy's decision for its request.
    func deciding(_ request: RequestContext) -> CommandContext {
        var decided = self
        decided.request = request
        return decided
    }

    /// The request's descriptor `descriptor` (`--pin-fd N`, `--password-fd N`), when the command may read it for the
    /// caller (`RequestContext.mayUse`: any run directly; through the agent, only one the client passed); else -1,
    /// which reads as a closed descriptor. 0, 1 and 2 are the request's standard streams, wherever they are.
    func readable(_ descriptor: Int32) -> Int32 {
        guard request.mayUse(descriptor: descriptor) else { return -1 }
        switch descriptor {
        case STDIN_FILENO: return streams.input
        case STDOUT_FILENO: return streams.output.descriptor
        case STDERR_FILENO: return streams.error.descriptor
        default: return descriptor
        }
    }

    /// Whether stdin is a terminal (a person types there): prompts and confirmations ask only then.
    var inputIsTerminal: Bool { isatty(streams.input) == 1 }

    /// Whether stderr is a terminal: progress lines are drawn only there.
    var errorIsTerminal: Bool { isatty(streams.error.descriptor) == 1 }

    /// All of stdin (`token import`, `login --token-stdin`).
    func readInput() -> Data {
        FileHandle(fileDescriptor: streams.input, closeOnDealloc: false).readDataToEndOfFile()
    }
}

/// A request's stdin, stdout and stderr.
struct StandardStreams: Sendable {
    var input: Int32
    var output: StandardStream
    var error: StandardStream

    init(input: Int32, output: Int32, error: Int32) {
        self.input = input
        self.output = StandardStream(descriptor: output)
        self.error = StandardStream(descriptor: error)
    }

    /// Descriptors 0, 1 and 2: keymgr run directly, and the agent's worker (which put the passed ones there).
    static let standard = StandardStreams(input: STDIN_FILENO, output: STDOUT_FILENO, error: STDERR_FILENO)
}
