import ArgumentParser
import Foundation
import KeyManager
import Logging

/// The options every keymgr command takes: where the store lives and how keymgr talks.
///
/// Declared on the root command and on every subcommand, so they may come before or after the subcommand name.
struct GlobalOptions: ParsableArguments {
    @Option(
        help: ArgumentHelp(
            "The store's directory (default: $KEYMGR_HOME, else ${XDG_DATA_HOME:-~/.local/share}/keymgr).",
            valueName: "dir"),
        completion: .directory)
    var home: String?

    @Flag(help: "Print the result as JSON on stdout and nothing else there; errors as {\"error\":{\"code\",\"message\"}}.")
    var json = false

    @Flag(help: "Print only results and errors: no confirmations or warnings.")
    var quiet = false

    @Flag(help: "Say on stderr what keymgr is doing.")
    var verbose = false

    func validate() throws {
        if quiet && verbose { throw ValidationError("--quiet and --verbose cannot be used together") }
        // Nothing but what Foundation's `.whitespaces` trims (tab, the space separators and U+200B), checked without its
        // CharacterSet, whose first use costs every command about 0.9 M instructions at start-up.
        if let home, home.unicodeScalars.allSatisfy({
            $0 == "\t" || $0 == "\u{200B}" || $0.properties.generalCategory == .spaceSeparator
        }) {
            throw ValidationError("--home needs a directory: leave it out to use $KEYMGR_HOME or the default")
        }
    }

    /// The store home these options name.
    var storeHome: StoreLocation { StoreLocation.resolve(explicit: home, environment: ProcessEnvironment.variables) }

    /// The console shaped by `--json`, `--quiet` and `--verbose`.
    var console: Console { Console(json: json, quiet: quiet, verbose: verbose) }

    /// Opens the existing store named by these options; `readOnly` for a command that only reads (no write, no fsync).
    func openManager(readOnly: Bool = false) throws -> KeyManager {
        let home = storeHome
        console.detail("store \(home.url.path)")
        let request = ServedRequest.context
        if let prepared = AgentWarmWorker.openPrepared(home: home, context: request, logger: logger) { return prepared }
        return try KeyManager.open(home: home, readOnly: readOnly, context: request, environment: ProcessEnvironment.variables,
                                   logger: logger)
    }

    /// The libraries' logs on stderr: warnings, or everything with --verbose. Libraries log no secret.
    var logger: Logger {
        var logger = Logger(label: "keymgr") { StreamLogHandler.standardError(label: $0) }
        logger.logLevel = verbose ? .debug : (quiet ? .error : .warning)
        return logger
    }
}

/// `--wide`: tables show whole kids, ids and timestamps instead of fitting the terminal (or 80 columns).
struct TableOptions: ParsableArguments {
    @Flag(help: "Show whole kids, ids and timestamps instead of fitting the terminal's width.")
    var wide = false
}

/// The environment a command sees: the process's own, read once (`ProcessInfo.environment` builds a new dictionary of
/// every variable on each call, and a command asks for it several times at start-up), and, when the agent serves
/// the request, the request's own options over it (`RequestContext`: the agent's store as `KEYMGR_HOME` when it was
/// given `--home`, and the client's `COLUMNS`, or none).
enum ProcessEnvironment {
    /// The process's environment as it was when first asked (in the agent: before the first fork).
    private static let own = ProcessInfo.processInfo.environment

    static var variables: [String: String] {
        let request = ServedRequest.context
        guard request.isServed else { return own }
        var variables = own
        if let home = request.home { variables["KEYMGR_HOME"] = home }
        variables["COLUMNS"] = request.columns.map(String.init)
        return variables
    }

    /// The agent's worker: the same in the process's environment, for what reads it there (a verifier command).
    static func export(_ request: RequestContext) {
        if let home = request.home { setenv("KEYMGR_HOME", home, 1) }
        if let columns = request.columns { setenv("COLUMNS", String(columns), 1) } else { unsetenv("COLUMNS") }
    }
}
